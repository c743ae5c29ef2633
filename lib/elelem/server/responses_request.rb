# frozen_string_literal: true

require_relative "fields"

module Elelem
  class Server
    # The body of a `POST /v1/responses` (OpenAI's Responses API), checked and turned into the
    # body of the chat completion it asks for, as llama-server turns it
    # (server_chat_convert_responses_to_chatcmpl in its tools/server/server-chat.cpp):
    # `instructions` as a system message, `input` (a string, or a list of items: messages,
    # function calls and their outputs, reasoning) as the messages, `max_output_tokens` as
    # `max_tokens`, the flat function tools as chat tools; and, which llama-server ignores,
    # `text.format` as `response_format`. The chat request then checks the rest ({Request}).
    # A field of the wrong shape, or one the server does not implement, is a 400 naming it.
    class ResponsesRequest
      include Fields

      # The fields taken: the Responses API's that apply to a stateless server, the sampling
      # fields the chat endpoint takes too (as llama-server passes them on), and those OpenAI
      # documents as having no effect on the text ({Request::IGNORED}).
      FIELDS = %w[model input instructions stream max_output_tokens temperature top_p tools tool_choice
                  parallel_tool_calls text seed stop top_k min_p repeat_penalty presence_penalty frequency_penalty
                  logit_bias ignore_eos].freeze
      # The chat fields that Responses fields become, for the errors the chat request finds: the
      # Responses field (`param`), and the chat's names in a message with theirs.
      CHAT_NAMES = {
        "messages" => ["input", { "messages" => "input" }],
        "max_tokens" => ["max_output_tokens", { "max_tokens" => "max_output_tokens" }],
        "response_format" => ["text", { "response_format.json_schema" => "text.format",
                                        "response_format" => "text.format" }]
      }.freeze

      # @param body [Object] the parsed JSON body
      # @raise [HTTPError] 400, naming the field at fault
      def initialize(body)
        take_body(body)
        known_fields
        if @body.key?("previous_response_id")
          raise invalid("previous_response_id is not supported: responses are not stored, so send the whole " \
                        "conversation as input", "previous_response_id")
        end
        @messages = []
      end

      # @return [Hash] the chat completion's body
      # @raise [HTTPError] 400, naming the field at fault
      def chat_body
        instructions = optional("instructions", String)
        @messages << { "role" => "system", "content" => instructions } if instructions
        input
        { "messages" => @messages, "max_tokens" => integer("max_output_tokens", 0..Options::MAX_N_CTX),
          "tools" => tools, "tool_choice" => tool_choice, "response_format" => text_format }
          .merge(@body.slice(*FIELDS - %w[input instructions max_output_tokens tools tool_choice text]))
          .merge(@body.slice(*Request::IGNORED)).compact
      end

      # The chat request's error in the Responses API's names.
      # @param error [HTTPError]
      # @return [HTTPError]
      def self.renamed(error)
        param, names = CHAT_NAMES[error.param]
        return error unless param

        message = names.reduce(error.message) { |text, (chat, own)| text.gsub(/\b#{Regexp.escape(chat)}\b/, own) }
        HTTPError.new(error.status, message, param:, code: error.code)
      end

      private

      def known_fields
        unknown = @body.keys - FIELDS - Request::IGNORED - ["previous_response_id"]
        return if unknown.empty?

        raise invalid("#{unknown.map(&:inspect).join(", ")} #{unknown.size == 1 ? "is" : "are"} not supported " \
                      "by this server", unknown.first)
      end

      def input
        value = required("input", String, Array)
        return @messages << { "role" => "user", "content" => value } if value.is_a?(String)
        raise invalid("input must not be empty", "input") if value.empty?

        value.each_with_index { |item, index| item(typed(item, "input[#{index}]", Hash), "input[#{index}]") }
      end

      # One input item, by its shape (as llama-server tells them apart).
      def item(item, path)
        case [item["type"], item["role"]]
        in ["function_call", _] then function_call(item, path)
        in ["function_call_output", _] then function_call_output(item, path)
        in ["reasoning", _] then reasoning(item, path)
        in [nil | "message", "assistant"] then assistant_message(item, path)
        in [nil | "message", "user" | "system" | "developer" => role] then input_message(item, role, path)
        else raise invalid("#{path} is not an item this server takes: a message (role user, system, developer or " \
                           "assistant), a function_call, a function_call_output or a reasoning item", "input")
        end
      end

      def input_message(item, role, path)
        parts = content_parts(item, path, role == "user" ? %w[input_text input_image] : %w[input_text])
        @messages << { "role" => role == "developer" ? "system" : role, "content" => parts }
      end

      # A message the model wrote, joined to the assistant's turn before it (its calls, its thinking).
      def assistant_message(item, path)
        message = assistant
        message["content"] = (message["content"] || []) + content_parts(item, path, %w[output_text input_text refusal])
      end

      def function_call(item, path)
        call_id, name, arguments = %w[call_id name arguments].map { |key| text(item, key, path) }
        (assistant["tool_calls"] ||= []) << { "id" => call_id, "type" => "function",
                                              "function" => { "name" => name, "arguments" => arguments } }
      end

      def function_call_output(item, path)
        output = typed(item["output"], "#{path}.output", String, Array)
        raise invalid("#{path}.output is required", "input") if output.nil?

        output = content_parts({ "content" => output }, "#{path}.output", %w[input_text]) if output.is_a?(Array)
        @messages << { "role" => "tool", "tool_call_id" => text(item, "call_id", path), "content" => output }
      end

      def reasoning(item, path)
        content = typed(item["content"], "#{path}.content", Array)
        thought = content&.first
        unless thought.is_a?(Hash) && thought["text"].is_a?(String)
          raise invalid("#{path}.content must hold the reasoning's text ([{\"type\": \"reasoning_text\", " \
                        "\"text\": ...}])", "input")
        end

        message = assistant
        message["content"] ||= []
        message["reasoning_content"] = thought["text"]
      end

      # The assistant's message that the last items make, or a new one (with no content until
      # one of its items has some: a turn of calls alone has none).
      def assistant
        @messages << { "role" => "assistant" } unless @messages.last&.fetch("role") == "assistant"
        @messages.last
      end

      # A message's content as chat text parts: a string, or parts of the `types` given.
      def content_parts(item, path, types)
        content = typed(item["content"], "#{path}.content", String, Array)
        raise invalid("#{path}.content is required", "input") if content.nil?
        return [{ "type" => "text", "text" => content }] if content.is_a?(String)

        content.each_with_index.map do |part, index|
          part_path = "#{path}.content[#{index}]"
          type = part_type(part, part_path, types)
          next image_part(part, part_path) if type == "input_image"

          { "type" => "text", "text" => text(part, type == "refusal" ? "refusal" : "text", part_path) }
        end
      end

      def part_type(part, path, types)
        type = typed(part, path, Hash)["type"]
        return type if types.include?(type)

        raise invalid("#{path}.type must be #{types.join(" or ")}, got #{type.inspect}" \
                      "#{" (images go in user messages)" if type == "input_image"}", "input")
      end

      # An `input_image` as the chat's `image_url` part (a data URI, or a URL the server fetches
      # with `--allow-fetch`); a `file_id` names a stored file, which this server has none of.
      def image_part(part, path)
        if part.key?("file_id")
          raise invalid("#{path}.file_id is not supported (no files are stored): send image_url, a data URI",
                        "input")
        end

        { "type" => "image_url", "image_url" => { "url" => text(part, "image_url", path) } }
      end

      def text(item, key, path)
        value = typed(item[key], "#{path}.#{key}", String)
        raise invalid("#{path}.#{key} is required", "input") if value.nil?

        value
      end

      # Function tools, flat as the Responses API writes them, as chat tools.
      def tools
        optional("tools", Array)&.each_with_index&.map do |tool, index|
          path = "tools[#{index}]"
          type = typed(tool, path, Hash)["type"]
          unless type == "function"
            raise invalid("#{path}.type must be \"function\" (this server runs no built-in tools), got " \
                          "#{type.inspect}", "tools")
          end

          { "type" => "function", "function" => tool.except("type") }
        end
      end

      # `auto`, `none`, `required`, or `{"type": "function", "name": ...}` as the chat's named function.
      def tool_choice
        choice = optional("tool_choice", String, Hash)
        return choice unless choice.is_a?(Hash)

        unless choice["type"] == "function" && choice["name"].is_a?(String)
          raise invalid("tool_choice must be auto, none, required or {\"type\": \"function\", \"name\": ...}",
                        "tool_choice")
        end

        { "type" => "function", "function" => { "name" => choice["name"] } }
      end

      # `text.format`: `text`, `json_object`, or `json_schema` with its `name`, `schema` and
      # `strict` beside the type, as the chat's `response_format`.
      def text_format
        text = optional("text", Hash)
        return nil if text.nil?

        unknown = text.keys - ["format"]
        raise invalid("text.#{unknown.first} is not supported by this server", "text") unless unknown.empty?

        format = typed(text["format"], "text.format", Hash)
        return format unless format&.fetch("type", nil) == "json_schema"

        { "type" => "json_schema", "json_schema" => format.except("type") }
      end
    end
  end
end
