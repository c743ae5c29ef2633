# frozen_string_literal: true

module Elelem
  class Server
    # `POST /v1/embeddings` (OpenAI's shape) and `POST /v1/rerank` (llama-server's, which
    # is Jina's and Cohere's), over {Embeddings#embed} and {Embeddings#rerank}.
    module Retrieval
      # The most texts one request may embed or rerank.
      MAX_INPUTS = 2048
      # The routes that generate text, which an embedding model (an encoder) cannot serve.
      GENERATING = %i[chat_completions completions completion infill ollama_chat ollama_generate].freeze

      private

      # A 501 for a text route on an embedding model.
      def check_serves(handler)
        return unless GENERATING.include?(handler) && @model.info[:kind] == :encoder

        raise HTTPError.new(501, "#{model_name} is an embedding model: it serves /v1/embeddings, /v1/rerank " \
                                 "and /api/embed",
                            code: "not_supported")
      end

      # `input`: a string, an array of strings, an array of token ids, or an array of
      # those arrays; `encoding_format`: `float` (default) or `base64` (little-endian f32,
      # as OpenAI's clients ask for by default). Vectors are L2-normalized, as OpenAI's
      # and llama-server's are.
      def embeddings(env)
        body = retrieval_body(env)
        inputs = embedding_inputs(body["input"])
        format = encoding_format(body)
        check_pooling

        ids = inputs.map { |input| input.is_a?(String) ? retrieval_tokens(input, "input") : input }
        vectors = retrieval_call("input") { @model.embed(ids) }
        data = vectors.each_with_index.map do |v, index|
          { object: "embedding", index:, embedding: format == "base64" ? [v.pack("e*")].pack("m0") : v }
        end
        json(200, { object: "list", data:, model: model_name, usage: usage(ids) })
      end

      # A 400 for a model without pooling, which gives one vector per token, not per input.
      def check_pooling
        return unless (@model.info[:pooling] || :none) == :none

        raise HTTPError.new(400, "#{model_name} has no pooling: it gives one vector per token, not per input",
                            param: "input", code: "not_supported")
      end

      # `query`, `documents` (strings), optional `top_n` and `return_documents`: each
      # document's `relevance_score`, best first.
      def rerank(env)
        body = retrieval_body(env)
        query, documents, top_n = rerank_params(body)
        ranked = retrieval_call("documents") { @model.rerank(query, documents, top_n: top_n&.clamp(..documents.size)) }
        results = ranked.map do |r|
          result = { index: r[:index], relevance_score: r[:score] }
          body["return_documents"] ? result.merge(document: { text: r[:document] }) : result
        end
        query_tokens = retrieval_tokens(query, "query").size
        tokens = documents.sum { |d| query_tokens + retrieval_tokens(d, "documents").size }
        json(200, { object: "list", model: model_name, results:,
                    usage: { prompt_tokens: tokens, total_tokens: tokens } })
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
        @model.tokenize(text)
      rescue ArgumentError => e
        raise HTTPError.new(400, e.message, param:)
      end

      # The model's refusals as a client's errors: too long or empty a text (400), a model
      # that cannot do this (an embedding model asked to rerank: 400).
      def retrieval_call(param)
        yield
      rescue ArgumentError => e
        code = e.message.include?("longer than") ? "context_length_exceeded" : nil
        raise HTTPError.new(400, e.message, param:, code:)
      end

      def usage(ids)
        tokens = ids.sum(&:size)
        { prompt_tokens: tokens, total_tokens: tokens }
      end
    end
  end
end
