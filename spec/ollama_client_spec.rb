# frozen_string_literal: true

require "spec_helper"
require "digest"
require "open3"
require_relative "support/serve_process"
require_relative "../tasks/ollama_client"

# Ollama's API on `elelem serve`, spoken by Ollama's own clients: the Python package from
# PyPI and the npm package, version-pinned (tasks/ollama_client.rb). A chat server and an
# embedding server (one model each) run in processes of their own; what the clients parsed
# is checked against the same generations run here.
RSpec.describe "elelem serve and Ollama's clients" do
  before(:all) do
    @qwen = SpecModels.path("qwen2.5-coder-0.5b")
    @minilm = SpecModels.path("all-minilm-l6-v2")
    @chat_server = ServeProcess.new("-m", @qwen, "-t", "1", "-c", "1024", "--parallel", "1")
    @embed_server = ServeProcess.new("-m", @minilm, "-t", "1")
  end

  after(:all) do
    @chat_server&.stop
    @embed_server&.stop
  end

  around { |example| Timeout.timeout(300) { example.run } }

  let(:hosts) { [@chat_server, @embed_server].map { |server| "http://127.0.0.1:#{server.port}" } }
  let(:messages) { [{ role: "user", content: "Write a Ruby method that adds two numbers." }] }
  # Ollama's sampling, greedy: its repeat penalty stays on.
  let(:ollama_greedy) { { temperature: 0, repeat_penalty: 1.1, repeat_last_n: 64, reuse_prefix: true } }
  let(:name) { "qwen2.5-coder-0.5b-instruct-q4_k_m" }

  def run_client(*command, env: {})
    out, err, status = Open3.capture3(env, *command, *hosts)
    expect(status).to be_success, err
    JSON.parse(out)
  end

  def expect_embeddings(vectors, texts)
    Elelem.open(@minilm, n_threads: 1) do |model|
      model.embed(texts).zip(vectors).each do |expected, got|
        expect(got.size).to eq(expected.size)
        expect(got.zip(expected).map { |a, b| (a - b).abs }.max).to be < 1e-5
      end
    end
  end

  it "answers the Python client: list, show, ps, chat and generate streamed and not, a schema, tools, embeddings" do
    result = run_client(OllamaClient.python, File.join(ROOT, "spec", "support", "ollama_client.py"))
    expect(result["version"]).to eq(OllamaClient::VERSION)
    expect(result["list"]).to eq([{ "model" => name, "size" => File.size(@qwen), "family" => "qwen2",
                                    "digest" => Digest::SHA256.file(@qwen).hexdigest, "quantization" => "Q4_K_M" }])
    expect(result["show"]).to include("family" => "qwen2", "capabilities" => %w[completion tools insert],
                                      "context_length" => 32_768)
    expect(result["ps"]).to match([include("model" => name, "context_length" => 1024)])

    Elelem.open(@qwen, n_ctx: 1024, n_threads: 1) do |model|
      chat = model.complete(model.chat_tokens(messages), max_tokens: 16, **ollama_greedy)
      puts "\n    ollama #{result["version"]} (PyPI): chat #{result["chat"]["content"].inspect}"
      expect(result["chat"]).to eq("content" => chat.text, "role" => "assistant", "done" => true,
                                   "done_reason" => "length", "eval_count" => 16,
                                   "prompt_eval_count" => chat.prompt_tokens,
                                   "total_duration" => result["chat"]["total_duration"])
      expect(result["chat"]["total_duration"]).to be_positive
      expect(result["chat_stream"]).to include("content" => chat.text, "done_reason" => "length", "eval_count" => 16)
      expect(result["chat_stream"]["done"]).to eq(([false] * (result["chat_stream"]["chunks"] - 1)) + [true])

      hello = model.chat_tokens([{ role: "user", content: "Say hello." }])
      generated = model.complete(hello, max_tokens: 16, **ollama_greedy)
      expect(result["generate"]).to include("response" => generated.text, "eval_count" => generated.tokens.size,
                                            "context" => hello + generated.tokens)
      raw = model.complete(model.tokenize("def fibonacci(n):"), max_tokens: 16, **ollama_greedy)
      expect(result["generate_raw_stream"]).to eq(raw.text)

      city = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
      weather = { type: "function", function: { name: "get_weather", description: "The weather in a city",
                                                parameters: city } }
      question = [{ role: "user", content: "What is the weather in Paris?" }]
      called = model.complete(question, tools: [weather], max_tokens: 48, **ollama_greedy)
      calls = called.tool_calls.map { |c| { "name" => c.name, "arguments" => c.arguments } }
      expect(calls).not_to be_empty
      expect(result["tools"]).to eq("content" => called.text, "done_reason" => "stop", "calls" => calls)
    end

    expect(result["structured"]["validated"]).to include("name" => a_string_including("Lovelace"), "age" => 36)
    expect(JSON.parse(result["json_mode"]["response"])).to be_a(Hash)

    texts = ["Why is the sky blue?", "Why is the grass green?"]
    expect_embeddings(result["embed"]["embeddings"], texts)
    expect_embeddings([result["embeddings"]], texts.first(1))

    errors = result["errors"]
    expect(errors.transform_values { |e| e["status"] })
      .to eq("images" => 400, "num_ctx" => 400, "schema" => 400, "chat_on_embedder" => 501, "embed_on_decoder" => 400)
    expect(errors["images"]["error"]).to include("without a projector")
    expect(errors["num_ctx"]["error"]).to include("num_ctx 1048576 is above", "1024")
    expect(errors["schema"]["error"]).to include("unsupported JSON schema")
    expect(errors["chat_on_embedder"]["error"]).to include("embedding model")
  end

  it "answers the npm client: list, show, version, chat streamed and not, generate, a schema, embeddings" do
    script = File.join(ROOT, "spec", "support", "ollama_client.js")
    result = run_client("node", script, env: { "NODE_PATH" => OllamaClient.node_modules })
    expect(result["version"]).to eq(OllamaClient::NODE_VERSION)
    expect(result["list"]).to eq([{ "model" => name, "family" => "qwen2" }])
    expect(result["show"]).to eq("family" => "qwen2", "capabilities" => %w[completion tools insert])
    expect(result["server_version"]).to eq(Elelem::VERSION)

    Elelem.open(@qwen, n_ctx: 1024, n_threads: 1) do |model|
      chat = model.complete(model.chat_tokens(messages), max_tokens: 16, **ollama_greedy)
      puts "\n    ollama #{result["version"]} (npm): chat #{result["chat"]["content"].inspect}"
      expect(result["chat"]).to eq("content" => chat.text, "done" => true, "done_reason" => "length",
                                   "eval_count" => 16)
      expect(result["chat_stream"]).to eq(result["chat"])
      hello = model.complete(model.chat_tokens([{ role: "user", content: "Say hello." }]), max_tokens: 16,
                                                                                           **ollama_greedy)
      expect(result["generate"]).to eq("response" => hello.text,
                                       "done_reason" => hello.finish_reason == :length ? "length" : "stop")
    end
    expect(result["structured"]).to include("name" => a_string_including("Lovelace"), "age" => 36)
    expect_embeddings(result["embed"], ["Why is the sky blue?", "Why is the grass green?"])
    expect(result["images"]).to include("status" => 400)
  end
end
