# frozen_string_literal: true

module Elelem
  class Server
    module Ollama
      # The objects of an Ollama chat or generate reply (docs/api.md of ollama/ollama): each
      # with `model`, `created_at` and `done`; the last with `done_reason` and the figures
      # (`total_duration`, `prompt_eval_count`, `eval_count`, ... in nanoseconds and tokens),
      # and for generate the `context` (the prompt's ids and the reply's, to send back).
      class Reply
        # How elelem's stop reasons read in Ollama's `done_reason`.
        DONE_REASONS = { stop: "stop", eos: "stop", length: "length", context_full: "length" }.freeze

        # The time as Ollama writes it (RFC 3339, nanoseconds, UTC).
        # @return [String]
        def self.now
          Time.now.utc.iso8601(9)
        end

        # Nanoseconds since a monotonic instant.
        # @param since [Float] `Process.clock_gettime(Process::CLOCK_MONOTONIC)` then
        # @return [Integer]
        def self.nanoseconds(since)
          ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - since) * 1e9).round
        end

        # @param request [Request]
        # @param model_name [String] the `model` field
        # @param prompt [Array<Integer>, Images::Prompt] the prompt's ids (a generate reply's
        #   `context` starts with them; a prompt with images has none for them: its context is the reply's)
        def initialize(request, model_name, prompt)
          @chat = request.kind == :chat
          @model_name = model_name
          @prompt = prompt.is_a?(Array) ? prompt : []
          @started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        end

        # The one object of a request that does not stream.
        # @param completions [Array<Completion>] its one choice's
        # @return [Hash]
        def complete(completions)
          completion = completions.first
          final(completion, completion.text, completion.tool_calls)
        end

        # Nothing opens an Ollama stream.
        # @return [Array<Hash>] none
        def opening
          []
        end

        # The object of one event of the generation: a piece of the text, or once the choice
        # is done, the last object (no text, the tool calls, the figures).
        # @param event [Array(Integer, String), Array(Integer, Completion)]
        # @return [Array<Hash>]
        def piece(event)
          _index, piece = event
          return [final(piece, "", piece.tool_calls)] if piece.is_a?(Completion)

          [head.merge(text(piece), done: false)]
        end

        # Nothing closes an Ollama stream: its last object says `done: true`.
        # @param _completions [Array<Completion>]
        # @return [Array<Hash>] none
        def closing(_completions)
          []
        end

        # The answer to a request with nothing to generate: the model is loaded, or is to be
        # unloaded (Ollama's way to unload one: `keep_alive: 0`).
        # @param unload [Boolean] whether the model is unloaded once idle
        # @return [Hash]
        def loaded(unload: false)
          head.merge(text(""), done: true, done_reason: unload ? "unload" : "load")
        end

        private

        def head
          { model: @model_name, created_at: Reply.now }
        end

        # A chat's message (with its tool calls, arguments as objects) or a generate's response.
        def text(text, tool_calls = [])
          return { response: text } unless @chat

          calls = tool_calls.map { |call| { function: { name: call.name, arguments: call.arguments } } }
          { message: { role: "assistant", content: text, **(calls.empty? ? {} : { tool_calls: calls }) } }
        end

        def final(completion, text, tool_calls)
          t = completion.timings
          context = @chat ? {} : { context: @prompt + completion.tokens }
          figures = { total_duration: Reply.nanoseconds(@started), load_duration: 0,
                      prompt_eval_count: completion.prompt_tokens,
                      prompt_eval_duration: (t[:prompt_seconds] * 1e9).round,
                      eval_count: completion.tokens.size, eval_duration: (t[:decode_seconds] * 1e9).round }
          done = { done: true, done_reason: DONE_REASONS.fetch(completion.finish_reason, "stop") }
          head.merge(text(text, tool_calls), **done, **context, **figures)
        end
      end

      # An Ollama stream: one JSON object a line (`application/x-ndjson`), the last with
      # `done: true`; an error after the 200 is a line `{"error": "..."}`, as Ollama's
      # clients read it.
      class Stream < NativeStream
        private

        def event(object)
          "#{JSON.generate(object)}\n"
        end

        def error_body(error)
          Ollama.error_body(error)
        end
      end
    end
  end
end
