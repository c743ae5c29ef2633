# frozen_string_literal: true

require "spec_helper"
require "open3"
require "tempfile"
require_relative "support/serve_process"
require_relative "../tasks/openai_client"

# `elelem serve` on Puma over loopback: OpenAI's own Python client, a load test, hostile
# clients, Ctrl-C, and Puma's cluster mode sharing the weights. Every server runs in a
# process of its own and every wait is bounded; the measured figures are printed.
RSpec.describe "elelem serve" do
  # A ChatML-like template for the canary, which has none.
  def canary_template
    file = Tempfile.new(["template", ".jinja"])
    file.write("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}" \
               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    file.close
    file
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  around { |example| Timeout.timeout(300) { example.run } }

  it "answers OpenAI's Python client: chat and completions, streaming and not; Ctrl-C stops it cleanly" do
    qwen = SpecModels.path("qwen2.5-coder-0.5b")
    # One thread each: a two-thread pool spins badly when the cores are shared (issue 14's contended row).
    server = ServeProcess.new("-m", qwen, "-t", "1", "-c", "1024", "--parallel", "2", "--api-key", "sekret")
    out, err, status = Open3.capture3(OpenAIClient.python, File.join(ROOT, "spec", "support", "openai_client.py"),
                                      server.base_url, "sekret")
    expect(status).to be_success, err
    result = JSON.parse(out)

    Elelem.open(qwen, n_ctx: 1024, n_threads: 1) do |model|
      messages = [{ role: "user", content: "Write a Ruby method that adds two numbers." }]
      chat = model.complete(model.chat_tokens(messages), max_tokens: 16, reuse_prefix: true)
      completion = model.complete("def fibonacci(n):", max_tokens: 16)
      puts "\n    openai #{result["version"]}: chat #{result["chat"]["text"].inspect}, " \
           "completion #{result["completion"]["text"].inspect}"
      expect(result["chat"]).to include("object" => "chat.completion", "role" => "assistant", "text" => chat.text,
                                        "logprob_tokens" => chat.text)
      expect(result["chat"]["id"]).to start_with("chatcmpl-")
      expect(result["chat"]["finish_reason"]).to eq(chat.finish_reason == :length ? "length" : "stop")
      expect(result["chat"]["usage"]).to eq("prompt_tokens" => chat.prompt_tokens,
                                            "completion_tokens" => chat.tokens.size,
                                            "total_tokens" => chat.prompt_tokens + chat.tokens.size)
      expect(result["chat"]["top_logprobs"]).to all(eq(2))
      expect(result["chat_stream"]).to include("text" => chat.text, "completion_tokens" => chat.tokens.size)
      expect(result["completion"]).to include("object" => "text_completion", "text" => completion.text,
                                              "finish_reason" => "length", "logprob_tokens" => completion.text)
      expect(result["completion_stream"]).to eq("text" => completion.text, "finish_reason" => "length")
    end
    expect(result["models"]).to eq(["qwen2.5-coder-0.5b-instruct-q4_k_m"])
    expect(result["wrong_key"]).to eq("status" => 401, "code" => "invalid_api_key")
    expect(result["bad_request"]).to eq("status" => 400, "param" => "temperature")
    status = server.stop
    expect(status.exitstatus).to eq(0)
    expect(server.log).to include("Goodbye")
  ensure
    server&.stop if server&.pid
  end

  # Request i of the load test: chat and completions in turn, each prompt its own.
  def load_request(index)
    body = { max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } }
    if index.even?
      ["/v1/chat/completions", body.merge(messages: [{ role: "user", content: "question #{index} of the load" }])]
    else
      ["/v1/completions", body.merge(prompt: "the canary sings song #{index}")]
    end
  end

  # What is wrong with a stream, if anything.
  def stream_problems(status, headers, events)
    *chunks, usage = events[0..-2]
    {
      "status #{status}" => status != 200,
      "content-type #{headers["content-type"]}" => headers["content-type"] != ["text/event-stream"],
      "no single [DONE] at the end" => events.last != "[DONE]" || events.count("[DONE]") != 1,
      "not one id" => [*chunks, usage].map { |c| c["id"] }.uniq.size != 1,
      "no finish reason" => !%w[stop length].include?(chunks.dig(-1, "choices", 0, "finish_reason")),
      "bad usage #{usage}" => !usage.dig("usage", "completion_tokens")&.between?(1, 8)
    }.select { |_, bad| bad }.keys
  end

  # The text of a well-formed stream; raises on anything out of place.
  def stream_text(status, headers, events)
    problems = stream_problems(status, headers, events)
    raise problems.join(", ") unless problems.empty?

    events[0..-3].map do |chunk|
      choice = chunk["choices"][0]
      choice.key?("delta") ? choice["delta"]["content"].to_s : choice["text"]
    end.join
  end

  # Request indices 0...25 from 8 concurrent streaming clients, 25 each: `[index, text or error]`.
  def concurrent_load(server)
    Array.new(8) do |client|
      Thread.new do
        Array.new(25) do |n|
          index = ((client * 7) + n) % 25
          [index, stream_text(*server.stream(*load_request(index)))]
        rescue StandardError => e
          [index, e]
        end
      end
    end.flat_map(&:value)
  end

  # The load test, after each request alone: every response complete and well-formed,
  # none lost. Returns how many replies are the text of the same request served alone.
  def load_test(server, label)
    alone = Array.new(25) { |i| stream_text(*server.stream(*load_request(i))) }
    started = now
    results = concurrent_load(server)
    seconds = now - started
    failed = results.reject { |_, text| text.is_a?(String) }
    agreeing = results.count { |index, text| text == alone[index] }
    puts "\n    load#{label}: #{results.size} streaming requests from 8 clients in #{seconds.round(1)} s " \
         "(#{(results.size / seconds).round(1)} requests/s), #{failed.size} failed, #{agreeing} of " \
         "#{results.size} replies identical to the same request served alone"
    expect(failed).to be_empty
    expect(results.size).to eq(200)
    agreeing
  end

  # The canary served with parallel 4, a queue of 32 and a chat template, plus `flags`.
  def serve_canary(*flags)
    @template = canary_template
    @server = ServeProcess.new("-m", SpecModels.canary, "-t", "1", "-c", "2048", "--parallel", "4", "--queue", "32",
                               "--template", @template.path, *flags)
  end

  def stop_canary
    expect(@server.stop.exitstatus).to eq(0)
    @template.unlink
  end

  describe "on the canary" do
    before(:all) { serve_canary }
    after(:all) { stop_canary }

    it "serves 8 concurrent streaming clients x 25 requests: every response complete and well-formed" do
      agreeing = load_test(@server, "")
      expect(agreeing).to be >= 100
    end
  end

  describe "on the canary, batch-invariant" do
    before(:all) { serve_canary("--batch-invariant") }
    after(:all) { stop_canary }

    it "gives every reply of the load test the text of the same request served alone" do
      expect(load_test(@server, " (batch-invariant)")).to eq(200)
    end
  end

  describe "hostile clients (parallel 1, queue 2)" do
    before(:all) do
      @server = ServeProcess.new("-m", SpecModels.canary, "-t", "1", "-c", "2048", "--parallel", "1", "--queue", "2")
    end

    after(:all) { expect(@server.stop.exitstatus).to eq(0) }

    def completion(max_tokens = 4)
      @server.request("POST", "/v1/completions", { prompt: "hello", max_tokens:, temperature: 0 })
    end

    def still_serving!
      expect(@server.request("GET", "/health").code).to eq("200")
      response = completion
      expect(response.code).to eq("200")
      expect(JSON.parse(response.body)["choices"][0]["text"]).to be_a(String)
    end

    def error_of(response, status)
      expect(response.code).to eq(status.to_s)
      JSON.parse(response.body).fetch("error")
    end

    # A raw connection: sends the bytes given, returns what comes back until the server closes.
    def raw(bytes)
      socket = TCPSocket.new("127.0.0.1", @server.port)
      socket.write(bytes)
      socket.close_write
      socket.read
    ensure
      socket&.close
    end

    it "answers malformed JSON and wrong types with 400, naming the field" do
      expect(error_of(@server.request("POST", "/v1/chat/completions", "{\"messages\": ["), 400)["type"])
        .to eq("invalid_request_error")
      expect(error_of(@server.request("POST", "/v1/completions", { prompt: "hi", max_tokens: "many" }), 400)["param"])
        .to eq("max_tokens")
      expect(error_of(@server.request("POST", "/v1/completions", "\xff\xfe"),
                      400)["type"]).to eq("invalid_request_error")
      # Puma's own parser refuses it: Puma 5.6 with a 400, Puma 6.6 by closing the half-closed connection.
      expect(raw("GARBAGE\r\n\r\n")).to start_with("HTTP/1.1 400").or eq("")
      still_serving!
    end

    it "refuses a 100 MB body with 413, without holding it in memory" do
      before = @server.memory[@server.pid]["Rss"]
      socket = TCPSocket.new("127.0.0.1", @server.port)
      size = 100 << 20
      socket.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
                   "Content-Length: #{size}\r\nConnection: close\r\n\r\n")
      started = now
      megabyte = "x" * (1 << 20)
      begin
        100.times { socket.write(megabyte) }
      rescue Errno::EPIPE, Errno::ECONNRESET
        nil # the server may answer and close before the whole body is sent
      end
      response = socket.read
      socket.close
      grown = @server.memory[@server.pid]["Rss"] - before
      puts "\n    100 MB body: #{response[/\AHTTP\S+ \d+/]} after #{(now - started).round(2)} s, " \
           "server RSS #{format("%+.1f", grown)} MiB"
      expect(response).to start_with("HTTP/1.1 413")
      expect(JSON.parse(response.split("\r\n\r\n", 2)[1])["error"]["code"]).to eq("request_too_large")
      expect(grown).to be < 50
      still_serving!
    end

    it "keeps serving others while a slow client trickles its request in" do
      body = JSON.generate(prompt: "hello", max_tokens: 4, temperature: 0)
      bytes = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
              "Content-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}"
      slow = Thread.new do
        socket = TCPSocket.new("127.0.0.1", @server.port)
        bytes.each_char.each_slice(8) do |slice|
          socket.write(slice.join)
          sleep 0.1
        end
        socket.read
      ensure
        socket&.close
      end
      sleep 0.3
      started = now
      still_serving!
      others = now - started
      answer = slow.value
      puts "\n    while a client took #{(bytes.size / 8 * 0.1).round(1)} s to send its request, another was served " \
           "in #{(others * 1000).round} ms"
      expect(others).to be < 2
      expect(answer).to start_with("HTTP/1.1 200")
    end

    it "frees the sequence of a client that disconnects mid-stream: the next request is served at once" do
      body = JSON.generate(prompt: "hello", max_tokens: 1900, ignore_eos: true, temperature: 0, stream: true)
      socket = TCPSocket.new("127.0.0.1", @server.port)
      socket.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
                   "Content-Length: #{body.bytesize}\r\n\r\n#{body}")
      received = +""
      received << socket.readpartial(4096) until received.scan("data: ").size >= 3
      socket.close
      started = now
      still_serving!
      waited = now - started
      puts "\n    after a client left 3 events into a 1,900-token stream, /health and a 4-token request took " \
           "#{(waited * 1000).round} ms (parallel 1; the stream alone takes seconds)"
      expect(waited).to be < 2
    end

    it "sheds 100 requests beyond the queue with 503, and serves again after" do
      hold = Thread.new do
        @server.stream("/v1/completions", { prompt: "hello", max_tokens: 1900, ignore_eos: true, stream: true })
      end
      sleep 0.5 # the long stream holds the only sequence
      started = now
      statuses = Array.new(100) do
        Thread.new do
          response = completion
          error = JSON.parse(response.body)["error"] if response.code == "503"
          [response.code, error && error["code"], response["retry-after"]]
        end
      end.map(&:value)
      counts = statuses.map(&:first).tally
      puts "\n    100 requests while one stream held the only sequence (queue 2): #{counts} in " \
           "#{(now - started).round(2)} s"
      expect(counts.keys - %w[200 503]).to be_empty
      expect(counts["503"]).to be >= 90
      expect(statuses.select { |s, *| s == "503" }.uniq).to eq([%w[503 server_busy 1]])
      hold.kill
      still_serving!
    end
  end

  it "stops on Ctrl-C within the grace period, ending a stream and a request in flight with 503s" do
    # Qwen 0.5B: 1,000 tokens take it far longer than the grace period.
    server = ServeProcess.new("-m", SpecModels.path("qwen2.5-coder-0.5b"), "-t", "1", "-c", "2048", "--parallel", "1")
    long = { prompt: "def hello", max_tokens: 1000, ignore_eos: true }
    stream = Thread.new { server.stream("/v1/completions", long.merge(stream: true)) }
    sleep 1 # the stream holds the only sequence; the next request waits for it
    waiting = Thread.new { server.request("POST", "/v1/completions", long) }
    sleep 0.5
    started = now
    status = server.stop
    stopped = now - started
    _, _, events = stream.value
    response = waiting.value
    puts "\n    Ctrl-C with a stream and a queued request in flight: stopped in #{stopped.round(1)} s"
    expect(status.exitstatus).to eq(0)
    expect(stopped).to be < Elelem::Server::Runner::SHUTDOWN_GRACE + 3
    expect(events.last["error"]["code"]).to eq("shutting_down")
    expect([response.code, JSON.parse(response.body)["error"]["code"]]).to eq(%w[503 shutting_down])
  ensure
    server&.stop if server&.pid
  end

  it "shares the weights between Puma's workers forked after the model is opened (cluster mode)" do
    server = ServeProcess.new("-m", SpecModels.path("qwen2.5-coder-0.5b"), "-t", "1", "-c", "512", "--parallel", "1",
                              "--workers", "2")
    workers = server.children
    expect(workers.size).to eq(2)
    # Which worker accepts a connection is up to the kernel: send requests until both have run the model
    # (a worker that served none has touched none of the weights, and shares nothing to measure).
    run_model = ->(pid) { server.memory[pid]["Rss"] > server.memory[server.pid]["Rss"] + 200 }
    20.times do
      break if workers.all?(&run_model)

      Array.new(4) { Thread.new { server.request("POST", "/v1/completions", { prompt: "def add", max_tokens: 4 }) } }
           .each { |t| expect(t.value.code).to eq("200") }
    end
    expect(workers.select(&run_model)).to eq(workers)
    memory = server.memory
    puts "\n    cluster mode, MiB (master #{server.pid}, workers #{workers.join(", ")}):"
    memory.each do |pid, m|
      puts format("      %-8<role>s Rss %6.1<Rss>f  Pss %6.1<Pss>f  (Pss anon %6.1<Pss_Anon>f, file %6.1<Pss_File>f)",
                  role: pid == server.pid ? "master" : "worker", **m.transform_keys(&:to_sym))
    end
    workers.each { |pid| expect(memory[pid]["Pss"]).to be < memory[pid]["Rss"] * 0.7 }
    expect(server.stop.exitstatus).to eq(0)
  ensure
    server&.stop if server&.pid
  end
end
