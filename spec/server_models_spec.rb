# frozen_string_literal: true

require "spec_helper"
require "open3"
require "rack" # Debian's ruby-rack, for the specs only: Rack::Lint and Rack::MockRequest
require "tempfile"
require "timeout"
require_relative "support/serve_process"
require_relative "../tasks/openai_client"

# Several models on one Elelem::Server (a ModelPool): each request routed by its `model` in
# OpenAI's, llama-server's and Ollama's APIs, an unknown or hostile name refused in each API's
# shape, models loaded on first use and unloaded on request, a stream's model held until the
# stream ends; then `elelem serve -m A -m B` with OpenAI's Python client.
RSpec.describe "Several models on one server" do
  template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}" \
             "{% if add_generation_prompt %}<|assistant|>{% endif %}"
  open_options = { n_ctx: 256, n_threads: 1, parallel: 2 }.freeze

  before(:all) do
    @paths = { "llama" => SpecModels.synthetic("tiny-llama3"), "qwen" => SpecModels.synthetic("tiny-qwen3") }
  end

  around { |example| Timeout.timeout(120) { example.run } }

  let(:pool) { Elelem::Server::ModelPool.new(@paths, open_options:, budget: nil) }
  let(:server) { Elelem::Server.new(pool, template:, max_tokens: 8) }

  after { pool.close }

  def call(method, path, body = nil, app: Rack::Lint.new(server))
    input = body.is_a?(String) || body.nil? ? body.to_s : JSON.generate(body)
    Rack::MockRequest.new(app).request(method, path, input:, "CONTENT_TYPE" => "application/json")
  end

  def post(path, body)
    call("POST", path, body)
  end

  def json(response)
    expect(response.content_type).to eq("application/json")
    JSON.parse(response.body)
  end

  def statuses
    json(call("GET", "/v1/models"))["data"].to_h { |m| [m["id"], m["status"]["value"]] }
  end

  def tokens(name, text)
    Elelem.open(@paths[name], n_ctx: 64, n_threads: 1) { |model| model.tokenize(text, add_special: false) }
  end

  it "routes each API's requests by model, loading each model on its first use" do
    expect(json(call("GET", "/v1/models"))["data"]).to eq(
      %w[llama qwen].map do |id|
        { "id" => id, "object" => "model", "created" => json(call("GET", "/v1/models"))["data"][0]["created"],
          "owned_by" => "elelem", "status" => { "value" => "unloaded" } }
      end
    )
    expect(json(call("GET", "/models"))).to eq(json(call("GET", "/v1/models")))

    # Ollama's /api/show, each model its own (the two share a vocabulary, not an architecture).
    architectures = %w[qwen llama].map do |name|
      json(post("/api/show", { model: name }))["model_info"]["general.architecture"]
    end
    expect(architectures).to eq(%w[qwen3 llama])
    expect(statuses).to eq("llama" => "loaded", "qwen" => "loaded")
    text = "Hello world, routed"
    expect(json(post("/tokenize", { model: "qwen", content: text }))["tokens"]).to eq(tokens("qwen", text))

    # OpenAI's, llama-server's and Ollama's generations, each reply naming the model it came from.
    completion = { prompt: "Hi", max_tokens: 2, temperature: 0 }
    expect(%w[llama qwen].map { |m| json(post("/v1/completions", completion.merge(model: m)))["model"] })
      .to eq(%w[llama qwen])
    expect(json(post("/v1/chat/completions", { model: "qwen", messages: [{ role: "user", content: "Hi" }],
                                               max_tokens: 2 }))["model"]).to eq("qwen")
    expect(json(post("/completion", { model: "qwen", prompt: "Hi", n_predict: 2 }))["model"]).to eq("qwen")
    expect(json(post("/api/generate", { model: "llama", prompt: "Hi", stream: false,
                                        options: { num_predict: 2 } }))["model"]).to eq("llama")
    expect(json(call("GET", "/props?model=qwen"))).to include("model_alias" => "qwen", "model_path" => @paths["qwen"])
    expect(json(call("GET", "/props"))).to include("model_alias" => "llama") # none named: the first

    # Each model's own counters: llama generated 2 (OpenAI) + 2 (Ollama), qwen 2 + 2 + 2.
    predicted = %w[llama qwen].to_h do |name|
      [name, call("GET", "/metrics?model=#{name}").body[/^llamacpp:tokens_predicted_total (\d+)/, 1].to_i]
    end
    expect(predicted).to eq("llama" => 4, "qwen" => 6)
    expect(json(call("GET", "/slots?model=qwen")).size).to eq(2)

    # Ollama's listings: every model in /api/tags, the loaded ones in /api/ps.
    tags = json(call("GET", "/api/tags"))["models"]
    expect(tags.map { |m| [m["name"], m["size"]] }).to eq(@paths.map { |name, path| [name, File.size(path)] })
    expect(tags.map { |m| m["details"]["family"] }).to eq(%w[llama qwen3])
    ps = json(call("GET", "/api/ps"))["models"]
    expect(ps.map { |m| m["name"] }).to eq(%w[llama qwen])
    expect(ps.map { |m| Time.iso8601(m["expires_at"]) }).to all(be > Time.now + 200) # the default 5 minutes
  end

  it "answers an unknown model with a 404 in each API's shape, a bad name with a 400, and keeps serving" do
    message = "model 'mistral' not found"
    openai = json(post("/v1/chat/completions", { model: "mistral", messages: [{ role: "user", content: "Hi" }] }))
    expect(openai).to eq("error" => { "message" => message, "type" => "not_found_error", "param" => "model",
                                      "code" => "model_not_found" })
    expect(json(post("/api/chat", { model: "mistral", messages: [] }))).to eq("error" => message)
    expect(json(post("/completion", { model: "mistral", prompt: "Hi" })))
      .to eq("error" => { "code" => 404, "message" => message, "type" => "not_found_error" })
    expect(call("GET", "/metrics?model=mistral").status).to eq(404)
    expect(call("GET", "/v1/models/mistral").status).to eq(404)
    expect(json(call("GET", "/v1/models/qwen"))["id"]).to eq("qwen")

    hostile = ["../../etc/passwd", "/etc/passwd", @paths["qwen"], "qwen.gguf", "tiny-qwen3", "qwen/../llama"]
    hostile.each do |name|
      [post("/v1/completions", { model: name, prompt: "Hi" }), post("/api/generate", { model: name, prompt: "Hi" }),
       post("/tokenize", { model: name, content: "Hi" })].each { |response| expect(response.status).to eq(404) }
    end
    too_long = post("/v1/completions", { model: "x" * 300, prompt: "Hi" })
    expect(too_long.status).to eq(400)
    expect(json(too_long)["error"]).to include("param" => "model", "message" => /longer than 256 bytes/)
    expect(json(post("/api/embed", { model: "x" * 300, input: "Hi" }))).to eq(
      "error" => "the model name is longer than 256 bytes"
    )
    expect(post("/v1/completions", { model: 7, prompt: "Hi" }).status).to eq(400)
    expect(statuses).to eq("llama" => "unloaded", "qwen" => "unloaded")
    expect(json(post("/v1/completions", { model: "qwen", prompt: "Hi", max_tokens: 1 }))["model"]).to eq("qwen")
  end

  it "loads and unloads on request: llama-server's router routes and Ollama's keep_alive" do
    expect(json(post("/models/load", { model: "qwen" }))).to eq("success" => true)
    expect(statuses).to eq("llama" => "unloaded", "qwen" => "loaded")
    expect(json(post("/models/load", { model: "qwen" }))).to eq(
      "error" => { "code" => 400, "message" => "model is already running", "type" => "invalid_request_error" }
    )
    expect(json(post("/models/unload", { model: "qwen" }))).to eq("success" => true)
    expect(post("/models/unload", { model: "qwen" }).status).to eq(400)
    expect(post("/models/load", { model: "mistral" }).status).to eq(404)

    loaded = json(post("/api/generate", { model: "llama", prompt: "", keep_alive: "10m" }))
    expect(loaded).to include("done" => true, "done_reason" => "load")
    expires = Time.iso8601(json(call("GET", "/api/ps"))["models"][0]["expires_at"])
    expect(expires).to be_within(60).of(Time.now + 600)
    unloaded = json(post("/api/generate", { model: "llama", prompt: "", keep_alive: 0 }))
    expect(unloaded).to include("done" => true, "done_reason" => "unload")
    expect(json(call("GET", "/api/ps"))["models"]).to eq([])
    expect(json(post("/api/chat", { model: "llama", messages: [], keep_alive: "soon" }))).to eq(
      "error" => "keep_alive: \"soon\" is not a duration (seconds, or with a unit: 30s, 5m, 1h; negative: for ever)"
    )
  end

  it "keeps a streaming request's model until the stream ends, even with a keep_alive of 0" do
    env = Rack::MockRequest.env_for("/api/generate", method: "POST", "CONTENT_TYPE" => "application/json",
                                                     input: JSON.generate({ model: "qwen", prompt: "Hi", keep_alive: 0,
                                                                            options: { num_predict: 4 } }))
    status, _headers, body = server.call(env)
    expect(status).to eq(200)
    expect(pool.unload("qwen")).to be(true) # asked while the stream is out: once it ends
    expect(pool.reap).to eq([])
    expect(statuses["qwen"]).to eq("loaded")
    lines = []
    body.each { |line| lines << JSON.parse(line) }
    body.close
    expect(lines.last).to include("done" => true, "eval_count" => 4)
    expect(statuses["qwen"]).to eq("unloaded")
  end

  it "answers a model that does not load with a 500, logged, and keeps serving the others" do
    Tempfile.create(["broken", ".gguf"]) do |file|
      file.write("not a GGUF")
      file.flush
      broken = Elelem::Server::ModelPool.new({ "broken" => file.path, "qwen" => @paths["qwen"] },
                                             open_options:, budget: nil)
      errors = StringIO.new
      app = Elelem::Server.new(broken)
      body = JSON.generate({ model: "broken", prompt: "x" })
      response = Rack::MockRequest.new(app).post("/v1/completions", input: body, "rack.errors" => errors)
      expect(response.status).to eq(500)
      expect(JSON.parse(response.body)["error"]).to include(
        "code" => "model_load_failed", "message" => "model 'broken' could not be loaded (the server's log says why)"
      )
      expect(errors.string).to include("Elelem::LoadError")
      ok = Rack::MockRequest.new(app).post("/v1/completions", input: JSON.generate({ model: "qwen", prompt: "x" }))
      expect(ok.status).to eq(200)
      broken.close
    end
  end

  it "routes embeddings, and refuses text of the embedding model it routes to" do
    models = { "qwen" => @paths["qwen"], "bert" => SpecModels.synthetic("tiny-bert") }
    pool = Elelem::Server::ModelPool.new(models, open_options:, budget: nil)
    app = Rack::Lint.new(Elelem::Server.new(pool, template:))
    vector = json(call("POST", "/v1/embeddings", { model: "bert", input: "Hi" }, app:))
    expect(vector).to include("model" => "bert")
    expected = Elelem.open(models["bert"], n_threads: 1) { |bert| bert.embed(["Hi"]).first }
    expect(vector["data"][0]["embedding"]).to eq(expected)
    expect(json(call("POST", "/api/embed", { model: "bert", input: "Hi" }, app:))["embeddings"]).to eq([expected])
    refused = call("POST", "/v1/chat/completions", { model: "bert", messages: [{ role: "user", content: "Hi" }] }, app:)
    expect(refused.status).to eq(501)
    expect(json(refused)["error"]["message"]).to start_with("bert is an embedding model")
    expect(json(call("POST", "/v1/embeddings", { model: "qwen", input: "Hi" }, app:))["error"])
      .to include("param" => "pooling", "message" => /qwen has no pooling of its own/)
  ensure
    pool&.close
  end

  it "serves a model the application opened as before: to any name, never unloaded" do
    Elelem.open(@paths["qwen"], **open_options) do |model|
      app = Rack::Lint.new(Elelem::Server.new(model, model_name: "q", template:))
      reply = json(call("POST", "/v1/completions", { model: "../anything", prompt: "Hi", max_tokens: 1 }, app:))
      expect(reply["model"]).to eq("q")
      expect(json(call("POST", "/api/generate", { model: "x", prompt: "", keep_alive: 0 }, app:)))
        .to include("done_reason" => "load")
      ps = json(call("GET", "/api/ps", app:))["models"]
      expect(ps.map { |m| [m["name"], m.key?("expires_at")] }).to eq([["q", false]])
      expect(json(call("POST", "/models/unload", { model: "q" }, app:))["error"])
        .to include("message" => "model was opened by the application and stays loaded")
      expect(model).not_to be_closed
    end
  end

  it "serves two models with `elelem serve -m A -m B` to OpenAI's Python client" do
    file = Tempfile.new(["template", ".jinja"])
    file.write(template)
    file.close
    server = ServeProcess.new("-m", @paths["llama"], "-m", @paths["qwen"], "-t", "1", "-c", "256", "--parallel", "1",
                              "--template", file.path, "--ttl", "10m")
    expect(server.log).to include("elelem: serving tiny-llama3, tiny-qwen3 (each loaded on first use")
    script = File.join(ROOT, "spec", "support", "openai_models.py")
    out, err, status = Open3.capture3(OpenAIClient.python, script, server.base_url, "tiny-llama3", "tiny-qwen3")
    expect(status).to be_success, err
    result = JSON.parse(out)
    puts "\n    openai #{result["version"]} with two models: #{result.except("version")}"
    expect(result["listed"]).to eq([%w[tiny-llama3 unloaded], %w[tiny-qwen3 unloaded]])
    expect(result["chat"]).to eq(%w[tiny-llama3 tiny-qwen3])
    expect(result["completion"]).to eq(%w[tiny-llama3 tiny-qwen3])
    expect(result["listed_after"]).to eq([%w[tiny-llama3 loaded], %w[tiny-qwen3 loaded]])
    expect(result["unknown"]).to eq("status" => 404, "code" => "model_not_found")
    expect(server.stop.exitstatus).to eq(0)
  ensure
    server&.stop if server&.pid
    file&.unlink
  end
end
