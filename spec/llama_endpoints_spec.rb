# frozen_string_literal: true

require "spec_helper"
require "rack" # Debian's ruby-rack, for the specs only: Rack::Lint and Rack::MockRequest
require "timeout"

# llama-server's own endpoints on Elelem::Server, called as Rack calls them: the fields and
# shapes of llama.cpp's tools/server (the llama-cpp-python 0.3.36 sdist's, the llama-server
# `rake bench` builds), checked against the lists below, taken from its source.
module LlamaServerShapes
  # server-task.cpp, server_task_result_cmpl_final::to_json_non_oaicompat (less `id_slot`:
  # elelem's sequences are the model's own); `completion_probabilities` comes with `n_probs`.
  FINAL = %w[index content tokens stop model tokens_predicted tokens_evaluated generation_settings prompt
             has_new_line truncated stop_type stopping_word tokens_cached timings].freeze
  # server-common.cpp, server_slot_stats::to_json.
  TIMINGS = %w[cache_n prompt_n prompt_ms prompt_per_token_ms prompt_per_second predicted_n predicted_ms
               predicted_per_token_ms predicted_per_second].freeze
  # server-task.cpp, completion_token_output::probs_vector_to_json (and to_json for the alternatives).
  PROBABILITY = %w[id token bytes logprob top_logprobs].freeze
  # server-task.cpp, server_task_result_metrics::to_metrics: the names that apply to elelem;
  # and the KV cache's gauges, which llama-server had (`kv_cache_usage_ratio`, `kv_cache_tokens`)
  # until llama.cpp's KV cache API changed, and the pinned one no longer has.
  METRICS = %w[prompt_tokens_total prompt_tokens_cached_total prompt_seconds_total tokens_predicted_total
               tokens_predicted_seconds_total n_tokens_max prompt_tokens_seconds predicted_tokens_seconds
               kv_cache_usage_ratio kv_cache_tokens requests_processing requests_deferred].freeze
  # server-context.cpp, get_res_props: the keys elelem gives.
  PROPS = %w[default_generation_settings total_slots model_alias model_path modalities endpoint_slots
             endpoint_props endpoint_metrics chat_template bos_token eos_token build_info is_sleeping].freeze
end

RSpec.describe "llama-server's endpoints" do
  before(:all) do
    @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 4096, n_threads: 1, parallel: 2, queue: 4)
  end
  after(:all) { @model.close }

  around { |example| Timeout.timeout(120) { example.run } }

  let(:model) { @model }
  let(:server) { Elelem::Server.new(model, max_tokens: 64) }

  def post(path, body, app: Rack::Lint.new(server))
    Rack::MockRequest.new(app).post(path, input: JSON.generate(body), "CONTENT_TYPE" => "application/json")
  end

  def get(path)
    Rack::MockRequest.new(Rack::Lint.new(server)).get(path)
  end

  def json(response)
    JSON.parse(response.body)
  end

  # The Prometheus text as {name => value}, checking each sample has its HELP and TYPE.
  def metrics(app = server)
    text = Rack::MockRequest.new(Rack::Lint.new(app)).get("/metrics").body
    text.scan(/^llamacpp:(\w+) (\S+)$/).to_h do |name, value|
      expect(text).to include("# HELP llamacpp:#{name} ", "# TYPE llamacpp:#{name} ")
      [name, Float(value)]
    end
  end

  it "tokenizes and detokenizes as /tokenize and /detokenize do: add_special, parse_special, with_pieces" do
    text = "Hello <|im_start|> wörld 🦙"
    expect(json(post("/tokenize", { content: text }))["tokens"]).to eq(model.tokenize(text, add_special: false))
    plain = json(post("/tokenize", { content: text, parse_special: false }))["tokens"]
    expect(plain).to eq(model.tokenize(text, add_special: false, parse_special: false))
    expect(json(post("/tokenize", {}))).to eq("tokens" => [])

    pieces = json(post("/tokenize", { content: text, with_pieces: true }))["tokens"]
    expect(pieces.map { |t| t["id"] }).to eq(model.tokenize(text, add_special: false))
    # A piece that is not UTF-8 on its own (the llama's bytes) is a list of its bytes.
    expect(pieces.map { |t| t["piece"] }).to include(an_instance_of(Array))
    bytes = pieces.flat_map { |t| t["piece"].is_a?(Array) ? t["piece"] : t["piece"].bytes }
    expect(bytes.pack("C*").force_encoding(Encoding::UTF_8)).to eq(text)

    ids = model.tokenize(text)
    expect(json(post("/detokenize", { tokens: ids }))).to eq("content" => text)
    expect(json(post("/detokenize", {}))).to eq("content" => "")
    bad = post("/detokenize", { tokens: [model.info[:n_vocab]] })
    expect(bad.status).to eq(400)
    expect(json(bad)["error"]).to include("code" => 400, "type" => "invalid_request_error")
  end

  it "applies the chat template as /apply-template does" do
    messages = [{ "role" => "user", "content" => "Hi" }]
    expect(json(post("/apply-template", { messages: }))).to eq("prompt" => model.chat_prompt(messages))
    expect(post("/apply-template", { messages: "Hi" }).status).to eq(400)
  end

  it "completes as /completion does: llama-server's fields, stop types, probabilities, and its stream" do
    prompt = "def fibonacci(n):"
    expected = model.complete(prompt, max_tokens: 8, temperature: 0)
    reply = json(post("/completion", { prompt:, n_predict: 8, temperature: 0, cache_prompt: false,
                                       n_probs: 2, return_tokens: true }))
    expect(reply.keys).to eq(LlamaServerShapes::FINAL + ["completion_probabilities"])
    expect(reply).to include("content" => expected.text, "tokens" => expected.tokens, "stop" => true,
                             "stop_type" => "limit", "stopping_word" => "", "tokens_predicted" => 8,
                             "tokens_evaluated" => expected.prompt_tokens, "prompt" => prompt, "truncated" => false,
                             "model" => "qwen2.5-coder-0.5b-instruct-q4_k_m")
    expect(reply["timings"].keys).to eq(LlamaServerShapes::TIMINGS)
    expect(reply["timings"]).to include("prompt_n" => expected.prompt_tokens, "cache_n" => 0, "predicted_n" => 8)
    expect(reply["generation_settings"]).to include("n_predict" => 8, "temperature" => 0.0, "top_k" => 40,
                                                    "n_probs" => 2, "cache_prompt" => false)
    probabilities = reply["completion_probabilities"]
    expect(probabilities.map(&:keys)).to all(eq(LlamaServerShapes::PROBABILITY))
    expect(probabilities.map { |p| p["id"] }).to eq(expected.tokens)
    expect(probabilities.map { |p| p["top_logprobs"].size }).to all(eq(2))

    # Stopped by a stop string: the word, not in the text.
    word = expected.text[/[a-z]{2,}/]
    stopped = json(post("/completion", { prompt:, n_predict: 8, temperature: 0, stop: [word], cache_prompt: false }))
    expect(stopped).to include("stop_type" => "word", "stopping_word" => word,
                               "content" => expected.text[0...expected.text.index(word)])

    # Streamed: server-sent events, the text in pieces, the figures last, no [DONE].
    response = post("/completion", { prompt:, n_predict: 8, temperature: 0, stream: true, cache_prompt: false })
    expect(response.headers["content-type"]).to eq("text/event-stream")
    events = response.body.split("\n\n").map { |event| JSON.parse(event.delete_prefix("data: ")) }
    *pieces, last = events
    expect(pieces.map(&:keys)).to all(eq(%w[index content tokens stop]))
    expect(pieces.map { |e| e["content"] }.join).to eq(expected.text)
    expect(last.keys).to eq(LlamaServerShapes::FINAL)
    expect(last).to include("stop" => true, "content" => "", "tokens_predicted" => 8)

    bad = post("/completion", { prompt:, n_predict: -5 })
    expect(bad.status).to eq(400)
    expect(json(bad)["error"]["message"]).to include("n_predict")
  end

  it "fills in the middle as /infill does: Qwen2.5-Coder's FIM tokens, laid out as format_prompt_infill" do
    body = { input_prefix: "def add(a, b):\n    ", input_suffix: "\n\nprint(add(1, 2))\n",
             input_extra: [{ filename: "util.py", text: "x = 1\n" }], n_predict: 6, temperature: 0 }
    reply = json(post("/infill", body))
    # The repository pattern, by hand: extra chunks first, then prefix, suffix, middle.
    layout = "<|repo_name|>myproject\n<|file_sep|>util.py\nx = 1\n<|file_sep|>filename\n" \
             "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"
    expect(reply["prompt"]).to eq(layout)
    ids = model.tokenize(layout, add_special: false)
    expect(reply["tokens_evaluated"]).to eq(ids.size)
    expect(reply["content"]).to eq(model.complete(ids, max_tokens: 6, temperature: 0).text)
    expect(reply["content"]).to start_with("return a + b")

    expect(post("/infill", { input_prefix: "x" }).status).to eq(400)
    expect(post("/infill", body.merge(input_extra: [{ text: 1 }])).status).to eq(400)
    Elelem.open(SpecModels.canary, n_ctx: 256, n_threads: 1) do |canary|
      refused = post("/infill", body, app: Elelem::Server.new(canary))
      expect(refused.status).to eq(501)
      expect(json(refused)["error"]).to include("type" => "not_supported_error")
      expect(json(refused)["error"]["message"]).to include("no FIM prefix, suffix, middle tokens")
    end
  end

  it "describes itself as /props and /slots do" do
    props = json(get("/props"))
    expect(props.keys).to eq(LlamaServerShapes::PROPS)
    expect(props).to include("total_slots" => 2, "chat_template" => model.chat_template,
                             "eos_token" => "<|im_end|>", "model_path" => model.info[:path])
    expect(props["default_generation_settings"]).to include("n_ctx" => 4096)
    expect(props["default_generation_settings"]["params"]).to include("temperature" => 0.8, "n_predict" => 64)

    expect(json(get("/slots"))).to eq([0, 1].map do |id|
      { "id" => id, "n_ctx" => 4096, "speculative" => false, "is_processing" => false }
    end)
    post("/completion", { prompt: "x = ", n_predict: 2, temperature: 0 })
    slot = json(get("/slots")).first
    expect(slot).to include("id_task" => 1, "is_processing" => false, "n_prompt_tokens" => model.tokenize("x = ").size,
                            "next_token" => [{ "has_next_token" => false, "n_decoded" => 2 }])
    expect(slot["params"]).to include("n_predict" => 2, "temperature" => 0.0)
  end

  it "counts in /metrics: llama-server's names, the tokens of every route, requests processing and deferred" do
    expect(metrics.keys).to eq(LlamaServerShapes::METRICS)
    expect(get("/metrics").headers).to include("content-type" => "text/plain; version=0.0.4")
    replies = Array.new(2) { json(post("/completion", { prompt: "x = ", n_predict: 3, temperature: 0 })) }
    chat = post("/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], max_tokens: 2 })
    usage = json(chat)["usage"]
    counted = metrics
    expect(counted["tokens_predicted_total"]).to eq(6 + usage["completion_tokens"])
    expect(counted["prompt_tokens_total"] + counted["prompt_tokens_cached_total"])
      .to eq(replies.sum { |r| r["tokens_evaluated"] } + usage["prompt_tokens"])
    expect(counted["prompt_tokens_cached_total"]).to eq(replies.sum { |r| r["timings"]["cache_n"] })
    expect(counted["n_tokens_max"]).to eq(usage["total_tokens"])
    expect(counted).to include("requests_processing" => 0, "requests_deferred" => 0)
    check_kv(at_least: usage["prompt_tokens"])

    # Two long generations hold both sequences; a third waits for one.
    long = { prompt: "The", n_predict: 64, ignore_eos: true, stream: true }
    env = ->(body) { Rack::MockRequest.env_for("/completion", method: "POST", input: JSON.generate(body)) }
    streams = Array.new(2) { server.call(env.call(long))[2] }
    third = Thread.new { server.call(env.call(long))[2] }
    Timeout.timeout(30) { sleep 0.05 until metrics["requests_deferred"] == 1 }
    expect(metrics).to include("requests_processing" => 2, "requests_deferred" => 1)
    check_kv(at_least: 2 * model.tokenize("The").size)
    expect(json(get("/slots")).map { |s| s["is_processing"] }).to eq([true, true])
    streams.each(&:close)
    third.value.close
    expect(metrics).to include("requests_processing" => 0, "requests_deferred" => 0)
  end

  # The KV cache's gauges are the engine's figures as of the last pass (Model#stats), read
  # between two reads of those figures: a generation running meanwhile moves them.
  def check_kv(at_least:)
    before = model.stats
    counted = metrics
    after = model.stats
    expect(before).to include(kv_cells: be >= 4096, kv_tokens: be >= at_least)
    expect(counted["kv_cache_tokens"]).to be_between(*[before[:kv_tokens], after[:kv_tokens]].minmax)
    low, high = [usage(before), usage(after)].minmax
    expect(counted["kv_cache_usage_ratio"]).to be_between(low - 1e-6, high + 1e-6).and be_between(0.0, 1.0).exclusive
  end

  def usage(stats) = stats[:kv_cells_used].fdiv(stats[:kv_cells])

  it "gives an empty KV cache for a model not loaded, without loading it" do
    pool = Elelem::Server::ModelPool.new({ "qwen" => SpecModels.path("qwen2.5-coder-0.5b") })
    counted = metrics(Elelem::Server.new(pool))
    expect(counted).to include("kv_cache_usage_ratio" => 0.0, "kv_cache_tokens" => 0.0)
    expect(pool.models.map { |m| m[:status] }).to eq([:unloaded])
  ensure
    pool&.close
  end
end
