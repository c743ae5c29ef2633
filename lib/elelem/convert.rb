# frozen_string_literal: true

# {Elelem.convert}: Hugging Face BERT checkpoints to GGUF, natively (elelem-convert).
module Elelem
  # The output types of {Elelem.convert}, as `convert_hf_to_gguf.py --outtype`.
  CONVERT_TYPES = %i[f16 f32].freeze

  class << self
    # Converts a Hugging Face / sentence-transformers BERT checkpoint directory
    # (`config.json`, `model.safetensors`, `tokenizer.json`; `tokenizer_config.json`,
    # `special_tokens_map.json`, `modules.json` and the pooling module's `config.json`
    # when present) to a GGUF, byte for byte as llama.cpp's `convert_hf_to_gguf.py`
    # writes it (its `BertModel`): the same metadata in the same order, the same
    # tensors, F16 matrices rounded as numpy rounds them.
    #
    #   Elelem.convert("all-MiniLM-L6-v2", "minilm.gguf")
    #   # => {path: "minilm.gguf", tensors: 101, bytes: 46223712, parameters: 22565376,
    #   #     name: "MiniLM L6 H384 Uncased", notes: []}
    #
    # @param dir [String, #to_path] the model directory
    # @param out [String, #to_path, nil] the GGUF to write; nil: in `dir`, named as the
    #   script names it (`all-MiniLM-L6-23M-v2-F16.gguf`)
    # @param type [Symbol] `:f16` (the script's default: matrices F16, vectors, norms and
    #   position and token-type embeddings F32) or `:f32`
    # @param pre_tokenizer [String, nil] the `tokenizer.ggml.pre` to write instead of the
    #   one the script finds by fingerprinting the tokenizer (it refuses tokenizers it
    #   does not know; llama.cpp reads the name of a WordPiece vocabulary only to label it)
    # @return [Hash{Symbol => Object}] `path`, `tensors`, `bytes`, `parameters`, `name`
    #   (`general.name`), `notes` (what the script would also copy that this does not:
    #   a model card's metadata, a generation config)
    # @raise [Elelem::ConvertError] a file missing or malformed, shapes that disagree with
    #   the config, or a model that is not a BERT with a WordPiece vocabulary
    def convert(dir, out = nil, type: :f16, pre_tokenizer: nil)
      raise ArgumentError, "type must be one of #{CONVERT_TYPES.inspect}, got #{type.inspect}" \
        unless CONVERT_TYPES.include?(type)
      raise ArgumentError, "pre_tokenizer must be a String" unless pre_tokenizer.nil? || pre_tokenizer.is_a?(String)

      _convert(convert_path(:dir, dir), out.nil? ? nil : convert_path(:out, out), type == :f32, pre_tokenizer)
    end

    private

    def convert_path(name, path)
      path = path.to_path if path.respond_to?(:to_path)
      raise ArgumentError, "#{name} must be a String or a Pathname, got #{path.class}" unless path.is_a?(String)

      path
    end
  end
end
