# frozen_string_literal: true

require "spec_helper"

RSpec.describe "text in, text out" do
  qwen = SpecModels.path("qwen2.5-coder-0.5b")
  golden = SpecModels.golden("qwen2.5-coder-0.5b")

  before(:all) { @model = Elelem.open(qwen, n_ctx: golden.n_ctx, n_threads: golden.n_threads) }
  after(:all) { @model.close }

  let(:model) { @model }

  golden.cases.reject { |c| c["name"] == "long" }.each do |c|
    it "generates llama.cpp's text for the #{c["name"]} prompt, streamed in pieces that add up" do
      expect(model.tokenize(c["prompt_text"])).to eq(c["prompt"])
      pieces = []
      text = model.generate(c["prompt_text"], max_tokens: c["max_tokens"]) { |piece| pieces << piece }
      expect(text).to eq(golden.output(c["name"])["text"])
      expect(pieces.join).to eq(text)
      expect(pieces).to all(be_valid_encoding)
    end
  end

  it "returns a Completion that says why it stopped" do
    c = golden.cases.first
    completion = model.complete(c["prompt_text"], max_tokens: 8)
    expect(completion.tokens).to eq(golden.output(c["name"])["ids"].first(8))
    expect(completion.text).to eq(model.detokenize(completion.tokens, special: false))
    expect(completion.finish_reason).to eq(:length)
    expect(completion.prompt_tokens).to eq(c["prompt"].size)
    expect(completion.timings[:decode_tokens_per_s]).to be > 0
  end

  it "honours stop strings, never emitting them" do
    c = golden.find("code")
    full = golden.output("code")["text"]
    stop = full[20, 6]
    pieces = []
    completion = model.complete(c["prompt_text"], max_tokens: 32, stop: [stop, "never appears"]) { |p| pieces << p }
    expect(completion.text).to eq(full[0, full.index(stop)])
    expect(completion.finish_reason).to eq(:stop)
    expect(pieces.join).to eq(completion.text)
  end

  it "samples reproducibly with a seed" do
    prompt = "Write a haiku about Ruby:"
    a = model.generate(prompt, max_tokens: 24, temperature: 0.9, seed: 42)
    b = model.generate(prompt, max_tokens: 24, temperature: 0.9, seed: 42)
    c = model.generate(prompt, max_tokens: 24, temperature: 0.9, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 7)
    expect(a).to eq(b)
    expect(c).not_to eq(a)
  end

  it "applies a repetition penalty" do
    prompt = "one one one one one one one one"
    plain = model.generate(prompt, max_tokens: 8)
    penalized = model.generate(prompt, max_tokens: 8, repeat_penalty: 1.5, repeat_last_n: 16)
    expect(penalized).not_to eq(plain)
  end

  it "has a lazy form" do
    c = golden.cases.first
    text = golden.output(c["name"])["text"]
    pieces = model.each_token(c["prompt_text"], max_tokens: 32)
    expect(pieces).to be_a(Enumerator)
    expect(pieces.first(3).join).to eq(text[0, pieces.first(3).join.size])
    expect(pieces.to_a.join).to eq(text)
  end

  it "rejects bad sampling options" do
    expect { model.generate("x", temperature: -1) }.to raise_error(ArgumentError, /temperature/)
    expect { model.generate("x", top_p: 2.0) }.to raise_error(ArgumentError, /top_p/)
    expect { model.generate("x", stop: [""]) }.to raise_error(ArgumentError, /stop/)
    expect { model.generate("x", temprature: 1) }.to raise_error(ArgumentError, /unknown option: temprature/)
    expect { model.generate("") }.to raise_error(ArgumentError, /empty/)
  end

  describe "chat" do
    chat = SpecModels.fixture("chat-qwen2.5-coder-0.5b")

    it "renders the model's ChatML template to llama.cpp's prompt tokens" do
      prompt = model.chat_prompt(chat["messages"])
      expect(prompt).to eq(chat["prompt_text"])
      expect(model.tokenize(prompt)).to eq(chat["prompt"])
    end

    it "answers with the assistant's turn, streamed" do
      pieces = []
      reply = model.chat([{ role: "user", content: "Say hello in Ruby." }], max_tokens: 16) { |p| pieces << p }
      expect(reply).to be_a(String).and(satisfy { |r| !r.empty? })
      expect(pieces.join).to eq(reply)
      expect(reply).not_to include("<|im_end|>")
    end

    it "keeps earlier turns in the KV cache instead of evaluating them again" do
      messages = [{ role: "user", content: "Write a Ruby method that reverses a string." }]
      reply = model.chat(messages, max_tokens: 16)
      messages += [{ role: "assistant", content: reply }, { role: "user", content: "Now handle nil." }]
      model.chat(messages, max_tokens: 4)
      expect(model.stats[:reused_prompt_tokens]).to be > 20
      model.generate(model.chat_prompt(messages), max_tokens: 4)
      expect(model.stats[:reused_prompt_tokens]).to eq(0)
    end

    it "takes a template for a model that has none" do
      Elelem.open(SpecModels.canary) do |canary|
        expect(canary.chat_template).to be_nil
        expect { canary.chat([{ role: "user", content: "hi" }]) }.to raise_error(Elelem::Error, /template:/)
        reply = canary.chat([{ role: "user", content: "hi" }], template: "{{ messages[0].content }}", max_tokens: 2)
        expect(reply).to be_a(String)
      end
    end

    it "contains runaway templates" do
      runaway = "{% for i in range(50000) %}{% for j in range(50000) %}x{% endfor %}{% endfor %}"
      expect { model.chat_prompt([{ role: "user", content: "hi" }], template: runaway) }
        .to raise_error(Elelem::Error, /fuel/)
    end
  end
end
