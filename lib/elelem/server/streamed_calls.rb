# frozen_string_literal: true

require "json"
require "securerandom"
require_relative "compact_json"

module Elelem
  class Server
    # The tool calls of a reply streamed as OpenAI streams them, while the model writes them:
    # for each call, once its name and the opening of its arguments are written, a delta with
    # its index, id, type and name (and arguments `""`), then a delta with each piece of the
    # arguments as it is generated ({CompactJson}: put together, the arguments of the whole
    # reply, as `JSON.generate` writes them).
    #
    # Where a call's arguments begin is read by the template's tool-call format (the one
    # {Model#tool_call_format} names, and {ToolCallGrammar} forces): a call object's `"name"`
    # then `"arguments"` (or Llama 3.x's `"parameters"`), in Hermes' `<tool_call>`, bare,
    # in Mistral's array or FireFunction's; Mistral's `[TOOL_CALLS]name[ARGS]`; Functionary
    # v3.1's `<function=name>`. A call written otherwise (its arguments before its name, a
    # format not listed) is sent whole at the end, from the calls read out of the whole
    # reply ({#finish}), as is the rest of a call whose text stopped being JSON (a model's
    # doubled braces).
    class StreamedCalls
      # A call object's name, then where its arguments begin.
      OBJECT_HEAD = /\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)/
      # The heads of a call, in each format: a match's first group is the name.
      HEADS = {
        hermes: [OBJECT_HEAD, /<function(?:=|\s+name=")([^>"]+)"?>\s*(?=\{)/],
        llama3_json: [OBJECT_HEAD], mistral: [OBJECT_HEAD], firefunction: [OBJECT_HEAD],
        mistral_args: [/\[TOOL_CALLS\]([^\[\]]+?)(?:\[CALL_ID\][^\[]*)?\[ARGS\]\s*(?=\{)/],
        functionary_v3_1: [/<function=([^>]+)>\s*(?=\{)/]
      }.freeze

      # One call streamed: its name, the arguments sent so far, and the reader of the rest.
      Call = Struct.new(:name, :sent, :arguments)

      # @param format [Symbol] the template's tool-call format ({Model#tool_call_format})
      def initialize(format)
        @heads = HEADS.fetch(format, [])
        @text = +""
        @at = 0 # how far @text is read
        @calls = []
      end

      # The deltas of the calls in the text held so far.
      # @param text [String] the reply's text from where a call may begin, all of it so far
      # @return [Array<Hash>]
      def update(text)
        @text = text
        deltas = []
        loop do
          call = @calls.last
          progress = call && !call.arguments.done? ? arguments(call, deltas) : open_call(deltas)
          break unless progress
        end
        deltas
      end

      # The deltas that complete the calls, given those read out of the whole reply: the rest
      # of each streamed call's arguments, and each call not streamed, whole. A streamed call
      # the whole reply does not confirm (a call cut short by `max_tokens`) stays as it was sent.
      # @param calls [Array<ToolCall>]
      # @return [Array<Hash>]
      def finish(calls)
        calls.each_with_index.flat_map do |call, index|
          whole = JSON.generate(call.arguments)
          streamed = @calls[index]
          next [opening(index, call.name), piece(index, whole)] if streamed.nil?
          next [] unless streamed.name == call.name && whole.start_with?(streamed.sent)

          rest = whole.delete_prefix(streamed.sent)
          rest.empty? ? [] : [piece(index, rest)]
        end
      end

      # @return [String] a new tool call id, as OpenAI's look (`call_` and 24 characters)
      def self.call_id
        "call_#{SecureRandom.alphanumeric(24)}"
      end

      private

      # The next call's head, if it is written: its opening delta. False when there is none (yet).
      def open_call(deltas)
        return false if @calls.last&.arguments&.broken?

        match = @heads.filter_map { |head| @text.match(head, @at) }.min_by { |m| m.begin(0) }
        return false unless match

        @at = match.end(0)
        @calls << Call.new(name(match), +"", CompactJson.new)
        deltas << opening(@calls.size - 1, @calls.last.name)
      end

      # The arguments written since the last piece. False once the text so far is read.
      def arguments(call, deltas)
        return false if call.arguments.broken? || @at >= @text.size

        written, used = call.arguments.feed(@text[@at..])
        @at += used
        call.sent << written
        deltas << piece(@calls.size - 1, written) unless written.empty?
        call.arguments.done?
      end

      # The call's name: a JSON string's value, or as written between markers, less blanks.
      def name(match)
        return match[1].strip unless match.regexp == OBJECT_HEAD

        JSON.parse("\"#{match[1]}\"")
      end

      def opening(index, name)
        { tool_calls: [{ index:, id: StreamedCalls.call_id, type: "function", function: { name:, arguments: "" } }] }
      end

      def piece(index, arguments)
        { tool_calls: [{ index:, function: { arguments: } }] }
      end
    end
  end
end
