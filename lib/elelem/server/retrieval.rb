# frozen_string_literal: true

module Elelem
  class Server
    # `POST /v1/embeddings` (OpenAI's shape) and `POST /v1/rerank` (llama-server's, which
    # is Jina's and Cohere's), over {Embeddings#embed} and {Embeddings#rerank}.
    module Retrieval
      # The most texts one request may embed or rerank.
      MAX_INPUTS = 2048
      # The routes that generate text, which an embedding model (an encoder) cannot serve.
      GENERATING = %i[chat_completions completions responses completion infill ollama_chat ollama_generate].freeze

      private

      # The poolings that give one vector per input, OpenAI's shape.
      POOLINGS = %w[mean last cls].freeze

      # `input`: a string, an array of strings, an array of token ids, or an array of
      # those arrays; `encoding_format`: `float` (default) or `base64` (little-endian f32,
      # as OpenAI's clients ask for by default); `dimensions`: the model's own (a model
      # does not shorten its vectors: any other is a 400). Beyond OpenAI's fields, as
      # {Embeddings#embed} takes them: `pooling` (`mean`, `last` or `cls`; the model's own
      # by default, and required of a model without one) and `truncate` (true cuts a
      # text longer than the model takes, which is otherwise a 400). Vectors are
      # L2-normalized, as OpenAI's and llama-server's are.
      def embeddings(env)
        body = retrieval_body(env)
        model = model_for(body["model"])
        inputs = embedding_inputs(body["input"])
        format = encoding_format(body)
        check_dimensions(body["dimensions"])
        options = { pooling: embedding_pooling(body["pooling"]), truncate: truncate_flag(body) }
        ids = inputs.map { |input| input.is_a?(String) ? retrieval_tokens(input, "input") : input }
        vectors = retrieval_call("input") { model.embed(ids, **options) }
        data = vectors.each_with_index.map do |v, index|
          { object: "embedding", index:, embedding: format == "base64" ? [v.pack("e*")].pack("m0") : v }
        end
        json(200, { object: "list", data:, model: served_name, usage: usage(ids) })
      end

      # A 400 for a model without pooling, which gives one vector per token, not per input.
      def check_pooling
        return unless (served_model.info[:pooling] || :none) == :none

        raise HTTPError.new(400, "#{served_name} has no pooling of its own, and this API has no field to name one " \
                                 "(/v1/embeddings takes \"pooling\": \"mean\", \"last\" or \"cls\")",
                            param: "input", code: "not_supported")
      end

      # `query`, `documents` (strings), optional `top_n` and `return_documents`: each
      # document's `relevance_score`, best first.
      def rerank(env)
        body = retrieval_body(env)
        model = model_for(body["model"])
        query, documents, top_n = rerank_params(body)
        ranked = retrieval_call("documents") { model.rerank(query, documents, top_n: top_n&.clamp(..documents.size)) }
        results = ranked.map do |r|
          result = { index: r[:index], relevance_score: r[:score] }
          body["return_documents"] ? result.merge(document: { text: r[:document] }) : result
        end
        query_tokens = retrieval_tokens(query, "query").size
        tokens = documents.sum { |d| query_tokens + retrieval_tokens(d, "documents").size }
        json(200, { object: "list", model: served_name, results:,
                    usage: { prompt_tokens: tokens, total_tokens: tokens } })
      end

      # `pooling` as {Embeddings#embed} takes it: one of {POOLINGS}, or nil for the model's own.
      def embedding_pooling(pooling)
        if pooling.nil?
          return nil if served_model.info[:pooling]

          raise HTTPError.new(400, "#{served_name} has no pooling of its own: send \"pooling\": \"mean\", " \
                                   "\"last\" or \"cls\" for one vector per input", param: "pooling")
        end
        return pooling.to_sym if POOLINGS.include?(pooling)

        raise HTTPError.new(400, "pooling must be one of #{POOLINGS.join(", ")} (one vector per input), " \
                                 "got #{pooling.inspect[0, 40]}", param: "pooling")
      end

      def truncate_flag(body)
        truncate = body.fetch("truncate", false)
        return truncate if [true, false].include?(truncate)

        raise HTTPError.new(400, "truncate must be true or false", param: "truncate")
      end

      # OpenAI's `dimensions` shortens its text-embedding-3 vectors; these models' vectors
      # have one length, so only that length is accepted.
      def check_dimensions(dimensions)
        size = served_model.info[:embedding_length]
        return if dimensions.nil? || dimensions == size

        raise HTTPError.new(400, "dimensions must be #{size}, the length of #{served_name}'s embeddings " \
                                 "(it does not shorten them), got #{dimensions.inspect[0, 40]}", param: "dimensions")
      end

      def rerank_params(body)
        query, documents, top_n = body.values_at("query", "documents", "top_n")
        raise HTTPError.new(400, "query must be a string", param: "query") unless query.is_a?(String)
        unless documents.is_a?(Array) && documents.all?(String) && documents.size.between?(1, MAX_INPUTS)
          raise HTTPError.new(400, "documents must be an array of 1 to #{MAX_INPUTS} strings", param: "documents")
        end

        [query, documents, positive_integer(top_n, "top_n")]
      end

      def positive_integer(value, param)
        return value if value.nil? || (value.is_a?(Integer) && value.positive?)

        raise HTTPError.new(400, "#{param} must be a positive integer", param:)
      end

      def encoding_format(body)
        format = body.fetch("encoding_format", "float")
        return format if %w[float base64].include?(format)

        raise HTTPError.new(400, "encoding_format must be \"float\" or \"base64\"", param: "encoding_format")
      end

      def retrieval_body(env)
        body = read_json(env)
        raise HTTPError.new(400, "the request body must be a JSON object") unless body.is_a?(Hash)

        body
      end

      def embedding_inputs(input)
        inputs = single_input?(input) ? [input] : input
        valid = inputs.is_a?(Array) && inputs.size.between?(1, MAX_INPUTS) && inputs.all? { |i| single_input?(i) }
        return inputs if valid

        raise HTTPError.new(400, "input must be a string, an array of token ids, or an array of 1 to " \
                                 "#{MAX_INPUTS} of those", param: "input")
      end

      # A string, or non-empty token ids.
      def single_input?(input)
        input.is_a?(String) || (input.is_a?(Array) && !input.empty? && input.all?(Integer))
      end

      def retrieval_tokens(text, param)
        served_model.tokenize(text)
      rescue ArgumentError => e
        raise HTTPError.new(400, e.message, param:)
      end

      # The model's refusals as a client's errors: too long or empty a text (400), a model
      # that cannot do this (an embedding model asked to rerank: 400).
      def retrieval_call(param)
        yield
      rescue InputTooLongError => e
        hint = " (send \"truncate\": true to cut it)" if param == "input"
        raise HTTPError.new(400, "a text of #{e.tokens} tokens is longer than the #{e.limit} #{served_name} " \
                                 "embeds at once#{hint}", param:, code: "context_length_exceeded")
      rescue ArgumentError => e
        raise HTTPError.new(400, e.message, param:)
      end

      def usage(ids)
        tokens = ids.sum(&:size)
        { prompt_tokens: tokens, total_tokens: tokens }
      end
    end
  end
end
