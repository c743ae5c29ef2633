# frozen_string_literal: true

module Elelem
  class Model
    # How {Model#chat} and {Model#complete} turn a conversation into a request (its
    # constraint included) and read the reply back: text, reasoning and tool calls.
    # @api private
    module Replies
      private

      # Whether `prompt` is a conversation (an Array of message Hashes) rather than ids.
      def conversation?(prompt)
        prompt.is_a?(Array) && !prompt.empty? && prompt.all?(Hash)
      end

      # What {#chat} evaluates and how: `[ids, generation options, constraint]`. `tools:` also
      # switch on the lazy constraint on tool calls unless a constraint on the whole reply is given.
      def chat_request(messages, template, system, parse_special, options)
        options, constraint = Options.constraint(options)
        generation = options.slice(*Options::GENERATION_DEFAULTS.keys)
        variables = options.except(*Options::GENERATION_DEFAULTS.keys)
        ids = chat_tokens(messages, template:, system:, parse_special:, **variables)
        tools = variables[:tools]
        if constraint.nil? && tools.is_a?(Array) && !tools.empty?
          constraint = ["tools", JSON.generate(tools), template && Options.text(:template, template)]
        end
        [ids, Options::CHAT_DEFAULTS.merge(generation), constraint]
      end

      # {#complete} for a conversation: the reply parsed into text, reasoning and tool calls.
      def complete_chat(messages, logprobs, options, &)
        template = options[:template]
        chat_options = options.slice(:system, :parse_special)
        ids, generation, constraint = chat_request(messages, template, chat_options[:system],
                                                   chat_options[:parse_special], options.except(:template, :system,
                                                                                                :parse_special))
        result = run(ids, generation, text: true, logprobs:, constraint:, &)
        cut_by_stop = result[:finish_reason] == :stop && !Array(generation[:stop]).empty?
        content, reasoning, calls = _parse_reply(cut_by_stop ? result[:text] : result[:tokens],
                                                 template && Options.text(:template, template))
        tool_calls = calls.map { |name, arguments| ToolCall.new(name:, arguments: JSON.parse(arguments)) }
        completion(result.merge(text: content), json: constraint&.first == "json_schema", reasoning:, tool_calls:)
      end

      def completion(result, json: false, reasoning: nil, tool_calls: [])
        Completion.new(**result.slice(:text, :tokens, :finish_reason, :prompt_tokens), timings: timings(result),
                                                                                       logprobs: result[:logprobs],
                                                                                       json:, reasoning:, tool_calls:)
      end

      def chat_arguments(messages, template, system, variables)
        template = Options.text(:template, template) unless template.nil?
        [ChatOptions.messages(messages, system), template, ChatOptions.variables(variables.except(:now)),
         ChatOptions.now(variables[:now])]
      end
    end
  end
end
