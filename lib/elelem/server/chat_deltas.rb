# frozen_string_literal: true

require_relative "streamed_calls"

module Elelem
  class Server
    # Turns the raw text of one chat choice, piece by piece, into the deltas of OpenAI's
    # stream, as llama-server splits it: a thinking model's `<think>…</think>` as
    # `reasoning_content`, the rest as `content`, and tool calls as `tool_calls` deltas.
    #
    # Text that may open a tool call (a marker such as `<tool_call>`, or a reply opening
    # with `{` or a code fence, as Qwen2.5-Coder writes its calls bare) is held back from
    # the content: the calls in it stream as `tool_calls` deltas as they are written
    # ({StreamedCalls}), and once the choice ends the parsed reply ({Completion#tool_calls})
    # says whether it was calls, completed, or text, sent as content. Everything else
    # streams as it comes.
    class ChatDeltas
      # Where a reasoning model's thinking opens and closes.
      THINK = ["<think>", "</think>"].freeze
      # What opens a tool call in the formats {Model#complete} reads.
      CALL_MARKERS = ["<tool_call>", "<|python_tag|>", "[TOOL_CALLS]"].freeze
      # What a reply written as a bare call object opens with.
      BARE_CALL = /\A\s*(?:\{|```)/

      # @param thinking [Boolean] whether the model thinks (its template knows `<think>`)
      # @param opened [Boolean] whether the prompt opened the thinking (the reply only closes it)
      # @param tools [Boolean] whether the reply may call tools
      # @param format [Symbol, nil] the template's tool-call format, where the reply may call tools
      def initialize(thinking:, opened:, tools:, format: nil)
        @state = if thinking
                   opened ? :reasoning : :start
                 else
                   :content
                 end
        @tools = tools
        @calls = StreamedCalls.new(format) if tools
        @pending = +""
        @held = nil
        @content = +""
      end

      # The deltas of one piece of raw text (none while it may be a marker or a call).
      # @param text [String]
      # @return [Array<Hash>]
      def piece(text)
        @pending << text
        opening if @state == :start
        deltas = [(reasoning if @state == :reasoning), (content if @state == :content)].compact
        @held ? deltas + @calls.update(@held) : deltas
      end

      # The deltas that end the choice: the text still pending, then what was held back,
      # as the calls the reply makes or else as content.
      # @param calls [Array<ToolCall>] the calls parsed out of the whole reply
      # @return [Array<Hash>]
      def finish(calls)
        @state = :content if @state == :start
        thought = { reasoning_content: @pending.slice!(0..) } if @state == :reasoning && !@pending.empty?
        deltas = [thought, content(final: true)].compact
        return deltas + @calls.finish(calls) unless calls.empty?

        held = @held.to_s
        @held = nil
        deltas + [text_delta(held)].compact
      end

      # A whole reply split as {#piece} and {#finish} split it: `[content, reasoning]`.
      # @param text [String] the raw reply
      # @param thinking [Boolean] see {#initialize}
      # @param opened [Boolean] see {#initialize}
      # @return [Array(String, String)] the content and the reasoning (either may be empty)
      def self.split(text, thinking:, opened:)
        deltas = new(thinking:, opened:, tools: false).then { |d| d.piece(text) + d.finish([]) }
        %i[content reasoning_content].map { |key| deltas.filter_map { |d| d[key] }.join }
      end

      private

      # Before anything: is it thinking (`<think>`) or the reply itself? Undecided while
      # the text so far may still be the opening.
      def opening
        text = @pending.lstrip
        if text.start_with?(THINK[0])
          @pending = text.delete_prefix(THINK[0]).lstrip
          @state = :reasoning
        elsif !THINK[0].start_with?(text)
          @state = :content
        end
      end

      # The thinking up to `</think>` (which switches to content), less a tail that may be
      # the start of it.
      def reasoning
        close = @pending.index(THINK[1])
        if close
          thought = @pending.slice!(0, close + THINK[1].size).delete_suffix(THINK[1])
          @pending = @pending.lstrip
          @state = :content
        else
          thought = @pending.slice!(0, @pending.size - partial_suffix(@pending, [THINK[1]]))
        end
        thought.empty? ? nil : { reasoning_content: thought }
      end

      # The pending content up to what may open a tool call, which is held from there on.
      # Until the text ends (`final`), a tail that may start a marker waits for the next piece.
      def content(final: false)
        return hold(@pending.slice!(0..)) if @held
        return nil if !final && undecided?

        text = @pending.slice!(0..)
        if @tools
          start = call_start(text)
          if start
            hold(text.slice!(start..))
          elsif !final
            @pending = text.slice!(text.size - partial_suffix(text, CALL_MARKERS)..)
          end
        end
        text_delta(text)
      end

      # Whether the reply so far is only blank, or the start of a code fence: it may still
      # turn out to be a bare call.
      def undecided?
        return false unless @tools && @content.strip.empty?

        text = @pending.lstrip
        text.empty? || (text.size < 3 && "```".start_with?(text))
      end

      def hold(text)
        (@held ||= +"") << text
        nil
      end

      # Content to send, as the model wrote it (the blanks after `</think>` left out).
      def text_delta(text)
        return nil if text.empty?

        @content << text
        { content: text }
      end

      # Where a call may begin in `text`: a marker, or a bare call object opening the reply.
      def call_start(text)
        return 0 if @content.strip.empty? && text.match?(BARE_CALL)

        CALL_MARKERS.filter_map { |marker| text.index(marker) }.min
      end

      # How many characters at the end of `text` begin one of `markers` (without completing it).
      def partial_suffix(text, markers)
        markers.map do |marker|
          (1...marker.size).reverse_each.find { |n| text.end_with?(marker[0, n]) } || 0
        end.max
      end
    end
  end
end
