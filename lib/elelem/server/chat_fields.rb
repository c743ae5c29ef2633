# frozen_string_literal: true

require "json"

module Elelem
  class Server
    # The fields of a chat request (OpenAI's chat completion, {Request} of kind `:chat`; Ollama's
    # `/api/chat`, {Ollama::Request}): the messages, the tools and how to use them, the format of
    # the reply, checked as OpenAI checks them. What {Generation} reads of a chat.
    module ChatFields
      # The roles a message may have; `developer` is OpenAI's newer name for `system`.
      ROLES = %w[developer system user assistant tool].freeze
      # `tool_choice` as a string.
      TOOL_CHOICES = %w[auto none required].freeze

      # @return [Array<Hash>, nil] a tool's `{type: "function", function: {name:, ...}}` definitions
      attr_reader :tools
      # @return [String, nil] `"auto"`, `"none"`, `"required"`, or the name of the one function to call
      attr_reader :tool_choice
      # @return [Boolean] whether a reply may call several tools (`parallel_tool_calls`)
      attr_reader :parallel_tool_calls
      # @return [Hash, nil] the JSON Schema the reply must match (`response_format`)
      attr_reader :response_schema

      # @return [Boolean] whether the reply may call tools: tools given, and `tool_choice` is not `none`
      def calls_tools?
        !tools.nil? && tool_choice != "none"
      end

      # @return [Boolean] whether the reply must call a tool (`required`, or a named function)
      def forces_call?
        calls_tools? && tool_choice != "auto"
      end

      private

      def chat
        @messages = chat_messages
        @logprobs = chat_logprobs
        @tools = chat_tools
        @tool_choice = chat_tool_choice
        @parallel_tool_calls = optional("parallel_tool_calls", true, false) != false
        @response_schema = response_format
        schema_or_tools("response_format")
      end

      # A reply is constrained to a schema or free to call tools, not both.
      def schema_or_tools(field)
        return unless @response_schema && calls_tools?

        raise invalid("#{field} with tools is not supported: ask for the tool calls, or for JSON", field)
      end

      def chat_logprobs
        top = integer("top_logprobs", 0..Model::MAX_LOGPROBS)
        return top || 0 if optional("logprobs", true, false)
        raise invalid("top_logprobs needs logprobs: true", "top_logprobs") unless top.nil?
      end

      # The messages as the chat template takes them: `developer` as `system`, an assistant's
      # tool call arguments (a JSON string in OpenAI's API) as the object templates expect
      # (llama.cpp parses them too).
      def chat_messages
        messages = required("messages", Array)
        raise invalid("messages must not be empty", "messages") if messages.empty?

        messages.each_with_index.map { |message, i| chat_message(typed(message, "messages[#{i}]", Hash), i) }
      end

      def chat_message(message, index)
        path = "messages[#{index}]"
        role = message_role(message, path)
        calls = message_calls(message, role, path)
        message = message.merge("role" => role == "developer" ? "system" : role)
        return message if calls.nil?

        message.merge("tool_calls" => calls.each_with_index.map { |c, i| past_call(c, "#{path}.tool_calls[#{i}]") })
      end

      # An assistant's tool calls; a message needs them or a content.
      def message_calls(message, role, path)
        typed(message["content"], "#{path}.content", String, Array)
        calls = typed(message["tool_calls"], "#{path}.tool_calls", Array) if role == "assistant"
        return calls unless message["content"].nil? && calls.nil?

        raise invalid("#{path}.content is required#{" (or tool_calls)" if role == "assistant"}", "messages")
      end

      def message_role(message, path)
        role = typed(message["role"], "#{path}.role", String)
        return role if ROLES.include?(role)

        raise invalid("#{path}.role must be one of #{ROLES.join(", ")}, got #{role.inspect}", "messages")
      end

      # An earlier call of the conversation, its arguments parsed.
      def past_call(call, path)
        function = typed(typed(call, path, Hash)["function"], "#{path}.function", Hash)
        if function.nil? || !function["name"].is_a?(String)
          raise invalid("#{path}.function.name is required", "messages")
        end

        arguments = typed(function["arguments"], "#{path}.function.arguments", String, Hash) || {}
        arguments = JSON.parse(arguments) if arguments.is_a?(String)
        call.merge("type" => "function", "function" => function.merge("arguments" => arguments))
      rescue JSON::ParserError
        raise invalid("#{path}.function.arguments is not a JSON string", "messages")
      end

      def chat_tools
        tools = optional("tools", Array)
        return nil if tools.nil? || tools.empty?

        tools.each_with_index.map do |tool, i|
          path = "tools[#{i}]"
          typed(tool, path, Hash)
          raise invalid("#{path}.type must be \"function\"", "tools") unless tool["type"] == "function"

          function = typed(tool["function"], "#{path}.function", Hash)
          raise invalid("#{path}.function.name is required", "tools") unless function&.dig("name").is_a?(String)

          typed(function["parameters"], "#{path}.function.parameters", Hash)
          tool
        end
      end

      # `auto` unless told (OpenAI's default with tools), `{"type": "function", "function":
      # {"name": ...}}` as the name, which must be one of the tools'.
      def chat_tool_choice
        choice = optional("tool_choice", String, Hash) || "auto"
        return named_choice(choice) if choice.is_a?(Hash)
        return choice if TOOL_CHOICES.include?(choice)

        raise invalid("tool_choice must be one of #{TOOL_CHOICES.join(", ")} or a function, got #{choice.inspect}",
                      "tool_choice")
      end

      def named_choice(choice)
        name = choice["function"]["name"] if choice["type"] == "function" && choice["function"].is_a?(Hash)
        unless name.is_a?(String)
          raise invalid("tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
        end
        return name if tools&.any? { |tool| tool["function"]["name"] == name }

        raise invalid("tool_choice names #{name.inspect}, which is not among the tools", "tool_choice")
      end

      # `text` (nil), `json_object` (any JSON object) or `json_schema`'s schema (any JSON
      # value without one). The reply is constrained to it whether or not `strict`, as
      # llama-server does: llguidance enforces the schema, and one it cannot enforce is a 400.
      def response_format
        format = optional("response_format", Hash)
        case format&.fetch("type", nil)
        when nil, "text" then nil
        when "json_object" then { "type" => "object" }
        when "json_schema"
          spec = typed(format["json_schema"], "response_format.json_schema", Hash)
          raise invalid("response_format.json_schema is required", "response_format") if spec.nil?

          typed(spec["strict"], "response_format.json_schema.strict", true, false)
          typed(spec["schema"], "response_format.json_schema.schema", Hash) || {}
        else
          raise invalid("response_format.type must be text, json_object or json_schema, got " \
                        "#{format["type"].inspect}", "response_format")
        end
      end
    end
  end
end
