# frozen_string_literal: true

require "securerandom"
require_relative "reply"
require_relative "event_stream"

module Elelem
  class Server
    # The objects of one reply of OpenAI's Responses API, in llama-server's shapes
    # (server_task_result_cmpl_final::to_json_oaicompat_resp and the partial and final results'
    # `_stream` forms, in its tools/server/server-task.cpp): the whole `response`, or the events
    # of its stream. They are made from the chat completion's ({Reply}): the same text, thinking
    # and tool calls, split and streamed as the chat endpoint splits and streams them.
    #
    # The output: a `reasoning` item (the thinking), a `message` item (the text), and a
    # `function_call` item for each call. Streamed: `response.created` and
    # `response.in_progress`; each item's `response.output_item.added` when it begins, its text
    # as `response.reasoning_text.delta`, `response.output_text.delta` or
    # `response.function_call_arguments.delta` events (the arguments in pieces, as they are
    # generated); `response.output_text.done`, `response.content_part.done` and
    # `response.output_item.done` when the reply ends; then `response.completed`, holding the
    # whole response. Each event also has OpenAI's `sequence_number`, and its `output_index`
    # (and `content_index`) where OpenAI's has them.
    class ResponsesReply
      # @param generation [Generation] what the request generates (one choice)
      # @param model [Model] the served model
      # @param model_name [String] the `model` field of the response
      def initialize(generation, model, model_name)
        @chat = Reply.new(generation, model, model_name)
        @model_name = model_name
        @id = "resp_#{SecureRandom.alphanumeric(32)}"
        @reasoning_id = "rs_#{SecureRandom.alphanumeric(32)}"
        @message_id = "msg_#{SecureRandom.alphanumeric(32)}"
        @created = Time.now.to_i
        @sequence = -1
        @items = {} # :reasoning, :message and each call's index => the item, in the order they began
      end

      # The whole response of a request that does not stream.
      # @param completions [Array<Completion>] one
      # @return [Hash]
      def complete(completions)
        message = @chat.complete(completions).dig(:choices, 0, :message)
        output = []
        output << reasoning_item(message[:reasoning_content], "completed") if message[:reasoning_content]
        output << message_item(message[:content].to_s, "completed") unless message[:content].to_s.empty?
        message[:tool_calls]&.each do |call|
          output << call_item(call[:id], call[:function][:name], call[:function][:arguments], "completed")
        end
        response(output, completions).merge(completed_at: Time.now.to_i)
      end

      # The events that open the stream.
      # @return [Array<Hash>]
      def opening
        %w[response.created response.in_progress].map do |type|
          event(type, response: { id: @id, object: "response", status: "in_progress" })
        end
      end

      # The events of one event of the generation: a piece of its text, or its {Completion}
      # (what was held back, then each item done).
      # @param event [Array(Integer, String), Array(Integer, Completion)]
      # @return [Array<Hash>]
      def piece(event)
        events = @chat.piece(event).flat_map { |chunk| delta_events(chunk.dig(:choices, 0, :delta)) }
        event[1].is_a?(Completion) ? events + @items.values.flat_map { |item| done_events(item) } : events
      end

      # The event that closes the stream: the whole response.
      # @param completions [Array<Completion>]
      # @return [Array<Hash>]
      def closing(completions)
        [event("response.completed", response: response(@items.values.map { |item| finished(item) }, completions))]
      end

      private

      def response(output, completions)
        completion = completions.first
        cached = completion.prompt_tokens - completion.timings[:prompt_tokens]
        { id: @id, object: "response", created_at: @created, status: "completed", model: @model_name, output:,
          usage: { input_tokens: completion.prompt_tokens, output_tokens: completion.tokens.size,
                   total_tokens: completion.prompt_tokens + completion.tokens.size,
                   input_tokens_details: { cached_tokens: cached } } }
      end

      # The events of one chat delta: the item it adds to (added first if new), and its text.
      def delta_events(delta)
        if delta[:reasoning_content]
          text_events(:reasoning, delta[:reasoning_content], "response.reasoning_text.delta")
        elsif delta[:content] && !delta[:content].empty?
          text_events(:message, delta[:content], "response.output_text.delta")
        elsif delta[:tool_calls]
          call_events(delta[:tool_calls].first)
        else
          []
        end
      end

      def text_events(key, text, type)
        events = begin_item(key) do
          key == :reasoning ? reasoning_item("", "in_progress") : message_item("", "in_progress")
        end
        item = @items[key]
        item[:text] << text
        index = key == :message ? { content_index: 0 } : {}
        events << event(type, item_id: item[:id], output_index: item[:index], **index, delta: text)
      end

      def call_events(call)
        function = call[:function]
        events = begin_item(call[:index]) { call_item(call[:id], function[:name], "", "in_progress") }
        item = @items[call[:index]]
        return events if function[:arguments].empty?

        item[:arguments] << function[:arguments]
        events << event("response.function_call_arguments.delta", item_id: item[:id], output_index: item[:index],
                                                                  delta: function[:arguments])
      end

      # `response.output_item.added` (and a message's `response.content_part.added`) for an item
      # not yet begun.
      def begin_item(key)
        return [] if @items.key?(key)

        item = @items[key] = yield.merge(index: @items.size)
        item[:text] = +"" unless item[:type] == "function_call"
        added = [event("response.output_item.added", output_index: item[:index], item: shown(item))]
        return added unless key == :message

        added << event("response.content_part.added", item_id: item[:id], output_index: item[:index],
                                                      content_index: 0, part: { type: "output_text", text: "" })
      end

      def done_events(item)
        done = finished(item)
        events = []
        if item[:type] == "message"
          part = done[:content].first
          events << event("response.output_text.done", item_id: item[:id], output_index: item[:index],
                                                       content_index: 0, text: part[:text])
          events << event("response.content_part.done", item_id: item[:id], output_index: item[:index],
                                                        content_index: 0, part:)
        end
        events << event("response.output_item.done", output_index: item[:index], item: done)
      end

      # An item as streamed so far, completed.
      def finished(item)
        case item[:type]
        when "reasoning" then reasoning_item(item[:text], "completed")
        when "message" then message_item(item[:text], "completed")
        else item.slice(:id, :type, :call_id, :name, :arguments).merge(status: "completed")
        end
      end

      # An item as the events show it now (without the streaming's own bookkeeping).
      def shown(item)
        item.except(:index, :text).transform_values { |value| value.is_a?(String) ? value.dup : value }
      end

      def reasoning_item(text, status)
        content = text.empty? ? [] : [{ type: "reasoning_text", text: }]
        { id: @reasoning_id, type: "reasoning", summary: [], content:, encrypted_content: "", status: }
      end

      def message_item(text, status)
        content = status == "completed" ? [{ type: "output_text", annotations: [], logprobs: [], text: }] : []
        { id: @message_id, type: "message", status:, role: "assistant", content: }
      end

      # A call's item: its id `fc_…` and `call_id` `call_…` share the chat call's random part.
      def call_item(call_id, name, arguments, status)
        { id: call_id.sub(/\Acall_/, "fc_"), type: "function_call", status:, call_id:, name:, arguments: +arguments }
      end

      def event(type, **fields)
        { type:, sequence_number: @sequence += 1, **fields }
      end
    end

    # The stream of a Responses API reply: server-sent events named by their type
    # (`event: response.output_text.delta`), with no `[DONE]` at the end (as llama-server's);
    # an error after the 200 is OpenAI's `error` event.
    class ResponsesStream < EventStream
      private

      def event(object)
        "event: #{object[:type]}\ndata: #{JSON.generate(object)}\n\n"
      end

      def ending
        []
      end

      def error_body(error)
        body = error.to_h[:error]
        { type: "error", code: body[:code] || body[:type], message: body[:message], param: body[:param] }
      end
    end
  end
end
