# frozen_string_literal: true

module Elelem
  # A call a model asked for in its reply ({Completion#tool_calls}): the tool's name, its
  # arguments, parsed (a Hash, valid against the tool's JSON Schema), and its id where the
  # model writes one (Mistral's formats), else nil.
  ToolCall = Struct.new(:name, :arguments, :id, keyword_init: true) do
    # The call as an assistant message's `tool_calls` entry, to send back in the conversation.
    # @return [Hash]
    def to_message
      { id:, type: "function", function: { name:, arguments: } }.compact
    end
  end

  # The result of {Model#complete}: the text, the token ids, and why it stopped.
  class Completion
    # @return [String] the generated text (stop strings excluded)
    attr_reader :text
    # @return [Array<Integer>] the generated token ids
    attr_reader :tokens
    # Why generation stopped: `:stop` (a stop string, or the constrained text is complete),
    # `:eos`, `:length` (`max_tokens`: a constrained text may then be incomplete) or
    # `:context_full`.
    # Never `:interrupted`: a call that does not finish (an exception, a `break` out of the
    # block) returns no Completion; {Model#last_stop_reason} then says `:interrupted`.
    # @return [Symbol]
    attr_reader :finish_reason
    # @return [Integer] tokens in the prompt
    attr_reader :prompt_tokens
    # Prompt and decode speed of this generation; with a constraint also `:constraint_us`, the
    # microseconds each generated token's mask and commit took (an Array); with images also
    # `:image_encode_seconds`, the seconds the projector's encoder passes took for the images
    # not already in its cache (neither decoding nor preprocessing them; 0.0 when all were);
    # with audio, `:audio_encode_seconds`, the same for the audio files.
    # @return [Hash{Symbol => Numeric, Array<Float>}]
    attr_reader :timings
    # Each generated token's log-probability under the model (the log-softmax of its
    # logits) and the likeliest alternatives, when asked for (`complete(..., logprobs: k)`):
    # `{ token:, logprob:, top: [[id, logprob], ...] }` per token, likeliest first.
    # @return [Array<Hash>, nil]
    attr_reader :logprobs
    # What a reasoning model thought before answering: the text inside `<think>...</think>`
    # (for {Model#complete} given a conversation; nil when there is none).
    # @return [String, nil]
    attr_reader :reasoning
    # The tool calls in the reply (for {Model#complete} given a conversation with `tools:`),
    # in order; empty when it is a plain reply.
    # @return [Array<ToolCall>]
    attr_reader :tool_calls

    # @api private
    def initialize(text:, tokens:, finish_reason:, prompt_tokens:, timings:, logprobs: nil, json: false,
                   reasoning: nil, tool_calls: [])
      @text = text
      @tokens = tokens
      @finish_reason = finish_reason
      @prompt_tokens = prompt_tokens
      @timings = timings
      @logprobs = logprobs
      @json = json
      @reasoning = reasoning
      @tool_calls = tool_calls
    end

    # The text parsed as JSON: for a `json_schema:` generation, a value valid against the
    # schema (unless `max_tokens` cut it short: {#finish_reason} `:length`).
    # @return [Hash, Array, String, Numeric, true, false, nil]
    # @raise [Elelem::Error] when the text is not JSON (cut short, or not asked for JSON)
    def json
      JSON.parse(text)
    rescue JSON::ParserError => e
      why = finish_reason == :length ? "max_tokens cut it short" : "#{e.class}: #{e.message[0, 60]}"
      raise Error, "the text is not #{"complete " if @json}JSON (#{why})"
    end

    # @return [Boolean] whether the reply calls tools
    def tool_calls?
      !tool_calls.empty?
    end

    # The reply as an assistant message, to append to the conversation (with its tool
    # calls, if any) before the tools' results.
    # @return [Hash]
    def message
      message = { role: "assistant", content: text }
      message[:tool_calls] = tool_calls.map(&:to_message) if tool_calls?
      message
    end

    # The completion as plain data (JSON-ready but for the Symbol finish reason): what
    # {#inspect} summarizes, whole. The tool calls are `{ name:, arguments:, id: }` Hashes.
    # @return [Hash{Symbol => Object}]
    def to_h
      { text:, tokens:, finish_reason:, prompt_tokens:, timings:, logprobs:, reasoning:,
        tool_calls: tool_calls.map(&:to_h) }
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
