# frozen_string_literal: true

require_relative "metrics"
require_relative "native_request"
require_relative "native_reply"
require_relative "infill"

module Elelem
  class Server
    # llama-server's own endpoints, with its field names and shapes (its tools/server in
    # llama.cpp, as the llama-cpp-python 0.3.36 sdist pins it): `POST /tokenize`,
    # `POST /detokenize`, `POST /apply-template`, `GET /props`, `GET /slots`,
    # `GET /metrics` (Prometheus text), `POST /infill` and the native `POST /completion`.
    # Errors are llama-server's objects, `{"error": {"code", "message", "type"}}`.
    module LlamaEndpoints
      # What each path answers, and to which methods.
      ROUTES = {
        "/tokenize" => [%w[POST], :tokenize], "/detokenize" => [%w[POST], :detokenize],
        "/apply-template" => [%w[POST], :apply_template], "/props" => [%w[GET HEAD], :props],
        "/slots" => [%w[GET HEAD], :slots], "/metrics" => [%w[GET HEAD], :metrics],
        "/infill" => [%w[POST], :infill], "/completion" => [%w[POST], :completion],
        "/completions" => [%w[POST], :completion]
      }.freeze
      # The content type of Prometheus' text format, as llama-server sends it.
      PROMETHEUS = "text/plain; version=0.0.4"

      # An error as llama-server's endpoints give it.
      # @param error [HTTPError]
      # @return [Hash]
      def self.error_body(error)
        { error: { code: error.status, message: error.to_h.dig(:error, :message), type: error.type } }
      end

      private

      # An error in the shape of the API the path belongs to: Ollama's, llama-server's, OpenAI's.
      def error_body(error, path)
        return Ollama.error_body(error) if path.start_with?("/api/")
        return LlamaEndpoints.error_body(error) if ROUTES.key?(path) || Routing::ROUTER_ROUTES.key?(path)

        error.to_h
      end

      # `content` (a string) as token ids, or with `with_pieces` as `{id, piece}` (a piece
      # that is not UTF-8 as its bytes); `add_special` (false) and `parse_special` (true).
      def tokenize(env)
        body = retrieval_body(env)
        content = body["content"]
        return json(200, { tokens: [] }) if content.nil?

        ids = tokens_of(content, body)
        model = model_for(body["model"])
        ids = ids.map { |id| { id:, piece: piece_json(model.token_to_piece(id)) } } if body["with_pieces"] == true
        json(200, { tokens: ids })
      end

      def tokens_of(content, body)
        raise HTTPError.new(400, "content must be a string", param: "content") unless content.is_a?(String)

        model_for(body["model"]).tokenize(content, add_special: body["add_special"] == true,
                                                   parse_special: body["parse_special"] != false)
      end

      def piece_json(piece)
        text = piece.dup.force_encoding(Encoding::UTF_8)
        text.valid_encoding? ? text : piece.bytes
      end

      # `tokens` as text: each token's piece (special tokens as their text), joined.
      def detokenize(env)
        body = retrieval_body(env)
        ids = body.fetch("tokens", [])
        unless ids.is_a?(Array) && ids.all?(Integer)
          raise HTTPError.new(400, "tokens must be an array of token ids", param: "tokens")
        end

        model = model_for(body["model"])
        text = ids.map { |id| model.token_to_piece(id) }.join.force_encoding(Encoding::UTF_8).scrub
        json(200, { content: text })
      rescue ArgumentError => e
        raise HTTPError.new(400, e.message, param: "tokens")
      end

      # The chat template applied to `messages` (and `tools`), as text: `{"prompt": ...}`.
      def apply_template(env)
        body = retrieval_body(env)
        messages = body["messages"]
        raise HTTPError.new(400, "messages must be an array", param: "messages") unless messages.is_a?(Array)

        variables = { tools: body["tools"], tool_choice: body["tool_choice"] }.compact
        json(200, { prompt: model_for(body["model"]).chat_prompt(messages, template: @template, **variables) })
      rescue ArgumentError, TemplateError => e
        raise HTTPError.new(400, e.message, param: "messages")
      end

      # `?model=NAME`: the model's (as on llama-server's router), loaded if it is not.
      def props(env)
        model = model_for(query_model(env))
        info = model.info
        settings = { params: NativeRequest.new({ "prompt" => "" }, max_tokens: @max_tokens).settings,
                     n_ctx: info[:n_ctx] }
        json(200, { default_generation_settings: settings, total_slots: info[:parallel] || 1,
                    model_alias: served_name, model_path: info[:path],
                    modalities: { vision: model.vision?, video: false, audio: model.audio? },
                    endpoint_slots: true, endpoint_props: false, endpoint_metrics: true,
                    chat_template: @template || model.chat_template.to_s, **special_tokens(model),
                    build_info: "elelem #{VERSION}", is_sleeping: false })
      end

      def special_tokens(model)
        tokenizer = model.tokenizer
        { bos_token: tokenizer.bos ? model.token_to_piece(tokenizer.bos) : "",
          eos_token: tokenizer.eos ? model.token_to_piece(tokenizer.eos) : "" }
      end

      # `?fail_on_no_slot=1` answers 503 when every slot is busy, as llama-server does.
      def slots(env)
        info = model_for(query_model(env)).info
        slots = metrics_for(served_name).slots(n_ctx: info[:n_ctx], speculative: !info[:draft].nil?)
        if env["QUERY_STRING"].to_s.match?(/(?:\A|&)fail_on_no_slot=[^&]/) && slots.all? { _1[:is_processing] }
          raise HTTPError.new(503, "no slot available", code: "unavailable")
        end

        json(200, slots)
      end

      # `?model=NAME`: the model's counters and KV cache (none loaded for them).
      def metrics(env)
        name = pool_answer { @pool.resolve(query_model(env)) }
        metrics = metrics_for(name)
        [200, { "content-type" => PROMETHEUS, "process-start-time-unix" => metrics.started.to_s },
         [metrics.prometheus(kv_usage(name))]]
      end

      # The KV cache of the model `name` if it is loaded (nil if not, or closed since).
      def kv_usage(name)
        @pool.loaded(name)&.stats
      rescue ClosedError
        nil
      end

      def completion(env)
        body = retrieval_body(env)
        request = NativeRequest.new(body, max_tokens: @max_tokens, reuse_prefix: @reuse_prefix)
        native(env, model_for(body["model"]), request)
      end

      # Fill-in-the-middle: `input_prefix`, `input_suffix`, `input_extra`, and the optional
      # `prompt`, laid out as llama-server does ({Infill}); then as `/completion`.
      def infill(env)
        body = retrieval_body(env)
        model = model_for(body["model"])
        infill = Infill.new(model)
        request = NativeRequest.new(body, max_tokens: @max_tokens, reuse_prefix: @reuse_prefix, infill: true)
        native(env, model, request, infill.tokens(body))
      end

      def native(env, model, request, prompt = nil)
        generation = new_generation(model, request, prompt:)
        respond(env, generation, NativeReply.new(generation, model, served_name), NativeStream)
      end
    end
  end
end
