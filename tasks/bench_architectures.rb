# frozen_string_literal: true

require "fileutils"
require_relative "reference"

# `rake bench`'s rows of the 2026 architectures at the sizes people run: a hybrid (LFM2-350M's
# shape: short convolutions beside attention) and a mixture of experts (a Qwen3-MoE of 0.9B
# weights, 0.3B used per token), random weights in Q4_K written by the testkit
# (`canary::bench_models`, into tmp/bench-models once). Beside llama.cpp: prompt and decode
# speed, then the memory each engine keeps per context (KV cache, recurrent state, compute
# buffer; llama.cpp's from its log).
module BenchArchitectures
  DIR = File.join(Reference::ROOT, "tmp", "bench-models")
  # Within the context length the testkit writes (2048).
  N_CTX = 2048

  module_function

  def enabled? = ENV.fetch("BENCH_ARCHITECTURES", "1") == "1"

  def rows(threads)
    write_models
    Dir[File.join(DIR, "*.gguf")].flat_map do |path|
      (speed_rows(path, threads) + memory_rows(path))
        .map { |r| r.merge("model" => File.basename(path, ".gguf"), "threads" => threads) }
    end
  end

  def write_models
    system("cargo", "run", "--quiet", "--release", "--locked", "-p", "elelem-testkit", "--example",
           "write_bench_models", "--", DIR, exception: true)
  end

  def speed_rows(path, threads)
    Bench.with_both(path, threads, N_CTX) do |_model, ours, peer|
      [Bench.interleaved("pp#{Bench::PP} t/s", ours, peer) { |side| side.prompt_rate(Bench::PP) },
       Bench.interleaved("tg#{Bench::TG} t/s", ours, peer) { |side| side.decode_rate(Bench::TG) }]
    end
  end

  # Each engine's memory after a pass at Bench::N_CTX, as the models' memory rows.
  def memory_rows(path)
    stats = Elelem.open(path, n_ctx: Bench::N_CTX) do |model|
      model.generate([1, 2, 3], max_tokens: 2)
      model.stats
    end
    theirs = Bench.peer_memory(path)
    mib = ->(bytes) { bytes / 1_048_576.0 }
    rows = [{ "metric" => "KV cache MiB", "elelem" => mib[stats[:kv_cache_bytes]], "llama.cpp" => theirs[:kv] },
            { "metric" => "compute buffer MiB", "elelem" => mib[stats[:compute_buffer_bytes]],
              "llama.cpp" => theirs[:compute] }]
    return rows unless stats[:recurrent_state_bytes].positive?

    rows << { "metric" => "recurrent state MiB", "elelem" => mib[stats[:recurrent_state_bytes]],
              "llama.cpp" => theirs[:rs] }
  end
end
