# frozen_string_literal: true

require "json"
require "net/http"
require "tmpdir"
require_relative "llama_server"

# `rake bench`'s server rows: `elelem serve` (Puma) beside llama.cpp's `llama-server`
# (tasks/llama_server.rb: continuous batching, the reference's llama.cpp), both serving
# the same model with `parallel` sequences over one KV cache of Bench::N_CTX tokens, driven
# by the same load over loopback. For 1, 2, 4 and 8 clients at once, each client sends
# ROUNDS streaming /v1/completions requests in turn (greedy, `ignore_eos`, MAX_TOKENS
# tokens, a prompt of its own); measured: the generated tokens of all clients per second of
# wall time, and each request's time to first token (sent → first text in the stream),
# p50 and p99 over every repetition. Each figure is taken A B A B, medians of Bench.reps.
#
# Then the same load over two models served together and routed by each request's `model`
# (ROUTED_MODELS; BENCH_SERVER_ROUTED=0 leaves them out, BENCH_SERVER_SINGLE=0 runs them alone):
# `elelem serve --models-dir` beside
# llama-server's router mode (`--models-dir`: a child llama-server per model), both given one
# directory holding the two files, both models loaded before the figures (the first request
# to each loads it); a client's rounds alternate between the models.
module BenchServer
  MODEL = "qwen2.5-coder-0.5b"
  ROUTED_MODELS = %w[qwen2.5-coder-0.5b gemma-3-270m].freeze
  STREAMS = [1, 2, 4, 8].freeze
  MAX_TOKENS = 64
  ROUNDS = 2
  PORTS = { "elelem" => 18_480, "llama.cpp" => 18_481 }.freeze
  ROUTED_PORTS = { "elelem" => 18_482, "llama.cpp" => 18_483 }.freeze
  # The label of the rows of one model.
  LABEL = "streams over HTTP"
  # ... and of the routed rows.
  ROUTED_LABEL = "streams over HTTP, 2 models routed"

  module_function

  def enabled?
    ENV.fetch("BENCH_SERVER", "1") == "1"
  end

  # The rows, at `threads` threads: one model, then two routed (each left out when its
  # variable is 0).
  def rows(threads)
    streams = Bench.list("BENCH_STREAMS", STREAMS).map(&:to_i)
    rows = ENV.fetch("BENCH_SERVER_SINGLE", "1") == "1" ? single_rows(streams, threads) : []
    ENV.fetch("BENCH_SERVER_ROUTED", "1") == "1" ? rows + routed_rows(streams, threads) : rows
  end

  # The load on one model (BENCH_SERVER_MODEL).
  def single_rows(streams, threads)
    path = Elelem::Models.fetch(ENV.fetch("BENCH_SERVER_MODEL", MODEL))
    rows = with_servers(path, streams.max, threads) do
      PORTS.each_value { |port| load(port, 1, rounds: 1, max_tokens: 8) } # warm-up
      streams.flat_map { |n| stream_rows(n) }
    end
    name = File.basename(path, ".gguf")
    (rows + speedup_rows(rows, streams)).map { |r| r.merge("model" => name, "threads" => threads) }
  end

  # The same load over ROUTED_MODELS served together, each request routed by its `model`.
  def routed_rows(streams, threads)
    paths = ROUTED_MODELS.map { |name| Elelem::Models.fetch(name) }
    models = paths.map { |path| File.basename(path, ".gguf") } # as both servers name a --models-dir's files
    rows = with_routers(paths, streams.max, threads) do
      ROUTED_PORTS.each_value do |port| # warm-up, which loads each model
        models.each { |model| load(port, 1, rounds: 1, max_tokens: 8, models: [model]) }
      end
      streams.flat_map { |n| stream_rows(n, ports: ROUTED_PORTS, models:, label: ROUTED_LABEL) }
    end
    (rows + speedup_rows(rows, streams, label: ROUTED_LABEL))
      .map { |r| r.merge("model" => models.join(" + "), "threads" => threads) }
  end

  # Both routers up at once over one directory holding the models' files (links to them).
  def with_routers(paths, parallel, threads, &)
    Dir.mktmpdir("bench-models") do |dir|
      paths.each { |path| File.symlink(path, File.join(dir, File.basename(path))) }
      elelem_serve(["--models-dir", dir, "--ttl=-1"], parallel, threads, port: ROUTED_PORTS["elelem"]) do
        LlamaServer.serve_router(dir, parallel:, n_ctx: Bench::N_CTX, threads:, port: ROUTED_PORTS["llama.cpp"], &)
      end
    end
  end

  # Both servers up at once (an idle one waits on a condition, taking no CPU).
  def with_servers(path, parallel, threads, &)
    elelem_serve(["-m", path], parallel, threads) do
      LlamaServer.serve(path, parallel:, n_ctx: Bench::N_CTX, threads:, port: PORTS["llama.cpp"], &)
    end
  end

  # `elelem serve MODELS` (its model flags) from this checkout, as a user runs it.
  def elelem_serve(models, parallel, threads, port: PORTS["elelem"])
    log = File.join(Reference::ROOT, "tmp", "elelem-serve-#{port}.log")
    pid = Process.spawn(RbConfig.ruby, "-I#{File.join(Reference::ROOT, "lib")}",
                        File.join(Reference::ROOT, "exe", "elelem"), "serve", *models, "--parallel", parallel.to_s,
                        "-c", Bench::N_CTX.to_s, "-t", threads.to_s, "--port", port.to_s,
                        %i[out err] => [log, "w"])
    LlamaServer.wait_healthy(port, pid, log)
    yield
  ensure
    LlamaServer.stop(pid) if pid
  end

  def stream_rows(clients, ports: PORTS, models: ["bench"], label: LABEL)
    runs = Array.new(Bench.reps) { ports.transform_values { |port| load(port, clients, models:) } }
    label = "#{clients} #{label}"
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
  def speedup_rows(rows, streams, label: LABEL)
    rate = ->(n) { rows.find { |r| r["metric"] == "#{n} #{label} tg#{MAX_TOKENS} t/s (all)" } }
    single = rate.call(streams.min)
    streams.drop(1).map do |n|
      { "metric" => "#{n} #{label} speedup over 1",
        "elelem" => rate.call(n)["elelem"] / single["elelem"],
        "llama.cpp" => rate.call(n)["llama.cpp"] / single["llama.cpp"] }
    end
  end

  def percentile(values, quantile)
    sorted = values.sort
    sorted[((sorted.size - 1) * quantile).round]
  end

  # `clients` threads released together, each sending `rounds` requests one after another
  # (to `models` in turn, each client starting at another): the generated tokens of all per
  # second from the release to the last reply, and each request's time to first token.
  def load(port, clients, rounds: ROUNDS, max_tokens: MAX_TOKENS, models: ["bench"])
    gate = Queue.new
    threads = Array.new(clients) do |client|
      Thread.new do
        gate.pop
        Array.new(rounds) do |round|
          request(port, prompt(client, round), max_tokens, models[(client + round) % models.size])
        end
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
  # usage, else llama-server's timings, else its chunks of text), from `model` (a router's
  # name for it; a server of one model takes any).
  def request(port, prompt, max_tokens, model)
    post = Net::HTTP::Post.new("/v1/completions", "content-type" => "application/json")
    post.body = JSON.generate({ model:, prompt:, max_tokens:, temperature: 0, ignore_eos: true,
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
