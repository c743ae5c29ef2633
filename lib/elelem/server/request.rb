# frozen_string_literal: true

require_relative "fields"
require_relative "chat_fields"

module Elelem
  class Server
    # The body of a `POST /v1/chat/completions` or `POST /v1/completions`, checked field by
    # field as OpenAI checks it, and turned into what {Model#complete} takes. A field of the
    # wrong type or out of range is a 400 naming it, and so is a field the server does not
    # implement, but those OpenAI documents as having no effect on the text ({IGNORED}).
    class Request
      include Fields
      include ChatFields

      # What OpenAI's completions endpoint generates when `max_tokens` is not given.
      COMPLETION_MAX_TOKENS = 16
      # OpenAI's API samples at temperature 1 and top_p 1 unless told, not greedily as the
      # library does: a client written for it expects its defaults.
      OPENAI_SAMPLING = { temperature: 1.0, top_p: 1.0 }.freeze
      # The fields each endpoint implements: OpenAI's, and llama.cpp's `top_k`, `min_p`,
      # `repeat_penalty` and `ignore_eos`, which llama-server takes too.
      FIELDS = {
        chat: %w[model messages stream stream_options max_tokens max_completion_tokens temperature top_p n stop
                 seed presence_penalty frequency_penalty logit_bias logprobs top_logprobs response_format tools
                 tool_choice parallel_tool_calls top_k min_p repeat_penalty ignore_eos],
        completion: %w[model prompt stream stream_options max_tokens temperature top_p n best_of stop seed
                       presence_penalty frequency_penalty logit_bias logprobs echo suffix top_k min_p repeat_penalty
                       ignore_eos]
      }.freeze
      # Fields taken and ignored, because OpenAI's API reference documents them as having no
      # effect on what is generated: `user`, `safety_identifier` and `prompt_cache_key`
      # identify the end user or group requests for abuse monitoring and caching;
      # `metadata` and `store` concern stored completions; `service_tier` the latency tier
      # billed. Any other unknown field is a 400 naming it.
      IGNORED = %w[user safety_identifier prompt_cache_key metadata store service_tier].freeze
      # OpenAI's bound on a logit bias.
      MAX_LOGIT_BIAS = 100

      # @return [Symbol] `:chat` or `:completion`
      attr_reader :kind
      # @return [Boolean] whether the reply streams as server-sent events
      attr_reader :stream
      # @return [Boolean] whether a stream ends with a chunk holding the usage (`stream_options`)
      attr_reader :include_usage
      # @return [Integer, nil] how many alternatives each token's logprobs lists, nil: no logprobs
      attr_reader :logprobs
      # @return [Hash] the options of {Model#complete}: `max_tokens`, `temperature`, `seed`, ...
      attr_reader :generation
      # @return [Array<Hash>, nil] a chat's messages
      attr_reader :messages
      # @return [Integer] how many choices to generate, each a sequence of its own (`n`)
      attr_reader :choices
      # @return [String, Array<Integer>, nil] a completion's prompt: text or token ids
      attr_reader :prompt

      # @param body [Object] the parsed JSON body
      # @param kind [Symbol] `:chat` or `:completion`
      # @param max_tokens [Integer] the most tokens one request may generate (larger asks are cut to it)
      # @param reuse_prefix [Boolean] whether the generation keeps the cached prefix it shares
      #   with an earlier request (see {Model#generate})
      # @param n_vocab [Integer] the model's vocabulary size (the token ids `logit_bias` may name)
      # @raise [HTTPError] 400, naming the field at fault
      def initialize(body, kind, max_tokens:, reuse_prefix:, n_vocab:)
        take_body(body)
        @kind = kind
        known_fields
        optional("model", String)
        @choices = choice_count
        @stream = optional("stream", true, false) || false
        @include_usage = stream_options
        @generation = sampling(n_vocab).merge(max_tokens: max_tokens(max_tokens), reuse_prefix:)
        kind == :chat ? chat : completion
      end

      # The options of {Model#complete} for choice `index`: with a seed, each choice draws
      # from a seed of its own (the seed plus its index), or `n` samples would be one.
      # @param index [Integer]
      # @return [Hash]
      def generation_for(index)
        seed = generation[:seed]
        seed.nil? || index.zero? ? generation : generation.merge(seed: (seed + index) & Options::MAX_SEED)
      end

      private

      def known_fields
        unknown = @body.keys - FIELDS.fetch(kind) - IGNORED
        return if unknown.empty?

        raise invalid("#{unknown.map(&:inspect).join(", ")} #{unknown.size == 1 ? "is" : "are"} not supported " \
                      "by this server", unknown.first)
      end

      def completion
        @prompt = completion_prompt
        @logprobs = integer("logprobs", 0..Model::MAX_LOGPROBS)
        raise invalid("echo is not supported", "echo") if optional("echo", true, false)
        raise invalid("suffix is not supported", "suffix") unless optional("suffix", String).nil?
      end

      # `n`, each choice a sequence (the server checks it against the model's `parallel`);
      # `best_of` may only repeat it, since ranking candidates is not implemented.
      def choice_count
        n = integer("n", 1..Model::MAX_SEQUENCES) || 1
        best_of = integer("best_of", 1..Model::MAX_SEQUENCES)
        raise invalid("best_of must equal n (ranking candidates is not supported)", "best_of") if best_of&.!=(n)

        n
      end

      def stream_options
        options = optional("stream_options", Hash) || {}
        usage = options.fetch("include_usage", false)
        return usage if [true, false].include?(usage)

        raise invalid("stream_options.include_usage must be a boolean", "stream_options")
      end

      # Sampling as OpenAI defines it ({OPENAI_SAMPLING} unless told), plus
      # llama.cpp's `top_k`, `min_p`, `repeat_penalty` and `ignore_eos`, which llama-server
      # takes too.
      def sampling(n_vocab)
        {
          ignore_eos: optional("ignore_eos", true, false),
          temperature: number("temperature", 0.0..2.0) || OPENAI_SAMPLING[:temperature],
          top_p: number("top_p", 0.0..1.0) || OPENAI_SAMPLING[:top_p],
          top_k: integer("top_k", 0..Options::MAX_U32), min_p: number("min_p", 0.0..1.0),
          repeat_penalty: number("repeat_penalty", 0.01..10.0), seed: integer("seed", 0..Options::MAX_SEED),
          presence_penalty: number("presence_penalty", -2.0..2.0),
          frequency_penalty: number("frequency_penalty", -2.0..2.0),
          logit_bias: logit_bias(n_vocab), stop: stops
        }.compact
      end

      # `{"token id": bias}`, the ids as strings (JSON's keys), each bias from -100 to 100.
      def logit_bias(n_vocab)
        bias = optional("logit_bias", Hash)
        bias&.to_h do |id, value|
          token = Integer(id, 10, exception: false)
          unless token&.between?(0, n_vocab - 1)
            raise invalid("logit_bias keys must be token ids from 0 to #{n_vocab - 1}, got #{id.inspect}",
                          "logit_bias")
          end
          unless value.is_a?(Numeric) && value.abs <= MAX_LOGIT_BIAS
            raise invalid("logit_bias values must be numbers from -#{MAX_LOGIT_BIAS} to #{MAX_LOGIT_BIAS}",
                          "logit_bias")
          end

          [token, value.to_f]
        end
      end

      # The request's own bound (chat: `max_completion_tokens` or `max_tokens`), cut to the server's.
      def max_tokens(cap)
        asked = integer("max_completion_tokens", 0..Options::MAX_N_CTX) if kind == :chat
        asked ||= integer("max_tokens", 0..Options::MAX_N_CTX)
        asked ||= kind == :chat ? cap : COMPLETION_MAX_TOKENS
        [asked, cap].min
      end
    end
  end
end
