# frozen_string_literal: true

require "json"
require "fileutils"
require_relative "golden"
require_relative "speculative_prompts"

# `rake speculative_agreement`: how often greedy speculative decoding gives the very
# tokens of plain greedy decoding. A verification pass evaluates several tokens at once,
# and the matrix kernels round differently for several rows than for one, so a token
# whose top two logits are nearly tied may change. Qwen2.5-Coder-1.5B greedy, 64 tokens
# (AGREEMENT_TOKENS), on the golden prompts and 50 of our own (code to complete, edits),
# plain beside the 0.5B drafting and beside prompt lookup (both with adaptive drafts):
# how many outputs are identical, and where the others first differ, the plain run's
# top-two logit margin there. Writes tmp/speculative_agreement.json. AGREEMENT_BATCH_INVARIANT=1 opens
# the target with `batch_invariant: true`, where every output should be identical (and writes
# tmp/speculative_agreement_batch_invariant.json).
module SpeculativeAgreement
  TARGET = "qwen2.5-coder-1.5b"
  DRAFT = "qwen2.5-coder-0.5b"

  module_function

  def prompts
    Goldens::QWEN_PROMPTS.values + SpeculativePrompts.all
  end

  def run
    tokens = Integer(ENV.fetch("AGREEMENT_TOKENS", "64"))
    limit = Integer(ENV.fetch("AGREEMENT_PROMPTS", prompts.size.to_s))
    runs = []
    Elelem.open(Elelem::Models.fetch(TARGET), n_ctx: 4096, n_threads: 2, draft: Elelem::Models.fetch(DRAFT),
                                              batch_invariant: batch_invariant?) do |model|
      # Written after every prompt: a run stopped early keeps what it measured.
      prompts.first(limit).each_with_index do |prompt, i|
        write(summarize(runs << measure(model, prompt, i, tokens), tokens))
      end
    end
    puts JSON.pretty_generate(summarize(runs, tokens).except("runs"))
  end

  def batch_invariant?
    ENV.fetch("AGREEMENT_BATCH_INVARIANT", "0") == "1"
  end

  def write(report)
    FileUtils.mkdir_p(File.join(Reference::ROOT, "tmp"))
    name = batch_invariant? ? "speculative_agreement_batch_invariant" : "speculative_agreement"
    File.write(File.join(Reference::ROOT, "tmp", "#{name}.json"), JSON.pretty_generate(report))
  end

  # One prompt: plain greedy (with the top two logprobs), then each drafter.
  def measure(model, prompt, index, tokens)
    options = { max_tokens: tokens, ignore_eos: true }
    plain = model.complete(prompt, draft: false, logprobs: 2, **options)
    row = { "prompt" => index, "plain_decode_tps" => plain.timings[:decode_tokens_per_s] }
    { "draft" => :model, "lookup" => :lookup }.each do |label, draft|
      row[label] = compare(plain, model.complete(prompt, draft:, **options))
    end
    warn "agreement: prompt #{index} #{row.slice("draft", "lookup").transform_values { |r| r["identical"] }}"
    row
  end

  # One speculative run beside the plain one: identical or not, where they part and the
  # plain run's top-two logit margin there, and how the drafts fared.
  def compare(plain, speculative)
    step = plain.tokens.each_index.find { |i| plain.tokens[i] != speculative.tokens[i] }
    timings = speculative.timings
    row = { "identical" => step.nil?, "proposed" => timings[:draft_proposed], "accepted" => timings[:draft_accepted],
            "decode_tps" => timings[:decode_tokens_per_s] }
    return row unless step

    top = plain.logprobs[step][:top]
    row.merge("parts_at" => step, "margin" => top[0][1] - top[1][1])
  end

  def summarize(runs, tokens)
    summary = %w[draft lookup].to_h { |label| [label, figures(runs.map { |r| r[label] })] }
    { "target" => TARGET, "draft" => DRAFT, "batch_invariant" => batch_invariant?, "tokens" => tokens,
      "summary" => summary, "runs" => runs }
  end

  def figures(rows)
    parted = rows.reject { |r| r["identical"] }
    { "identical" => rows.size - parted.size, "of" => rows.size, "parted_at" => parted.map { |r| r["parts_at"] },
      "margins" => parted.map { |r| r["margin"].round(4) },
      "acceptance" => rows.sum { |r| r["accepted"] }.fdiv([rows.sum { |r| r["proposed"] }, 1].max).round(3) }
  end
end
