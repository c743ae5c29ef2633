# frozen_string_literal: true

require "English"
require "fileutils"
require "json"
require "open3"
require_relative "reference"

# Greedy speculative decoding as llama.cpp runs it, through the reference driver:
# `speculative` (llama-speculative-simple's loop: Qwen2.5-Coder-0.5B drafting for the
# 1.5B, K guesses a round) and `lookup` (llama-lookup's, on the 0.5B). Each round's
# verification pass carries the last token and the guesses, so the target's bits are
# those of that batch; elelem follows the same schedule with a fixed draft length, and
# `rake speculative_golden` records the reference's ids into spec/fixtures/speculative/
# for spec/speculative_golden_spec.rb to compare.
module SpeculativeGolden
  FIXTURE = File.join(Reference::ROOT, "spec", "fixtures", "speculative", "qwen2.5-coder.json")
  TARGET = "qwen2.5-coder-1.5b"
  DRAFT = "qwen2.5-coder-0.5b"
  LOOKUP_MODEL = "qwen2.5-coder-0.5b"
  DRAFT_TOKENS = 4
  MAX_TOKENS = 32
  EDIT = "Rename the variable total to sum and return it:\n\ndef add_all(values):\n    total = 0\n    " \
         "for v in values:\n        total += v\n    return total\n\nThe renamed function:\n\ndef add_all(values):\n"
  PROMPTS = {
    "code" => "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "edit" => EDIT
  }.freeze

  module_function

  # The recording this build profile checks against: the committed one if it was made
  # under this profile, else one `rake goldens` made here from the reference.
  def fixture_path
    committed = File.exist?(FIXTURE) && JSON.parse(File.read(FIXTURE))
    return FIXTURE if committed && committed["profile"] == Elelem.build_profile[:id]

    File.join(Elelem::Golden::CACHE_DIR, Elelem.build_profile[:id], File.basename(FIXTURE))
  end

  def ensure_recorded
    run(path: fixture_path) unless File.exist?(fixture_path)
  end

  def run(binary: Reference.build, path: FIXTURE)
    target = Elelem::Models.fetch(TARGET)
    draft = Elelem::Models.fetch(DRAFT)
    lookup_model = Elelem::Models.fetch(LOOKUP_MODEL)
    cases = PROMPTS.map do |name, text|
      ids = Reference.tokenize(target, text)
      { "name" => name, "prompt" => ids,
        "speculative" => driver(binary, "speculative", target, draft, ids.join(","), MAX_TOKENS, DRAFT_TOKENS),
        "lookup" => driver(binary, "lookup", lookup_model, ids.join(","), MAX_TOKENS, DRAFT_TOKENS) }
    end
    fixture = { "target" => TARGET, "draft" => DRAFT, "lookup_model" => LOOKUP_MODEL, "draft_tokens" => DRAFT_TOKENS,
                "max_tokens" => MAX_TOKENS, "n_ctx" => Reference::N_CTX, "profile" => Elelem.build_profile[:id],
                "recorder" => "llama.cpp (llama-cpp-sys-2 0.1.161, tools/reference speculative and lookup modes)",
                "cases" => cases }
    FileUtils.mkdir_p(File.dirname(path))
    File.write(path, "#{JSON.pretty_generate(fixture)}\n")
    puts "wrote #{path}"
  end

  # One driver run: its ids and how its drafts fared.
  def driver(binary, mode, *args)
    out, err, status = Open3.capture3(binary, mode, *args.map(&:to_s), Reference::N_CTX.to_s, Reference::N_THREADS.to_s)
    raise "reference #{mode} failed: #{err}" unless status.success?

    stats = err[/drafted (\d+) accepted (\d+) passes (\d+)/] && ::Regexp.last_match
    { "ids" => out.lines[0].split.map(&:to_i), "drafted" => stats[1].to_i, "accepted" => stats[2].to_i,
      "passes" => stats[3].to_i }
  end
end
