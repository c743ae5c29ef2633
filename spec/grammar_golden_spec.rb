# frozen_string_literal: true

require "spec_helper"
require_relative "../tasks/grammar_golden"

# Greedy decoding under a GBNF grammar picks llama.cpp's tokens: each fixture holds the
# ids llama.cpp's grammar sampler chose (the reference driver's `grammar` mode, recorded
# by `rake grammar_golden`), with the GBNF its json_schema_to_grammar writes for
# {name: string, age: integer}; elelem decodes the same prompts with `grammar:`. The
# synthetic models' random weights make the grammar spell its forced text with other
# tokens than the tokenizer's own, as llama.cpp lets it (see tasks/grammar_golden.rb).
RSpec.describe "greedy decoding under a grammar" do
  gbnf = File.read(GrammarGolden::GBNF)

  GrammarGolden.models.each do |name|
    describe name do
      fixture = JSON.parse(File.read(GrammarGolden.fixture_path(name)))

      before(:all) do
        path = GrammarGolden::SYNTHETIC.key?(name) ? SpecModels.synthetic(name) : SpecModels.path(name)
        @model = Elelem.open(path, n_ctx: 4096, n_threads: 2)
      end

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
  end
end
