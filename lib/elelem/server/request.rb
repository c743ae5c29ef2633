# frozen_string_literal: true

module Elelem
  class Server
    # The body of a `POST /v1/chat/completions` or `POST /v1/completions`, checked field by
    # field as OpenAI checks it, and turned into what {Model#complete} takes. A field of the
    # wrong type or out of range is a 400 naming it; fields the server has no use for
    # (`user`, `metadata`, `presence_penalty`, ...) are accepted and ignored, as clients send them.
    class Request
      include Fields

      # What OpenAI's completions endpoint generates when `max_tokens` is not given.
      COMPLETION_MAX_TOKENS = 16
      # OpenAI's API samples at temperature 1 and top_p 1 unless told, not greedily as the
      # library does: a client written for it expects its defaults.
      OPENAI_SAMPLING = { temperature: 1.0, top_p: 1.0 }.freeze

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
      # @return [Hash] a chat's template variables (`tools:`, `tool_choice:`)
      attr_reader :variables
      # @return [String, Array<Integer>, nil] a completion's prompt: text or token ids
      attr_reader :prompt

      # @param body [Object] the parsed JSON body
      # @param kind [Symbol] `:chat` or `:completion`
      # @param max_tokens [Integer] the most tokens one request may generate (larger asks are cut to it)
      # @param reuse_prefix [Boolean] whether the generation keeps the cached prefix it shares
      #   with an earlier request (see {Model#generate})
      # @raise [HTTPError] 400, naming the field at fault
      def initialize(body, kind, max_tokens:, reuse_prefix:)
        raise invalid("the request body must be a JSON object, got #{json_type(body)}") unless body.is_a?(Hash)

        @body = body
        @kind = kind
        optional("model", String)
        single_choice
        @stream = optional("stream", true, false) || false
        @include_usage = stream_options
        @generation = sampling.merge(max_tokens: max_tokens(max_tokens), reuse_prefix:)
        kind == :chat ? chat : completion
      end

      private

      def chat
        @messages = required("messages", Array)
        @logprobs = chat_logprobs
        tools = optional("tools", Array)
        tool_choice = optional("tool_choice", String, Hash)
        @variables = { tools:, tool_choice: }.compact
        response_format
      end

      def completion
        @prompt = completion_prompt
        @logprobs = integer("logprobs", 0..Model::MAX_LOGPROBS)
        raise invalid("echo is not supported", "echo") if optional("echo", true, false)
        raise invalid("suffix is not supported", "suffix") unless optional("suffix", String).nil?
      end

      # `n` and `best_of` other than 1: one choice per request is what a model's sequence gives.
      def single_choice
        %w[n best_of].each do |name|
          n = integer(name, 1..Options::MAX_U32)
          raise invalid("#{name} must be 1: one choice per request", name) unless n.nil? || n == 1
        end
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
      def sampling
        {
          ignore_eos: optional("ignore_eos", true, false),
          temperature: number("temperature", 0.0..2.0) || OPENAI_SAMPLING[:temperature],
          top_p: number("top_p", 0.0..1.0) || OPENAI_SAMPLING[:top_p],
          top_k: integer("top_k", 0..Options::MAX_U32), min_p: number("min_p", 0.0..1.0),
          repeat_penalty: number("repeat_penalty", 0.01..10.0), seed: integer("seed", 0..Options::MAX_SEED),
          stop: stops
        }.tap { %w[presence_penalty frequency_penalty].each { |name| number(name, -2.0..2.0) } }.compact
      end

      # The request's own bound (chat: `max_completion_tokens` or `max_tokens`), cut to the server's.
      def max_tokens(cap)
        asked = integer("max_completion_tokens", 0..Options::MAX_N_CTX) if kind == :chat
        asked ||= integer("max_tokens", 0..Options::MAX_N_CTX)
        asked ||= kind == :chat ? cap : COMPLETION_MAX_TOKENS
        [asked, cap].min
      end

      def chat_logprobs
        top = integer("top_logprobs", 0..Model::MAX_LOGPROBS)
        return top || 0 if optional("logprobs", true, false)
        raise invalid("top_logprobs needs logprobs: true", "top_logprobs") unless top.nil?
      end

      # Plain text is what the model gives; JSON modes wait for constrained decoding.
      def response_format
        format = optional("response_format", Hash)
        return if format.nil? || format["type"] == "text"

        raise invalid("response_format #{format["type"].inspect} is not supported yet (only \"text\")",
                      "response_format")
      end
    end
  end
end
