# frozen_string_literal: true

require "json"
require "securerandom"
require_relative "chat_deltas"

module Elelem
  class Server
    # The OpenAI objects of one reply: the whole `chat.completion` or `text_completion`,
    # or the chunks of its stream. One id and one `created` time serve all of them.
    class Reply
      # How elelem's stop reasons read in OpenAI's `finish_reason`: a full context is a
      # length limit too.
      FINISH_REASONS = { stop: "stop", eos: "stop", length: "length", context_full: "length" }.freeze

      # @param generation [Generation] what the request generates
      # @param model [Model] the served model (its tokenizer spells the logprobs' tokens)
      # @param model_name [String] the `model` field of every object
      def initialize(generation, model, model_name)
        @generation = generation
        @request = generation.request
        @model = model
        @model_name = model_name
        @chat = @request.kind == :chat
        @id = "#{@chat ? "chatcmpl" : "cmpl"}-#{SecureRandom.hex(12)}"
        @created = Time.now.to_i
        @deltas = {}
      end

      # The whole reply of a request that does not stream.
      # @param completions [Array<Completion>] one per choice
      # @return [Hash]
      def complete(completions)
        choices = completions.each_with_index.map do |completion, index|
          choice = @chat ? { index:, message: message(completion) } : { index:, text: completion.text }
          choice.merge(logprobs: logprobs(completion), finish_reason: finish_reason(completion))
        end
        header(@chat ? "chat.completion" : "text_completion").merge(choices:, usage: usage(completions))
      end

      # The chunks that open a chat stream (each choice's role); none for completions.
      # @return [Array<Hash>]
      def opening
        return [] unless @chat

        Array.new(@request.choices) { |index| chunk(index, delta: { role: "assistant", content: "" }) }
      end

      # The chunks of one event of a choice: a piece of its text, or its {Completion} (the
      # text held back, the tool calls, the finish reason with the logprobs of every token
      # when asked for).
      # @param event [Array(Integer, String), Array(Integer, Completion)]
      # @return [Array<Hash>]
      def piece(event)
        index, piece = event
        return finish(index, piece) if piece.is_a?(Completion)
        return [chunk(index, text: piece)] unless @chat

        deltas(index).piece(piece).map { |delta| chunk(index, delta:) }
      end

      # The chunks that close a stream: the usage, when `stream_options.include_usage` asks.
      # @param completions [Array<Completion>]
      # @return [Array<Hash>]
      def closing(completions)
        return [] unless @request.include_usage

        [header(chunk_object).merge(choices: [], usage: usage(completions))]
      end

      private

      def finish(index, completion)
        last = { logprobs: logprobs(completion), finish_reason: finish_reason(completion) }
        return [chunk(index, text: "", **last)] unless @chat

        calls = tool_calls(completion)
        deltas(index).finish(calls).reject { |delta| @request.forces_call? && delta.key?(:content) }
                     .map { |delta| chunk(index, delta:) } + [chunk(index, delta: {}, **last)]
      end

      def deltas(index)
        @deltas[index] ||= ChatDeltas.new(thinking: @generation.thinking?, opened: @generation.thinking_opened?,
                                          tools: @request.calls_tools?, format: @generation.tool_call_format)
      end

      # The assistant's turn: its text (null when it only calls tools), its thinking, its calls.
      def message(completion)
        calls = tool_calls(completion)
        content, reasoning = if @request.calls_tools?
                               [completion.text, completion.reasoning.to_s]
                             else
                               ChatDeltas.split(completion.text, thinking: @generation.thinking?,
                                                                 opened: @generation.thinking_opened?)
                             end
        message = { role: "assistant", content: text_beside(calls, content) }
        message[:reasoning_content] = reasoning unless reasoning.empty?
        message[:tool_calls] = calls.map { |call| call_object(call) } if calls.any?
        message
      end

      # A reply's content: none where it only calls tools, nor where a call is forced: the
      # grammar lets it write nothing else, so text there is a call cut short (`max_tokens`).
      def text_beside(calls, content)
        @request.forces_call? || (calls.any? && content.empty?) ? nil : content
      end

      # The calls a reply makes: only where it may make them.
      def tool_calls(completion)
        @request.calls_tools? ? completion.tool_calls : []
      end

      def call_object(call)
        { id: StreamedCalls.call_id, type: "function",
          function: { name: call.name, arguments: JSON.generate(call.arguments) } }
      end

      def chunk(index, logprobs: nil, finish_reason: nil, **fields)
        header(chunk_object).merge(choices: [{ index:, **fields, logprobs:, finish_reason: }])
      end

      def chunk_object
        @chat ? "chat.completion.chunk" : "text_completion"
      end

      def header(object)
        { id: @id, object:, created: @created, model: @model_name }
      end

      def finish_reason(completion)
        return "tool_calls" if tool_calls(completion).any?

        FINISH_REASONS.fetch(completion.finish_reason, "stop")
      end

      # The prompt once (every choice reads the same), and every choice's tokens.
      def usage(completions)
        prompt = completions.first.prompt_tokens
        generated = completions.sum { |completion| completion.tokens.size }
        { prompt_tokens: prompt, completion_tokens: generated, total_tokens: prompt + generated }
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
