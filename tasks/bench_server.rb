# frozen_string_literal: true

require "json"
require "net/http"
require_relative "llama_server"

# `rake bench`'s server rows: `elelem serve` (Puma) beside llama.cpp's `llama-server`
# (tasks/llama_server.rb: continuous batching, the reference's llama.cpp), both serving
# the same model with `parallel` sequences over one KV cache of Bench::N_CTX tokens, driven
# by the same load over loopback. For 1, 2, 4 and 8 clients at once, each client sends
# ROUNDS streaming /v1/completions requests in turn (greedy, `ignore_eos`, MAX_TOKENS
# tokens, a prompt of its own); measured: the generated tokens of all clients per second of
# wall time, and each request's time to first token (sent → first text in the stream),
# p50 and p99 over every repetition. Each figure is taken A B A B, medians of Bench.reps.
module BenchServer
  MODEL = "qwen2.5-coder-0.5b"
  STREAMS = [1, 2, 4, 8].freeze
  MAX_TOKENS = 64
  ROUNDS = 2
  PORTS = { "elelem" => 18_480, "llama.cpp" => 18_481 }.freeze

  module_function

  def enabled?
    ENV.fetch("BENCH_SERVER", "1") == "1"
  end

  # The rows, at `threads` threads.
  def rows(threads)
    path = Elelem::Models.fetch(ENV.fetch("BENCH_SERVER_MODEL", MODEL))
    streams = Bench.list("BENCH_STREAMS", STREAMS).map(&:to_i)
    rows = with_servers(path, streams.max, threads) do
      PORTS.each_value { |port| load(port, 1, rounds: 1, max_tokens: 8) } # warm-up
      streams.flat_map { |n| stream_rows(n) }
    end
    name = File.basename(path, ".gguf")
    (rows + speedup_rows(rows, streams)).map { |r| r.merge("model" => name, "threads" => threads) }
  end

  # Both servers up at once (an idle one waits on a condition, taking no CPU).
  def with_servers(path, parallel, threads, &)
    elelem_serve(path, parallel, threads) do
      LlamaServer.serve(path, parallel:, n_ctx: Bench::N_CTX, threads:, port: PORTS["llama.cpp"], &)
    end
  end

  # `elelem serve` from this checkout, as a user runs it.
  def elelem_serve(path, parallel, threads)
    log = File.join(Reference::ROOT, "tmp", "elelem-serve.log")
    pid = Process.spawn(RbConfig.ruby, "-I#{File.join(Reference::ROOT, "lib")}",
                        File.join(Reference::ROOT, "exe", "elelem"), "serve", "-m", path, "--parallel", parallel.to_s,
                        "-c", Bench::N_CTX.to_s, "-t", threads.to_s, "--port", PORTS["elelem"].to_s,
                        %i[out err] => [log, "w"])
    LlamaServer.wait_healthy(PORTS["elelem"], pid, log)
    yield
  ensure
    LlamaServer.stop(pid) if pid
  end

  def stream_rows(clients)
    runs = Array.new(Bench.reps) { PORTS.transform_values { |port| load(port, clients) } }
    label = "#{clients} streams over HTTP"
    rate = ->(side) { Bench.median(runs.map { |r| r[side][:rate] }) }
    ttft = ->(side, q) { percentile(runs.flat_map { |r| r[side][:ttft_ms] }, q) }
    [{ "metric" => "#{label} tg#{MAX_TOKENS} t/s (all)", "elelem" => rate.call("elelem"),
       "llama.cpp" => rate.call("llama.cpp") },
     { "metric" => "#{label} ttft p50 ms", "elelem" => ttft.call("elelem", 0.5),
       "llama.cpp" => ttft.call("llama.cpp", 0.5) },
     { "metric" => "#{label} ttft p99 ms", "elelem" => ttft.call("elelem", 0.99),
       "llama.cpp" => ttft.call("llama.cpp", 0.99) }]
  end

  # Each side's aggregate rate at N clients over its rate at one.
  def speedup_rows(rows, streams)
    rate = ->(n) { rows.find { |r| r["metric"] == "#{n} streams over HTTP tg#{MAX_TOKENS} t/s (all)" } }
    single = rate.call(streams.min)
    streams.drop(1).map do |n|
      { "metric" => "#{n} streams over HTTP speedup over 1",
        "elelem" => rate.call(n)["elelem"] / single["elelem"],
        "llama.cpp" => rate.call(n)["llama.cpp"] / single["llama.cpp"] }
    end
  end

  def percentile(values, quantile)
    sorted = values.sort
    sorted[((sorted.size - 1) * quantile).round]
  end

  # `clients` threads released together, each sending `rounds` requests one after another:
  # the generated tokens of all per second from the release to the last reply, and each
  # request's time to first token.
  def load(port, clients, rounds: ROUNDS, max_tokens: MAX_TOKENS)
    gate = Queue.new
    threads = Array.new(clients) do |client|
      Thread.new do
        gate.pop
        Array.new(rounds) { |round| request(port, prompt(client, round), max_tokens) }
      end
    end
    start = now
    clients.times { gate << true }
    results = threads.flat_map(&:value)
    { rate: results.sum { |r| r[:tokens] } / (now - start), ttft_ms: results.map { |r| r[:ttft_ms] } }
  end

  # A prompt no earlier request began with (neither server may reuse a cached prefix).
  def prompt(client, round)
    @serial = (@serial || 0) + 1
    "// Request #{@serial} from client #{client}, round #{round}\n" \
      "#{Bench::AGREEMENT_PROMPTS[@serial % Bench::AGREEMENT_PROMPTS.size]}"
  end

  # One streaming completion: the time to its first text and the tokens it generated (its
  # usage, else llama-server's timings, else its chunks of text).
  def request(port, prompt, max_tokens)
    post = Net::HTTP::Post.new("/v1/completions", "content-type" => "application/json")
    post.body = JSON.generate({ model: "bench", prompt:, max_tokens:, temperature: 0, ignore_eos: true,
                                stream: true, stream_options: { include_usage: true } })
    start = now
    tally = { first: nil, chunks: 0, counted: nil }
    Net::HTTP.start("127.0.0.1", port, read_timeout: 600) do |http|
      http.request(post) { |response| each_event(response, port) { |json| count(tally, json) } }
    end
    { ttft_ms: 1000.0 * ((tally[:first] || now) - start), tokens: tally[:counted] || tally[:chunks] }
  end

  # The JSON of each `data:` line of a server-sent event stream, as it arrives.
  def each_event(response, port)
    raise "POST :#{port}/v1/completions: #{response.code} #{response.body}" unless response.code == "200"

    buffer = +""
    response.read_body do |data|
      buffer << data
      while (line = buffer.slice!(/\A[^\n]*\n/))
        event = line[/\Adata: (\{.*)/, 1]
        yield JSON.parse(event) if event
      end
    end
  end

  def count(tally, json)
    text = json.dig("choices", 0, "text")
    if text && !text.empty?
      tally[:first] ||= now
      tally[:chunks] += 1
    end
    tally[:counted] = json.dig("usage", "completion_tokens") || json.dig("timings", "predicted_n") || tally[:counted]
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
