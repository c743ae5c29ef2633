# frozen_string_literal: true

require "English"
require "json"
require "open3"
require_relative "reference"

# `rake bench`: elelem, through its public Ruby API, side by side with llama.cpp
# (the reference built from the same pinned source, its defaults) in one run,
# interleaved A B A B after a warm-up, medians of BENCH_REPS (default 3).
# A benchmark, not a test: it prints a table of ratios and writes tmp/bench.json.
module Bench
  MODELS = %w[qwen2.5-coder-0.5b qwen2.5-coder-1.5b gemma-3-270m].freeze
  N_CTX = 4096
  PP = 512
  TG = 128
  TG_DEPTH = 32
  DEPTHS = [1024, 4096].freeze
  TTFT_PROMPT = 16
  RSS_TOKENS = 64
  # Ratios (elelem / llama.cpp) each figure should reach: higher is better for
  # speeds, lower for times and memory.
  TARGETS = {
    "pp512 t/s" => [:min, 0.95], "tg128 t/s" => [:min, 1.0], "tg32@depth t/s" => [:min, 1.0],
    "ttft16 ms" => [:max, 1.0], "open warm ms" => [:max, 1.0],
    "chat turn-2 ttft ms (cached vs cold, both elelem)" => [:max, 1.0],
    "open cold ms" => [:max, 1.0], "peak RSS MiB" => [:max, 1.0], "compute buffer MiB" => [:max, 1.0],
    "KV cache MiB" => [:max, 1.0]
  }.freeze

  module_function

  def reps
    Integer(ENV.fetch("BENCH_REPS", "3"))
  end

  def list(name, default)
    ENV.fetch(name, default.join(",")).split(",")
  end

  def median(values)
    values.sort[values.size / 2]
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def random_ids(model, count, seed)
    rng = Random.new(seed)
    vocab = model.info[:n_vocab]
    Array.new(count) { rng.rand(vocab) }
  end

  # elelem, through its public Ruby API.
  module Ours
    module_function

    def pp(model, tokens)
      ids = Bench.random_ids(model, tokens, tokens)
      t = Bench.now
      model.generate(ids, max_tokens: 1)
      tokens / (Bench.now - t)
    end

    # Decode speed from the first generated token to the last, as Ruby sees them arrive.
    def tg(model, tokens, depth)
      stamps = []
      prompt = Bench.random_ids(model, [depth, 1].max, depth + 1)
      model.generate(prompt, max_tokens: tokens + 1, ignore_eos: true) { stamps << Bench.now }
      tokens / (stamps.last - stamps.first)
    end

    def ttft_ms(model)
      ids = Bench.random_ids(model, TTFT_PROMPT, 16)
      t = Bench.now
      model.generate(ids, max_tokens: 1)
      (Bench.now - t) * 1000
    end

    # Time to first token of a chat's second turn, with the first turn's keys and
    # values kept (`reuse_prefix`) and without.
    def second_turn_ttft_ms(model, reuse:)
      messages = [{ role: "user", content: "Write a Ruby method that reverses a string." }]
      messages += [{ role: "assistant", content: model.chat(messages, max_tokens: 48) },
                   { role: "user", content: "Now make it handle nil." }]
      t = Bench.now
      model.generate(model.chat_prompt(messages), max_tokens: 1, reuse_prefix: reuse)
      (Bench.now - t) * 1000
    end

    def open_ms(path, threads)
      t = Bench.now
      Elelem.open(path, n_ctx: N_CTX, n_threads: threads).close
      (Bench.now - t) * 1000
    end
  end

  # llama.cpp, through tools/reference/reference.cpp.
  module Peer
    module_function

    # `shape` is { n_ctx:, pp:, tg:, depth: }.
    def bench(path, threads, shape)
      args = [shape[:n_ctx] || N_CTX, shape[:pp] || 0, shape[:tg] || 0, shape[:depth] || 0]
      Reference.run("bench", path, threads, *args, 1).lines.to_h do |line|
        key, value = line.split
        [key, Float(value)]
      end
    end

    def memory(path)
      log, status = Open3.capture2e({ "ELELEM_REFERENCE_VERBOSE" => "1" }, Reference::BINARY, "generate", path,
                                    "1,2,3", "2", N_CTX.to_s, "2")
      raise "reference generate failed" unless status.success?

      mib = ->(re) { log.scan(re).flatten.sum(&:to_f) }
      { kv: mib.call(/KV buffer size =\s*([\d.]+) MiB/), compute: mib.call(/CPU compute buffer size =\s*([\d.]+) MiB/) }
    end
  end

  def drop_caches
    system("sync")
    File.write("/proc/sys/vm/drop_caches", "3")
    true
  rescue SystemCallError
    false
  end

  def peak_rss_mib(*command)
    _, err, status = Open3.capture3("/usr/bin/time", "-v", *command)
    raise "#{command.first} failed: #{err[-500..]}" unless status.success?

    err[/Maximum resident set size \(kbytes\): (\d+)/, 1].to_i / 1024.0
  end

  def rss_pair(path, threads)
    ids = (1..16).to_a.join(",")
    ruby = ["ruby", "-I#{File.join(Reference::ROOT, "lib")}", "-relelem", "-e",
            "Elelem.open(ARGV[0], n_ctx: #{N_CTX}, n_threads: #{threads}) { |m| " \
            "m.generate((1..16).to_a, max_tokens: #{RSS_TOKENS}, ignore_eos: true) }", path]
    [peak_rss_mib(*ruby),
     peak_rss_mib(Reference::BINARY, "generate", path, ids, RSS_TOKENS.to_s, N_CTX.to_s, threads.to_s, "1")]
  end

  def interleaved(rows, label, elelem, reference)
    ours = []
    theirs = []
    reps.times do
      ours << elelem.call
      theirs << reference.call
    end
    rows << { "metric" => label, "elelem" => median(ours), "llama.cpp" => median(theirs) }
  end

  def speed_rows(path, threads)
    rows = []
    Elelem.open(path, n_ctx: N_CTX, n_threads: threads) do |model|
      Ours.pp(model, 64) && Ours.tg(model, 8, 0) # warm-up
      interleaved(rows, "pp512 t/s", -> { Ours.pp(model, PP) }, -> { Peer.bench(path, threads, pp: PP)["pp"] })
      interleaved(rows, "tg128 t/s", -> { Ours.tg(model, TG, 0) }, -> { Peer.bench(path, threads, tg: TG)["tg"] })
      interleaved(rows, "ttft16 ms", -> { Ours.ttft_ms(model) },
                  -> { 1000.0 * TTFT_PROMPT / Peer.bench(path, threads, pp: TTFT_PROMPT)["pp"] })
      rows.concat(memory_rows(model.stats))
      prefix_reuse_row(rows, model)
    end
    rows
  end

  # Beyond the peer: the second turn of a chat with and without the first turn's cache.
  def prefix_reuse_row(rows, model)
    interleaved(rows, "chat turn-2 ttft ms (cached vs cold, both elelem)",
                -> { Ours.second_turn_ttft_ms(model, reuse: true) },
                -> { Ours.second_turn_ttft_ms(model, reuse: false) })
  end

  def memory_rows(stats)
    [{ "metric" => "compute buffer MiB", "elelem" => stats[:compute_buffer_bytes] / 1_048_576.0 },
     { "metric" => "KV cache MiB", "elelem" => stats[:kv_cache_bytes] / 1_048_576.0 }]
  end

  def depth_rows(path, threads)
    list("BENCH_DEPTHS", DEPTHS).map(&:to_i).map do |depth|
      n_ctx = depth + 256
      Elelem.open(path, n_ctx:, n_threads: threads) do |model|
        rows = []
        interleaved(rows, "tg#{TG_DEPTH}@#{depth} t/s", -> { Ours.tg(model, TG_DEPTH, depth) },
                    -> { Peer.bench(path, threads, n_ctx:, tg: TG_DEPTH, depth:)["tg"] })
        rows.first
      end
    end
  end

  def open_rows(path, threads)
    rows = []
    interleaved(rows, "open warm ms", -> { Ours.open_ms(path, threads) },
                -> { Peer.bench(path, threads, {})["load_ms"] })
    if drop_caches
      interleaved(rows, "open cold ms", -> { drop_caches && Ours.open_ms(path, threads) },
                  -> { drop_caches && Peer.bench(path, threads, {})["load_ms"] })
    end
    rows
  end

  def model_rows(name, threads)
    path = Elelem::Models.fetch(name)
    rows = speed_rows(path, threads) + depth_rows(path, threads)
    if threads == 2
      rows += open_rows(path, threads)
      ours, theirs = rss_pair(path, threads)
      rows << { "metric" => "peak RSS MiB", "elelem" => ours, "llama.cpp" => theirs }
      memory = Peer.memory(path)
      rows.find { |r| r["metric"] == "KV cache MiB" }["llama.cpp"] = memory[:kv]
      rows.find { |r| r["metric"] == "compute buffer MiB" }["llama.cpp"] = memory[:compute]
    end
    rows.map { |r| r.merge("model" => name, "threads" => threads) }
  end

  def verdict(row)
    kind, target = TARGETS.fetch(row["metric"].sub(/@\d+/, "@depth"))
    return ["", ""] unless row["elelem"] && row["llama.cpp"]&.positive?

    ratio = row["elelem"] / row["llama.cpp"]
    met = kind == :min ? ratio >= target : ratio <= target
    [format("%.2f", ratio), "#{kind == :min ? "≥" : "≤"} #{target} #{met ? "yes" : "NO"}"]
  end

  def table(rows)
    header = "| model | threads | metric | elelem | llama.cpp | ratio | target |\n|---|---|---|---|---|---|---|\n"
    header + rows.map do |r|
      ratio, target = verdict(r)
      fmt = ->(v) { v ? format("%.1f", v) : "n/a" }
      "| #{r["model"]} | #{r["threads"]} | #{r["metric"]} | #{fmt.call(r["elelem"])} | " \
        "#{fmt.call(r["llama.cpp"])} | #{ratio} | #{target} |"
    end.join("\n")
  end

  def machine
    cpu = File.read("/proc/cpuinfo")[/model name\s*:\s*(.+)/, 1]
    "#{cpu}, #{Etc.nprocessors} cores, #{`uname -sr`.strip}, load before: #{File.read("/proc/loadavg").split.first}"
  end

  def run
    Reference.build
    models = list("BENCH_MODELS", MODELS)
    rows = models.product(list("BENCH_THREADS", %w[1 2]).map(&:to_i)).flat_map do |name, threads|
      warn "bench: #{name}, #{threads} thread(s)"
      model_rows(name, threads)
    end
    report = { "machine" => machine, "time" => Time.now.utc.to_s, "reps" => reps, "rows" => rows }
    FileUtils.mkdir_p(File.join(Reference::ROOT, "tmp"))
    File.write(File.join(Reference::ROOT, "tmp", "bench.json"), JSON.pretty_generate(report))
    File.write(File.join(Reference::ROOT, "tmp", "bench.md"), "#{report["machine"]}\n\n#{table(rows)}\n")
    puts report["machine"], "", table(rows)
  end
end
