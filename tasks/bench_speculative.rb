# frozen_string_literal: true

require "open3"
require_relative "reference"
require_relative "speculative_prompts"

# `rake bench`'s speculative rows (BENCH_SPECULATIVE=0 skips them): Qwen2.5-Coder-1.5B
# greedy decode speed on code to complete and on edits (the prompt holds a function the
# model rewrites), TOKENS tokens a prompt, summed over the prompts: elelem plain, with
# Qwen2.5-Coder-0.5B drafting and with prompt lookup (draft length K, as llama.cpp's
# tools take it, and adaptive), beside llama.cpp plain (the driver's lookup mode with no
# draft: one token a pass), its speculative mode (llama-speculative-simple's loop, the
# same pair, the same K) and its lookup mode (llama-lookup's); and elelem copying (`draft:
# :copy`, adaptive; llama.cpp's ngram-simple, which only its server runs). Decode speed counts the
# tokens after the prompt's pass and the seconds they took, on both sides. Also the
# share of drafted tokens accepted. Each figure the median of BENCH_REPS, A B A B.
module BenchSpeculative
  TARGET = "qwen2.5-coder-1.5b"
  DRAFT = "qwen2.5-coder-0.5b"
  TOKENS = 64
  K = 4
  N_CTX = 4096
  TASKS = { "code" => SpeculativePrompts::COMPLETIONS, "edit" => SpeculativePrompts.all.last(25) }.freeze

  module_function

  def enabled?
    ENV.fetch("BENCH_SPECULATIVE", "1") == "1"
  end

  # Prompts a task (BENCH_SPECULATIVE_PROMPTS, 4 by default), spread over its list.
  def prompts(task)
    list = TASKS.fetch(task)
    n = Integer(ENV.fetch("BENCH_SPECULATIVE_PROMPTS", "4"))
    list.each_slice((list.size.to_f / n).ceil).map(&:first).first(n)
  end

  def rows(threads)
    target = Elelem::Models.fetch(TARGET)
    draft = Elelem::Models.fetch(DRAFT)
    Elelem.open(target, n_ctx: N_CTX, n_threads: threads, draft:) do |model|
      TASKS.keys.flat_map do |task|
        ids = prompts(task).map { |p| model.tokenize(p) }
        job = { model:, ids:, target:, draft:, threads: }
        figures = Array.new(Bench.reps) { measure(job) }
        task_rows(task, figures).map { |r| r.merge("model" => TARGET, "threads" => threads) }
      end
    end
  end

  # One repetition: each way of decoding over every prompt, ours and theirs in turn.
  def measure(job)
    ways = {
      plain: -> { ours(job, draft: false) }, theirs_plain: -> { theirs(job, "lookup", 0) },
      draft: -> { ours(job, draft_tokens: K) }, theirs_draft: -> { theirs(job, "speculative", K) },
      lookup: -> { ours(job, draft: :lookup, draft_tokens: K) }, theirs_lookup: -> { theirs(job, "lookup", K) },
      draft_auto: -> { ours(job) }, lookup_auto: -> { ours(job, draft: :lookup) },
      copy_auto: -> { ours(job, draft: :copy) }
    }
    ways.transform_values(&:call)
  end

  # elelem over the prompts: [tokens/s, accepted, proposed].
  def ours(job, **options)
    runs = job[:ids].map { |ids| job[:model].complete(ids, max_tokens: TOKENS, ignore_eos: true, **options).timings }
    totals(runs.map { |t| [t[:decode_seconds], t[:decode_tokens], t[:draft_proposed].to_i, t[:draft_accepted].to_i] })
  end

  # The reference driver over the prompts (`speculative` or `lookup`, `draft_tokens` guesses).
  def theirs(job, mode, draft_tokens)
    models = mode == "speculative" ? [job[:target], job[:draft]] : [job[:target]]
    totals(job[:ids].map do |ids|
      _, err, status = Open3.capture3(Reference.binary, mode, *models, ids.join(","), TOKENS.to_s, draft_tokens.to_s,
                                      N_CTX.to_s, job[:threads].to_s, "1")
      raise "reference #{mode} failed: #{err[-500..]}" unless status.success?

      err.match(/decode_s (\S+) tokens (\d+) drafted (\d+) accepted (\d+)/).captures.map(&:to_f)
    end)
  end

  # [tokens/s, accepted, proposed] of runs given as [seconds, tokens, proposed, accepted].
  def totals(runs)
    seconds, tokens, proposed, accepted = runs.transpose.map(&:sum)
    [tokens / seconds, accepted, proposed]
  end

  def task_rows(task, figures)
    rate = ->(way) { Bench.median(figures.map { |f| f[way][0] }) }
    [["tg#{TOKENS} t/s plain", :plain, :theirs_plain],
     ["tg#{TOKENS} t/s 0.5B draft k=#{K} vs llama.cpp's speculative", :draft, :theirs_draft],
     ["tg#{TOKENS} t/s 0.5B draft k=#{K} vs llama.cpp plain", :draft, :theirs_plain],
     ["tg#{TOKENS} t/s 0.5B draft adaptive vs llama.cpp's speculative k=#{K}", :draft_auto, :theirs_draft],
     ["tg#{TOKENS} t/s lookup k=#{K} vs llama.cpp's lookup", :lookup, :theirs_lookup],
     ["tg#{TOKENS} t/s lookup k=#{K} vs llama.cpp plain", :lookup, :theirs_plain],
     ["tg#{TOKENS} t/s lookup adaptive vs llama.cpp's lookup k=#{K}", :lookup_auto, :theirs_lookup],
     ["tg#{TOKENS} t/s copy adaptive vs llama.cpp plain", :copy_auto, :theirs_plain],
     ["tg#{TOKENS} t/s copy adaptive vs llama.cpp's lookup k=#{K}", :copy_auto, :theirs_lookup]]
      .map do |label, ours, theirs|
        { "metric" => "#{task}: #{label}", "elelem" => rate.call(ours), "llama.cpp" => rate.call(theirs) }
      end + acceptance_rows(task, figures)
  end

  # The share of drafted tokens accepted, over every repetition.
  def acceptance_rows(task, figures)
    acceptance = ->(way) { 100.0 * figures.sum { |f| f[way][1] } / [figures.sum { |f| f[way][2] }, 1].max }
    [{ "metric" => "#{task}: 0.5B draft k=#{K} acceptance %", "elelem" => acceptance.call(:draft),
       "llama.cpp" => acceptance.call(:theirs_draft) },
     { "metric" => "#{task}: lookup k=#{K} acceptance %", "elelem" => acceptance.call(:lookup),
       "llama.cpp" => acceptance.call(:theirs_lookup) },
     { "metric" => "#{task}: 0.5B draft adaptive acceptance %", "elelem" => acceptance.call(:draft_auto) },
     { "metric" => "#{task}: lookup adaptive acceptance %", "elelem" => acceptance.call(:lookup_auto) },
     { "metric" => "#{task}: copy adaptive acceptance %", "elelem" => acceptance.call(:copy_auto) }]
  end
end
