# frozen_string_literal: true

module Elelem
  # Embeddings and reranking, as llama.cpp's `llama-embedding` and llama-server's
  # `/v1/embeddings` and `/v1/rerank` compute them (bit for bit on the same build):
  # encoders such as BERT (all-MiniLM-L6-v2, nomic-embed-text) and decoders with a
  # pooling (Qwen3-Embedding's last token). Texts are packed into passes, each its own
  # sequence, `batch_size` at a time.
  #
  #   Elelem.open("all-minilm-l6-v2") do |model|
  #     model.embed("A cat sat on the mat.")          # => [0.0123, -0.0456, ...] (384 Floats, unit length)
  #     model.embed(["one", "two"], normalize: :none) # => [[...], [...]]
  #   end
  module Embeddings
    # `normalize:` names and llama-embedding's `--embd-normalize` numbers: an Integer p
    # above 2 is the p-norm.
    NORMALIZATIONS = { none: -1, max_abs: 0, taxicab: 1, l1: 1, l2: 2 }.freeze
    # `pooling:` names (llama.cpp's `--pooling`); nil is the model's own.
    POOLINGS = %i[none mean cls last rank].freeze
    # How many texts one pass holds unless told otherwise.
    DEFAULT_BATCH_SIZE = 32

    # The embedding of a text, or of each text.
    #
    # @param input [String, Array<Integer>, Array<String, Array<Integer>>] a text (tokenized with
    #   special tokens, as llama.cpp does), token ids, or an Array of either
    # @param normalize [Symbol, Integer] `:l2` (unit length, the default), `:none`, `:max_abs`
    #   (largest magnitude 32760, an int16 range), `:taxicab` (`:l1`), or an Integer p > 2 (p-norm)
    # @param pooling [Symbol, nil] `:mean`, `:cls`, `:last`, `:none` (one vector per token) or
    #   `:rank`; nil is the model's `pooling_type`, and required of a model without one (a
    #   decoder such as Qwen2.5-Coder: `ArgumentError`, as the CLI's `--pooling` and the
    #   server's `"pooling"` are)
    # @param batch_size [Integer] the most texts evaluated in one pass (1 to {Model::MAX_SEQUENCES})
    # @param truncate [Boolean] cut a text longer than the model takes (keeping its last
    #   token, the end marker) instead of raising `ArgumentError`
    # @return [Array<Float>, Array<Array<Float>>] one vector for one input, else one per input
    #   (with `pooling: :none`, each text's per-token vectors)
    # @raise [ArgumentError] for an empty text, or no pooling for a model without one
    # @raise [Elelem::InputTooLongError] for a text longer than the model takes (an ArgumentError)
    def embed(input, normalize: :l2, pooling: nil, batch_size: DEFAULT_BATCH_SIZE, truncate: false)
      if pooling.nil? && !_info[:pooling]
        raise ArgumentError, "#{_info[:name] || _info[:architecture]} has no pooling of its own: pass pooling: " \
                             ":mean, :last or :cls (one vector per text), or :none (one vector per token)"
      end

      single = single_text?(input)
      ids = embedding_ids(single ? [input] : input, truncate)
      vectors = _embed(ids, embedding_pooling(pooling), embedding_norm(normalize), checked_batch_size(batch_size))
      vectors = by_token(vectors, ids) if per_token?(pooling)
      single ? vectors.first : vectors
    end

    # Scores each document's relevance to the query with a reranker (a cross-encoder
    # with a classification head, `rank` pooling), as llama-server's `/v1/rerank`: each
    # pair is `BOS query SEP document` (EOS where the vocabulary asks for it), and its
    # score the head's first output, unnormalized.
    #
    # @param query [String]
    # @param documents [Array<String>]
    # @param top_n [Integer, nil] keep only the best n
    # @param batch_size [Integer] the most pairs evaluated in one pass
    # @return [Array<Hash{Symbol => Object}>] `{index:, score:, document:}`, best first
    # @raise [ArgumentError] when the model has no classification head
    def rerank(query, documents, top_n: nil, batch_size: DEFAULT_BATCH_SIZE)
      Options.text(:query, query)
      embedding_inputs(documents).each { |d| Options.text(:document, d) }
      Options.integer(:top_n, top_n, 0..documents.size) unless top_n.nil?
      ids = documents.map { |doc| checked_length(tokenizer.send(:_rerank_ids, query, doc)) }
      scores = _embed(ids, "rank", NORMALIZATIONS[:none], checked_batch_size(batch_size))
      ranked = scores.each_with_index.map { |s, i| { index: i, score: s.first, document: documents[i] } }
      ranked = ranked.sort_by { |r| [-r[:score], r[:index]] }
      top_n ? ranked.first(top_n) : ranked
    end

    private

    def embedding_inputs(inputs)
      return inputs if inputs.is_a?(Array) && !inputs.empty?

      raise ArgumentError, "expected a String, token ids, or a non-empty Array of them, got #{inputs.class}"
    end

    def per_token?(pooling)
      (pooling || _info[:pooling]) == :none
    end

    # Without pooling, each text's vector holds its tokens' rows one after another.
    def by_token(vectors, ids)
      vectors.zip(ids).map { |v, t| v.each_slice(v.size / t.size).to_a }
    end

    def checked_batch_size(batch_size)
      Options.integer(:batch_size, batch_size, 1..Model::MAX_SEQUENCES)
    end

    # A String, or token ids: one text.
    def single_text?(input)
      input.is_a?(String) || (input.is_a?(Array) && input.first.is_a?(Integer))
    end

    def embedding_ids(texts, truncate)
      embedding_inputs(texts).map do |text|
        checked_length(text.is_a?(String) ? tokenize(text) : Options.ids(text), truncate:,
                                                                                hint: "pass truncate: true to cut it")
      end
    end

    # The ids, cut to the model's length when `truncate`, else refused when longer (`hint`
    # saying how to cut them).
    def checked_length(ids, truncate: false, hint: nil)
      raise ArgumentError, "cannot embed an empty text" if ids.empty?

      max = _embed_max_tokens
      return ids if ids.size <= max
      return ids.first(max - 1) << ids.last if truncate

      raise InputTooLongError.new(ids.size, max, hint)
    end

    def embedding_pooling(pooling)
      return nil if pooling.nil?
      return pooling.to_s if POOLINGS.include?(pooling)

      raise ArgumentError, "pooling must be one of #{POOLINGS.inspect}, got #{pooling.inspect}"
    end

    def embedding_norm(normalize)
      return normalize if normalize.is_a?(Integer) && normalize > 2

      NORMALIZATIONS.fetch(normalize) do
        raise ArgumentError, "normalize must be one of #{NORMALIZATIONS.keys.inspect} or an Integer p > 2, " \
                             "got #{normalize.inspect}"
      end
    end
  end
end
