# frozen_string_literal: true

module Elelem
  # `elelem generate`: a continuation of a prompt, or with --chat a reply to it, streamed or
  # as one JSON object.
  class CLI
    private

    def cmd_generate(argv)
      opts, rest = parse(argv, "generate [-m MODEL] [options] [PROMPT | -]") do |o, op|
        sampling_options(o, op, "generate")
        o.on("--chat", "send PROMPT as a user message through the chat template") { op[:chat] = true }
        o.on("--image FILE", "an image before PROMPT (repeatable; needs the model's projector, --mmproj)") do |f|
          (op[:media] ||= []) << [:images, f]
        end
        o.on("--audio FILE", "a WAV, MP3 or FLAC file before PROMPT (repeatable, in order with --image; needs " \
                             "an audio projector, --mmproj)") do |f|
          (op[:media] ||= []) << [:audio, f]
        end
        o.on("--json", "print one JSON object: text, finish reason, token counts, seed (a string above 2^53), " \
                       "timings") { op[:json] = true }
      end
      return if opts.nil?

      prompt = text_argument(rest, "PROMPT")
      open_model(opts) { |model| generate(model, prompt, opts) }
    end

    def generate(model, prompt, opts)
      gen = SAMPLING["generate"].slice(:max_tokens).merge(opts[:gen], seed: Options.seed(opts[:gen][:seed]))
      given = opts[:media] || []
      prompt = chat_input(model, prompt, given, opts) if opts[:chat] || opts[:system] || opts[:template]
      stream = opts[:json] ? nil : ->(piece) { @out.print(piece).then { @out.flush } }
      completion = model.complete(prompt, **media_option(given), **gen, &stream)
      @out.puts(opts[:json] ? JSON.generate(summary(model, completion, gen)) : "")
      @out.flush
      CLI.stop_note(@err, completion.finish_reason, gen[:max_tokens])
    end

    # The content part each of --image's and --audio's files becomes in a chat message.
    MEDIA_PARTS = { images: :image, audio: :audio }.freeze

    # --image's and --audio's files (`[kind, file]` in the order given) as {Model#complete}
    # takes them: `images:` or `audio:` where they are of one kind, else `media:` (a projector
    # with both encoders, Qwen2.5-Omni's).
    # @return [Hash]
    def media_option(given)
      kinds = given.map(&:first).uniq
      return {} if kinds.empty?

      { (kinds.size == 1 ? kinds.first : :media) => given.map(&:last) }
    end

    # With --chat (or a system message, or a template): PROMPT as a user message through the
    # template, its images and audio files before it in the order given ({Model#chat_input}).
    def chat_input(model, prompt, media, opts)
      parts = media.map do |kind, file|
        key = MEDIA_PARTS[kind]
        { type: key.to_s, key => file }
      end
      content = parts.empty? ? prompt : [*parts, prompt]
      model.chat_input([{ role: "user", content: }], **opts.slice(:system, :template))
    end

    def summary(model, completion, gen)
      { text: completion.text, finish_reason: completion.finish_reason, prompt_tokens: completion.prompt_tokens,
        completion_tokens: completion.tokens.size, seed: json_seed(gen[:seed]), model: model.info[:path],
        timings: completion.timings }
    end

    # A seed as JSON: a number while a double holds it exactly (random seeds always are),
    # else its digits as a String, which no reader rounds.
    def json_seed(seed)
      seed > Options::MAX_EXACT_SEED ? seed.to_s : seed
    end
  end
end
