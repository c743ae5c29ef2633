# frozen_string_literal: true

module Elelem
  class Server
    # The prompt of `POST /infill` (fill-in-the-middle), laid out as llama-server's
    # `format_prompt_infill` lays it out, in Qwen2.5-Coder's repository-level pattern:
    #
    #   <|repo_name|>myproject\n<|file_sep|>NAME\nTEXT ...<|file_sep|>filename\n
    #   <|fim_prefix|>PREFIX PROMPT<|fim_suffix|>SUFFIX<|fim_middle|>
    #
    # (the repository and file markers where the vocabulary has them; without a file
    # separator each extra chunk follows a `--- snippet ---` line). As llama-server does, the
    # prefix keeps its last 3/4 of a batch of tokens, the suffix its first 1/4 (less the
    # prompt's), and the extra chunks what is left of the context.
    class Infill
      # llama-server's default batch (`-b`): the prefix and suffix share one.
      BATCH = 2048
      # llama-server's default `-n` (no limit), which sizes the room left to the extra chunks.
      N_PREDICT = -1
      # What separates extra chunks without a file separator token (llama-server's bytes).
      SNIPPET = "\n\n--- snippet ---\n\n"
      # The most extra chunks one request may give.
      MAX_EXTRA = 256

      # @param model [Model] the served model; a 501 when its vocabulary has no FIM tokens
      # @raise [HTTPError] 501 for a model that cannot infill
      def initialize(model)
        @model = model
        @fim = model.tokenizer.fim_tokens
        missing = %i[prefix suffix middle].reject { |role| @fim[role] }
        return if missing.empty?

        raise HTTPError.new(501, "infill is not supported by this model: it has no FIM " \
                                 "#{missing.join(", ")} token#{"s" if missing.size > 1}", code: "not_supported")
      end

      # The prompt's token ids.
      # @param body [Hash] `input_prefix`, `input_suffix` (strings, required), `input_extra`
      #   (`[{filename:, text:}]`) and the optional `prompt` (text after the prefix)
      # @return [Array<Integer>]
      # @raise [HTTPError] 400 for a missing or malformed field
      def tokens(body)
        prompt = @model.tokenize(body["prompt"].to_s, add_special: false, parse_special: true)
        extra = extra_tokens(chunks(body["input_extra"]))
        keep = [[0, @model.info[:n_ctx] - BATCH - (2 * N_PREDICT)].max, extra.size].min
        bos = @model.tokenizer.add_bos? ? [@model.tokenizer.bos] : []
        [*extra.last(keep), *bos, *prefix(body, prompt), *suffix(body, prompt), @fim[:middle]]
      end

      private

      # The prefix's last 3/4 of a batch, after its marker, then the prompt.
      def prefix(body, prompt)
        ids = tokenize(text(body, "input_prefix"))
        [@fim[:prefix], *ids.last([ids.size, 3 * (BATCH / 4)].min), *prompt]
      end

      # The suffix's first 1/4 of a batch (less the prompt's), after its marker.
      def suffix(body, prompt)
        ids = tokenize(text(body, "input_suffix"))
        [@fim[:suffix], *ids.first([ids.size, [0, (BATCH / 4) - (2 + prompt.size)].max].min)]
      end

      def text(body, name)
        value = body[name]
        return value if value.is_a?(String)

        raise HTTPError.new(400, "#{name} is required (a string)", param: name)
      end

      def chunks(extra)
        return [] if extra.nil?

        return extra if extra.is_a?(Array) && extra.size <= MAX_EXTRA && extra.all? { |chunk| chunk?(chunk) }

        raise HTTPError.new(400, "input_extra must be an array of at most #{MAX_EXTRA} " \
                                 "{\"filename\": string, \"text\": string}", param: "input_extra")
      end

      def chunk?(chunk)
        chunk.is_a?(Hash) && chunk["text"].is_a?(String) && [nil, String].include?(chunk["filename"]&.class)
      end

      def extra_tokens(chunks)
        repo = @fim[:repo] ? [@fim[:repo], *tokenize("myproject\n")] : []
        files = chunks.flat_map do |chunk|
          [*separator(chunk.fetch("filename", nil) || "tmp"), *tokenize(chunk["text"])]
        end
        [*repo, *files, *(@fim[:file_separator] ? separator("filename") : [])]
      end

      def separator(filename)
        @fim[:file_separator] ? [@fim[:file_separator], *tokenize("#{filename}\n")] : tokenize(SNIPPET)
      end

      def tokenize(text)
        @model.tokenize(text, add_special: false, parse_special: false)
      end
    end
  end
end
