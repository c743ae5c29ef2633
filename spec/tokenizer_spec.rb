# frozen_string_literal: true

require "pathname"
require "spec_helper"

# Token ids identical to the reference's llama-tokenize on a corpus of hard strings.
RSpec.describe "tokenizer parity with llama.cpp" do
  fixtures = File.join(ROOT, "spec", "fixtures", "tokenizer")
  corpus = File.readlines(File.join(fixtures, "corpus.jsonl")).map { |l| JSON.parse(l) }

  { "qwen2.5-coder-0.5b" => "qwen2.5-coder-0.5b", "gemma-3-270m" => "gemma-3-270m" }.each do |name, fixture|
    context name do
      before(:all) { @model = Elelem.open(SpecModels.path(name), n_ctx: 256) }
      after(:all) { @model.close }

      it "tokenizes all #{corpus.size} corpus strings as llama.cpp does" do
        golden = File.readlines(File.join(fixtures, "#{fixture}.jsonl")).map { |l| JSON.parse(l) }
        raw = File.readlines(File.join(fixtures, "#{fixture}.raw.jsonl")).map { |l| JSON.parse(l) }
        corpus.each_with_index do |text, i|
          expect(@model.tokenize(text)).to eq(golden[i]), "corpus line #{i + 1}: #{text.inspect}"
          expect(@model.tokenize(text, add_special: false, parse_special: false)).to eq(raw[i])
        end
      end

      it "detokenizes to the reference's text, and round-trips" do
        # Each line: the hex of llama.cpp's detokenization with special: false, then true.
        detok = File.readlines(File.join(fixtures, "#{fixture}.detok.jsonl")).map { |l| JSON.parse(l) }
        golden = File.readlines(File.join(fixtures, "#{fixture}.jsonl")).map { |l| JSON.parse(l) }
        corpus.each_index do |i|
          plain, special = detok[i].map { |hex| [hex].pack("H*").force_encoding(Encoding::UTF_8).scrub }
          expect(@model.detokenize(golden[i], special: false)).to eq(plain), "corpus line #{i + 1}"
          expect(@model.detokenize(golden[i])).to eq(special), "corpus line #{i + 1}"
        end
        round_trips = corpus.count do |text|
          @model.detokenize(@model.tokenize(text, add_special: false)) == text
        end
        expect(round_trips).to be >= corpus.size - corpus.count { |t| t.include?("\u2581") }
      end

      it "gives pieces as bytes, whole characters across tokens" do
        ids = @model.tokenize("日本語 🎉", add_special: false)
        pieces = ids.map { |id| @model.token_to_piece(id) }
        expect(pieces.join.force_encoding(Encoding::UTF_8)).to eq("日本語 🎉").or eq(" 日本語 🎉")
      end
    end
  end
end

# Elelem::Tokenizer on its own: llama.cpp's vocab-only GGUFs (`rake peer_suite`), and a model's.
RSpec.describe Elelem::Tokenizer do
  vocab = ->(name) { File.join(ROOT, "vendor", "llama.cpp", "models", "ggml-vocab-#{name}.gguf") }

  # The cases of a vocabulary, as llama.cpp's test-tokenizer-0 reads them.
  def suite_cases(path)
    sep = "\n__ggml_vocab_test__\n"
    inputs = File.read("#{path}.inp").delete_suffix(sep).split(sep, -1)
    outputs = File.readlines("#{path}.out", chomp: true).map { |l| l.split.map(&:to_i) }
    inputs.zip(outputs)
  end

  it "opens a vocab-only GGUF and tokenizes as llama.cpp's own suite says" do
    tok = described_class.open(vocab["llama-bpe"])
    expect(tok.n_vocab).to eq(128_256)
    expect([tok.bos, tok.eos, tok.add_bos?, tok.add_eos?]).to eq([128_000, 128_001, true, false])
    expect([tok.model, tok.pre]).to eq(%w[gpt2 llama-bpe])
    expect(tok.inspect).to eq("#<Elelem::Tokenizer gpt2/llama-bpe n_vocab=128256 bos=128000 eos=128001>")
    suite_cases(vocab["llama-bpe"]).each do |text, ids|
      expect(tok.tokenize(text, add_special: false, parse_special: false)).to eq(ids), text.inspect
    end
    expect(tok.tokenize("Hello")).to eq([128_000, 9906])
    expect(tok.detokenize([9906, 1917])).to eq("Hello world")
    expect(tok.token_to_piece(128_000)).to eq("<|begin_of_text|>")
    expect(tok.token_to_piece(128_000, special: false)).to eq("")
    expect(tok.eog?(128_001)).to be(true)
    expect(tok.eog?(9906)).to be(false)
  end

  it "opens every vocabulary of the suite and tokenizes its cases as llama.cpp does" do
    files = Dir[File.join(ROOT, "vendor", "llama.cpp", "models", "ggml-vocab-*.gguf")]
    expect(files.size).to eq(19)
    files.each do |path|
      tok = described_class.open(path)
      expect(tok.model).not_to be_empty
      next unless File.exist?("#{path}.inp")

      suite_cases(path).each do |text, ids|
        expect(tok.tokenize(text, add_special: false, parse_special: false)).to eq(ids), "#{path}: #{text.inspect}"
      end
    end
  end

  it "refuses what is not a vocabulary with LoadError, and bad arguments with ArgumentError" do
    expect { described_class.open("/nonexistent.gguf") }.to raise_error(Elelem::LoadError, /nonexistent/)
    expect { described_class.open(__FILE__) }.to raise_error(Elelem::LoadError)
    expect { described_class.open(nil) }.to raise_error(ArgumentError)
    tok = described_class.open(Pathname(vocab["llama-spm"]))
    expect { tok.tokenize(nil) }.to raise_error(ArgumentError)
    expect { tok.detokenize([tok.n_vocab]) }.to raise_error(ArgumentError, /out of range/)
    expect { tok.token_to_piece(-1) }.to raise_error(ArgumentError)
  end

  it "is the model's, shared across threads and usable after the model is closed" do
    model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 256)
    tok = model.tokenizer
    expect(model.tokenizer).to equal(tok)
    expect(tok.tokenize("def f():")).to eq(model.tokenize("def f():"))
    results = Array.new(4) { |i| Thread.new { tok.tokenize("thread #{i} " * 50) } }.map(&:value)
    expect(results.map(&:size).uniq.size).to eq(1)
    model.close
    expect(tok.detokenize(tok.tokenize("still here", add_special: false))).to eq("still here")
    expect { model.tokenizer }.to raise_error(Elelem::ClosedError)
  end
end
