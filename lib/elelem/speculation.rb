# frozen_string_literal: true

module Elelem
  # Checks {Model#generate}'s speculative-decoding options (`draft:` and `draft_tokens:`)
  # and puts them as the native side takes them ({Elelem.open}'s are checked there).
  # @api private
  module Speculation
    # `draft:` per call: plain decoding, prompt lookup, copying, or the draft model the model was opened with.
    DRAFTS = { false => "none", lookup: "lookup", copy: "copy", model: "model" }.freeze

    module_function

    # A call's `draft:` and `draft_tokens:` as the native side takes them.
    def call_options(draft, draft_tokens)
      unless draft.nil? || DRAFTS.key?(draft)
        raise ArgumentError, "draft must be false, :lookup, :copy or :model (a model opened with draft:), " \
                             "got #{draft.inspect}"
      end

      Options.integer(:draft_tokens, draft_tokens, 1..Model::MAX_DRAFT_TOKENS) unless draft_tokens.nil?
      { draft: DRAFTS[draft], draft_tokens: }
    end

    # Speculation decodes one sequence at a time; a batch of prompts may not ask for it.
    def refuse_batch(opts)
      return if opts[:draft].nil? || opts[:draft] == "none"

      raise ArgumentError, "generate_all decodes its prompts together; speculative decoding (draft:) runs one " \
                           "sequence at a time: call generate for each"
    end
  end
end
