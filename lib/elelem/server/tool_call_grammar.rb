# frozen_string_literal: true

require "json"

module Elelem
  class Server
    # The grammar (llguidance's Lark) that forces a reply to be tool calls, in the format
    # the chat template teaches, for `tool_choice: "required"` or a named function: what
    # llama-server does with its (not lazy) tool-call grammar. {Model#complete} then reads
    # the calls back as it reads any reply.
    class ToolCallGrammar
      # @param model [Model] the model whose tokenizer spells the markers
      # @param format [Symbol] the template's tool-call format
      # @param tools [Array<Hash>] the tools the reply may call (one, for a named function)
      # @param parallel [Boolean] whether the reply may make several calls
      def initialize(model, format, tools, parallel:)
        @model = model
        @format = format
        @tools = tools
        @parallel = parallel
      end

      # @return [String] the grammar
      # @raise [ArgumentError] when the chat template teaches no tool-call format
      def to_s
        case @format
        when :hermes then repeated("#{marker("<tool_call>")} \"\\n\" %json #{call_schema("arguments")} " \
                                   "\"\\n\" #{marker("</tool_call>")}", '"\n"')
        when :llama3_json then repeated("%json #{call_schema("parameters")}", '"; "')
        when :mistral then "start: #{marker("[TOOL_CALLS]")} %json #{JSON.generate(mistral_array)}"
        when :mistral_args then repeated(mistral_args_call, '""')
        else raise ArgumentError, "this model's chat template has no tool-call format: a call cannot be forced"
        end
      end

      private

      # One call, or with parallel calls one or more, joined by `separator`.
      def repeated(call, separator)
        "start: call#{" (#{separator} call)*" if @parallel}\ncall: #{call}\n"
      end

      # A call object as a JSON Schema: the tool's name, then its arguments.
      def call_schema(arguments_key)
        JSON.generate(anyOf: @tools.map do |tool|
          function = tool["function"]
          { type: "object", properties: { name: { const: function["name"] },
                                          arguments_key => function["parameters"] || { type: "object" } },
            required: ["name", arguments_key], additionalProperties: false }
        end)
      end

      def mistral_array
        { type: "array", items: JSON.parse(call_schema("arguments")), minItems: 1, maxItems: (1 unless @parallel) }
          .compact
      end

      def mistral_args_call
        alternatives = @tools.map do |tool|
          function = tool["function"]
          "#{JSON.generate(function["name"])} #{marker("[ARGS]")} %json " \
            "#{JSON.generate(function["parameters"] || { type: "object" })}"
        end
        "#{marker("[TOOL_CALLS]")} (#{alternatives.join(" | ")})"
      end

      # A marker as the grammar matches it: a special token (`[TOOL_CALLS]`, which text
      # cannot spell) by its id, anything else as text.
      def marker(text)
        special = @model.tokenize(text, add_special: false, parse_special: true)
        plain = @model.tokenize(text, add_special: false, parse_special: false)
        special.size == 1 && special != plain ? "<[#{special.first}]>" : JSON.generate(text)
      end
    end
  end
end
