# frozen_string_literal: true

module Elelem
  # Checks the speculative-decoding options ({Elelem.open}'s and {Model#generate}'s
  # `draft:` and `draft_tokens:`) and puts them as the native side takes them.
  # @api private
  module Speculation
    # `draft:` per call: plain decoding, prompt lookup, copying, or the draft model the model was opened with.
    DRAFTS = { false => "none", lookup: "lookup", copy: "copy", model: "model" }.freeze
    # The drafters that need no second model, as {Elelem.open}'s `draft:` takes them.
    SELF_DRAFTS = %i[lookup copy].freeze

    module_function

    # A call's `draft:` and `draft_tokens:` as the native side takes them.
    def call_options(draft, draft_tokens)
      unless draft.nil? || DRAFTS.key?(draft)
        raise ArgumentError, "draft must be false, :lookup, :copy or :model (a model opened with draft:), " \
                             "got #{draft.inspect}"
      end

      draft_tokens(draft_tokens) unless draft_tokens.nil?
      { draft: DRAFTS[draft], draft_tokens: }
    end

    # {Elelem.open}'s `draft:` and `draft_tokens:` as the native side takes them: the draft
    # model (nil, a path, which `resolve` turns a known model's name into, or an open
    # {Model}) and `[drafter, draft_tokens]`, the drafter "lookup", "copy" or nil.
    def open_arguments(draft, draft_tokens, &)
      draft_tokens(draft_tokens) unless draft_tokens.nil?
      [draft_model(draft, &), [SELF_DRAFTS.include?(draft) ? draft.to_s : nil, draft_tokens]]
    end

    def draft_model(draft)
      return if draft.nil? || SELF_DRAFTS.include?(draft)
      return draft if draft.is_a?(Model)

      draft = draft.to_path if draft.respond_to?(:to_path)
      return yield(draft) if draft.is_a?(String)

      raise ArgumentError,
            "draft must be a path, a known model's name, an Elelem::Model, :lookup or :copy, got #{draft.inspect}"
    end

    # A draft's length: 1 to {Model::MAX_DRAFT_TOKENS} tokens.
    def draft_tokens(value)
      Options.integer(:draft_tokens, value, 1..Model::MAX_DRAFT_TOKENS)
    end

    # Speculation decodes one sequence at a time; a batch of prompts may not ask for it.
    def refuse_batch(opts)
      return if opts[:draft].nil? || opts[:draft] == "none"

      raise ArgumentError, "generate_all decodes its prompts together; speculative decoding (draft:) runs one " \
                           "sequence at a time: call generate for each"
    end
  end
end
