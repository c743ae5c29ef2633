# frozen_string_literal: true

require "spec_helper"
require "rack"

# Model#embed and #rerank as a user calls them: shapes, pooling, normalizations, the
# errors; the bits against llama.cpp are embedding_golden_spec's.
RSpec.describe "Embeddings" do
  def l2(vector)
    Math.sqrt(vector.sum { |x| x * x })
  end

  describe "an encoder (tiny-bert)" do
    before(:all) { @model = Elelem.open(SpecModels.synthetic("tiny-bert"), n_threads: 2) }
    after(:all) { @model.close }

    let(:model) { @model }
    let(:texts) { [[2, 17, 40, 3], [2, 9, 100, 101, 102, 3], [2, 5, 3]] }

    it "says what it is" do
      expect(model.info).to include(kind: :encoder, pooling: :mean, embedding_length: 64, causal: false)
      expect(model.inspect).to match(/\A#<Elelem::Model bert .*embeddings=64 pooling=mean>\z/)
    end

    it "refuses to generate text, with a clear error" do
      expect { model.generate([2, 3], max_tokens: 2) }.to raise_error(Elelem::Error, /embedding model/)
    end

    it "gives one unit vector per text, in order; one text gives one vector" do
      vectors = model.embed(texts)
      expect(vectors.map(&:size)).to eq([64, 64, 64])
      vectors.each { |v| expect(l2(v)).to be_within(1e-6).of(1.0) }
      expect(model.embed(texts[1])).to eq(model.embed([texts[1]]).first)
    end

    it "normalizes as llama-embedding does: none, max_abs, taxicab, l2, p-norms" do
      raw = model.embed(texts[0], normalize: :none)
      expect(model.embed(texts[0], normalize: :l2)).to all(be_a(Float))
      scaled = ->(norm) { raw.map { |x| (x * (1.0 / norm).to_f) } }
      { l2: l2(raw), taxicab: raw.sum(&:abs), max_abs: raw.map(&:abs).max / 32_760.0,
        3 => raw.sum { |x| x.abs**3 }**(1.0 / 3) }.each do |normalize, norm|
        model.embed(texts[0], normalize:).zip(scaled.call(norm)).each do |a, b|
          expect(a).to be_within((1e-5 * b.abs) + 1e-9).of(b)
        end
      end
      expect(model.embed(texts[0], normalize: :l1)).to eq(model.embed(texts[0], normalize: :taxicab))
    end

    it "pools per token, by the first token, or by mean" do
      rows = model.embed(texts[1], pooling: :none, normalize: :none)
      expect(rows.size).to eq(texts[1].size)
      expect(model.embed(texts[1], pooling: :cls, normalize: :none)).to eq(rows.first)
      mean = rows.transpose.map { |column| column.sum / column.size }
      model.embed(texts[1], normalize: :none).zip(mean).each { |a, b| expect(a).to be_within(1e-5).of(b) }
    end

    it "gives nearly the same vectors batched as one at a time" do
      alone = texts.map { |t| model.embed(t, batch_size: 1) }
      model.embed(texts, batch_size: 3).zip(alone).each do |batched, one|
        batched.zip(one).each { |a, b| expect(a).to be_within(1e-5).of(b) }
      end
    end

    it "refuses empty and over-long texts, and cuts them when asked" do
      too_long = [2] + ([17] * 200) + [3]
      expect { model.embed([]) }.to raise_error(ArgumentError)
      expect { model.embed([[2, 3], []]) }.to raise_error(ArgumentError, /empty/)
      expect(model.embed("").size).to eq(64) # [CLS] [SEP], as llama.cpp embeds it
      expect { model.embed(too_long) }.to raise_error(ArgumentError, /longer than the 128/)
      expect(model.embed(too_long, truncate: true)).to eq(model.embed(too_long.first(127) + [3]))
      expect { model.embed(texts, normalize: :l3) }.to raise_error(ArgumentError, /normalize/)
      expect { model.embed(texts, pooling: :max) }.to raise_error(ArgumentError, /pooling/)
      expect { model.embed(texts, batch_size: 0) }.to raise_error(ArgumentError, /batch_size/)
      expect { model.embed([[2, 99_999, 3]]) }.to raise_error(ArgumentError, /out of range/)
      expect { model.rerank("q", ["d"]) }.to raise_error(ArgumentError, /classification head/)
    end
  end

  describe "a reranker (tiny-bert-rerank)" do
    before(:all) { @model = Elelem.open(SpecModels.synthetic("tiny-bert-rerank"), n_threads: 2) }
    after(:all) { @model.close }

    it "scores documents against the query, best first, as rank pooling of llama-server's pairs" do
      documents = %w[alpha beta gamma delta]
      ranked = @model.rerank("query", documents)
      expect(ranked.map(&:keys)).to all(eq(%i[index score document]))
      expect(ranked.map { |r| r[:score] }).to eq(ranked.map { |r| r[:score] }.sort.reverse)
      expect(ranked.map { |r| documents[r[:index]] }).to eq(ranked.map { |r| r[:document] })
      ids = documents.map { |d| @model.tokenizer.send(:_rerank_ids, "query", d) }
      scores = @model.embed(ids, pooling: :rank, normalize: :none).map(&:first)
      expect(ranked.map { |r| r[:score] }).to eq(scores.sort.reverse)
      expect(@model.rerank("query", documents, top_n: 2)).to eq(ranked.first(2))
    end
  end

  describe "a decoder as an embedder (Qwen2.5-Coder-0.5B, last-token pooling)" do
    before(:all) { @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 1024, n_threads: 2) }
    after(:all) { @model.close }

    it "takes the last token's normed state, and still generates text" do
      rows = @model.embed("def hello(name):", pooling: :none, normalize: :none)
      last = @model.embed("def hello(name):", pooling: :last, normalize: :none)
      expect(last).to eq(rows.last)
      expect(l2(@model.embed("def hello(name):", pooling: :last))).to be_within(1e-6).of(1.0)
      expect(@model.generate("def fib", max_tokens: 3)).to be_a(String)
    end
  end

  describe "the server's /v1/embeddings and /v1/rerank" do
    before(:all) do
      @bert = Elelem.open(SpecModels.synthetic("tiny-bert"), n_threads: 1)
      @reranker = Elelem.open(SpecModels.synthetic("tiny-bert-rerank"), n_threads: 1)
    end

    after(:all) { [@bert, @reranker].each(&:close) }

    def post(model, path, body)
      app = Rack::Lint.new(Elelem::Server.new(model, model_name: "m"))
      input = body.is_a?(String) ? body : JSON.generate(body)
      response = Rack::MockRequest.new(app).request("POST", path, input:, "CONTENT_TYPE" => "application/json")
      [response.status, JSON.parse(response.body)]
    end

    it "embeds in OpenAI's shape, as floats or base64" do
      status, body = post(@bert, "/v1/embeddings", { input: [[2, 17, 3], [2, 9, 3]] })
      expect(status).to eq(200)
      expect(body.slice("object", "model", "usage")).to eq("object" => "list", "model" => "m",
                                                           "usage" => { "prompt_tokens" => 6, "total_tokens" => 6 })
      expect(body["data"].map { |d| [d["object"], d["index"]] }).to eq([["embedding", 0], ["embedding", 1]])
      expect(body["data"].map { |d| d["embedding"] }).to eq(@bert.embed([[2, 17, 3], [2, 9, 3]]))
      _, b64 = post(@bert, "/v1/embeddings", { input: [2, 17, 3], encoding_format: "base64" })
      expect(b64["data"][0]["embedding"].unpack1("m0").unpack("e*")).to eq(@bert.embed([2, 17, 3]))
    end

    it "reranks in llama-server's shape" do
      status, body = post(@reranker, "/v1/rerank", { query: "q", documents: %w[a b c], top_n: 2,
                                                     return_documents: true })
      expect(status).to eq(200)
      expect(body["results"].size).to eq(2)
      expect(body["results"].first.keys).to eq(%w[index relevance_score document])
      expected = @reranker.rerank("q", %w[a b c], top_n: 2)
      expect(body["results"].map { |r| r["index"] }).to eq(expected.map { |r| r[:index] })
    end

    it "answers bad requests with 400 and text requests to an embedding model with 501" do
      expect(post(@bert, "/v1/embeddings", { input: [] }).first).to eq(400)
      expect(post(@bert, "/v1/embeddings", { input: "x", encoding_format: "hex" }).first).to eq(400)
      expect(post(@bert, "/v1/embeddings", { input: [[2] + ([17] * 300) + [3]] })).to match(
        [400, { "error" => hash_including("code" => "context_length_exceeded") }]
      )
      expect(post(@bert, "/v1/rerank", { query: "q", documents: ["d"] }).first).to eq(400)
      expect(post(@reranker, "/v1/rerank", { query: 1, documents: ["d"] }).first).to eq(400)
      expect(post(@bert, "/v1/completions", { prompt: "x" }))
        .to match([501, { "error" => hash_including("code" => "not_supported") }])
      expect(post(@bert, "/v1/embeddings", { input: "still serving" }).first).to eq(200)
    end
  end
end
