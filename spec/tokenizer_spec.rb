# frozen_string_literal: true

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
