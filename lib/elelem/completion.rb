# frozen_string_literal: true

module Elelem
  # The result of {Model#complete}: the text, the token ids, and why it stopped.
  class Completion
    # @return [String] the generated text (stop strings excluded)
    attr_reader :text
    # @return [Array<Integer>] the generated token ids
    attr_reader :tokens
    # Why generation stopped: `:stop` (a stop string), `:eos`, `:length` or `:context_full`.
    # Never `:interrupted`: a call that does not finish (an exception, a `break` out of the
    # block) returns no Completion; {Model#last_stop_reason} then says `:interrupted`.
    # @return [Symbol]
    attr_reader :finish_reason
    # @return [Integer] tokens in the prompt
    attr_reader :prompt_tokens
    # @return [Hash{Symbol => Numeric}] prompt and decode speed of this generation
    attr_reader :timings
    # Each generated token's log-probability under the model (the log-softmax of its
    # logits) and the likeliest alternatives, when asked for (`complete(..., logprobs: k)`):
    # `{ token:, logprob:, top: [[id, logprob], ...] }` per token, likeliest first.
    # @return [Array<Hash>, nil]
    attr_reader :logprobs

    # @api private
    def initialize(text:, tokens:, finish_reason:, prompt_tokens:, timings:, logprobs: nil)
      @text = text
      @tokens = tokens
      @finish_reason = finish_reason
      @prompt_tokens = prompt_tokens
      @timings = timings
      @logprobs = logprobs
    end

    # @return [String] the text
    def to_s
      text
    end

    # @return [String]
    def inspect
      "#<#{self.class.name} #{tokens.size} tokens, #{finish_reason}: #{text[0, 40].inspect}>"
    end
  end
end
