# frozen_string_literal: true

require_relative "tool_call_grammar"

module Elelem
  class Server
    # What one request generates, whichever API it came by (OpenAI's, llama-server's,
    # Ollama's): its `n` choices, each a sequence of its own in the model's passes, running
    # together (so `n` may not exceed the model's `parallel`), each counted in the server's
    # {Metrics}.
    #
    # A chat whose reply may call tools is answered by {Model#complete} given the
    # messages, which constrains a call to the tool's schema once the model opens one, and
    # reads the calls back; `tool_choice: "required"` or a named function constrains the
    # whole reply to calls ({ToolCallGrammar}). Any other chat is answered from its
    # rendered prompt, and a completion from its prompt (or the one its route built: an
    # infill's, an Ollama generate's), constrained to the request's schema when it has one.
    #
    # A request is read for `kind`, `stream`, `choices`, `generation_for(index)`,
    # `logprobs`, `response_schema`, a completion's `prompt`, and a chat's {ChatFields}.
    class Generation
      # The choices of a request whose API has no `n`: one, with the request's options.
      module OneChoice
        # @return [Integer] 1
        def choices
          1
        end

        # @param _index [Integer] the choice (0)
        # @return [Hash] the request's options of {Model#complete}
        def generation_for(_index)
          generation
        end
      end

      # @return [Request, NativeRequest, Ollama::Request]
      attr_reader :request
      # @return [String, Array<Integer>] what the model evaluates: a chat's rendered conversation
      #   or a completion's prompt, as token ids or text
      attr_reader :prompt

      # A conversation rendered by the chat template: its token ids, or with images an
      # {Images::Prompt} ({Model#chat_input}).
      # @param model [Model] the model whose template renders it
      # @param messages [Array<Hash>] the checked messages
      # @param template [String, nil] the server's chat template, instead of the model's
      # @param tools [Array<Hash>, nil] the tools the template shows
      # @return [Array<Integer>, Images::Prompt]
      # @raise [HTTPError] 400 for a conversation the template cannot render or an image that
      #   cannot be read, 500 for a model without a template served without one
      def self.chat_input(model, messages, template:, tools: nil)
        model.chat_input(messages, template:, **{ tools: }.compact)
      rescue ArgumentError, TemplateError => e
        raise HTTPError.new(400, e.message, param: "messages")
      rescue ToolsNotSupportedError => e
        raise HTTPError.new(400, e.message, param: "tools")
      rescue ClosedError
        raise
      rescue Elelem::Error => e # a model without a template, served without one
        raise HTTPError.new(500, "chat is not available: #{e.message} (elelem serve --template FILE)",
                            code: "no_chat_template")
      end

      # @param model [Model] the served model
      # @param request [Request, NativeRequest, Ollama::Request] the checked request
      # @param template [String, nil] the server's chat template, instead of the model's
      # @param metrics [Metrics] the server's counters, which count each choice
      # @param prompt [String, Array<Integer>, nil] a completion's prompt as its route built it,
      #   instead of the request's own
      # @param allow_fetch [Boolean] whether a chat's image URLs are fetched ({ImageFetch})
      # @raise [HTTPError] 400 for a chat the template cannot render, more choices than
      #   sequences, a call that cannot be forced
      def initialize(model, request, template, metrics:, prompt: nil, allow_fetch: false)
        @model = model
        @allow_fetch = allow_fetch
        @request = request
        @template = template
        @metrics = metrics
        check_choices
        @prompt = prompt || request_prompt
        @forced = forced_call if chat? && request.forces_call?
      end

      # @return [Boolean] whether the model thinks before it answers (its template knows
      #   `<think>`): its thinking is then `reasoning_content`, as llama-server gives it
      def thinking?
        return false unless chat?

        @thinking = (@template || @model.chat_template).to_s.include?(ChatDeltas::THINK[0]) if @thinking.nil?
        @thinking
      end

      # @return [Boolean] whether the prompt opened the thinking (the reply then only closes it)
      def thinking_opened?
        return @opened unless @opened.nil?

        tail = @prompt.is_a?(Images::Prompt) ? @prompt.text[-40..] || @prompt.text : @model.detokenize(@prompt.last(4))
        @opened = thinking? && tail.rstrip.end_with?(ChatDeltas::THINK[0])
      end

      # @return [Symbol, nil] the chat template's tool-call format ({Model#tool_call_format}),
      #   for a chat whose reply may call tools
      def tool_call_format
        return nil unless chat? && request.calls_tools?

        @tool_call_format ||= @model.tool_call_format(template: @template)
      end

      # Generates every choice. Streaming, each choice's pieces are yielded as they come,
      # and then its {Completion}, as `[index, piece or completion]` (from the choices'
      # threads when there are several). A failed choice stops the others.
      # @yieldparam event [Array(Integer, String), Array(Integer, Completion)]
      # @return [Array<Completion>] in the order of the choices
      # @raise [HTTPError] 400 for a prompt longer than the context or an option the model refuses
      def run(&on_event)
        return [choice(0, &on_event)] if request.choices == 1

        results = Thread::Queue.new
        threads = Array.new(request.choices) { |index| choice_thread(index, results, on_event) }
        completions = Array.new(request.choices)
        request.choices.times do
          index, result = results.pop
          raise result if result.is_a?(Exception)

          completions[index] = result
        end
        completions
      ensure
        threads&.each(&:kill)
      end

      private

      def check_choices
        parallel = @model.info[:parallel]
        return if request.choices <= parallel

        raise HTTPError.new(400, "n is #{request.choices}, more than the #{parallel} sequences this server " \
                                 "generates at once (elelem serve --parallel)", param: "n")
      end

      def chat?
        request.kind == :chat
      end

      # A chat's conversation through the template, or a completion's prompt.
      def request_prompt
        return request.prompt unless chat?

        messages = ImageFetch.inline(request.messages, allowed: @allow_fetch)
        Generation.chat_input(@model, messages, template: @template, tools: request.tools)
      end

      def forced_call
        tools = request.tools
        named = request.tool_choice != "required"
        tools = tools.select { |tool| tool["function"]["name"] == request.tool_choice } if named
        ToolCallGrammar.new(@model, tool_call_format, tools, parallel: request.parallel_tool_calls).to_s
      rescue ArgumentError => e
        raise HTTPError.new(400, "#{e.message} (tool_choice #{request.tool_choice.inspect})", param: "tool_choice")
      end

      def choice_thread(index, results, on_event)
        thread = Thread.new do
          results << [index, choice(index, &on_event)]
        rescue StandardError, NoMemoryError => e
          results << [index, e]
        end
        thread.report_on_exception = false
        thread
      end

      # One choice's {Completion}, its pieces and then itself handed to the block.
      def choice(index, &on_event)
        each_piece = on_event && ->(piece) { on_event.call([index, piece]) unless piece.empty? }
        options = request.generation_for(index)
        completion = @metrics.track(options, stream: request.stream, n_probs: request.logprobs || 0) do
          generate(options, &each_piece)
        end
        on_event&.call([index, completion])
        completion
      rescue ContextFullError => e
        raise HTTPError.new(400, e.message, param: chat? ? "messages" : "prompt", code: "context_length_exceeded")
      rescue ArgumentError, TemplateError => e
        raise HTTPError.new(400, e.message)
      end

      def generate(options, &)
        options = options.merge(logprobs: request.logprobs)
        if chat? && request.calls_tools?
          return @model.complete(request.messages, template: @template, tools: request.tools,
                                                   **{ lark: @forced }.compact, **options, &)
        end

        @model.complete(@prompt, **options, **{ json_schema: request.response_schema }.compact, &)
      end
    end
  end
end
