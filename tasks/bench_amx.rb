# frozen_string_literal: true

require "json"
require "open3"
require "rbconfig"
require_relative "reference"
require_relative "../spec/support/deny_amx_permission"

# `rake bench`'s AMX rows, where ggml's AMX kernels are in use: prompt and decode speed
# with AMX and without it, elelem beside llama.cpp each time. AMX is a process's
# choice, so each side runs in a child process, the AMX-off ones under a seccomp filter
# that makes Linux refuse the tile-data permission (spec/support/deny_amx_permission.c):
# ggml then offers no AMX buffer to either engine, exactly as on a kernel that refuses
# it, and both run their AVX-512 paths. Children with and without AMX take turns.
module BenchAmx
  # The models: the 1.5B's matrices are Q4_K and Q6_K, which AMX takes; the 0.5B's are
  # mostly Q5_0, which it does not (its Q8_0 head and few Q4_K/Q6_K matrices it does).
  MODELS = %w[qwen2.5-coder-1.5b qwen2.5-coder-0.5b].freeze
  PROMPTS = [512, 64].freeze
  TG = 128

  module_function

  def enabled?
    ENV.fetch("BENCH_AMX", "1") == "1" && Elelem.build_profile[:isa].include?("AMX_INT8")
  end

  def rows(threads)
    denied = DenyAmxPermission.executable(Reference::ROOT)
    Bench.list("BENCH_AMX_MODELS", MODELS).flat_map do |name|
      path = Elelem::Models.fetch(name)
      turns = Array.new(Bench.reps) { [child(path, threads), child(path, threads, denied)] }
      on, off = turns.transpose.map { |side| medians(side) }
      compare(on, off).map { |r| r.merge("model" => name, "threads" => threads) }
    end
  end

  # Per metric: llama.cpp's and ours without AMX, and each engine's speed with AMX
  # against without.
  def compare(on, off)
    on.keys.flat_map do |metric|
      [{ "metric" => "AMX off: #{metric}", "elelem" => off[metric]["elelem"], "llama.cpp" => off[metric]["llama.cpp"] },
       { "metric" => "#{metric} AMX on vs off (both elelem)", "elelem" => on[metric]["elelem"],
         "llama.cpp" => off[metric]["elelem"] },
       { "metric" => "#{metric} AMX on vs off (both llama.cpp)", "elelem" => on[metric]["llama.cpp"],
         "llama.cpp" => off[metric]["llama.cpp"] }]
    end
  end

  def medians(runs)
    runs.first.keys.to_h do |metric|
      [metric, %w[elelem llama.cpp].to_h { |side| [side, Bench.median(runs.map { |r| r[metric][side] })] }]
    end
  end

  # One turn in a fresh process (under `prefix`): each figure once per side, after a warm-up.
  def child(path, threads, *prefix)
    code = "require 'json'; require './tasks/bench'; puts JSON.generate(BenchAmx.measure(ARGV[0], " \
           "Integer(ARGV[1])))"
    out, err, status = Open3.capture3({ "BENCH_REPS" => "1" }, *prefix, RbConfig.ruby, "-I", "lib", "-relelem",
                                      "-e", code, path, threads.to_s, chdir: Reference::ROOT)
    raise "AMX bench child failed: #{err[-1000..]}" unless status.success?

    JSON.parse(out.lines.last)
  end

  def measure(path, threads)
    Bench.with_both(path, threads, Bench::N_CTX) do |_model, ours, peer|
      figures = PROMPTS.to_h { |n| ["pp#{n} t/s", ->(side) { side.prompt_rate(n) }] }
      figures["tg#{TG} t/s"] = ->(side) { side.decode_rate(TG) }
      figures.transform_values { |rate| { "elelem" => rate.call(ours), "llama.cpp" => rate.call(peer) } }
    end
  end
end
