# frozen_string_literal: true

require "spec_helper"
require_relative "../tasks/embedding_golden"

# Embeddings bit for bit against llama.cpp's (spec/fixtures/embeddings, recorded by the
# reference driver's `embed` mode, which does what llama-embedding does; see
# tasks/embedding_golden.rb): every model, pooling, normalization and batching recorded.
RSpec.describe "Embedding goldens" do
  # `normalize:` for llama-embedding's --embd-normalize number.
  def normalize(number)
    Elelem::Embeddings::NORMALIZATIONS.invert.fetch(number, number)
  end

  def hex(values)
    values.map { |x| [x].pack("e").unpack1("V").to_s(16).rjust(8, "0") }.join(" ")
  end

  def largest_difference(ours, theirs)
    pairs = ours.zip(theirs).flat_map do |a, b|
      a.split.zip(b.split).map { |x, y| [[x.to_i(16)].pack("V").unpack1("e"), [y.to_i(16)].pack("V").unpack1("e")] }
    end
    pairs.map { |x, y| (x - y).abs }.max
  end

  EmbeddingGolden::MODELS.each_key do |name|
    describe name do
      before(:all) do
        @golden = JSON.parse(File.read(EmbeddingGolden.fixture_path(name)))
        path = Elelem::Models.names.include?(name) ? SpecModels.path(name) : SpecModels.synthetic(name)
        expect(Digest::SHA256.file(path).hexdigest).to eq(@golden["sha256"])
        @model = Elelem.open(path, n_ctx: @golden["n_ctx"], n_threads: @golden["n_threads"])
      end

      after(:all) { @model&.close }

      it "gives llama.cpp's bits in every recorded case" do
        @golden["cases"].each do |kase|
          kase["texts"]&.zip(kase["inputs"])&.each do |text, ids|
            expect(@model.tokenize(text)).to eq(ids), "#{kase["name"]}: tokens of #{text.inspect}"
          end
          vectors = @model.embed(kase["inputs"], pooling: kase["pooling"].to_sym,
                                                 normalize: normalize(kase["normalize"]),
                                                 batch_size: kase["batch_texts"])
          rows = kase["pooling"] == "none" ? vectors.flatten(1) : vectors
          ours = rows.map { |v| hex(v) }
          expect(ours).to eq(kase["outputs"]),
                          "#{name} #{kase["name"]}: largest difference #{largest_difference(ours, kase["outputs"])}"
        end
      end
    end
  end
end
