# frozen_string_literal: true

require "English"
require "fileutils"
require "json"
require_relative "reference"

# Greedy decoding under a grammar, as llama.cpp does it: its GBNF sampler
# (llama_sampler_init_grammar, the reference driver's `grammar` mode) with the GBNF
# that its json_schema_to_grammar writes for a small schema. `rake grammar_golden`
# records the reference's ids into spec/fixtures/grammar/person-<model>.json; the spec
# checks that elelem's `generate(grammar:)` (llguidance, the same GBNF) picks the same tokens.
#
# The real model answers chat prompts. The synthetic ones, whose random weights make the
# grammar's choices anything but the likeliest text, check what a real model rarely shows:
# forced text spelled with other tokens than the tokenizer's own (tiny-glm4moe's
# `n a m e`), and a SentencePiece vocabulary whose forced `{` would tokenize with the
# dummy prefix (tiny-qwen3).
module GrammarGolden
  DIR = File.join(Reference::ROOT, "spec", "fixtures", "grammar")
  # What llama.cpp's json_schema_to_grammar wrote person.gbnf from (its converter adds no
  # other keys when additionalProperties is absent; JSON Schema itself would allow them).
  SCHEMA = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } },
             required: %w[name age], additionalProperties: false }.freeze
  GBNF = File.join(DIR, "person.gbnf")
  MODEL = "qwen2.5-coder-0.5b"
  TASKS = ["Describe a person.", "Describe a famous scientist.", "Describe a child.", "Describe your neighbour."].freeze
  MAX_TOKENS = 48
  # The synthetic models' prompts, as token ids (their vocabularies are real, their weights not).
  SYNTHETIC = {
    "tiny-glm4moe" => { "short" => [1, 50, 60, 70, 80], "tiny" => [1, 90, 91, 92] },
    "tiny-qwen3" => { "short" => [1, 50, 60, 70, 80], "tiny" => [1, 90, 91, 92] }
  }.freeze

  module_function

  def prompt(task)
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" \
      "<|im_start|>user\n#{task} Answer in JSON.<|im_end|>\n<|im_start|>assistant\n"
  end

  def models = [MODEL, *SYNTHETIC.keys]

  def committed_path(model) = File.join(DIR, "person-#{model}.json")

  # The recording of `model` this build profile checks against: the committed one if it was
  # made under this profile, else one `rake goldens` made here from the reference.
  def fixture_path(model)
    committed = committed_path(model)
    return committed if File.exist?(committed) && JSON.parse(File.read(committed))["profile"] == profile_id

    File.join(Elelem::Golden::CACHE_DIR, profile_id, File.basename(committed))
  end

  def profile_id = Elelem.build_profile[:id]

  # `rake goldens`: records this profile's ids from the reference for each model that
  # neither the committed fixtures nor the cache have.
  def ensure_recorded
    binary = nil
    models.each do |model|
      path = fixture_path(model)
      run(model, binary: binary ||= Reference.build, path:) unless File.exist?(path)
    end
  end

  # `rake grammar_golden`: records every model into spec/fixtures/grammar.
  def record_all
    binary = Reference.build
    models.each { |model| run(model, binary:, path: committed_path(model)) }
  end

  def run(model, binary:, path:)
    synthetic = SYNTHETIC.key?(model)
    file = synthetic ? File.join(Reference::ROOT, "tmp", "synthetic", "#{model}.gguf") : Elelem::Models.fetch(model)
    max_tokens = synthetic ? 32 : MAX_TOKENS
    prompts = synthetic ? SYNTHETIC.fetch(model) : TASKS.to_h { |task| [task, Reference.tokenize(file, prompt(task))] }
    cases = prompts.map { |name, ids| record_case(binary, file, name, ids, max_tokens) }
    fixture = { "model" => model, "max_tokens" => max_tokens, "profile" => profile_id,
                "cases" => cases }
    FileUtils.mkdir_p(File.dirname(path))
    File.write(path, "#{JSON.pretty_generate(fixture)}\n")
    puts "wrote #{path}"
  end

  def record_case(binary, file, name, ids, max_tokens)
    out = IO.popen([binary, "grammar", file, ids.join(","), max_tokens.to_s, GBNF, Reference::N_CTX.to_s,
                    Reference::N_THREADS.to_s], &:read).lines
    raise "reference grammar failed for #{name}" unless $CHILD_STATUS.success?

    { "task" => name, "prompt" => ids, "tokens" => out[0].split.map(&:to_i),
      "text" => [out[1].strip].pack("H*").force_encoding(Encoding::UTF_8) }
  end
end
