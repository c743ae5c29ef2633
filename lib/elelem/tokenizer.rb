# frozen_string_literal: true

module Elelem
  # A vocabulary's tokenizer, exactly llama.cpp's: the ids of `llama_tokenize` and the
  # bytes of `llama_token_to_piece` / `llama_detokenize`. Open one from a vocab-only
  # GGUF (llama.cpp's `vocab_only`; no weights are read) with {.open}, or take a
  # model's with {Model#tokenizer}.
  #
  # A tokenizer is immutable: threads may share it, and it stays usable after its
  # model is closed.
  #
  #   tok = Elelem::Tokenizer.open("ggml-vocab-llama-bpe.gguf")
  #   tok.tokenize("Hello world")      # => [128000, 9906, 1917]
  #   tok.detokenize([9906, 1917])     # => "Hello world"
  class Tokenizer
    class << self
      # Opens the vocabulary of a GGUF file.
      # @param path [String, #to_path] the file, a known model's name ({Models.list}) or a Hugging
      #   Face reference ({Hub}), fetched on first use
      # @return [Tokenizer]
      # @raise [Elelem::LoadError] not a GGUF, or a vocabulary llama.cpp would refuse
      def open(path)
        path = path.to_path if path.respond_to?(:to_path)
        raise ArgumentError, "path must be a String, got #{path.class}" unless path.is_a?(String)

        _open(Models.known(path))
      end
    end

    # Token ids of `text`, as llama.cpp's `llama-tokenize` gives them.
    # @param text [String] UTF-8
    # @param add_special [Boolean] add BOS/EOS where the vocabulary asks for them
    # @param parse_special [Boolean] read special-token text (`<|im_start|>`) as those tokens
    # @return [Array<Integer>]
    def tokenize(text, add_special: true, parse_special: true)
      _tokenize(Options.text(:text, text), add_special ? true : false, parse_special ? true : false)
    end

    # The text of token ids (invalid UTF-8 replaced).
    # @param ids [Array<Integer>]
    # @param special [Boolean] render special tokens as their text
    # @return [String] UTF-8
    def detokenize(ids, special: true)
      _detokenize(checked(ids, allow_empty: true), special ? true : false)
    end

    # One token's bytes (which may be part of a character, hence a binary String).
    # @param id [Integer]
    # @param special [Boolean] render a special token as its text (else nothing)
    # @return [String]
    def token_to_piece(id, special: true)
      _token_to_piece(checked([id]).first, special ? true : false)
    end

    # Whether generating `id` ends a generation (llama.cpp's end-of-generation set).
    # @param id [Integer]
    # @return [Boolean]
    def eog?(id)
      _eog?(checked([id]).first)
    end

    # The vocabulary's fill-in-the-middle tokens, as llama.cpp finds them (the GGUF's
    # `tokenizer.ggml.fim_*_token_id`, else the tokens named like `<|fim_prefix|>`): what a
    # code model's infill prompt is laid out with (see `POST /infill` in docs/SERVING.md).
    # @return [Hash{Symbol => Integer, nil}] `prefix:`, `suffix:`, `middle:`, `repo:` (before a
    #   repository's name) and `file_separator:`, each nil where the vocabulary has none
    def fim_tokens
      %i[prefix suffix middle repo file_separator].zip(_fim).to_h
    end

    # @!method n_vocab
    #   @return [Integer] how many tokens the vocabulary has
    # @!method bos
    #   @return [Integer, nil] the beginning-of-sequence token
    # @!method eos
    #   @return [Integer, nil] the end-of-sequence token
    # @!method add_bos?
    #   @return [Boolean] whether {#tokenize} starts with BOS (when `add_special`)
    # @!method add_eos?
    #   @return [Boolean] whether {#tokenize} ends with EOS (when `add_special`)
    # @!method model
    #   @return [String] the vocabulary's kind, `tokenizer.ggml.model`: "gpt2" (byte-level BPE),
    #     "llama" (SentencePiece), "bert" (WordPiece), "t5" (Unigram), "gemma4"...
    # @!method pre
    #   @return [String, nil] its pre-tokenizer, `tokenizer.ggml.pre` ("qwen2", "llama-bpe"...)

    # @return [String] e.g. `#<Elelem::Tokenizer gpt2/qwen2 n_vocab=151936 bos=151643 eos=151645>`
    def inspect
      kind = [model, pre].compact.join("/")
      "#<#{self.class.name} #{kind} n_vocab=#{n_vocab} bos=#{bos.inspect} eos=#{eos.inspect}>"
    end
    alias to_s inspect

    private

    def checked(ids, allow_empty: false)
      Options.ids(ids, allow_empty:)
      bad = ids.find { |id| id >= n_vocab }
      raise ArgumentError, "token id #{bad} is out of range (vocabulary size #{n_vocab})" if bad

      ids
    end
  end
end
