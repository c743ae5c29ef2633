# frozen_string_literal: true

require "English"
require "json"
require "open3"
require_relative "reference"
require_relative "bench_embeddings"
require_relative "bench_speculative"
require_relative "bench_server"
require_relative "bench_amx"
require_relative "bench_rpc"
require_relative "bench_vulkan"
require_relative "bench_architectures"
require_relative "bench_vision"

# `rake bench`: elelem, through its public Ruby API (Elelem::Bench), side by
# side with llama.cpp (the reference built from the same pinned source, its
# defaults, kept loaded in a `serve` process) in one run: each figure measured
# A B A B after a warm-up, medians of BENCH_REPS (default 3).
# A benchmark, not a test: it prints a table of ratios and writes tmp/bench.json
# and tmp/bench.md. At 2 threads every figure; at 1, the speeds without depth.
module Bench
  MODELS = %w[qwen2.5-coder-0.5b qwen2.5-coder-1.5b gemma-3-270m].freeze
  N_CTX = 4096
  PP = 512
  TG = 128
  TG_DEPTH = 32
  DEPTHS = [1024, 4096].freeze
  # Depths of the attention-mode rows (one model: BENCH_ATTN_MODEL, the 0.5B by default).
  ATTN_DEPTHS = [0, 1024, 4096, 16_384].freeze
  TTFT_PROMPT = 16
  # Sequences generated together, and the tokens each generates.
  STREAMS = [1, 2, 4, 8].freeze
  # How many spinning processes the contended rows run beside (BENCH_LOADS).
  LOADS = [1, 2, 4].freeze
  TG_STREAM = 64
  RSS_TOKENS = 64
  # Ratios (elelem / llama.cpp) each figure should reach: higher is better for
  # speeds, lower for times and memory.
  TARGETS = {
    "pp512 t/s" => [:min, 0.95], "tg128 t/s" => [:min, 1.0], "tg32@depth t/s" => [:min, 1.0],
    "ttft16 ms" => [:max, 1.0], "open warm ms" => [:max, 1.0], "open cold ms" => [:max, 1.0],
    "streams tg64 t/s (all)" => [:min, 1.0],
    "chat turn-2 ttft ms (cached vs cold, both elelem)" => [:max, 1.0],
    "peak RSS MiB" => [:max, 1.0], "compute buffer MiB" => [:max, 1.0], "KV cache MiB" => [:max, 1.0],
    "recurrent state MiB" => [:max, 1.0],
    "schema mask p50 µs" => [:max, 1.0], "schema mask p99 µs" => [:max, 1.0],
    "decode t/s under a schema" => [:min, 1.0],
    "GBNF grammar mask p50 µs" => [:max, 1.0], "GBNF grammar mask p99 µs" => [:max, 1.0],
    "decode t/s under a GBNF grammar" => [:min, 1.0],
    "tg128 t/s with a JSON Schema vs without (both elelem)" => [:min, 0.9],
    "tg32@depth t/s best mode" => [:min, 1.0],
    "tg128 t/s, one core busy" => [:min, 1.0], "tg32@depth t/s, one core busy" => [:min, 1.0],
    "embed 256×64 texts/s batch 1" => [:min, 1.0], "embed 256×64 texts/s batch 32" => [:min, 1.0],
    "embed peak RSS MiB" => [:max, 1.0],
    # Speculative decoding (BenchSpeculative), for code to complete and for edits alike.
    "tg64 t/s plain" => [:min, 1.0],
    "tg64 t/s 0.5B draft k=4 vs llama.cpp's speculative" => [:min, 1.0],
    "tg64 t/s 0.5B draft k=4 vs llama.cpp plain" => [:min, 1.5],
    "tg64 t/s 0.5B draft adaptive vs llama.cpp's speculative k=4" => [:min, 1.0],
    "tg64 t/s lookup k=4 vs llama.cpp's lookup" => [:min, 1.0],
    "tg64 t/s lookup k=4 vs llama.cpp plain" => [:min, 1.5],
    "tg64 t/s lookup adaptive vs llama.cpp's lookup k=4" => [:min, 1.0],
    "tg64 t/s copy adaptive vs llama.cpp plain" => [:min, 1.5],
    "tg64 t/s copy adaptive vs llama.cpp's lookup k=4" => [:min, 1.0],
    # Where AMX is in use (BenchAmx): each engine without it, and each with it against without.
    "AMX off: pp512 t/s" => [:min, 0.95], "AMX off: pp64 t/s" => [:min, 0.95], "AMX off: tg128 t/s" => [:min, 1.0],
    "pp512 t/s AMX on vs off (both elelem)" => [:min, 1.0], "pp64 t/s AMX on vs off (both elelem)" => [:min, 1.0],
    # `elelem serve` beside llama-server under the same load (BenchServer).
    "streams over HTTP tg64 t/s (all)" => [:min, 1.0],
    "streams over HTTP ttft p50 ms" => [:max, 1.0], "streams over HTTP ttft p99 ms" => [:max, 1.0],
    # A prompt with an image through projectors of SmolVLM-256M's, Qwen2.5-VL-3B's and Qwen3-VL-2B's sizes
    # (BenchVision).
    "image encode ms" => [:max, 1.0], "pp t/s with an image" => [:min, 0.95], "tg64 t/s after an image" => [:min, 1.0],
    # ... and a prompt with audio through Qwen2-Audio's encoder (BenchVision too).
    "audio encode ms" => [:max, 1.0], "pp t/s with audio" => [:min, 0.95], "tg64 t/s after audio" => [:min, 1.0]
  }.freeze
  # A schema whose values run past 128 tokens, for decode speed under a constraint.
  LONG_SCHEMA = { type: "array", minItems: 40, maxItems: 40,
                  items: { type: "object", properties: { id: { type: "integer", minimum: 0, maximum: 999 },
                                                         name: { type: "string", maxLength: 12 } },
                           required: %w[id name], additionalProperties: false } }.freeze

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

  # llama.cpp, kept loaded in a tools/reference `serve` process: the same
  # questions as Elelem::Bench, answered without a reload between repetitions.
  class Peer
    attr_reader :load_ms

    def self.open(path, threads, n_ctx, flash_attn: true, cache_type: :f16, extra: [])
      peer = new(path, threads, n_ctx, flash_attn:, cache_type:, extra:)
      yield peer
    ensure
      peer&.close
    end

    # `cache_type`: llama.cpp's -ctk and -ctv (its KV cache stores K and V as this); `extra`:
    # more of the driver's options (`--rpc`).
    def initialize(path, threads, n_ctx, flash_attn: true, cache_type: :f16, extra: [])
      @path = path
      @threads = threads
      @io = IO.popen([Reference.binary, "serve", path, threads.to_s, n_ctx.to_s, "-fa", flash_attn ? "on" : "off",
                      "-ctk", cache_type.to_s, "-ctv", cache_type.to_s, *extra], "r+")
      @load_ms = Float(@io.gets.to_s[/\Aload_ms (\S+)/, 1])
    end

    def prompt_rate(tokens)
      ask("pp #{tokens}")
    end

    def first_token_ms(tokens)
      1000.0 * tokens / prompt_rate(tokens)
    end

    def decode_rate(tokens, depth: 0)
      ask("tg #{tokens} #{depth}")
    end

    # The reference driver's lockstep mode on `streams` random prompts of 16 ids: one
    # context, a sequence each, one llama_batch per pass (as Elelem::Bench#batch_rate).
    def batch_rate(streams, tokens)
      prompts = Array.new(streams) { Array.new(16) { rand(1000..9000) }.join(",") }
      _, err, status = Open3.capture3(Reference.binary, "lockstep", @path, tokens.to_s, N_CTX.to_s, @threads.to_s,
                                      "1", *prompts)
      raise "reference lockstep failed: #{err}" unless status.success?

      streams * tokens / Float(err[/elapsed_s (\S+)/, 1])
    end

    def close
      @io.close
      raise "reference serve failed" unless $CHILD_STATUS.success?
    end

    private

    def ask(line)
      @io.puts(line)
      answer = @io.gets.to_s
      raise "reference serve: #{line} -> #{answer.inspect}" unless answer.start_with?(line[0, 2])

      Float(answer.split[1])
    end
  end

  # The compute buffer, KV cache and recurrent state llama.cpp reports in its log.
  def peer_memory(path)
    log, status = Open3.capture2e({ "ELELEM_REFERENCE_VERBOSE" => "1" }, Reference.binary, "generate", path,
                                  "1,2,3", "2", N_CTX.to_s, "2")
    raise "reference generate failed" unless status.success?

    mib = ->(re) { log.scan(re).flatten.sum(&:to_f) }
    { kv: mib.call(/KV buffer size =\s*([\d.]+) MiB/), rs: mib.call(/RS buffer size =\s*([\d.]+) MiB/),
      compute: mib.call(/CPU compute buffer size =\s*([\d.]+) MiB/) }
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
     peak_rss_mib(Reference.binary, "generate", path, ids, RSS_TOKENS.to_s, N_CTX.to_s, threads.to_s, "1")]
  end

  # One row: `measure` asked of elelem and of llama.cpp in turn, reps times.
  def interleaved(label, ours, theirs, &measure)
    pairs = Array.new(reps) { [measure.call(ours), measure.call(theirs)] }
    { "metric" => label, "elelem" => median(pairs.map(&:first)), "llama.cpp" => median(pairs.map(&:last)) }
  end

  def with_both(path, threads, n_ctx, flash_attn: true, cache_type: :f16, adaptive_threads: true)
    Elelem.open(path, n_ctx:, n_threads: threads, adaptive_threads:, flash_attn:, cache_type_k: cache_type,
                      cache_type_v: cache_type) do |model|
      Peer.open(path, threads, n_ctx, flash_attn:, cache_type:) do |peer|
        ours = Elelem::Bench.new(model)
        [ours, peer].each { |side| side.prompt_rate(64) && side.decode_rate(8) } # warm-up
        yield model, ours, peer
      end
    end
  end

  def speed_rows(path, threads)
    with_both(path, threads, N_CTX) do |model, ours, peer|
      rows = [interleaved("pp#{PP} t/s", ours, peer) { |side| side.prompt_rate(PP) },
              interleaved("tg#{TG} t/s", ours, peer) { |side| side.decode_rate(TG) },
              interleaved("ttft#{TTFT_PROMPT} ms", ours, peer) { |side| side.first_token_ms(TTFT_PROMPT) }]
      overhead = median(Array.new(reps) { ours.ruby_overhead_us(RSS_TOKENS) })
      rows << { "metric" => "Ruby overhead µs/token", "elelem" => overhead }
      rows += memory_rows(model.stats)
      rows << prefix_reuse_row(ours) if model.chat_template
      rows
    end
  end

  # Decode after 1024 then 4096 tokens of context: each side fills its
  # context once and keeps it between repetitions (a sliding-window model
  # refills, on both sides).
  def depth_rows(path, threads)
    depths = list("BENCH_DEPTHS", DEPTHS).map(&:to_i)
    return [] if depths.empty?

    with_both(path, threads, depths.max + 256) do |_model, ours, peer|
      depths.sort.map do |depth|
        interleaved("tg#{TG_DEPTH}@#{depth} t/s", ours, peer) { |side| side.decode_rate(TG_DEPTH, depth:) }
      end
    end
  end

  # The attention modes attention_rows measures: F16 KV with flash attention on and off,
  # and a q8_0 KV cache (llama.cpp's -ctk q8_0 -ctv q8_0) with flash attention, which
  # gives other bits than F16 (each engine's the other's in the same mode).
  ATTN_MODES = { "fa on" => [true, :f16], "fa off" => [false, :f16], "q8_0 KV" => [true, :q8_0] }.freeze

  # Decode at depth in each attention mode (llama.cpp's -fa on and off, and -ctk/-ctv q8_0;
  # elelem's flash_attn: true and false, and cache_type_k/v: :q8_0), then each engine's best
  # F16 mode against the other's.
  def attention_rows(path, threads)
    depths = list("BENCH_ATTN_DEPTHS", ATTN_DEPTHS).map(&:to_i).sort
    modes = ATTN_MODES.map do |label, (flash_attn, cache_type)|
      with_both(path, threads, depths.max + 256, flash_attn:, cache_type:) do |_model, ours, peer|
        depths.map do |depth|
          interleaved("tg#{TG_DEPTH}@#{depth} t/s #{label}", ours, peer) { |side| side.decode_rate(TG_DEPTH, depth:) }
        end
      end
    end
    best = modes.first(2).transpose.zip(depths).map do |pair, depth|
      { "metric" => "tg#{TG_DEPTH}@#{depth} t/s best mode", "elelem" => pair.map { |r| r["elelem"] }.max,
        "llama.cpp" => pair.map { |r| r["llama.cpp"] }.max }
    end
    modes.flatten + best
  end

  # Decode while LOAD other processes spin (BENCH_LOADS, default 1, 2 and 4 on 2 threads: a
  # server shares its cores with Ruby threads and other processes): elelem's default (its
  # thread count adapting), fixed at `threads`, and on one thread, beside llama.cpp on
  # `threads` and on one, all in turn under the same load, so each row compares what the
  # same moment gave. The default should never fall below one thread's speed, the last row.
  def contended_rows(path, threads)
    return [] if threads < 2

    depth = list("BENCH_DEPTHS", DEPTHS).map(&:to_i).min
    loads = list("BENCH_LOADS", LOADS).map(&:to_i)
    with_contenders(path, threads) do |sides|
      loads.flat_map do |load|
        with_spinners(load) { load_rows(sides, load) + contended_depth_rows(sides, load, depth) }
      end
    end
  end

  # The rows of one load: decode rates of every side, each rep in turn.
  def load_rows(sides, load)
    samples = contended_samples(sides, sides.keys)
    rate = median_rates(samples)
    label = "tg#{TG_DEPTH} t/s, load #{load}"
    [{ "metric" => label, "elelem" => rate[:default], "llama.cpp" => rate[:peer] },
     { "metric" => "#{label}, fixed threads", "elelem" => rate[:fixed], "llama.cpp" => rate[:peer] },
     { "metric" => "#{label}, 1 thread", "elelem" => rate[:one], "llama.cpp" => rate[:peer_one] },
     { "metric" => "default ÷ 1 thread, load #{load} (elelem)", "elelem" => default_over_one(samples) }]
  end

  # Decode at depth, where a lone query's flash attention is split into chunks of cells:
  # on fewer threads than configured, each computes its share of the configured count's.
  def contended_depth_rows(sides, load, depth)
    samples = contended_samples(sides, %i[default one peer], depth:)
    rate = median_rates(samples)
    label = "tg#{TG_DEPTH}@#{depth} t/s, load #{load}"
    [{ "metric" => label, "elelem" => rate[:default], "llama.cpp" => rate[:peer] },
     { "metric" => "#{label}, 1 thread", "elelem" => rate[:one] },
     { "metric" => "default ÷ 1 thread at depth #{depth}, load #{load} (elelem)",
       "elelem" => default_over_one(samples) }]
  end

  # Each repetition decodes on the sides named, one after another under the same load.
  # @return [Array<Hash{Symbol => Float}>] t/s by side, one hash per repetition
  def contended_samples(sides, names, depth: 0)
    Array.new(reps) { names.to_h { |name| [name, sides[name].decode_rate(TG_DEPTH, depth:)] } }
  end

  def median_rates(samples) = samples.first.keys.to_h { |name| [name, median(samples.map { |sample| sample[name] })] }

  # Each repetition's own ratio (the two measured back to back), then the median.
  def default_over_one(samples) = median(samples.map { |sample| sample[:default] / sample[:one] })

  # Both engines, opened and warmed, in each thread setting of the contended rows.
  def with_contenders(path, threads)
    Elelem.open(path, n_ctx: N_CTX, n_threads: threads) do |default|
      Elelem.open(path, n_ctx: N_CTX, n_threads: threads, adaptive_threads: false) do |fixed|
        Elelem.open(path, n_ctx: N_CTX, n_threads: 1) do |one|
          Peer.open(path, threads, N_CTX) do |peer|
            Peer.open(path, 1, N_CTX) do |peer_one|
              sides = { default: Elelem::Bench.new(default), fixed: Elelem::Bench.new(fixed),
                        one: Elelem::Bench.new(one), peer:, peer_one: }
              sides.each_value { |side| side.decode_rate(8) } # warm-up
              yield sides
            end
          end
        end
      end
    end
  end

  # Runs the block while `count` other processes spin, each on a core of its own if it can.
  def with_spinners(count)
    spinners = Array.new(count) { Process.spawn(RbConfig.ruby, "-e", "loop {}") }
    yield
  ensure
    spinners&.each do |pid|
      Process.kill(:KILL, pid)
      Process.wait(pid)
    end
  end

  # Continuous batching: generated tokens per second of 1, 2, 4 and 8 sequences decoded
  # together (elelem's generate_all; llama.cpp's lockstep driver, same passes), and our
  # speedup over one stream.
  def stream_rows(path, threads)
    streams = list("BENCH_STREAMS", STREAMS).map(&:to_i)
    Elelem.open(path, n_ctx: N_CTX, n_threads: threads, parallel: streams.max) do |model|
      Peer.open(path, threads, N_CTX) do |peer|
        ours = Elelem::Bench.new(model)
        ours.batch_rate(1, 8) # warm-up
        rows = streams.map do |n|
          interleaved("#{n} streams tg#{TG_STREAM} t/s (all)", ours, peer) { |side| side.batch_rate(n, TG_STREAM) }
        end
        single = rows.first["elelem"]
        rows + rows.drop(1).map do |row|
          { "metric" => "#{row["metric"][/\A\d+/]} streams speedup over 1 (elelem)",
            "elelem" => row["elelem"] / single }
        end
      end
    end
  end

  # Prompts of our own for the agreement row: code, prose, questions, lists.
  AGREEMENT_PROMPTS = [
    "def quicksort(arr):", "class Stack:\n    def __init__(self):", "SELECT name, email FROM users WHERE",
    "The capital of France is", "Once upon a time, a robot", "To install Ruby on Debian, run",
    "function debounce(fn, ms) {", "// Parse a CSV line into fields\n", "The three laws of thermodynamics are",
    "A haiku about autumn:\n", "Q: What is a monad?\nA:", "fn main() {\n    let v = vec![",
    "import numpy as np\n\ndef normalize(x):", "Dear team,\n\nThis week we", "The HTTP status code 418 means",
    "#include <stdio.h>\nint main(void) {", "Photosynthesis converts", "git rebase -i lets you",
    "def fizzbuzz(n):", "Recipe for pancakes:\n1.", "The difference between TCP and UDP is",
    "module Greeter\n  def self.hello(name)", "In 1969, Apollo 11", "A binary search tree is",
    "Steps to reverse a linked list:", "<html>\n<head>\n<title>", "The mitochondria is",
    "async function fetchJSON(url) {", "Why is the sky blue?", "# Monthly report\n\n## Summary\n",
    "public static int gcd(int a, int b) {", "The best way to learn a language is"
  ].freeze

  # Greedy replies in a batch of 8 beside the same requests alone: how many are
  # identical, and the top-two logit margin (alone) where the others part. (llama.cpp's
  # own batched passes part from its lone runs on the same sequences: the matrix and
  # attention kernels round differently for a pass of many rows.) `batch_invariant`
  # opens the model so, whose replies should all be identical.
  def agreement_rows(path, threads, batch_invariant: false)
    label = batch_invariant ? ", batch-invariant" : ""
    Elelem.open(path, n_ctx: N_CTX, n_threads: threads, parallel: 8, batch_invariant:) do |model|
      alone = AGREEMENT_PROMPTS.map { |p| model.complete(p, max_tokens: 32, ignore_eos: true, logprobs: 2) }
      together = AGREEMENT_PROMPTS.each_slice(8).flat_map do |group|
        model.generate_all(group, max_tokens: 32, ignore_eos: true)
      end
      margins = alone.zip(together).filter_map { |single, text| parting_margin(model, single, text) }
      [{ "metric" => "greedy replies identical alone and 8 together (of #{alone.size})#{label}",
         "elelem" => alone.size - margins.size },
       { "metric" => "top-two margin where they part, largest#{label}", "elelem" => margins.max || 0.0 }]
    end
  end

  # Batch-invariant generation (Elelem.open(..., batch_invariant: true)) beside llama.cpp's
  # default passes: what its reference kernels cost in prompt and decode speed (compare the
  # default rows above), then its agreement. Twice N_CTX, so that each of 8 sequences holds
  # a prompt of PP tokens.
  def invariant_rows(path, threads)
    streams = list("BENCH_STREAMS", STREAMS).map(&:to_i)
    rows = Elelem.open(path, n_ctx: 2 * N_CTX, n_threads: threads, parallel: streams.max,
                             batch_invariant: true) do |model|
      Peer.open(path, threads, N_CTX) do |peer|
        ours = Elelem::Bench.new(model)
        [ours, peer].each { |side| side.prompt_rate(64) && side.batch_rate(1, 8) } # warm-up
        [interleaved("pp#{PP} t/s, batch-invariant", ours, peer) { |side| side.prompt_rate(PP) }] +
          streams.map do |n|
            interleaved("#{n} streams tg#{TG_STREAM} t/s (all), batch-invariant", ours, peer) do |side|
              side.batch_rate(n, TG_STREAM)
            end
          end
      end
    end
    rows + agreement_rows(path, threads, batch_invariant: true)
  end

  # The lone run's top-two logit margin at the first token the batched text changes.
  def parting_margin(model, single, text)
    return if single.text == text

    ids = model.tokenize(text, add_special: false)
    step = single.tokens.each_index.find { |i| single.tokens[i] != ids[i] } || 0
    top = single.logprobs[step][:top]
    top[0][1] - top[1][1]
  end

  # Structured output: the time to compute a token's mask over the vocabulary and commit the
  # token (elelem: llguidance; llama.cpp: its GBNF sampler's apply and accept, the reference
  # driver's grammar mode), p50 and p99 over the greedy runs of GrammarGolden's four prompts.
  # llama.cpp always runs the GBNF its json_schema_to_grammar writes for GrammarGolden::SCHEMA;
  # elelem runs that schema itself (`json_schema:`, the path users take) and, for a like-for-like
  # row, the same GBNF. Then decode speed with a JSON Schema against the same decode without
  # one (both elelem).
  def constraint_rows(name, path, threads, binary: Reference.binary)
    return [] unless name.start_with?("qwen")

    require_relative "grammar_golden"
    gbnf = File.read(GrammarGolden::GBNF)
    Elelem.open(path, n_ctx: N_CTX, n_threads: threads) do |model|
      prompts = GrammarGolden::TASKS.map { |t| model.tokenize(GrammarGolden.prompt(t)) }
      theirs = grammar_figures(prompts.map { |ids| reference_grammar_run(binary, path, ids, threads) })
      { "schema" => { json_schema: GrammarGolden::SCHEMA }, "GBNF grammar" => { grammar: gbnf } }.flat_map do |kind, c|
        ours = grammar_figures(prompts.map { |ids| grammar_run(model, ids, c) })
        ["#{kind} mask p50 µs", "#{kind} mask p99 µs", "decode t/s under a #{kind}"].each_with_index.map do |m, i|
          { "metric" => m, "elelem" => ours[i], "llama.cpp" => theirs[i] }
        end
      end + [schema_decode_row(model, prompts.first)]
    end
  end

  # The masks' p50 and p99 µs and the decode rate of some grammar runs.
  def grammar_figures(runs)
    masks = runs.flat_map { |r| r[:mask_us] }.sort
    percentile = ->(q) { masks[((masks.size - 1) * q).round] }
    [percentile.call(0.5), percentile.call(0.99), runs.sum { |r| r[:tokens] } / runs.sum { |r| r[:seconds] }]
  end

  # One greedy generation under a constraint: its masks' µs, its tokens, and the seconds
  # from the prompt's logits to the last token (masks, sampling, decode passes).
  def grammar_run(model, ids, constraint)
    start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    completion = model.complete(ids, max_tokens: GrammarGolden::MAX_TOKENS, **constraint)
    seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start - completion.timings[:prompt_seconds]
    { mask_us: completion.timings[:constraint_us], tokens: completion.tokens.size, seconds: }
  end

  # The same from llama.cpp's grammar sampler (the driver's `mask_us` line and its `decode_s`).
  def reference_grammar_run(binary, path, ids, threads)
    out, err, status = Open3.capture3(binary, "grammar", path, ids.join(","), GrammarGolden::MAX_TOKENS.to_s,
                                      GrammarGolden::GBNF, N_CTX.to_s, threads.to_s)
    raise "reference grammar failed: #{err}" unless status.success?

    { mask_us: out.lines[2].split.drop(1).map(&:to_f), tokens: Integer(err[/tokens (\d+)/, 1]),
      seconds: Float(err[/decode_s (\S+)/, 1]) }
  end

  def schema_decode_row(model, ids)
    rate = lambda do |constraint|
      model.complete(ids, max_tokens: 128, ignore_eos: true, **constraint).timings[:decode_tokens_per_s]
    end
    rate.call(json_schema: LONG_SCHEMA) # warm-up
    pairs = Array.new(reps) { [rate.call(json_schema: LONG_SCHEMA), rate.call({})] }
    { "metric" => "tg128 t/s with a JSON Schema vs without (both elelem)",
      "elelem" => median(pairs.map(&:first)), "llama.cpp" => median(pairs.map(&:last)) }
  end

  # Beyond the peer: the second turn of a chat with and without the first turn's cache.
  def prefix_reuse_row(ours)
    pairs = Array.new(reps) { [ours.second_turn_ms(reuse: true), ours.second_turn_ms(reuse: false)] }
    { "metric" => "chat turn-2 ttft ms (cached vs cold, both elelem)",
      "elelem" => median(pairs.map(&:first)), "llama.cpp" => median(pairs.map(&:last)) }
  end

  def memory_rows(stats)
    [{ "metric" => "compute buffer MiB", "elelem" => stats[:compute_buffer_bytes] / 1_048_576.0 },
     { "metric" => "KV cache MiB", "elelem" => stats[:kv_cache_bytes] / 1_048_576.0 }]
  end

  def open_rows(path, threads)
    ours = -> { Elelem::Bench.open_ms(path, n_ctx: N_CTX, n_threads: threads) }
    theirs = -> { Peer.open(path, threads, N_CTX, &:load_ms) }
    rows = [interleaved("open warm ms", ours, theirs, &:call)]
    rows << interleaved("open cold ms", ours, theirs) { |side| drop_caches && side.call } if drop_caches
    rows
  end

  # The rows measured at two threads only.
  def model_rows(name, threads)
    path = Elelem::Models.fetch(name)
    before = cpu_times
    rows = speed_rows(path, threads)
    if threads == 2
      rows += two_thread_rows(name, path, threads)
      add_peer_memory(rows, path)
    end
    rows << { "metric" => "CPU stolen by the host %", "elelem" => stolen_percent(before, cpu_times) }
    rows.map { |r| r.merge("model" => name, "threads" => threads) }
  end

  # The rows measured at two threads only: depth, streams, contention, open time, peak RSS.
  def two_thread_rows(name, path, threads)
    rows = depth_rows(path, threads) + stream_rows(path, threads) + agreement_rows(path, threads) +
           invariant_rows(path, threads) + contended_rows(path, threads) + open_rows(path, threads) +
           constraint_rows(name, path, threads)
    rows += attention_rows(path, threads) if name == ENV.fetch("BENCH_ATTN_MODEL", MODELS.first)
    ours, theirs = rss_pair(path, threads)
    rows << { "metric" => "peak RSS MiB", "elelem" => ours, "llama.cpp" => theirs }
    rows
  end

  # llama.cpp's KV cache and compute buffer, beside ours in the memory rows (speed_rows').
  def add_peer_memory(rows, path)
    memory = peer_memory(path)
    rows.find { |r| r["metric"] == "KV cache MiB" }["llama.cpp"] = memory[:kv]
    rows.find { |r| r["metric"] == "compute buffer MiB" }["llama.cpp"] = memory[:compute]
  end

  # /proc/stat's first line: user nice system idle iowait irq softirq steal ...
  def cpu_times
    File.read("/proc/stat").lines.first.split.drop(1).map(&:to_i)
  end

  def stolen_percent(before, after)
    delta = after.zip(before).map { |a, b| a - b }
    100.0 * delta[7] / delta.take(8).sum
  end

  def ratio(row)
    row["elelem"] / row["llama.cpp"] if row["elelem"] && row["llama.cpp"]&.positive?
  end

  def verdict(row)
    kind, target = TARGETS[row["metric"].sub(/@\d+/, "@depth").sub(/\A\d+ streams/, "streams").sub(/\A\w+: /, "")]
    ratio = ratio(row)
    return [ratio ? format("%.2f", ratio) : "", ""] unless kind && ratio

    met = kind == :min ? ratio >= target : ratio <= target
    [format("%.2f", ratio), "#{kind == :min ? "≥" : "≤"} #{target} #{met ? "yes" : "NO"}"]
  end

  def table(rows)
    header = "| model | threads | metric | elelem | llama.cpp | ratio | target |\n|---|---|---|---|---|---|---|\n"
    header + rows.map do |r|
      ratio, target = verdict(r)
      fmt = ->(v) { v ? format("%.1f", v) : "" }
      "| #{r["model"]} | #{r["threads"]} | #{r["metric"]} | #{fmt.call(r["elelem"])} | " \
        "#{fmt.call(r["llama.cpp"])} | #{ratio} | #{target} |"
    end.join("\n")
  end

  def machine
    cpu = File.read("/proc/cpuinfo")[/model name\s*:\s*(.+)/, 1]
    "#{cpu}, #{Etc.nprocessors} cores, #{`uname -sr`.strip}, load before: #{File.read("/proc/loadavg").split.first}"
  end

  # Two threads first (the targets are set there), then one; the report is
  # rewritten after each model, so a long run that is stopped keeps what it measured.
  def run
    Reference.build
    report = { "machine" => machine, "time" => Time.now.utc.to_s, "reps" => reps, "rows" => [] }
    threads = list("BENCH_THREADS", %w[2 1]).map(&:to_i)
    threads.product(list("BENCH_MODELS", MODELS)).each do |n, name|
      warn "bench: #{name}, #{n} thread(s)"
      report["rows"] += model_rows(name, n)
      write(report)
    end
    task_rows(report) if threads.include?(2)
    puts report["machine"], "", table(report["rows"])
  end

  # The rows of other tasks than a model's speed, at two threads: speculative decoding, embeddings,
  # and the OpenAI-compatible servers under concurrent load.
  def task_rows(report)
    tasks = { "speculative decoding, #{BenchSpeculative::TARGET}" => BenchSpeculative,
              BenchEmbeddings::MODEL => BenchEmbeddings, "AMX on and off" => BenchAmx,
              "over RPC workers, #{BenchRpc::MODEL}" => BenchRpc,
              "on lavapipe, #{BenchVulkan::MODEL}" => BenchVulkan,
              "a hybrid and a mixture of experts at realistic sizes" => BenchArchitectures,
              "images and audio through projectors of SmolVLM-256M's, Qwen2.5-VL-3B's, " \
              "Qwen3-VL-2B's and Qwen2-Audio's sizes" => BenchVision,
              "elelem serve beside llama-server, #{BenchServer::MODEL}" => BenchServer }
    tasks.each do |label, rows|
      next unless rows.enabled?

      warn "bench: #{label}, 2 threads"
      report["rows"] += rows.rows(2)
      write(report)
    end
  end

  # `rake bench_server`: the server rows alone, at two threads, into tmp/bench_server.md and .json.
  def server_only
    only(BenchServer, "bench_server")
  end

  # `rake bench_vision`: the image and audio rows alone, at two threads, into tmp/bench_vision.md and .json.
  def vision_only
    Reference.build
    only(BenchVision, "bench_vision")
  end

  def only(rows, name)
    report = { "machine" => machine, "time" => Time.now.utc.to_s, "reps" => reps, "rows" => rows.rows(2) }
    write(report, name)
    puts report["machine"], "", table(report["rows"])
  end

  def write(report, name = "bench")
    dir = File.join(Reference::ROOT, "tmp")
    FileUtils.mkdir_p(dir)
    File.write(File.join(dir, "#{name}.json"), JSON.pretty_generate(report))
    File.write(File.join(dir, "#{name}.md"), "#{report["machine"]}\n\n#{table(report["rows"])}\n")
  end
end
