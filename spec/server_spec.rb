# frozen_string_literal: true

require "spec_helper"
require "rack" # Debian's ruby-rack, for the specs only: Rack::Lint checks the server keeps Rack's SPEC
require "stringio"
require "timeout"

# What the examples share: a template for the canary (which has none), a conversation, a tool,
# and a request body that makes its bytes as they are read.
module ServerSpecs
  # A ChatML-like template for the canary (which has none); tools show up in the prompt.
  TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}" \
             "{% if tools %}<|tools|>{{ tools | tojson }}\n{% endif %}" \
             "{% if add_generation_prompt %}<|assistant|>{% endif %}"
  MESSAGES = [{ "role" => "system", "content" => "Be terse." },
              { "role" => "user", "content" => "Say hello." }].freeze
  WEATHER = { "type" => "function",
              "function" => { "name" => "get_weather", "parameters" => { "type" => "object" } } }
            .freeze

  # A request body that makes its bytes as they are read, and counts them.
  class EndlessInput
    attr_reader :bytes_read

    def initialize
      @bytes_read = 0
    end

    def read(length = nil, buffer = nil)
      length ||= 100 << 20
      @bytes_read += length
      (buffer || +"").replace("x" * length)
    end
  end
end

# Elelem::Server called as Rack calls it, with no network: every route, every error
# status and the shapes of OpenAI's objects. Rack::Lint wraps the server wherever the
# request is an ordinary one, so the responses are checked against Rack's SPEC too.
RSpec.describe Elelem::Server do
  before(:all) { @model = Elelem.open(SpecModels.canary, n_ctx: 2048, n_threads: 1, parallel: 2, queue: 4) }
  after(:all) { @model.close }

  around { |example| Timeout.timeout(60) { example.run } }

  let(:model) { @model }
  let(:messages) { ServerSpecs::MESSAGES }
  let(:server) { described_class.new(model, template: ServerSpecs::TEMPLATE, max_tokens: 64) }

  def request(method, path, body = nil, app: Rack::Lint.new(server), **env)
    input = body.is_a?(String) || body.nil? ? body.to_s : JSON.generate(body)
    Rack::MockRequest.new(app).request(method, path, input:, "CONTENT_TYPE" => "application/json", **env)
  end

  def post(path, body, **env)
    request("POST", path, body, **env)
  end

  def json(response)
    JSON.parse(response.body)
  end

  # The events of a server-sent stream: the JSON objects, then "[DONE]".
  def events(body)
    expect(body).to end_with("\n\n")
    body.split("\n\n").map do |event|
      expect(event).to start_with("data: ")
      data = event.delete_prefix("data: ")
      data == "[DONE]" ? data : JSON.parse(data)
    end
  end

  def expect_error(response, status, param: nil, code: nil)
    expect([response.status, response.content_type]).to eq([status, "application/json"])
    error = json(response).fetch("error")
    expect(error.keys).to eq(%w[message type param code])
    expect(error["message"]).to be_a(String).and(satisfy { |m| !m.empty? })
    expect(error.slice("type",
                       "param")).to eq("type" => Elelem::Server::HTTPError::TYPES.fetch(status), "param" => param)
    expect(error["code"]).to eq(code) if code
    error
  end

  describe "routes" do
    it "answers GET /health, and HEAD with no body" do
      response = request("GET", "/health")
      expect([response.status, json(response)]).to eq([200, { "status" => "ok" }])
      head = request("HEAD", "/health")
      expect([head.status, head.body]).to eq([200, ""])
    end

    it "lists the model at GET /v1/models and describes it at GET /v1/models/NAME" do
      list = json(request("GET", "/v1/models"))
      expect(list["object"]).to eq("list")
      expect(list["data"].size).to eq(1)
      entry = list["data"][0]
      expect(entry).to include("id" => "tiny-llama-canary", "object" => "model", "owned_by" => "elelem")
      expect(entry["created"]).to be_a(Integer)
      expect(json(request("GET", "/v1/models/tiny-llama-canary"))).to eq(entry)
      expect_error(request("GET", "/v1/models/gpt-4o"), 404, param: "model", code: "model_not_found")
      expect(json(request("GET", "/v1/models", app: described_class.new(model, model_name: "canary")))["data"][0]["id"])
        .to eq("canary")
    end

    it "answers 404 for an unknown path and 405 (with Allow) for a wrong method" do
      expect_error(request("GET", "/v1/audio/speech"), 404, code: "not_found")
      expect_error(request("GET", "/"), 404)
      response = request("GET", "/v1/chat/completions")
      expect_error(response, 405, code: "method_not_allowed")
      expect(response.headers["allow"]).to eq("POST")
      expect(request("DELETE", "/health").headers["allow"]).to eq("GET, HEAD")
    end

    it "serves under a mount point (SCRIPT_NAME), as Rails' `mount ... => \"/llm\"` does" do
      app = Rack::URLMap.new("/llm" => Rack::Lint.new(server))
      expect(json(request("GET", "/llm/health", app:))).to eq("status" => "ok")
      response = post("/llm/v1/completions", { prompt: "hello", max_tokens: 3, temperature: 0 }, app:)
      expect(json(response)["choices"][0]["text"]).to eq(model.generate("hello", max_tokens: 3))
      expect(request("GET", "/v1/models", app:).status).to eq(404) # outside the mount: not ours
    end
  end

  describe "POST /v1/completions" do
    it "completes a prompt as Model#complete does, with OpenAI's fields" do
      expected = model.complete("hello world", max_tokens: 6, temperature: 0.0)
      response = post("/v1/completions", { model: "whatever", prompt: "hello world", max_tokens: 6, temperature: 0 })
      expect(response.status).to eq(200)
      expect(response.content_type).to eq("application/json")
      body = json(response)
      expect(body["id"]).to match(/\Acmpl-\h{24}\z/)
      expect(body).to include("object" => "text_completion", "model" => "tiny-llama-canary")
      expect(body["created"]).to be_within(5).of(Time.now.to_i)
      expect(body["choices"]).to eq([{ "index" => 0, "text" => expected.text, "logprobs" => nil,
                                       "finish_reason" => "length" }])
      expect(body["usage"]).to eq("prompt_tokens" => expected.prompt_tokens, "completion_tokens" => 6,
                                  "total_tokens" => expected.prompt_tokens + 6)
    end

    it "takes token ids, and a list of one prompt" do
      ids = model.tokenize("hello world")
      expected = model.generate("hello world", max_tokens: 4)
      [ids, [ids], ["hello world"]].each do |prompt|
        body = json(post("/v1/completions", { prompt:, max_tokens: 4, temperature: 0 }))
        expect(body["choices"][0]["text"]).to eq(expected)
      end
    end

    it "stops at a stop string (finish_reason stop) and samples with a seed" do
      text = model.generate("Once upon a time", max_tokens: 8) # " I@ I@@@@@"
      body = json(post("/v1/completions", { prompt: "Once upon a time", max_tokens: 8, temperature: 0,
                                            stop: ["nothing", text[2, 2]] }))
      expect(body["choices"][0]).to include("text" => text[0, 2], "finish_reason" => "stop")
      sampled = Array.new(2) do
        json(post("/v1/completions", { prompt: "hello", max_tokens: 8, temperature: 1.5, seed: 7 }))["choices"][0]
      end
      expect(sampled[0]["text"]).to eq(sampled[1]["text"])
      expect(sampled[0]["text"]).to eq(model.generate("hello", max_tokens: 8, temperature: 1.5, top_p: 1.0, seed: 7))
    end

    it "gives logprobs: k as the legacy columns" do
      expected = model.complete("hello world", max_tokens: 3, logprobs: 2)
      logprobs = json(post("/v1/completions", { prompt: "hello world", max_tokens: 3, temperature: 0,
                                                logprobs: 2 }))["choices"][0]["logprobs"]
      expect(logprobs.keys).to eq(%w[tokens token_logprobs top_logprobs text_offset])
      expect(logprobs["tokens"].join).to eq(expected.text)
      expect(logprobs["token_logprobs"]).to eq(expected.logprobs.map { |e| e[:logprob] })
      expect(logprobs["top_logprobs"].map(&:size)).to all(be <= 2)
      expect(logprobs["text_offset"]).to eq([0, 1, 2])
    end

    it "cuts max_tokens to the server's cap" do
      body = json(post("/v1/completions", { prompt: "hello", max_tokens: 1000, temperature: 0, ignore_eos: true }))
      expect(body["usage"]["completion_tokens"]).to eq(64)
      expect(body["choices"][0]["finish_reason"]).to eq("length")
      body = json(post("/v1/completions", { prompt: "hello", temperature: 0, ignore_eos: true }))
      expect(body["usage"]["completion_tokens"]).to eq(16) # OpenAI's default for completions
    end

    it "streams server-sent events that add up to the reply, then [DONE]" do
      expected = model.generate("hello world", max_tokens: 6)
      response = post("/v1/completions", { prompt: "hello world", max_tokens: 6, temperature: 0, stream: true,
                                           stream_options: { include_usage: true } })
      expect(response.status).to eq(200)
      expect(response.headers).to include("content-type" => "text/event-stream", "cache-control" => "no-cache")
      *chunks, usage, done = events(response.body)
      expect(done).to eq("[DONE]")
      expect(chunks.map { |c| c["id"] }.uniq.size).to eq(1)
      expect(chunks).to all(include("object" => "text_completion", "model" => "tiny-llama-canary"))
      expect(chunks.map { |c| c["choices"][0]["text"] }.join).to eq(expected)
      expect(chunks[0..-2].map { |c| c["choices"][0]["finish_reason"] }).to all(be_nil)
      expect(chunks[-1]["choices"][0]).to include("text" => "", "finish_reason" => "length")
      expect(usage["choices"]).to eq([])
      expect(usage["usage"]["completion_tokens"]).to eq(6)
    end
  end

  describe "POST /v1/chat/completions" do
    def chat_prompt(**variables)
      model.chat_tokens(messages, template: ServerSpecs::TEMPLATE, **variables)
    end

    it "answers with the assistant's message, rendered through the chat template" do
      expected = model.complete(chat_prompt, max_tokens: 5, temperature: 0.0)
      response = post("/v1/chat/completions", { model: "gpt-4o-mini", messages:, max_tokens: 5,
                                                temperature: 0 })
      expect(response.status).to eq(200)
      body = json(response)
      expect(body["id"]).to match(/\Achatcmpl-\h{24}\z/)
      expect(body).to include("object" => "chat.completion", "model" => "tiny-llama-canary")
      expect(body["choices"]).to eq([{ "index" => 0, "message" => { "role" => "assistant", "content" => expected.text },
                                       "logprobs" => nil, "finish_reason" => "length" }])
      expect(body["usage"]).to eq("prompt_tokens" => chat_prompt.size, "completion_tokens" => 5,
                                  "total_tokens" => chat_prompt.size + 5)
    end

    it "prefers max_completion_tokens, and passes tools and tool_choice to the template" do
      body = json(post("/v1/chat/completions", { messages:, max_tokens: 9, max_completion_tokens: 2,
                                                 temperature: 0, tools: [ServerSpecs::WEATHER], tool_choice: "auto" }))
      expect(body["usage"]["completion_tokens"]).to eq(2)
      expect(body["usage"]["prompt_tokens"]).to eq(chat_prompt(tools: [ServerSpecs::WEATHER]).size)
      expect(body["usage"]["prompt_tokens"]).to be > chat_prompt.size
    end

    # A server that evaluates every prompt whole, as `complete` does here. One that reuses the
    # prefix an earlier example left re-evaluates the prompt's last token alone, and a pass of one
    # row rounds differently from a pass of the whole prompt on some CPUs (AVX2 ones), so its
    # logprobs are not `complete`'s to the last bit there (nor, sampling, its tokens).
    def whole_prompt_server
      Rack::Lint.new(described_class.new(model, template: ServerSpecs::TEMPLATE, max_tokens: 64, reuse_prefix: false))
    end

    it "gives logprobs with top_logprobs alternatives" do
      expected = model.complete(chat_prompt, max_tokens: 3, logprobs: 2)
      body = json(post("/v1/chat/completions", { messages:, max_tokens: 3, temperature: 0, logprobs: true,
                                                 top_logprobs: 2 }, app: whole_prompt_server))
      content = body["choices"][0]["logprobs"]["content"]
      expect(content.map { |t| t["token"] }.join).to eq(expected.text)
      expect(content.map { |t| t["logprob"] }).to eq(expected.logprobs.map { |e| e[:logprob] })
      content.each do |token|
        expect(token.keys).to eq(%w[token logprob bytes top_logprobs])
        expect(token["bytes"].pack("C*").force_encoding("UTF-8")).to eq(token["token"])
        expect(token["top_logprobs"].size).to eq(2)
        expect(token["top_logprobs"][0].keys).to eq(%w[token logprob bytes])
      end
    end

    it "streams the role, the pieces, the finish reason (with the logprobs), the usage, then [DONE]" do
      expected = model.complete(chat_prompt, max_tokens: 5, logprobs: 1)
      response = post("/v1/chat/completions", { messages:, max_tokens: 5, temperature: 0, stream: true,
                                                logprobs: true, top_logprobs: 1,
                                                stream_options: { include_usage: true } }, app: whole_prompt_server)
      *chunks, usage, done = events(response.body)
      expect(done).to eq("[DONE]")
      expect(chunks).to all(include("object" => "chat.completion.chunk"))
      expect(chunks[0]["choices"][0]["delta"]).to eq("role" => "assistant", "content" => "")
      expect(chunks[1..].map { |c| c["choices"][0]["delta"]["content"] }.join).to eq(expected.text)
      last = chunks[-1]["choices"][0]
      expect(last).to include("delta" => {}, "finish_reason" => "length")
      expect(last["logprobs"]["content"].map { |t| t["logprob"] }).to eq(expected.logprobs.map { |e| e[:logprob] })
      expect(usage["usage"]).to include("prompt_tokens" => chat_prompt.size, "completion_tokens" => 5)
    end

    it "streams without a usage chunk unless asked" do
      chunks = events(post("/v1/chat/completions", { messages:, max_tokens: 2, temperature: 0, stream: true },
                           app: whole_prompt_server).body)
      expect(chunks[-1]).to eq("[DONE]")
      expect(chunks[-2]["choices"][0]["finish_reason"]).to eq("length")
      expect(chunks[0..-2]).to all(satisfy { |c| !c.key?("usage") })
    end
  end

  describe "bad requests (400)" do
    it "refuses malformed JSON and a body that is not an object" do
      ["{", "", "nul", "[1, 2]", "\"text\"", "#{"[" * 200}#{"]" * 200}", "\xff\xfe",
       "{\"prompt\": \"\xff\"}"].each do |body|
        expect_error(post("/v1/chat/completions", body), 400)
      end
    end

    it "names the field of the wrong type or out of range, or that the server does not implement" do
      chat = { messages: }
      tool = { type: "function", function: { name: "f" } }
      cases = {
        "messages" => [{}, { messages: "hi" }, { messages: [] }, { messages: [{ role: "wizard", content: "hi" }] },
                       { messages: [{ role: "user", content: [{ type: "image_url", image_url: "x" }] }] },
                       { messages: [1] }, { messages: [{ role: "user" }] },
                       { messages: [{ role: "assistant", tool_calls: [{ function: { name: "f", arguments: "{" } }] }] },
                       { messages: [{ role: "developer" }] }],
        "temperature" => [chat.merge(temperature: "hot"), chat.merge(temperature: 3)],
        "max_tokens" => [chat.merge(max_tokens: -1), chat.merge(max_tokens: "10"), chat.merge(max_tokens: 1.5)],
        "top_p" => [chat.merge(top_p: 2)], "seed" => [chat.merge(seed: -1), chat.merge(seed: "1")],
        "stop" => [chat.merge(stop: 5), chat.merge(stop: [""]), chat.merge(stop: Array.new(17, "x"))],
        "stream" => [chat.merge(stream: "yes")], "n" => [chat.merge(n: 0), chat.merge(n: 64)],
        "stream_options" => [chat.merge(stream_options: { include_usage: "yes" }), chat.merge(stream_options: 1)],
        "logprobs" => [chat.merge(logprobs: 1)], "top_logprobs" => [chat.merge(top_logprobs: 2),
                                                                    chat.merge(logprobs: true, top_logprobs: 21)],
        "tools" => [chat.merge(tools: "get_weather"), chat.merge(tools: [{ type: "function" }]),
                    chat.merge(tools: [{ type: "retrieval", function: { name: "f" } }])],
        "tool_choice" => [chat.merge(tool_choice: "always"),
                          chat.merge(tools: [tool], tool_choice: { type: "function", function: { name: "other" } })],
        "response_format" => [chat.merge(response_format: { type: "xml" }),
                              chat.merge(response_format: { type: "json_schema" }),
                              chat.merge(response_format: { type: "json_object" }, tools: [tool])],
        "logit_bias" => [chat.merge(logit_bias: { "x" => 1 }), chat.merge(logit_bias: { "1" => 101 }),
                         chat.merge(logit_bias: { "99999999" => 1 })],
        "presence_penalty" => [chat.merge(presence_penalty: 3)],
        "audio" => [chat.merge(audio: { voice: "alloy" })], "functions" => [chat.merge(functions: [])],
        "model" => [chat.merge(model: 4)]
      }
      cases.each do |param, bodies|
        bodies.each { |body| expect_error(post("/v1/chat/completions", body), 400, param:) }
      end
      completion = { "prompt" => [{}, { prompt: 1 }, { prompt: [] }, { prompt: [[1], [2]] }, { prompt: [1, "a"] }],
                     "logprobs" => [{ prompt: "a", logprobs: true }, { prompt: "a", logprobs: 99 }],
                     "echo" => [{ prompt: "a", echo: true }], "best_of" => [{ prompt: "a", best_of: 3 }],
                     "suffix" => [{ prompt: "a", suffix: "b" }] }
      completion.each do |param, bodies|
        bodies.each { |body| expect_error(post("/v1/completions", body), 400, param:) }
      end
    end

    it "refuses a schema llguidance cannot enforce, saying why, and goes on serving" do
      schema = { type: "object", properties: { a: { "$ref" => "#/$defs/missing" } } }
      body = { messages:, response_format: { type: "json_schema", json_schema: { name: "x", schema: } } }
      error = expect_error(post("/v1/chat/completions", body), 400)
      expect(error["message"]).to include("$defs")
      expect(post("/v1/chat/completions", { messages:, max_tokens: 1 }).status).to eq(200)
    end

    it "refuses token ids outside the vocabulary and a prompt longer than the context" do
      expect_error(post("/v1/completions", { prompt: [1, 99_999] }), 400)
      error = expect_error(post("/v1/completions", { prompt: Array.new(3000, 5) }),
                           400, param: "prompt", code: "context_length_exceeded")
      expect(error["message"]).to include("3000")
      long = [{ role: "user", content: "hello " * 3000 }]
      expect_error(post("/v1/chat/completions", { messages: long, stream: true }), 400, param: "messages",
                                                                                        code: "context_length_exceeded")
    end
  end

  describe "authentication (401)" do
    let(:server) { described_class.new(model, api_key: "sekret", template: ServerSpecs::TEMPLATE) }

    it "asks /v1 requests for the Bearer token, and /health for none" do
      body = { prompt: "hello", max_tokens: 1 }
      expect_error(post("/v1/completions", body), 401, code: "invalid_api_key")
      expect_error(post("/v1/completions", body, "HTTP_AUTHORIZATION" => "Bearer wrong"), 401)
      expect_error(post("/v1/completions", body, "HTTP_AUTHORIZATION" => "sekret"), 401)
      expect_error(request("GET", "/v1/models"), 401)
      expect(post("/v1/completions", body, "HTTP_AUTHORIZATION" => "Bearer sekret").status).to eq(200)
      expect(request("GET", "/health").status).to eq(200)
    end
  end

  describe "request size (413)" do
    def env(input, length)
      Rack::MockRequest.env_for("/v1/chat/completions", method: "POST", "rack.input" => input)
                       .merge("CONTENT_LENGTH" => length&.to_s).compact
    end

    it "refuses a body announced as too large without reading it, and reads no more than the limit + 1" do
      server = described_class.new(model, max_body_bytes: 1000)
      input = ServerSpecs::EndlessInput.new
      status, headers, body = server.call(env(input, 100 << 20))
      expect([status, headers["content-type"], input.bytes_read]).to eq([413, "application/json", 0])
      expect(JSON.parse(body.first)["error"]["code"]).to eq("request_too_large")
      status, = server.call(env(input, nil)) # a chunked upload: no Content-Length
      expect([status, input.bytes_read]).to eq([413, 1001])
      ok = post("/v1/completions", { prompt: "x" * 900, max_tokens: 1 },
                app: Rack::Lint.new(described_class.new(model, max_body_bytes: 1000)))
      expect(ok.status).to eq(200)
    end
  end

  describe "refusals and failures" do
    it "answers 503 (Retry-After) when every sequence is busy and the queue is full" do
      busy = Elelem.open(SpecModels.canary, n_ctx: 2048, n_threads: 1, parallel: 1, queue: 1)
      # Seconds of work each: one holds the sequence, then the other waits in the queue (one
      # after the other: two arriving before the same pass would both count as queued).
      started = Queue.new
      running = Thread.new { busy.generate("hello", max_tokens: 1900, ignore_eos: true) { started << true } }
      started.pop
      waiting = Thread.new { busy.generate("hello", max_tokens: 1900, ignore_eos: true) }
      sleep 0.3
      expect(waiting).to be_alive
      server = described_class.new(busy)
      [{ prompt: "hi" }, { prompt: "hi", stream: true }].each do |body|
        response = post("/v1/completions", body, app: Rack::Lint.new(server))
        expect_error(response, 503, code: "server_busy")
        expect(response.headers["retry-after"]).to eq("1")
      end
      [running, waiting].each { |thread| thread.kill.join }
      expect(post("/v1/completions", { prompt: "hi", max_tokens: 1 }, app: Rack::Lint.new(server)).status).to eq(200)
    ensure
      busy&.close
    end

    it "answers 500 for chat on a model with no template, saying so" do
      app = Rack::Lint.new(described_class.new(model))
      error = expect_error(post("/v1/chat/completions", { messages: }, app:), 500, code: "no_chat_template")
      expect(error["message"]).to include("no chat template", "--template")
    end

    it "answers 503 for a closed model" do
      closed = Elelem.open(SpecModels.canary, n_ctx: 64, n_threads: 1)
      server = described_class.new(closed)
      closed.close
      expect_error(post("/v1/completions", { prompt: "hi" }, app: Rack::Lint.new(server)), 503, code: "model_closed")
    end

    it "answers 500 for anything unexpected, and logs it to rack.errors" do
      allow(model).to receive(:complete).and_raise(RuntimeError, "a bug")
      response = post("/v1/completions", { prompt: "hi" })
      error = expect_error(response, 500)
      expect(error["message"]).not_to include("a bug") # no internals to the client
      expect(response.errors).to include("RuntimeError", "a bug", "server_spec.rb")
    end

    it "ends a stream that fails midway with an error event (no [DONE]), logged" do
      allow(model).to receive(:complete) do |*, **, &block|
        block.call("par")
        raise "midway"
      end
      response = post("/v1/completions", { prompt: "hi", stream: true })
      expect(response.status).to eq(200)
      first, last = events(response.body)
      expect(first["choices"][0]["text"]).to eq("par")
      expect(last["error"]).to include("type" => "server_error")
      expect(response.errors).to include("midway")
    end
  end

  describe "a server that stops" do
    it "ends the streams in flight with an error event, freeing their sequences (close_streams)" do
      lone = Elelem.open(SpecModels.canary, n_ctx: 2048, n_threads: 1, parallel: 1, queue: 4)
      server = described_class.new(lone)
      body = JSON.generate(prompt: "hello", max_tokens: 1900, ignore_eos: true, stream: true)
      _, _, stream = server.call(Rack::MockRequest.env_for("/v1/completions", method: "POST", input: body))
      events = []
      reader = Thread.new { stream.each { |event| events << event } }
      sleep 0.2
      expect(server.close_streams).to eq(1)
      reader.join(5)
      expect(JSON.parse(events.last.delete_prefix("data: "))["error"]["code"]).to eq("shutting_down")
      expect(server.close_streams).to eq(0)
      expect(Timeout.timeout(2) { lone.generate("hello", max_tokens: 2) }).to be_a(String)
    ensure
      lone&.close
    end
  end

  describe "a forced call that max_tokens cuts short" do
    let(:weather) do
      { type: "function", function: { name: "get_weather", parameters: { type: "object",
                                                                         properties: { city: { type: "string" } } } } }
    end

    it "ends with finish_reason length and neither a call nor the call's text, streamed or not" do
      qwen = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 1024, n_threads: 1)
      app = Rack::Lint.new(described_class.new(qwen))
      body = { messages: [{ role: "user", content: "The weather in Paris?" }], tools: [weather],
               tool_choice: "required", max_tokens: 3 }
      reply = json(post("/v1/chat/completions", body, app:))["choices"][0]
      expect(reply).to include("finish_reason" => "length", "message" => { "role" => "assistant", "content" => nil })
      chunks = events(post("/v1/chat/completions", body.merge(stream: true), app:).body)
      deltas = chunks[0...-1].map { |chunk| chunk["choices"][0]["delta"] }
      expect(deltas.filter_map { |delta| delta["content"] }.join).to eq("")
      expect(chunks[-2]["choices"][0]["finish_reason"]).to eq("length")
    ensure
      qwen&.close
    end
  end

  describe "a client that goes away mid-stream" do
    it "stops the generation when writing to it fails, freeing the sequence at once" do
      lone = Elelem.open(SpecModels.canary, n_ctx: 2048, n_threads: 1, parallel: 1, queue: 4)
      server = described_class.new(lone)
      body = { prompt: "hello", max_tokens: 1900, ignore_eos: true, temperature: 0, stream: true }
      status, _, stream = server.call(Rack::MockRequest.env_for("/v1/completions", method: "POST",
                                                                                   input: JSON.generate(body)))
      expect(status).to eq(200)
      written = 0
      expect do
        stream.each do
          written += 1
          raise IOError, "Broken pipe" if written == 3 # what a server's write raises
        end
      end.to raise_error(IOError)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      expect(lone.generate("hello", max_tokens: 4)).to be_a(String)
      waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      puts "\n    after a client went away 3 events into a 1,900-token stream, the next request took " \
           "#{(waited * 1000).round} ms (parallel: 1)"
      expect(waited).to be < 1.5 # the abandoned stream alone would take seconds more
      expect(lone.last_stop_reason).to eq(:length)
    ensure
      lone&.close
    end
  end
end
