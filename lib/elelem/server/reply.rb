# frozen_string_literal: true

require "securerandom"

module Elelem
  class Server
    # The OpenAI objects of one reply: the whole `chat.completion` or `text_completion`,
    # or the chunks of its stream. One id and one `created` time serve all of them.
    class Reply
      # How elelem's stop reasons read in OpenAI's `finish_reason`: a full context is a
      # length limit too.
      FINISH_REASONS = { stop: "stop", eos: "stop", length: "length", context_full: "length" }.freeze

      # @param request [Request]
      # @param model [Model] the served model (its tokenizer spells the logprobs' tokens)
      # @param model_name [String] the `model` field of every object
      def initialize(request, model, model_name)
        @request = request
        @model = model
        @model_name = model_name
        @chat = request.kind == :chat
        @id = "#{@chat ? "chatcmpl" : "cmpl"}-#{SecureRandom.hex(12)}"
        @created = Time.now.to_i
      end

      # The whole reply of a request that does not stream.
      # @param completion [Completion]
      # @return [Hash]
      def complete(completion)
        choice = { index: 0 }
        if @chat
          choice[:message] = assistant_message(completion.text)
        else
          choice[:text] = completion.text
        end
        choice.merge!(logprobs: logprobs(completion), finish_reason: finish_reason(completion))
        header(@chat ? "chat.completion" : "text_completion").merge(choices: [choice], usage: usage(completion))
      end

      # The chunk that opens a chat stream (the assistant's role); nil for completions.
      # @return [Hash, nil]
      def opening
        chunk(delta: { role: "assistant", content: "" }) if @chat
      end

      # The chunk carrying a piece of the text.
      # @param piece [String]
      # @return [Hash]
      def piece(piece)
        @chat ? chunk(delta: { content: piece }) : chunk(text: piece)
      end

      # The chunks that close a stream: the finish reason (with the logprobs of every
      # token, when asked for), then the usage when `stream_options.include_usage` asks.
      # @param completion [Completion]
      # @return [Array<Hash>]
      def closing(completion)
        empty = @chat ? { delta: {} } : { text: "" }
        last = chunk(**empty, logprobs: logprobs(completion), finish_reason: finish_reason(completion))
        usage = header(chunk_object).merge(choices: [], usage: usage(completion)) if @request.include_usage
        [last, usage].compact
      end

      private

      # The assistant's turn. Tool-call parsing (another issue) will read `tool_calls` out
      # of the text here, and make the finish reason `tool_calls`.
      def assistant_message(text)
        { role: "assistant", content: text }
      end

      def chunk(logprobs: nil, finish_reason: nil, **fields)
        header(chunk_object).merge(choices: [{ index: 0, **fields, logprobs:, finish_reason: }])
      end

      def chunk_object
        @chat ? "chat.completion.chunk" : "text_completion"
      end

      def header(object)
        { id: @id, object:, created: @created, model: @model_name }
      end

      def finish_reason(completion)
        FINISH_REASONS.fetch(completion.finish_reason, "stop")
      end

      def usage(completion)
        generated = completion.tokens.size
        { prompt_tokens: completion.prompt_tokens, completion_tokens: generated,
          total_tokens: completion.prompt_tokens + generated }
      end

      def logprobs(completion)
        return nil if @request.logprobs.nil? || completion.logprobs.nil?

        @chat ? chat_logprobs(completion.logprobs) : completion_logprobs(completion.logprobs)
      end

      # `{content: [{token, logprob, bytes, top_logprobs: [...]}]}`, as chat completions give them.
      def chat_logprobs(entries)
        content = entries.map do |entry|
          token(entry[:token], entry[:logprob]).merge(top_logprobs: entry[:top].map { |id, lp| token(id, lp) })
        end
        { content:, refusal: nil }
      end

      # The legacy completions' columns: tokens, their logprobs, the alternatives as
      # `{text => logprob}`, and where each token starts in the generated text.
      def completion_logprobs(entries)
        offset = 0
        texts = entries.map { |entry| text(entry[:token]) }
        { tokens: texts, token_logprobs: entries.map { |entry| entry[:logprob] },
          top_logprobs: entries.map { |entry| entry[:top].to_h.transform_keys { |id| text(id) } },
          text_offset: texts.map { |t| offset.tap { offset += t.length } } }
      end

      def token(id, logprob)
        { token: text(id), logprob:, bytes: @model.token_to_piece(id).bytes }
      end

      # A token's text; a token holding part of a character shows U+FFFD for it (its
      # `bytes` are exact).
      def text(id)
        @model.token_to_piece(id).dup.force_encoding(Encoding::UTF_8).scrub
      end
    end
  end
end
