# frozen_string_literal: true

require "time"
require_relative "ollama/request"
require_relative "ollama/reply"
require_relative "ollama/catalog"

module Elelem
  class Server
    # Ollama's API (docs/api.md of ollama/ollama) on the same server: `POST /api/chat` and
    # `POST /api/generate` (streamed as NDJSON unless `stream: false`), `POST /api/embed` and
    # `POST /api/embeddings`, and the model's listings ({Catalog}: `/api/tags`, `/api/show`,
    # `/api/ps`, `/api/version`). Errors are Ollama's, `{"error": "..."}`, with the status.
    module Ollama
      include Catalog

      # What each path answers, and to which methods.
      ROUTES = {
        "/api/chat" => [%w[POST], :ollama_chat], "/api/generate" => [%w[POST], :ollama_generate],
        "/api/embed" => [%w[POST], :ollama_embed], "/api/embeddings" => [%w[POST], :ollama_embeddings],
        **Catalog::ROUTES
      }.freeze
      # The headers of a streaming reply: one JSON object a line, sent as it is made.
      NDJSON_HEADERS = { "content-type" => "application/x-ndjson", "cache-control" => "no-cache",
                         "x-accel-buffering" => "no" }.freeze

      # An error as Ollama gives it.
      # @param error [HTTPError]
      # @return [Hash]
      def self.error_body(error)
        { error: error.to_h.dig(:error, :message) }
      end

      # A request's `keep_alive` in seconds (nil: the server's `--ttl`): how long its model
      # stays loaded once idle ({ModelPool.seconds}).
      # @param body [Hash] the request's body
      # @return [Numeric, nil]
      # @raise [HTTPError] 400 for a value that is not a duration
      def self.keep_alive(body)
        value = body["keep_alive"]
        return nil if value.nil?
        unless value.is_a?(String) || value.is_a?(Numeric)
          raise HTTPError.new(400, "keep_alive must be a string or a number", param: "keep_alive")
        end

        ModelPool.seconds(value)
      rescue ArgumentError => e
        raise HTTPError.new(400, "keep_alive: #{e.message}", param: "keep_alive")
      end

      private

      # The conversation through the chat template, as {Generation} answers a chat (with
      # `tools`, {Model#complete} reads the calls out of the reply).
      def ollama_chat(env)
        ollama_generation(env, :chat)
      end

      # The prompt through the chat template (as a user message, after `system`), unless
      # `raw`; with a `suffix`, a fill-in-the-middle prompt ({Infill}); after `context`.
      def ollama_generate(env)
        ollama_generation(env, :completion) do |model, request|
          ids = if request.suffix
                  Infill.new(model).tokens("input_prefix" => request.text, "input_suffix" => request.suffix)
                elsif request.raw
                  retrieval_tokens(request.text, "prompt")
                else
                  Generation.chat_input(model, request.messages, template: @template)
                end
          next ids if ids.is_a?(Images::Prompt) && request.context.empty?
          raise HTTPError.new(400, "context cannot go with images", param: "context") if ids.is_a?(Images::Prompt)

          request.context + ids
        end
      end

      # The request of `kind` on the model it names, generated from the prompt `prompt` builds
      # (without it, the request's own). With nothing to generate, the model is loaded, or with
      # `keep_alive: 0` unloaded once no request uses it.
      def ollama_generation(env, kind, &prompt)
        body = retrieval_body(env)
        keep_alive = Ollama.keep_alive(body)
        model = model_for(body["model"], keep_alive:)
        request = Request.new(body, kind, max_tokens: @max_tokens, n_ctx: model.info[:n_ctx],
                                          reuse_prefix: @reuse_prefix)
        if request.load_only?
          unload = keep_alive&.zero? && !@pool.kept?(served_name)
          return json(200, Reply.new(request, served_name, []).loaded(unload:))
        end

        generation = new_generation(model, request, prompt: prompt&.call(model, request))
        respond(env, generation, Reply.new(request, served_name, generation.prompt), Stream, headers: NDJSON_HEADERS)
      end

      # `input`: a string or strings; `truncate` (on unless false) cuts a text longer than
      # the model takes. The vectors are L2-normalized, as Ollama's are.
      def ollama_embed(env)
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        body = retrieval_body(env)
        model_for(body["model"], keep_alive: Ollama.keep_alive(body))
        raise HTTPError.new(400, "dimensions is not supported", param: "dimensions") unless body["dimensions"].nil?

        ids = ollama_inputs(body["input"]).map { |input| retrieval_tokens(input, "input") }
        vectors = ollama_vectors(ids, truncate: body["truncate"] != false)
        json(200, { model: served_name, embeddings: vectors, total_duration: Reply.nanoseconds(started),
                    load_duration: 0, prompt_eval_count: ids.sum(&:size) })
      end

      def ollama_inputs(input)
        inputs = input.is_a?(String) ? [input] : input
        return inputs if inputs.is_a?(Array) && inputs.size.between?(1, Retrieval::MAX_INPUTS) && inputs.all?(String)

        raise HTTPError.new(400, "input must be a string or an array of 1 to #{Retrieval::MAX_INPUTS} strings")
      end

      # The older `/api/embeddings`: one `prompt`, one `embedding`.
      def ollama_embeddings(env)
        body = retrieval_body(env)
        model_for(body["model"], keep_alive: Ollama.keep_alive(body))
        prompt = body["prompt"]
        raise HTTPError.new(400, "prompt must be a string", param: "prompt") unless prompt.is_a?(String)

        json(200, { embedding: ollama_vectors([retrieval_tokens(prompt, "prompt")], truncate: true).first })
      end

      def ollama_vectors(ids, truncate:)
        check_pooling
        retrieval_call("input") { served_model.embed(ids, truncate:) }
      end
    end
  end
end
