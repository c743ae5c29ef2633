# frozen_string_literal: true

require "did_you_mean"

module Elelem
  class Model
    # How {Model#chat} and {Model#complete} turn a conversation into a request (its
    # constraint included) and read the reply back: text, reasoning and tool calls.
    # @api private
    module Replies
      # The keywords {Model#chat} and {Model#complete} take besides template variables: what
      # an unknown keyword is checked against for a suggestion.
      KEYWORDS = (Options::GENERATION_DEFAULTS.keys + Options::CONSTRAINTS +
                  %i[template system parse_special logprobs now max_completion_tokens]).map(&:to_s).freeze
      # Finds the keyword a misspelt one meant.
      KEYWORD_CHECKER = DidYouMean::SpellChecker.new(dictionary: KEYWORDS)

      # What {#chat} evaluates for `messages`: their ids ({#chat_tokens}), or for a conversation
      # with image parts an {Images::Prompt} (the rendered text, its plain ranges and the images'
      # bytes), which {#complete} and {#generate} take as a prompt. See {#chat} for the arguments.
      # @param variables [Hash] template variables (`tools:`, `enable_thinking: false`, ...) and `now:`
      # @return [Array<Integer>, Images::Prompt]
      # @raise [Elelem::TemplateError] when the template fails
      # @raise [Elelem::ImageError] for an image that cannot be read
      def chat_input(messages, template: nil, system: nil, parse_special: false, **variables)
        chat_renderer(messages, template, system, parse_special).call(variables)
      end

      private

      # Whether `prompt` is a conversation (an Array of message Hashes) rather than ids.
      def conversation?(prompt)
        prompt.is_a?(Array) && !prompt.empty? && prompt.all?(Hash)
      end

      # What {#chat} evaluates and how: `[ids or an Images::Prompt (with images), generation options,
      # constraint]`. `tools:` also switch on the lazy constraint on tool calls unless a
      # constraint on the whole reply is given.
      def chat_request(messages, template, system, parse_special, options)
        options, constraint = Options.constraint(max_completion_tokens(options))
        generation = options.slice(*Options::GENERATION_DEFAULTS.keys)
        variables = options.except(*Options::GENERATION_DEFAULTS.keys)
        render = chat_renderer(messages, template, system, parse_special)
        ids = render.call(variables)
        tools = variables[:tools]
        if tools.is_a?(Array) && !tools.empty?
          shown_tools!(ids, render.call(variables.merge(tools: nil)))
          constraint ||= ["tools", JSON.generate(tools), template && Options.text(:template, template)]
        end
        [ids, Options::CHAT_DEFAULTS.merge(generation), constraint]
      end

      # Renders the conversation with template variables into what {#chat} evaluates: its ids,
      # or with images an {Images::Prompt} (whose images the projector lays out around the text).
      def chat_renderer(messages, template, system, parse_special)
        both = vision? && audio?
        images = chat_media(messages).map { |type, part| Media.read(type, part, both:) }
        return ->(vars) { chat_ids(messages, template, system, parse_special, vars) } if images.empty?

        lambda do |vars|
          args = chat_arguments(messages, template, system, vars)
          text, plain = explaining_refusals(args[0]) do
            _chat_text(args[0], args[1], parse_special ? true : false, *args[2..])
          end
          Images::Prompt.new(text:, plain:, images:)
        end
      end

      # The ids of a conversation without images.
      def chat_ids(messages, template, system, parse_special, variables)
        args = chat_arguments(messages, template, system, variables)
        explaining_refusals(args[0]) { _chat_ids(args[0], args[1], parse_special ? true : false, *args[2..]) }
      end

      # OpenAI's newer name for `max_tokens`, as {Model#chat} takes it too.
      def max_completion_tokens(options)
        return options unless options.key?(:max_completion_tokens)

        given = options[:max_completion_tokens]
        if options.key?(:max_tokens) && options[:max_tokens] != given
          raise ArgumentError, "max_tokens: and max_completion_tokens: (the same limit) disagree"
        end

        options.except(:max_completion_tokens).merge(max_tokens: given)
      end

      # Tools the template cannot show would be dropped without a word: its prompt is the
      # same without them.
      def shown_tools!(ids, ids_without_tools)
        return unless ids == ids_without_tools

        raise ToolsNotSupportedError, "this chat template cannot show tools to the model (its prompt is the " \
                                      "same without them): pass a template: that renders tools, or no tools:"
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
        tool_calls = calls.map { |name, arguments, id| ToolCall.new(name:, arguments: JSON.parse(arguments), id:) }
        completion(result.merge(text: content), json: constraint&.first == "json_schema", reasoning:, tool_calls:)
      end

      def completion(result, json: false, reasoning: nil, tool_calls: [])
        Completion.new(**result.slice(:text, :tokens, :finish_reason, :prompt_tokens), timings: timings(result),
                                                                                       logprobs: result[:logprobs],
                                                                                       json:, reasoning:, tool_calls:)
      end

      # The conversation's image and audio parts ({Media.parts}), refused where this model's
      # projector takes the other kind (or there is none, for audio).
      def chat_media(messages)
        Media.parts(messages).tap { |parts| Media.check(parts, vision: vision?, audio: audio?) }
      end

      def chat_arguments(messages, template, system, variables)
        template = Options.text(:template, template) unless template.nil?
        chat_media(messages)
        warn_base_model
        [ChatOptions.messages(messages, system), template, ChatOptions.variables(variables.except(:now)),
         ChatOptions.now(variables[:now])]
      end

      # Renders as the block does, its refusals in the caller's terms: a template failing on a
      # message without content names that message, and an unknown keyword the option it most
      # likely meant (`max_token:` is `max_tokens:`).
      def explaining_refusals(messages)
        yield
      rescue TemplateError => e
        index = ChatOptions.missing_content(messages)
        raise if index.nil?

        raise ArgumentError, "message #{index} (#{messages[index]["role"]}) has no content, which the chat " \
                             "template needs (#{e.message.lines.first.strip[0, 80]})"
      rescue ArgumentError => e
        names = e.message[/\Aunknown keywords?: (.*?) \(/, 1]
        suggestions = names && keyword_suggestions(names.split(", "))
        raise unless suggestions

        raise ArgumentError, "unknown keyword#{"s" if names.include?(",")}: #{suggestions}"
      end

      # `:max_token (did you mean :max_tokens?)` for each name, nil when none has a likely meaning.
      def keyword_suggestions(names)
        hints = names.map { |name| [name, KEYWORD_CHECKER.correct(name.delete_prefix(":")).first] }
        return nil if hints.none?(&:last)

        hints.map { |name, hint| hint ? "#{name} (did you mean :#{hint}?)" : name }.join(", ")
      end

      # A base model (not tuned to chat: {Models::Entry#base}) answers a chat with junk:
      # said once per model, on its first chat.
      def warn_base_model
        return if @base_model_warned

        @base_model_warned = true
        entry = Models.base_entry(info[:path])
        return unless entry

        warn "elelem: #{entry.name} is a base model, not tuned to chat: expect its replies to a " \
             "conversation to be poor (it continues text; see Elelem::Models.list)"
      end
    end
  end
end
