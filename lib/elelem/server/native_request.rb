# frozen_string_literal: true

module Elelem
  class Server
    # The body of llama-server's native `POST /completion` (and of `POST /infill`, which adds
    # the code around the hole), checked field by field with llama-server's names and
    # defaults: `prompt`, `n_predict`, `temperature`, `top_k`, `top_p`, `min_p`,
    # `repeat_penalty`, `repeat_last_n`, `seed`, `stop`, `ignore_eos`, `n_probs`,
    # `cache_prompt`, `json_schema`, `grammar`, `stream`, `return_tokens`. A field of the
    # wrong type or out of range is a 400 naming it; llama-server's other fields (`samplers`,
    # `n_keep`, `dry_*`, ...) are accepted and ignored.
    class NativeRequest
      include Fields
      include Generation::OneChoice

      # llama-server's sampling unless told (its `common_params_sampling`): not greedy.
      LLAMA_SERVER_SAMPLING = { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05 }.freeze

      # @return [Symbol] `:completion`
      attr_reader :kind
      # @return [Boolean] whether the reply streams as server-sent events
      attr_reader :stream
      # @return [Boolean] whether the reply lists the generated token ids (`return_tokens`)
      attr_reader :return_tokens
      # @return [Integer, nil] how many alternatives each token's probabilities list (`n_probs`)
      attr_reader :logprobs
      # @return [Hash] the options of {Model#complete}: `max_tokens`, `temperature`, a grammar, ...
      attr_reader :generation
      # @return [String, Array<Integer>] the prompt: text or token ids (an infill's text after the prefix)
      attr_reader :prompt
      # @return [Hash, nil] the JSON Schema the text must match (`json_schema`)
      attr_reader :response_schema

      # @param body [Object] the parsed JSON body
      # @param max_tokens [Integer] the most tokens one request may generate (`n_predict: -1`
      #   and larger asks get this many)
      # @param reuse_prefix [Boolean] whether the server keeps cached prefixes at all (a request's
      #   `cache_prompt: false` turns it off for that request)
      # @param infill [Boolean] a `/infill` body: the prompt (text after the prefix) is optional
      # @raise [HTTPError] 400, naming the field at fault
      def initialize(body, max_tokens:, reuse_prefix: true, infill: false)
        take_body(body)
        @kind = :completion
        reply_fields
        @prompt = infill ? optional("prompt", String).to_s : completion_prompt
        @generation = native_sampling.merge(constraint, max_tokens: n_predict(max_tokens),
                                                        reuse_prefix: reuse_prefix && cache_prompt)
      end

      # Generation options ({Model#complete}'s) as llama-server's `generation_settings` names
      # them, the library's defaults filled in (`seed: -1`: a random one).
      # @param generation [Hash] the options
      # @param stream [Boolean] whether the reply streams
      # @param n_probs [Integer] how many alternatives each token's probabilities list
      # @return [Hash]
      def self.settings(generation, stream:, n_probs:)
        g = Options::GENERATION_DEFAULTS.merge(generation)
        { n_predict: g[:max_tokens], max_tokens: g[:max_tokens], seed: g[:seed] || -1, temperature: g[:temperature],
          top_k: g[:top_k], top_p: g[:top_p], min_p: g[:min_p], repeat_penalty: g[:repeat_penalty],
          repeat_last_n: g[:repeat_last_n], ignore_eos: g[:ignore_eos], stream:, n_probs:, stop: g[:stop] || [],
          cache_prompt: g[:reuse_prefix] }
      end

      # This request's settings, as {.settings} gives them.
      # @return [Hash]
      def settings
        self.class.settings(generation, stream:, n_probs: logprobs || 0)
      end

      private

      def reply_fields
        @stream = optional("stream", true, false) || false
        @return_tokens = optional("return_tokens", true, false) || false
        n_probs = integer("n_probs", 0..Model::MAX_LOGPROBS)
        @logprobs = n_probs unless n_probs&.zero?
      end

      def native_sampling
        LLAMA_SERVER_SAMPLING.merge({
          temperature: number("temperature", 0.0..Float::MAX), top_k: integer("top_k", 0..Options::MAX_U32),
          top_p: number("top_p", 0.0..1.0), min_p: number("min_p", 0.0..1.0),
          repeat_penalty: number("repeat_penalty", 0.01..10.0),
          repeat_last_n: integer("repeat_last_n", 0..Options::MAX_N_CTX),
          ignore_eos: optional("ignore_eos", true, false), stop: stops, seed: native_seed
        }.compact)
      end

      def cache_prompt
        optional("cache_prompt", true, false) != false
      end

      # llama-server's `seed: -1` (its default) draws a random seed, as no seed does here.
      def native_seed
        seed = integer("seed", -1..Options::MAX_SEED)
        seed unless seed == -1
      end

      # `n_predict: -1` (the default) generates to the end, within the server's cap.
      def n_predict(cap)
        asked = integer("n_predict", -1..Options::MAX_N_CTX)
        asked.nil? || asked.negative? ? cap : [asked, cap].min
      end

      # `json_schema` (an object: {#response_schema}) or `grammar` (GBNF, an option of
      # {Model#complete}), constrained as {Model#generate} does.
      def constraint
        @response_schema = optional("json_schema", Hash)
        grammar = optional("grammar", String)
        raise invalid("give json_schema or grammar, not both", "grammar") if @response_schema && grammar

        grammar.nil? || grammar.empty? ? {} : { grammar: }
      end
    end
  end
end
