# frozen_string_literal: true

require "open3"
require_relative "reference"
require_relative "../spec/support/rpc_workers"

# `rake bench`'s RPC rows: a model spread over 2 and 3 `elelem rpc-server` workers on
# loopback, every layer on them (llama.cpp's default), elelem beside llama.cpp's `--rpc`
# over the same workers. A worker serves one client at a time, so the two sides take turns,
# each opening the model afresh. Loopback has no network cost: these figures show what the
# split itself costs (a graph sent to each worker per pass, activations copied between
# them), not what a real network adds.
module BenchRpc
  MODEL = "qwen2.5-coder-0.5b"
  WORKERS = [2, 3].freeze
  PP = 128
  TG = 32

  module_function

  def enabled? = ENV.fetch("BENCH_RPC", "1") == "1"

  def rows(threads)
    name = ENV.fetch("BENCH_RPC_MODEL", MODEL)
    path = Elelem::Models.fetch(name)
    WORKERS.flat_map do |count|
      RpcWorkers.with(count) do |endpoints|
        turns = Array.new(Bench.reps) { [ours(path, threads, endpoints), theirs(path, threads, endpoints)] }
        setup_rows("#{count} RPC workers (loopback)", turns, memory(path, endpoints))
          .map { |r| r.merge("model" => name, "threads" => threads) }
      end
    end
  end

  def setup_rows(label, turns, (ours_mib, theirs_mib), tokens: { "pp" => PP, "tg" => TG })
    speed = tokens.map do |key, count|
      { "metric" => "#{label}: #{key}#{count} t/s", "elelem" => Bench.median(turns.map { |o, _| o[key] }),
        "llama.cpp" => Bench.median(turns.map { |_, t| t[key] }) }
    end
    speed + %w[host devices].map do |side|
      { "metric" => "#{label}: #{side} MiB (weights, KV cache, compute)", "elelem" => ours_mib[side],
        "llama.cpp" => theirs_mib[side] }
    end
  end

  def ours(path, threads, endpoints)
    Elelem.open(path, n_ctx: Bench::N_CTX, n_threads: threads, rpc: endpoints) do |model|
      measure(Elelem::Bench.new(model))
    end
  end

  def theirs(path, threads, endpoints)
    Bench::Peer.open(path, threads, Bench::N_CTX, extra: ["--rpc", endpoints.join(",")]) { |peer| measure(peer) }
  end

  def measure(side)
    side.prompt_rate(64) && side.decode_rate(8) # warm-up
    { "pp" => side.prompt_rate(PP), "tg" => side.decode_rate(TG) }
  end

  # Host and device memory, MiB: ours from Model#stats after a pass, llama.cpp's from its log.
  def memory(path, endpoints)
    ours = Elelem.open(path, n_ctx: Bench::N_CTX, rpc: endpoints) do |model|
      model.generate([1, 2, 3], max_tokens: 2)
      model.stats[:backends].partition { |b| b[:name] == "CPU" }.map do |rows|
        rows.sum { |b| b[:weights_bytes] + b[:cache_bytes] + b[:compute_buffer_bytes] } / 1_048_576.0
      end
    end
    [%w[host devices].zip(ours).to_h, peer_memory(path, endpoints)]
  end

  def peer_memory(path, endpoints)
    log, status = Open3.capture2e({ "ELELEM_REFERENCE_VERBOSE" => "1" }, Reference.binary, "--rpc", endpoints.join(","),
                                  "generate", path, "1,2,3", "2", Bench::N_CTX.to_s, "2")
    raise "reference generate failed: #{log[-500..]}" unless status.success?

    sizes = log.scan(/(\S+)\s+(?:model|KV|compute|output) buffer size =\s*([\d.]+) MiB/)
    devices, host = sizes.partition { |buffer, _| buffer.start_with?("RPC") }
    { "host" => host.sum { |_, mib| mib.to_f }, "devices" => devices.sum { |_, mib| mib.to_f } }
  end
end
