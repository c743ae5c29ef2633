# frozen_string_literal: true

require "spec_helper"
require_relative "../tasks/embedding_golden"

# The retrieval sanity check on the real embedder: for each of 20 queries of our own,
# its passage should be the nearest of the 20 (cosine similarity of unit vectors), for
# elelem and for llama.cpp (whose embeddings of the same texts are in the golden).
RSpec.describe "Retrieval with all-MiniLM-L6-v2" do
  pairs = EmbeddingGolden::RETRIEVAL

  def hits(queries, passages)
    queries.each_with_index.count do |q, i|
      scores = passages.map { |p| q.zip(p).sum { |a, b| a * b } }
      scores.index(scores.max) == i
    end
  end

  def floats(line)
    line.split.map { |x| [x.to_i(16)].pack("V").unpack1("e") }
  end

  it "puts the right passage first for at least 18 of 20 queries, as llama.cpp does" do
    golden = JSON.parse(File.read(EmbeddingGolden.fixture_path("all-minilm-l6-v2")))
    kase = golden["cases"].find { |c| c["name"] == "batched" }
    reference = kase["outputs"].last(2 * pairs.size).map { |line| floats(line) }
    theirs = hits(reference.first(pairs.size), reference.last(pairs.size))

    ours = Elelem.open(SpecModels.path("all-minilm-l6-v2"), n_ctx: 512, n_threads: 2) do |model|
      hits(model.embed(pairs.map { |p| p["query"] }), model.embed(pairs.map { |p| p["passage"] }))
    end
    expect([ours, theirs]).to all(be >= 18)
    puts "retrieval: elelem #{ours}/20, llama.cpp #{theirs}/20"
  end
end
