# frozen_string_literal: true

module Elelem
  # A language model opened from a GGUF file, with one context (KV cache and
  # compute buffer) of its own holding `parallel` sequences. Threads share a
  # model: their generations run together, each pass of the model carrying the
  # next token of every running sequence and chunks of new prompts (continuous
  # batching); past `parallel` sequences, requests wait their turn in a queue.
  #
  # Native memory is freed by {#close}, by the block form of {Elelem.open},
  # or by the garbage collector.
  class Model
    include Replies
    include Embeddings

    # The context size {Elelem.open} uses unless told otherwise.
    DEFAULT_N_CTX = Defaults::OPEN.fetch(:n_ctx)
    # The largest `n_ctx` accepted.
    MAX_N_CTX = Defaults::MAX_N_CTX
    # How many requests may wait for a free sequence unless told otherwise.
    DEFAULT_QUEUE = Defaults::OPEN.fetch(:queue)
    # The most alternatives `logprobs:` reports per token.
    MAX_LOGPROBS = 20

    class << self
      # Opens a model; see {Elelem.open}.
      # @return [Model]
      def open(path, **options)
        path = path.to_path if path.respond_to?(:to_path)
        raise ArgumentError, "path must be a String, got #{path.class}" unless path.is_a?(String)

        # A draft model's file, like the model's, may be a known model's name; the native
        # side checks every option else.
        draft = options[:draft]
        draft = draft.to_path if draft.respond_to?(:to_path)
        options = options.merge(draft: Models.known(draft)) if draft.is_a?(String)
        path = Models.known(path)
        _open(path, Images.with_projector(path, options)).tap { |m| m.send(:after_open) }
      rescue Elelem::LoadError => e
        raise unless missing_file?(e)

        raise Elelem::LoadError, "#{e.message} (known model names open too, fetched on first use: " \
                                 "#{Models.names.join(", ")}; see Elelem::Models.list; and Hugging Face " \
                                 "references: hf:org/repo[:QUANT] or hf:org/repo/file.gguf)"
      end

      private

      # The loader found no file (a Hugging Face reference's own errors say what they miss).
      def missing_file?(error)
        !error.is_a?(HubError) && error.message.include?("No such file")
      end
    end

    # Generates a continuation of `prompt`, starting a fresh sequence.
    #
    # Given token ids, returns the generated ids (yielding each); given a String,
    # returns the generated text (yielding each new piece, whole UTF-8 characters only).
    #
    # @param prompt [String, Array<Integer>] text (tokenized with special tokens) or token ids
    # @param max_tokens [Integer] the most tokens to generate
    # @param ignore_eos [Boolean] keep going after an end-of-generation token
    # @param temperature [Float] 0 is greedy (llama.cpp's exact choice); higher samples
    # @param top_k [Integer] sample among the k likeliest tokens (0: all)
    # @param top_p [Float] ... whose probabilities add up to p
    # @param min_p [Float] ... at least min_p times the likeliest's probability
    # @param repeat_penalty [Float] divide the logits of recent tokens by this (1: off)
    # @param repeat_last_n [Integer] how many recent tokens count as recent
    # @param presence_penalty [Float] subtract this from the logits of recent tokens (0: off;
    #   OpenAI's `presence_penalty`, applied as llama.cpp applies it, after `repeat_penalty`)
    # @param frequency_penalty [Float] subtract this once per time a token is recent (0: off)
    # @param logit_bias [Hash{Integer => Float}, nil] add to the logits of these token ids before
    #   sampling (`-Float::INFINITY` bans a token), as OpenAI's and llama.cpp's `logit_bias`
    # @param seed [Integer, nil] the random seed; the same seed gives the same text
    # @param stop [String, Array<String>, nil] strings that end the generation (never emitted)
    # @param reuse_prefix [Boolean] keep the cached keys and values of the prompt's prefix shared
    #   with the previous call instead of evaluating it again (faster; the text is then what
    #   llama.cpp gives with its prompt cache rather than a fresh evaluation's)
    # @param json_schema [Hash, String, nil] constrain the text to one JSON value valid against
    #   this JSON Schema (a Hash, or a JSON String): the logits of every token that would break
    #   it are masked before sampling (llguidance's JSON Schema subset; a keyword it cannot
    #   enforce raises `ArgumentError`, it is never ignored)
    # @param grammar [String, nil] constrain the text to a GBNF grammar as llama.cpp writes it
    #   (`root ::= ...`; what its `json_schema_to_grammar` produces)
    # @param lark [String, nil] constrain the text to a grammar in llguidance's Lark dialect
    #   (`start: ...`, with `%json {...}` for an embedded JSON Schema)
    # @param regex [String, nil] constrain the whole text to match this regex (Rust `regex` syntax)
    # @param choice [Array<String>, nil] constrain the text to exactly one of these strings
    # @param draft [false, :lookup, :copy, :model, nil] speculative decoding (see README,
    #   "Speculative decoding"): `:lookup` drafts from n-grams of the prompt and the text so far,
    #   `:copy` copies what followed the last earlier occurrence of its last three tokens, `:model`
    #   with the draft model the model was opened with, `false` decodes plainly; nil (the
    #   default) does as {Elelem.open}'s `draft:` says. Greedy text is the target's own choice
    #   at every token; sampled text has the target's distribution. Not with a constraint
    # @param draft_tokens [Integer, nil] how many tokens each draft holds (1 to
    #   {MAX_DRAFT_TOKENS}); nil adapts it to how many are accepted
    #
    # At most one constraint per call. A constrained generation ends when the text is complete
    # (`finish_reason` `:stop`), or at the end-of-generation token where the grammar allows it;
    # `max_tokens` may still cut it short (`:length`, the text then incomplete). Sampling, stop
    # strings, streaming and `logprobs` work as without one; logprobs are the model's own
    # distribution, before the mask.
    #
    # @example JSON that matches a schema
    #   model.generate("A person as JSON: ", json_schema: { type: "object",
    #     properties: { name: { type: "string" }, age: { type: "integer" } }, required: %w[name age] })
    #   #=> "{\"name\": \"Ada\", \"age\": 36}"
    # @yieldparam piece [String, Integer] each new piece of text, or each id for an ids prompt
    # @return [String, Array<Integer>]
    # @raise [ArgumentError] for ids that are not Integers in the vocabulary, or bad options; for a
    #   schema or grammar that cannot be enforced (naming the part), before anything is generated;
    #   for `draft:` with a constraint, or `:model` on a model opened without a draft model
    # @raise [Elelem::ContextFullError] when the prompt does not fit `n_ctx`
    # @raise [Elelem::ClosedError] after {#close}
    # @raise [Elelem::ImageError] for an image that cannot be read, decoded or encoded
    # @raise [Elelem::AudioError] for audio that cannot be read or decoded (a WAV, MP3 or FLAC
    #   file of a rate of 0 or above 384 kHz names it; another format names the ones read), or
    #   `audio:` on a model without an audio projector
    # @raise [ArgumentError] for more than one of `images:`, `audio:` and `media:`
    #
    # With `images:` (a model opened with a projector, see {#vision?}), the text places each
    # image with {Images::MARKER} (or they all come first), and each is decoded, preprocessed
    # and encoded as llama.cpp's mtmd does: `images:` takes paths, binary Strings of a
    # file's bytes, `data:` URIs or IOs ({Images.read}).
    # @example Describe a picture
    #   model = Elelem.open("gemma-3-4b-it-Q4_K_M.gguf", mmproj: "mmproj-gemma-3-4b-it-f16.gguf")
    #   model.generate("<start_of_turn>user\n#{Elelem::Images::MARKER}What is in this picture?" \
    #                  "<end_of_turn>\n<start_of_turn>model\n", images: ["cat.jpg"])
    #
    # With `audio:` (a model opened with an audio projector, see {#audio?}), the same for WAV,
    # MP3 and FLAC files ({Audio.read}): each is decoded as mtmd-helper decodes it, cut into
    # 30 s pieces and encoded as mtmd does, in place of its marker.
    # @example Listen to a recording
    #   model = Elelem.open("Qwen2-Audio-7B-Instruct-Q4_K_M.gguf", mmproj: "mmproj-Qwen2-Audio-7B-Instruct-f16.gguf")
    #   model.generate("<|im_start|>user\nAudio 1: #{Elelem::Images::MARKER}\nWhat is said?<|im_end|>\n" \
    #                  "<|im_start|>assistant\n", audio: ["speech.wav"])
    #
    # With `media:` (a model whose projector has both encoders, Qwen2.5-Omni's: {#vision?} and
    # {#audio?}), images and audio in one prompt: each entry a path, bytes or an IO of an image
    # or an audio file, in the order of their markers, told apart by their bytes as mtmd's helper
    # tells them (a WAV, MP3 or FLAC file is audio); on a model with one encoder, `media:` takes its kind and
    # refuses the other. `images:` and `audio:` together are refused: pass `media:`.
    # @example An image and a recording together
    #   model = Elelem.open("Qwen2.5-Omni-3B-Q4_K_M.gguf", mmproj: "mmproj-Qwen2.5-Omni-3B-Q8_0.gguf")
    #   model.generate("<|im_start|>user\n#{Elelem::Images::MARKER}#{Elelem::Images::MARKER}Is the " \
    #                  "recording about the picture?<|im_end|>\n<|im_start|>assistant\n",
    #                  media: ["cat.jpg", "speech.wav"])
    def generate(prompt, **options, &)
      options, constraint = Options.constraint(options)
      result = run(prompt, options, text: prompt.is_a?(String), constraint:, &)
      prompt.is_a?(String) ? result[:text] : result[:tokens]
    end

    # Like {#generate} for text, but returns a {Completion} with the ids, the reason
    # it stopped and the timings (and, for a JSON Schema, the parsed value: {Completion#json}).
    #
    # Given a conversation (an Array of message Hashes) instead of a prompt, answers it as
    # {#chat} does and reads the reply: {Completion#text} is what the user reads,
    # {Completion#reasoning} the model's `<think>` text and {Completion#tool_calls} the calls
    # it made to `tools:`, parsed from the format the chat template teaches (Hermes/Qwen
    # `<tool_call>`, Llama 3.x JSON, Mistral `[TOOL_CALLS]`). With `tools:`, a call's
    # arguments are constrained to the tool's JSON Schema from the moment the model opens the
    # call (as llama.cpp's lazy grammars do); plain replies are not constrained.
    #
    # @example A tool call round trip
    #   weather = { type: "function", function: { name: "get_weather",
    #               parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }
    #   messages = [{ role: "user", content: "Weather in Paris?" }]
    #   reply = model.complete(messages, tools: [weather])
    #   reply.tool_calls.first #=> #<struct Elelem::ToolCall name="get_weather", arguments={"city"=>"Paris"}>
    #   messages += [reply.message, { role: "tool", name: "get_weather", content: '{"celsius": 18}' }]
    #   model.complete(messages, tools: [weather]).text #=> "It is 18 °C in Paris."
    #
    # @param prompt [String, Array<Integer>, Array<Hash>] a prompt, or a conversation
    # @param logprobs [Integer, nil] also give each generated token's log-probability and
    #   the likeliest `logprobs` alternatives (0 to {MAX_LOGPROBS}) in {Completion#logprobs}
    # @param options the options of {#generate} (constraints included), and for a conversation
    #   those of {#chat} (`tools:`, `template:`, `system:`, template variables)
    # @yieldparam piece [String] each new piece of text (for a conversation, the raw reply)
    # @return [Completion]
    # @raise [ArgumentError] for bad options, or a schema, grammar or tool that cannot be enforced
    def complete(prompt, logprobs: nil, **options, &block)
      Options.integer(:logprobs, logprobs, 0..MAX_LOGPROBS) unless logprobs.nil?
      return complete_chat(prompt, logprobs, options, &block) if conversation?(prompt)

      options, constraint = Options.constraint(options)
      result = run(prompt, options, text: true, logprobs:, constraint:, &block)
      completion(result, json: constraint&.first == "json_schema")
    end

    # Generates a continuation of each prompt, all in the same passes: the batch form of
    # {#generate} for scripts. Started together, the prompts are evaluated and decoded in
    # lockstep (up to `parallel` at a time, the rest as sequences free up).
    # @example Two images described together
    #   model.generate_all(["Describe <__media__>", "What is in <__media__>?"], images: [["a.png"], ["b.jpg"]])
    #
    # @param prompts [Array<String, Array<Integer>>]
    # @param images [Array<Array, nil>, nil] each prompt's images, as {#generate} takes them
    #   (nil or [] for a prompt without)
    # @param audio [Array<Array, nil>, nil] each prompt's audio files, as {#generate} takes them,
    #   for a model with an audio projector ({#audio?})
    # @param media [Array<Array, nil>, nil] each prompt's images and audio files in marker order,
    #   as {#generate} takes them (one of `images:`, `audio:` and `media:`)
    # @param options see {#generate} (a constraint applies to each prompt); the prompts are not
    #   decoded speculatively
    # @yieldparam index [Integer] which prompt a piece (or id) belongs to
    # @yieldparam piece [String, Integer]
    # @return [Array<String, Array<Integer>>] in the order of `prompts`
    def generate_all(prompts, images: nil, audio: nil, media: nil, **options, &block)
      raise ArgumentError, "prompts must be an Array, got #{prompts.class}" unless prompts.is_a?(Array)

      options, constraint = Options.constraint(options)
      opts = Options.generation(options)
      Speculation.refuse_batch(opts)
      given = { images:, audio:, media: }
      checked, attachments = Images.attach_all(prompts, Media.options_all(given, vision?, audio?, prompts.size))
      results = _run_all(checked, attachments, opts, constraint, &block)
      results.zip(checked).map { |result, prompt| prompt.is_a?(String) ? result[:text] : result[:tokens] }
    end

    # Yields each piece of generated text; without a block, a {Pieces} enumerator of them.
    #
    # Iterating the enumerator with a block (`each`, `map`, `first(3)`, `lazy`) streams
    # as the block form does. External iteration (`next`, `peek`) generates the whole
    # continuation on its first call and then hands out the pieces: a paused enumerator
    # never holds the model, and dropping it releases nothing because it holds nothing.
    # @return [Pieces, String] the enumerator, or with a block the generated text
    def each_token(prompt, **options, &block)
      return Pieces.new { |pieces| each_token(prompt, **options) { |piece| pieces << piece } } unless block

      options, constraint = Options.constraint(options)
      run(prompt, options, text: true, constraint:, &block)[:text]
    end

    # Answers a conversation: renders `messages` with the model's chat template (or
    # `template:`), generates the assistant's turn and returns it. The reply runs to the
    # end of the turn, up to 1024 tokens unless `max_tokens:` says otherwise
    # ({Options::CHAT_DEFAULTS}), and earlier turns are not evaluated again
    # (`reuse_prefix: true` unless given).
    #
    # The template is rendered as Hugging Face transformers renders it (Python's jinja2
    # with `trim_blocks`, `lstrip_blocks`, `raise_exception`, `strftime_now`, ...): the
    # prompt is the one the model's authors trained it on.
    #
    # @example A tool call and its result
    #   weather = { type: "function", function: { name: "get_weather", description: "The weather in a city",
    #               parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }
    #   model.chat([{ role: "user", content: "Weather in Paris?" },
    #               { role: "assistant", tool_calls: [{ type: "function",
    #                 function: { name: "get_weather", arguments: { city: "Paris" } } }] },
    #               { role: "tool", name: "get_weather", content: '{"celsius": 18}' }], tools: [weather])
    #
    # @param messages [Array<Hash>, String] `{ role: "user", content: "..." }` hashes (String
    #   keys too), or a String alone as one user message; roles are `system`, `user`,
    #   `assistant` and `tool`; a content is a String or an Array of text parts (`{ type:
    #   "text", text: "..." }` or Strings), joined by newlines, or nil (or absent) as in an
    #   assistant's message with `tool_calls`. Other keys reach the template as they are:
    #   an assistant's `tool_calls` (`[{ id:, type: "function", function: { name:, arguments: } }]`, the arguments a
    #   Hash or a JSON String), a tool result's `tool_call_id` and `name`, `reasoning_content`
    # @param template [String, nil] a Jinja chat template to use instead of the model's; a GGUF
    #   without one gets llama.cpp's built-in format for its architecture where there is one
    #   (gemma3), else this is required
    # @param system [String, nil] a system message to put first
    # @param parse_special [Boolean] read special-token text in message contents (`<|im_end|>`)
    #   as those tokens. Off by default: contents are plain text, so a user cannot end a turn or
    #   open a system one; only the template's own markup is special. Set it for trusted content only.
    # @param options the options of {#generate} (`max_completion_tokens:`, OpenAI's newer name,
    #   is `max_tokens:`); every other keyword is a template variable, passed through as it is
    #   (`enable_thinking: false`, `documents: [...]`), but `now:`; one the template does not
    #   read is an ArgumentError (`unknown keyword: :max_token (did you mean :max_tokens?)`)
    # @option options [Array<Hash>] :tools tool definitions, OpenAI-style JSON schemas of
    #   functions (`{ type: "function", function: { name:, description:, parameters: } }`): the
    #   template shows them to the model, and a call the model opens is constrained to the
    #   tool's schema. The reply is returned as written; {#complete} given the messages
    #   parses the calls out of it ({Completion#tool_calls})
    # @option options [Hash, String] :json_schema, :grammar, :lark, :regex, :choice a constraint
    #   on the whole reply, as for {#generate}
    # @option options [Time] :now the time the template's `strftime_now` formats (in local
    #   time; default the current time), to make a dated prompt reproducible
    # @yieldparam piece [String] each new piece of the reply
    # @return [String] the reply
    # @raise [Elelem::Error] when the model has no template and none is given
    # @raise [Elelem::ToolsNotSupportedError] for `tools:` that the template cannot show (the
    #   prompt is the same without them: gemma-3-270m's built-in format, say)
    # @raise [Elelem::TemplateError] when the template fails (its `raise_exception`, say,
    #   refusing a role it does not take)
    # @raise [ArgumentError] for an unknown role, a missing content that the template needs
    #   (naming the message's index), a content that is not text, a value a
    #   template cannot take, or a keyword the template does not read (but `tools:`,
    #   `documents:`, `tool_choice:`, which every template gets)
    def chat(messages, template: nil, system: nil, parse_special: false, **options, &block)
      ids, generation, constraint = chat_request(messages, template, system, parse_special, options)
      run(ids, generation, text: true, constraint:, &block)[:text]
    end

    # The prompt {#chat} sends for `messages`, as text (with the generation prompt appended
    # unless told otherwise); see {#chat} for the arguments.
    # @param variables [Hash] template variables (`tools:`, `enable_thinking: false`, ...) and `now:`
    # @return [String]
    # @raise [Elelem::TemplateError] when the template fails
    # @raise [ArgumentError] for a keyword the template does not read, as {#chat}
    def chat_prompt(messages, template: nil, system: nil, add_generation_prompt: true, **variables)
      args = chat_arguments(messages, template, system, variables)
      explaining_refusals(args[0]) { _render_chat(args[0], args[1], add_generation_prompt ? true : false, *args[2..]) }
    end

    # The token ids {#chat} evaluates for `messages`: {#chat_prompt} tokenized with the
    # contents as plain text (unless `parse_special`); see {#chat} for the arguments.
    # @param variables [Hash] template variables (`tools:`, `enable_thinking: false`, ...) and `now:`
    # @return [Array<Integer>]
    # @raise [Elelem::TemplateError] when the template fails
    # @raise [ArgumentError] for a keyword the template does not read, as {#chat}
    def chat_tokens(messages, template: nil, system: nil, parse_special: false, **variables)
      unless Media.parts(messages).empty?
        raise ArgumentError, "a conversation with images or audio has no ids before they are encoded: chat_input " \
                             "gives what chat evaluates"
      end

      chat_ids(messages, template, system, parse_special, variables)
    end

    # How many tokens a text or a conversation takes: `tokenize(text).size`, or for an
    # Array of messages `chat_tokens(messages, **chat).size` (what {#chat} evaluates).
    # @param text_or_messages [String, Array<Hash>]
    # @param chat [Hash] the keywords {#chat_tokens} takes (`template:`, `system:`, `tools:`, ...)
    # @return [Integer]
    def count_tokens(text_or_messages, **chat)
      return chat_tokens(text_or_messages, **chat).size if text_or_messages.is_a?(Array)
      raise ArgumentError, "count_tokens takes no chat options for a text" unless chat.empty?

      tokenize(text_or_messages).size
    end

    # The format in which a chat template teaches the model to write tool calls, as
    # {#complete} reads them: `:hermes` (`<tool_call>{...}</tool_call>`), `:llama3_json`,
    # `:mistral` (`[TOOL_CALLS][...]`), `:mistral_args` (`[TOOL_CALLS]name[ARGS]{...}`), or
    # `:unsupported` (replies are read as plain text).
    # @param template [String, nil] a Jinja chat template instead of the model's
    # @return [Symbol]
    def tool_call_format(template: nil)
      _tool_call_format(template && Options.text(:template, template))
    end

    # @return [String, nil] the GGUF's Jinja chat template (nil when it has none, even where
    #   {#chat} has a built-in format to fall back on)
    def chat_template
      _chat_template
    end

    # The model's tokenizer. It takes no turn on the model: threads may tokenize while
    # the model generates, and it stays usable after {#close}.
    # @return [Tokenizer]
    # @raise [Elelem::Error] when the model's vocabulary is not supported (ids still work)
    def tokenizer
      raise ClosedError, "the model is closed" if @closed

      @tokenizer ||= _tokenizer
    end

    # Token ids of `text`; see {Tokenizer#tokenize}.
    # @param add_special [Boolean] add BOS/EOS where the model asks for them
    # @param parse_special [Boolean] read special-token text (`<|im_start|>`) as those tokens
    # @return [Array<Integer>]
    def tokenize(text, add_special: true, parse_special: true)
      tokenizer.tokenize(text, add_special:, parse_special:)
    end

    # The text of token ids; see {Tokenizer#detokenize}.
    # @param special [Boolean] render special tokens as their text
    # @return [String] UTF-8
    def detokenize(ids, special: true)
      tokenizer.detokenize(ids, special:)
    end

    # One token's bytes (which may be part of a character, hence a binary String).
    # @return [String]
    def token_to_piece(id, special: true)
      tokenizer.token_to_piece(id, special:)
    end

    # Why the last generation on this model stopped: `:stop` (a stop string), `:eos`,
    # `:length`, `:context_full`, or `:interrupted` when the call did not finish: an
    # exception (Ctrl-C, `Thread#raise`, `Timeout`, an error raised in the block) or a
    # `break` (`return`, `throw`) out of the block ended it. `nil` before the first
    # generation, and when the last call was refused before generating (bad ids, a
    # prompt longer than `n_ctx`, a closed model).
    # @return [Symbol, nil]
    attr_reader :last_stop_reason

    # Frees the model's native memory now. Idempotent.
    # @return [nil]
    # @raise [Elelem::Error] when called from the block of a generation on this model
    def close
      _close
      @closed = true
      nil
    end

    # @return [Boolean] whether {#close} has been called
    def closed?
      _closed?
    end

    # The model's hyper-parameters and how it runs.
    # @return [Hash{Symbol => Object}]
    def info
      _info
    end

    # Whether prompts may hold images: the model was opened with a projector that has a vision
    # encoder (`mmproj:`, or one found beside its file; {#info}'s `:vision`, and `:mmproj`
    # names its type).
    # @return [Boolean]
    def vision? = info[:vision] == true

    # Whether prompts may hold audio (`audio:`, audio content parts): the model was opened
    # with a projector that has an audio encoder (Qwen2-Audio's `qwen2a`, Qwen2.5-Omni's
    # `qwen2.5o`, which has both: {#vision?} too; {#info}'s `:audio`).
    # @return [Boolean]
    def audio? = info[:audio] == true

    # Memory use (the KV cache's cells in use, `kv_cells_used` of `kv_cells`, and the tokens
    # its sequences hold, `kv_tokens`, as of the last pass), and the work and speed of the last
    # generation that finished on this model (on any thread): its evaluated and reused prompt
    # tokens, its decode passes, the seconds they took, and the tokens its sequence holds (`n_past`).
    # @return [Hash{Symbol => Numeric}]
    def stats
      last = @last_result || {}
      _stats.merge(timings(last).except(:constraint_us).merge(last.slice(:n_past, :reused_prompt_tokens)))
    end

    # @return [String] e.g. `#<Elelem::Model qwen2 0.5B Q4_K_M n_ctx=4096>` (with
    #   ` batch_invariant` when opened so), or for an embedding model
    #   `#<Elelem::Model bert 22M F16 embeddings=384 pooling=mean>`
    def inspect
      return "#<#{self.class.name} closed>" if closed?

      i = info
      label = [i[:architecture], i[:size_label], i[:file_type]].compact.join(" ")
      if i[:kind] == :decoder
        flags = "#{" batch_invariant" if i[:batch_invariant]}#{" mmproj=#{i[:mmproj]}" if i[:mmproj]}"
        return "#<#{self.class.name} #{label} n_ctx=#{i[:n_ctx]}#{flags}>"
      end

      "#<#{self.class.name} #{label} embeddings=#{i[:embedding_length]} pooling=#{i[:pooling] || :none}>"
    end
    alias to_s inspect

    private

    def after_open
      i = info
      # An encoder embeds at most n_ctx_train tokens of a text whatever n_ctx says.
      return unless i[:kind] == :decoder && i[:n_ctx] > i[:n_ctx_train]

      warn "elelem: n_ctx #{i[:n_ctx]} is above the #{i[:n_ctx_train]} tokens #{i[:name] || i[:architecture]} " \
           "was trained on; past those, expect poor text"
    end

    def run(prompt, options, text:, logprobs: nil, constraint: nil, &block)
      opts = Options.generation(options.except(:images, :audio, :media))
      prompt = Images.attach(prompt, Media.option(options.slice(:images, :audio, :media), vision?, audio?), opts)
      @last_stop_reason = :interrupted
      result = generate_now(prompt, opts, text, logprobs, constraint, &block)
      @last_result = result
      @last_stop_reason = result[:finish_reason]
      result
    end

    # Runs the native generation; a refusal raised by elelem itself (not by the block)
    # leaves no stop reason, since nothing was generated.
    def generate_now(prompt, opts, text, logprobs, constraint, &block)
      in_block = false
      yielder = block && proc do |piece|
        in_block = true
        block.call(piece)
        in_block = false
      end
      _run(prompt, opts, text, logprobs, constraint, &yielder)
    rescue ArgumentError, ContextFullError, ClosedError, BusyError, NoMemoryError
      @last_stop_reason = nil unless in_block
      raise
    end

    # A generation's work and speed, as {#stats} and {Completion#timings} give them.
    def timings(result)
      prompt = result.fetch(:evaluated_prompt_tokens, 0)
      decode = result.fetch(:decode_tokens, 0)
      prompt_seconds = result.fetch(:prompt_seconds, 0.0)
      decode_seconds = result.fetch(:decode_seconds, 0.0)
      rate = ->(n, seconds) { seconds.positive? ? n / seconds : 0.0 }
      timings = { prompt_tokens: prompt, prompt_seconds:, prompt_tokens_per_s: rate.call(prompt, prompt_seconds),
                  decode_tokens: decode, decode_seconds:, decode_tokens_per_s: rate.call(decode, decode_seconds) }
      timings.merge(result.slice(:constraint_us, :decode_passes, :draft_proposed, :draft_accepted,
                                 :image_encode_seconds, :audio_encode_seconds))
    end
  end
end
