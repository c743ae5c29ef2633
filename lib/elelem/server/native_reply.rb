# frozen_string_literal: true

module Elelem
  class Server
    # The objects of a native `POST /completion` or `POST /infill` reply, shaped as
    # llama-server's (`server_task_result_cmpl_final::to_json_non_oaicompat` and its partial
    # chunks): `content`, `tokens`, `stop`, `stop_type`, `stopping_word`, `timings`, ...
    # llama-server's `id_slot` is left out: the model's sequences are its own. A stream's
    # chunks carry text pieces (whole characters, one or more tokens), so they do not count
    # tokens (`tokens_predicted` comes with the last one) nor carry per-token probabilities.
    class NativeReply
      # How elelem's stop reasons read as llama-server's `stop_type`.
      STOP_TYPES = { stop: "word", eos: "eos", length: "limit", context_full: "limit" }.freeze

      # @param generation [Generation] what the request generates (its one choice)
      # @param model [Model] the served model (its tokenizer spells tokens and the prompt)
      # @param model_name [String] the `model` field
      def initialize(generation, model, model_name)
        @request = generation.request
        @prompt = generation.prompt
        @model = model
        @model_name = model_name
      end

      # The whole reply of a request that does not stream.
      # @param completions [Array<Completion>] its one choice's
      # @return [Hash]
      def complete(completions)
        completion = completions.first
        ids = @request.return_tokens ? completion.tokens : []
        final(completion).merge(content: completion.text, tokens: ids, **probabilities(completion))
      end

      # Nothing opens a native stream.
      # @return [Array<Hash>] none
      def opening
        []
      end

      # The chunk of one event of the generation: a piece of the text, or once the choice is
      # done, the last chunk (`stop: true`, the figures, no text: the pieces carried it).
      # @param event [Array(Integer, String), Array(Integer, Completion)]
      # @return [Array<Hash>]
      def piece(event)
        _index, piece = event
        return [final(piece).merge(content: "", tokens: [])] if piece.is_a?(Completion)

        [{ index: 0, content: piece, tokens: [], stop: false }]
      end

      # Nothing closes a native stream: its last chunk says `stop: true`.
      # @param _completions [Array<Completion>]
      # @return [Array<Hash>] none
      def closing(_completions)
        []
      end

      private

      def final(completion)
        generated = completion.tokens.size
        { index: 0, content: nil, tokens: nil, stop: true, model: @model_name, tokens_predicted: generated,
          tokens_evaluated: completion.prompt_tokens, generation_settings: @request.settings, prompt: prompt_text,
          has_new_line: completion.text.include?("\n"), truncated: false,
          stop_type: stop_type(completion), stopping_word: stopping_word(completion),
          tokens_cached: completion.prompt_tokens + generated, timings: timings(completion) }
      end

      def prompt_text
        @model.detokenize(@prompt.is_a?(String) ? @model.tokenize(@prompt) : @prompt)
      end

      # `word` only when a stop string ended it (elelem's `:stop` also ends a completed
      # constrained text, which llama-server ends at its end-of-generation token).
      def stop_type(completion)
        type = STOP_TYPES.fetch(completion.finish_reason, "none")
        type == "word" && stopping_word(completion).empty? ? "eos" : type
      end

      # The stop string that ended the text: the generated tokens hold it after the text.
      def stopping_word(completion)
        return "" unless completion.finish_reason == :stop

        rest = @model.detokenize(completion.tokens).delete_prefix(completion.text)
        Array(@request.generation[:stop]).find { |stop| rest.start_with?(stop) } || ""
      end

      def timings(completion)
        t = completion.timings
        { cache_n: completion.prompt_tokens - t[:prompt_tokens],
          **rates(:prompt, t[:prompt_tokens], t[:prompt_seconds]),
          **rates(:predicted, completion.tokens.size, t[:decode_seconds]) }
      end

      def rates(name, tokens, seconds)
        ms = seconds * 1000.0
        { "#{name}_n": tokens, "#{name}_ms": ms, "#{name}_per_token_ms": tokens.positive? ? ms / tokens : 0.0,
          "#{name}_per_second": seconds.positive? ? tokens / seconds : 0.0 }
      end

      # `completion_probabilities`, as llama-server lists them when `n_probs` asks.
      def probabilities(completion)
        return {} if @request.logprobs.nil? || completion.logprobs.nil?

        entries = completion.logprobs.map do |entry|
          token(entry[:token], entry[:logprob]).merge(top_logprobs: entry[:top].map { |id, lp| token(id, lp) })
        end
        { completion_probabilities: entries }
      end

      def token(id, logprob)
        piece = @model.token_to_piece(id)
        { id:, token: piece.dup.force_encoding(Encoding::UTF_8).scrub(""), bytes: piece.bytes, logprob: }
      end
    end

    # A native stream: llama-server's server-sent events, each `data: {...}`, with no
    # `[DONE]` at the end (the last chunk says `stop: true`), and its errors in its own shape.
    class NativeStream < EventStream
      private

      def ending
        []
      end

      def error_body(error)
        LlamaEndpoints.error_body(error)
      end
    end
  end
end
