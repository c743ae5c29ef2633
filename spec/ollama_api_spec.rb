# frozen_string_literal: true

require "spec_helper"
require "rack" # Debian's ruby-rack, for the specs only: Rack::Lint and Rack::MockRequest
require "timeout"

# Ollama's API on Elelem::Server, called as Rack calls it, with the small random-weight
# models: its framing (NDJSON), its fields and defaults, and its errors (`{"error": "..."}`).
# Ollama's own clients are run against `elelem serve` in ollama_client_spec.rb.
RSpec.describe "Ollama's API" do
  template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}" \
             "{% if add_generation_prompt %}<|assistant|>{% endif %}"

  before(:all) { @model = Elelem.open(SpecModels.canary, n_ctx: 512, n_threads: 1, parallel: 2) }
  after(:all) { @model.close }

  around { |example| Timeout.timeout(60) { example.run } }

  let(:model) { @model }
  let(:server) { Elelem::Server.new(model, template:, max_tokens: 8) }
  let(:messages) { [{ "role" => "user", "content" => "Say hello." }] }

  def call(method, path, body = nil, app: server)
    input = body.is_a?(String) ? body : JSON.generate(body)
    Rack::MockRequest.new(Rack::Lint.new(app)).request(method, path, input:, "CONTENT_TYPE" => "application/json")
  end

  def post(path, body, app: server)
    call("POST", path, body, app:)
  end

  def json(response)
    JSON.parse(response.body)
  end

  it "streams a chat as NDJSON unless stream is false, with Ollama's fields and figures" do
    response = post("/api/chat", { model: "any", messages:, options: { temperature: 0, num_predict: 4 } })
    expect(response.headers["content-type"]).to eq("application/x-ndjson")
    lines = response.body.lines.map { |line| JSON.parse(line) }
    *pieces, last = lines
    expect(pieces.map(&:keys)).to all(eq(%w[model created_at message done]))
    expect(last.keys).to eq(%w[model created_at message done done_reason total_duration load_duration
                               prompt_eval_count prompt_eval_duration eval_count eval_duration])
    expect(last).to include("done" => true, "message" => { "role" => "assistant", "content" => "" })
    expect(Time.iso8601(last["created_at"])).to be_a(Time)

    whole = json(post("/api/chat", { messages:, stream: false, options: { temperature: 0, num_predict: 4 } }))
    expect(whole["message"]["content"]).to eq(pieces.map { |p| p["message"]["content"] }.join)
    expect(whole.slice("done_reason", "eval_count", "prompt_eval_count"))
      .to eq(last.slice("done_reason", "eval_count", "prompt_eval_count"))
  end

  it "generates with the template, raw, after a context, within num_predict and the server's cap" do
    options = { temperature: 0, num_predict: 3 }
    reply = json(post("/api/generate", { prompt: "Hi", system: "Be terse.", stream: false, options: }))
    prompt = model.chat_tokens([{ role: "system", content: "Be terse." }, { role: "user", content: "Hi" }],
                               template:)
    expect(reply["context"].first(prompt.size)).to eq(prompt)
    expect(reply).to include("prompt_eval_count" => prompt.size, "eval_count" => 3, "done_reason" => "length")

    again = json(post("/api/generate", { prompt: "Hi", raw: true, context: reply["context"], stream: false, options: }))
    expect(again["prompt_eval_count"]).to eq(reply["context"].size + model.tokenize("Hi").size)

    capped = json(post("/api/generate", { prompt: "Hi", raw: true, stream: false, options: { num_predict: -1 } }))
    expect(capped["eval_count"]).to be <= 8
    expect(json(post("/api/generate", { model: "any" }))).to include("done" => true, "done_reason" => "load")
    expect(json(post("/api/chat", { messages: [], keep_alive: 0 }))).to include("done_reason" => "load")
  end

  it "refuses in Ollama's shape: images, think, template, options out of range, a larger num_ctx, bad JSON" do
    tool = { type: "function", function: { name: "f", parameters: { type: "object" } } }
    refusals = {
      { messages: [{ "role" => "robot", "content" => "x" }] } => "messages[0].role must be one of",
      { messages: [{ "role" => "tool", "content" => "x", "tool_name" => 1 }] } => "tool_name must be a string",
      { messages:, tools: [tool], format: "json" } => "format with tools is not supported",
      { messages: [messages.first.merge("images" => ["aGk="])] } => "without a projector",
      { messages:, think: true } => "think is not supported",
      { messages:, options: { temperature: "hot" } } => "temperature must be a number",
      { messages:, options: { num_ctx: 4096 } } => "num_ctx 4096 is above the served model's context of 512",
      { messages:, format: "xml" } => "format must be",
      { messages:, keep_alive: [] } => "keep_alive must be"
    }
    refusals.each do |body, message|
      response = post("/api/chat", body)
      expect(response.status).to eq(400), body.inspect
      expect(json(response)).to eq("error" => json(response)["error"])
      expect(json(response)["error"]).to include(message)
    end
    expect(post("/api/generate", { prompt: "x", template: "{{ .Prompt }}" }).status).to eq(400)
    expect(post("/api/chat", { messages:, options: { num_ctx: 256 }, stream: false }).status).to eq(200)
    expect(json(post("/api/chat", "{"))["error"]).to include("not valid JSON")
    expect(call("GET", "/api/chat", nil).status).to eq(405)
    expect(json(post("/api/pull", { model: "x" }))).to eq("error" => "no route for POST /api/pull")
  end

  it "lists and shows the model, and embeds with an embedding model only" do
    tags = json(call("GET", "/api/tags"))["models"]
    expect(tags.map { |m| m["details"]["family"] }).to eq(["llama"])
    show = json(post("/api/show", { model: "any" }))
    expect(show).to include("template" => template, "capabilities" => ["completion"])
    expect(show["model_info"]).to include("general.architecture" => "llama",
                                          "llama.context_length" => model.info[:n_ctx_train])
    expect(json(call("GET", "/api/version"))).to eq("version" => Elelem::VERSION)
    expect(post("/api/embed", { input: "hi" }).status).to eq(400)

    Elelem.open(SpecModels.synthetic("tiny-bert"), n_threads: 1) do |bert|
      embedder = Elelem::Server.new(bert)
      texts = ["one text", "another text"]
      reply = json(post("/api/embed", { input: texts }, app: embedder))
      expect(reply["embeddings"]).to eq(bert.embed(texts))
      expect(reply["prompt_eval_count"]).to eq(texts.sum { |t| bert.tokenize(t).size })
      expect(json(post("/api/embeddings", { prompt: "one text" }, app: embedder))["embedding"])
        .to eq(bert.embed("one text"))
      expect(post("/api/embed", { input: "x", dimensions: 4 }, app: embedder).status).to eq(400)
      expect(post("/api/chat", { messages: }, app: embedder).status).to eq(501)
      expect(json(post("/api/show", {}, app: embedder))["capabilities"]).to eq(["embedding"])
    end
  end
end
