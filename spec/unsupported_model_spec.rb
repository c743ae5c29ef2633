# frozen_string_literal: true

require "spec_helper"

# A model elelem would not decode as llama.cpp does is refused when opened, never loaded:
# files of the hostile corpus (elelem_engine::hostile) with one such difference each.
RSpec.describe Elelem::UnsupportedModel do
  corpus = SpecModels.hostile_corpus

  define_method(:corpus_file) do |name|
    Dir[File.join(corpus, "*.gguf")].find { |f| File.basename(f).match?(/\A\d{4}-#{Regexp.escape(name)}\.gguf\z/) } ||
      raise("#{name} is not in the hostile corpus")
  end

  def refusal(name)
    Elelem.open(corpus_file(name), n_ctx: 16, n_threads: 1, &:info)
    raise "#{name} opened"
  rescue described_class => e
    e.message
  end

  it "names an architecture elelem does not run, and says llama.cpp runs it" do
    expect(refusal("unknown-architecture"))
      .to include("architecture 'mamba' is not one elelem runs (llama.cpp runs it); elelem runs llama, qwen2")
  end

  it "says when llama.cpp does not know the architecture either" do
    expect(refusal("architecture-unknown-to-llama-cpp")).to include("(llama.cpp does not know it either)")
  end

  it "names a tensor the architecture's graph would not read" do
    expect(refusal("unknown-tensor")).to include("tensor blk.0.ffn_gate_shexp.weight is not part of elelem's llama " \
                                                 "graph (llama.cpp runs llama models and would use it")
  end

  it "names a metadata key of the architecture it would not read" do
    expect(refusal("unknown-key"))
      .to include("metadata key llama.rope.scaling.yarn_beta_fast is not read by elelem's llama")
  end

  it "is a LoadError, with the file's path first" do
    path = corpus_file("unknown-key")
    expect { Elelem.open(path) }.to raise_error(Elelem::LoadError, /\A#{Regexp.escape(path)}: /)
  end

  it "opens a file whose extra keys change nothing llama.cpp computes" do
    expect(Elelem.open(corpus_file("informative-vocab-size"), n_ctx: 16, n_threads: 1) { |m| m.info[:architecture] })
      .to eq("llama")
  end
end

RSpec.describe "Elelem.supported_architectures" do
  it "lists the engine's architectures with their kind and models" do
    archs = Elelem.supported_architectures
    expect(archs.keys).to include("llama", "qwen2", "qwen3moe", "gemma3", "bert")
    expect(archs["qwen3moe"]).to include(kind: :decoder, experts: true)
    expect(archs["bert"]).to include(kind: :encoder, experts: false)
    expect(archs.values).to all(include(models: a_string_matching(/\S/)))
  end

  it "holds every architecture a synthetic golden decodes" do
    names = SpecModels.golden_names.filter_map { |name| SpecModels.fixture(name).dig("model", "file") }
                      .select { |file| file.start_with?("tiny-") && !file.start_with?("tiny-weights") }
    architectures = names.map do |file|
      Elelem.open(SpecModels.synthetic(File.basename(file, ".gguf")), n_ctx: 16) { |m| m.info[:architecture] }
    end
    expect(Elelem.supported_architectures.keys).to include(*architectures.uniq)
  end
end
