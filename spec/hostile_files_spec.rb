# frozen_string_literal: true

require "spec_helper"

# The corpus of elelem_engine::hostile (written by `rake hostile`): every seed and
# structured flaw, and a sample of the byte-level mutants. Each file opens and
# runs, or raises Elelem::LoadError naming the problem, in this one process.
RSpec.describe "hostile GGUF files" do
  corpus = SpecModels.hostile_corpus
  manifest = File.readlines(File.join(corpus, "manifest.tsv"), chomp: true).map { |line| line.split("\t", 3) }

  def run_file(path)
    Elelem.open(path, n_ctx: 16, n_threads: 1) do |model|
      next run_encoder(model) if model.info[:kind] == :encoder

      ids = model.generate([0, 1, 2, 3], max_tokens: 3, ignore_eos: true, temperature: 0.7, repeat_penalty: 1.2)
      expect(ids).to all(be_between(0, model.info[:n_vocab] - 1))
      begin
        model.generate("Hello, world!", max_tokens: 2)
      rescue Elelem::Error => e
        # A vocabulary the tokenizer cannot use still runs on ids.
        expect(e.message).to match(/tokenizer/)
      end
    end
  end

  # An embedding model embeds (a reranker reranks too) and refuses to generate.
  def run_encoder(model)
    # A model without a pooling of its own needs one named: per token here.
    vectors = model.embed([[0, 1, 2], [3]], batch_size: 2, pooling: model.info[:pooling] || :none)
    expect(vectors).to all(be_an(Array).and(satisfy(&:any?)))
    expect { model.generate([0, 1], max_tokens: 2) }.to raise_error(Elelem::Error, /embedding model/)
    model.rerank("q", %w[a b]) if model.info[:pooling] == :rank
  end

  it "opens and runs, or raises LoadError with a message naming the problem, for all #{manifest.size} files" do
    counts = Hash.new(0)
    manifest.each do |file, expect, words|
      path = File.join(corpus, file)
      begin
        run_file(path)
        raise "#{file} opened but should have been rejected (#{words})" if expect == "rejected"

        counts[:ran] += 1
      rescue Elelem::LoadError => e
        raise "#{file} should run but: #{e.message}" if expect == "runs"
        raise "#{file}: #{e.message.inspect} does not say #{words.inspect}" unless e.message.include?(words.to_s)
        raise "#{file}: the message does not name the file" unless e.message.start_with?(path)

        counts[:rejected] += 1
      end
    end
    puts "\n    #{manifest.size} hostile files: #{counts[:ran]} opened and ran, " \
         "#{counts[:rejected]} raised Elelem::LoadError"
    expect(counts[:ran] + counts[:rejected]).to eq(manifest.size)
    expect(counts[:rejected]).to be > manifest.count { |_, expect, _| expect == "rejected" }
  end

  it "keeps the process healthy afterwards" do
    expect(Elelem.open(SpecModels.canary) { |m| m.generate([1, 50, 60], max_tokens: 4) }.size).to eq(4)
  end
end
