# frozen_string_literal: true

require "spec_helper"

# Greedy decoding under a GBNF grammar picks llama.cpp's tokens: the fixture holds the
# ids llama.cpp's grammar sampler chose (the reference driver's `grammar` mode, recorded
# by `rake grammar_golden`), with the GBNF its json_schema_to_grammar writes for
# {name: string, age: integer}; elelem decodes the same prompts with `grammar:`.
RSpec.describe "greedy decoding under a grammar" do
  # This build profile's recording: committed, or made here by `rake goldens` (a prerequisite of the suite).
  committed = File.join(__dir__, "fixtures", "grammar", "person-qwen2.5-coder-0.5b.json")
  path = if JSON.parse(File.read(committed))["profile"] == Elelem.build_profile[:id]
           committed
         else
           File.join(Elelem::Golden::CACHE_DIR, Elelem.build_profile[:id], File.basename(committed))
         end
  fixture = JSON.parse(File.read(path))
  gbnf = File.read(File.join(__dir__, "fixtures", "grammar", "person.gbnf"))

  before(:all) { @model = Elelem.open(SpecModels.path(fixture["model"]), n_ctx: 4096, n_threads: 2) }
  after(:all) { @model.close }

  fixture["cases"].each do |c|
    it "equals llama.cpp's ids for #{c["task"].inspect}" do
      ours = @model.generate(c["prompt"], grammar: gbnf, max_tokens: fixture["max_tokens"])
      # llama.cpp's grammar then allows only the end-of-turn token, which it samples;
      # elelem stops as soon as the text is complete.
      theirs = c["tokens"]
      theirs = theirs[0...-1] if @model.tokenizer.eog?(theirs.last) && @model.last_stop_reason == :stop
      expect(ours).to eq(theirs)
      expect(@model.detokenize(ours, special: false)).to eq(c["text"])
    end
  end
end
