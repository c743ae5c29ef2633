# frozen_string_literal: true

module Elelem
  class Server
    module Ollama
      # The body of Ollama's `POST /api/chat` or `POST /api/generate`, checked field by field
      # and turned into what {Model#complete} takes: `options` (`num_predict`, `temperature`,
      # `top_k`, `top_p`, `min_p`, `seed`, `stop`, `repeat_penalty`, `repeat_last_n`,
      # `num_ctx`) with Ollama's defaults, `format` (`"json"` or a JSON Schema, constrained as
      # {Model#chat}'s `json_schema:`), `stream` (on unless false), `keep_alive` (read by
      # the server: {Ollama.keep_alive}). A chat's messages and tools are checked as OpenAI's
      # ({ChatFields}); the model decides whether to call a tool (Ollama has no `tool_choice`).
      # `images` (base64, a message's or a generate request's) come before the text they go with,
      # as image parts the served model's projector lays out (a model without one refuses them);
      # `think` is refused.
      class Request
        include Fields
        include ChatFields
        include Generation::OneChoice

        # Ollama's sampling unless told (its `api.DefaultOptions`).
        OLLAMA_SAMPLING = { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.0, repeat_penalty: 1.1,
                            repeat_last_n: 64 }.freeze
        # What `format: "json"` asks for: a JSON object, as Ollama's JSON mode gives.
        JSON_OBJECT = { "type" => "object" }.freeze

        # @return [Symbol] `:chat` or `:completion` (`/api/generate`)
        attr_reader :kind
        # @return [Boolean] whether the reply streams (NDJSON)
        attr_reader :stream
        # @return [Hash] the options of {Model#complete}: `max_tokens`, `temperature`, ...
        attr_reader :generation
        # @return [Array<Hash>] the conversation (a generate request's: `system` and the prompt)
        attr_reader :messages
        # @return [String] a generate request's prompt (`""`: just load the model)
        attr_reader :text
        # @return [String, nil] a generate request's `suffix`: the code after the hole (infill)
        attr_reader :suffix
        # @return [Boolean] a generate request's `raw`: the prompt as it is, no chat template
        attr_reader :raw
        # @return [Array<Integer>] a generate request's `context`: the ids of an earlier exchange
        attr_reader :context

        # @param body [Object] the parsed JSON body
        # @param kind [Symbol] `:chat` or `:completion` (`/api/generate`)
        # @param max_tokens [Integer] the server's cap on generated tokens (`num_predict: -1` gets it)
        # @param n_ctx [Integer] the model's context: a larger `num_ctx` is refused
        # @param reuse_prefix [Boolean] keep cached prefixes (see {Model#generate})
        # @raise [HTTPError] 400, naming the field at fault
        def initialize(body, kind, max_tokens:, n_ctx:, reuse_prefix:)
          take_body(body)
          @kind = kind
          optional("model", String)
          optional("keep_alive", String, Numeric)
          no_thinking
          @stream = optional("stream", true, false) != false
          @generation = options(max_tokens, n_ctx).merge(reuse_prefix:)
          @response_schema = format
          kind == :chat ? chat : generate
        end

        # @return [nil] an Ollama request asks for no log-probabilities here
        def logprobs; end

        # @return [Boolean] whether there is nothing to generate (Ollama's way to load a model)
        def load_only?
          kind == :chat ? messages.empty? : text.empty? && suffix.nil?
        end

        private

        # No messages: nothing to generate ({#load_only?}).
        def chat
          @messages = required("messages", Array).empty? ? [] : chat_messages
          @tools = chat_tools
          @tool_choice = "auto"
          @parallel_tool_calls = true
          schema_or_tools("format")
        end

        # Ollama's message fields as the chat templates read them (`tool_name` is a tool
        # result's `name`), then checked as OpenAI's.
        def chat_message(message, index)
          images = images(message["images"], "messages[#{index}].images")
          tool = typed(message["tool_name"], "messages[#{index}].tool_name", String)
          message = message.except("images", "tool_name").merge(tool ? { "name" => tool } : {})
          super(with_images(message, images), index)
        end

        def generate
          @text = optional("prompt", String) || ""
          @suffix = optional("suffix", String)
          @raw = optional("raw", true, false) || false
          @context = optional("context", Array) || []
          raise invalid("context must be token ids", "context") unless @context.all?(Integer)
          raise invalid("template is not supported (the model's chat template is used)", "template") if template?

          system = optional("system", String)
          @messages = [*(system ? [{ "role" => "system", "content" => system }] : []),
                       with_images({ "role" => "user", "content" => @text }, generate_images)]
        end

        def no_thinking
          return unless optional("think", true, false)

          raise invalid("think is not supported: the server splits no reasoning off", "think")
        end

        def template?
          !(optional("template", String) || "").empty?
        end

        # Ollama's `images`: base64 Strings, as image parts ({ChatOptions.image}).
        def images(images, path)
          typed(images, path, Array).to_a.each_with_index.map do |image, i|
            { "type" => "image", "image" => typed(image, "#{path}[#{i}]", String).unpack1("m0") }
          rescue ArgumentError
            raise invalid("#{path}[#{i}] is not base64", "images")
          end
        end

        # A generate request's images, which only a templated prompt takes.
        def generate_images
          images = images(@body["images"], "images")
          return images unless @raw && images.any?

          raise invalid("images cannot go with raw: true (a raw prompt is not templated)", "images")
        end

        # A message with its images before its text.
        def with_images(message, images)
          return message if images.empty?

          message.merge("content" => [*images, { "type" => "text", "text" => message["content"] || "" }])
        end

        # `format`: "json" (an object), a JSON Schema, or nothing.
        def format
          format = optional("format", String, Hash)
          case format
          when nil, "" then nil
          when "json" then JSON_OBJECT
          when Hash then format
          else raise invalid("format must be \"json\" or a JSON Schema, got #{format.inspect[0, 40]}", "format")
          end
        end

        # The `options` object, read with this class's field checks.
        def options(max_tokens, n_ctx)
          body = @body
          @body = optional("options", Hash) || {}
          num_ctx(n_ctx)
          OLLAMA_SAMPLING.merge(sampling_options, max_tokens: num_predict(max_tokens))
        ensure
          @body = body
        end

        def sampling_options
          seed = integer("seed", -1..Options::MAX_SEED)
          { temperature: number("temperature", 0.0..Float::MAX), top_k: integer("top_k", 0..Options::MAX_U32),
            top_p: number("top_p", 0.0..1.0), min_p: number("min_p", 0.0..1.0),
            repeat_penalty: number("repeat_penalty", 0.01..10.0),
            repeat_last_n: integer("repeat_last_n", 0..Options::MAX_N_CTX),
            seed: seed == -1 ? nil : seed, stop: stops }.compact
        end

        # `num_predict`: -1 (Ollama's default: no limit) and -2 (fill the context) get the
        # server's cap, as does anything above it.
        def num_predict(cap)
          asked = integer("num_predict", -2..Options::MAX_N_CTX)
          asked.nil? || asked.negative? ? cap : [asked, cap].min
        end

        # A context no larger than the model's is accepted (the model keeps its own); a larger
        # one cannot be had without reopening the model.
        def num_ctx(n_ctx)
          asked = integer("num_ctx", 1..Options::MAX_N_CTX)
          return if asked.nil? || asked <= n_ctx

          raise invalid("num_ctx #{asked} is above the served model's context of #{n_ctx} tokens " \
                        "(elelem serve --ctx N sets it)", "num_ctx")
        end
      end
    end
  end
end
