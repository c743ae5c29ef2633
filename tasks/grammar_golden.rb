# frozen_string_literal: true

require "English"
require "fileutils"
require "json"
require "tempfile"
require_relative "reference"

# Greedy decoding under a grammar, as llama.cpp does it: its GBNF sampler
# (llama_sampler_init_grammar, the reference driver's `grammar` mode) with the GBNF
# that its json_schema_to_grammar writes for a small schema. `rake grammar_golden`
# records the reference's ids into spec/fixtures/grammar/; the spec checks that
# elelem's `generate(grammar:)` (llguidance, the same GBNF) picks the same tokens.
module GrammarGolden
  FIXTURE = File.join(Reference::ROOT, "spec", "fixtures", "grammar", "person-qwen2.5-coder-0.5b.json")
  # What llama.cpp's json_schema_to_grammar wrote person.gbnf from (its converter adds no
  # other keys when additionalProperties is absent; JSON Schema itself would allow them).
  SCHEMA = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } },
             required: %w[name age], additionalProperties: false }.freeze
  GBNF = File.join(Reference::ROOT, "spec", "fixtures", "grammar", "person.gbnf")
  MODEL = "qwen2.5-coder-0.5b"
  TASKS = ["Describe a person.", "Describe a famous scientist.", "Describe a child.", "Describe your neighbour."].freeze
  MAX_TOKENS = 48

  module_function

  def prompt(task)
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" \
      "<|im_start|>user\n#{task} Answer in JSON.<|im_end|>\n<|im_start|>assistant\n"
  end

  # The recording this build profile checks against: the committed one if it was made
  # under this profile, else one `rake goldens` made here from the reference.
  def fixture_path
    committed = JSON.parse(File.read(FIXTURE))
    return FIXTURE if committed["profile"] == Elelem.build_profile[:id]

    File.join(Elelem::Golden::CACHE_DIR, Elelem.build_profile[:id], File.basename(FIXTURE))
  end

  # `rake goldens`: records this profile's ids from the reference when neither the
  # committed fixture nor the cache has them.
  def ensure_recorded
    run(path: fixture_path) unless File.exist?(fixture_path)
  end

  def run(binary: Reference.build, path: FIXTURE)
    model = Elelem::Models.fetch(MODEL)
    cases = TASKS.map do |task|
      ids = Reference.tokenize(model, prompt(task))
      out = IO.popen([binary, "grammar", model, ids.join(","), MAX_TOKENS.to_s, GBNF, Reference::N_CTX.to_s,
                      Reference::N_THREADS.to_s], &:read).lines
      raise "reference grammar failed for #{task}" unless $CHILD_STATUS.success?

      { "task" => task, "prompt" => ids, "tokens" => out[0].split.map(&:to_i),
        "text" => [out[1].strip].pack("H*").force_encoding(Encoding::UTF_8) }
    end
    fixture = { "model" => MODEL, "max_tokens" => MAX_TOKENS, "profile" => Elelem.build_profile[:id],
                "cases" => cases }
    FileUtils.mkdir_p(File.dirname(path))
    File.write(path, "#{JSON.pretty_generate(fixture)}\n")
    puts "wrote #{path}"
  end
end
