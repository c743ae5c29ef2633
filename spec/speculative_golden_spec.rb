# frozen_string_literal: true

require "spec_helper"

# Greedy speculative decoding gives llama.cpp's ids under the same schedule: the fixture
# holds what the reference driver's `speculative` mode (llama-speculative-simple's loop,
# Qwen2.5-Coder-0.5B drafting for the 1.5B) and `lookup` mode (llama-lookup's) chose with
# a fixed draft length (`rake speculative_golden`); elelem decodes the same prompts with
# the same drafts, so each verification pass carries the same tokens and rounds alike.
RSpec.describe "speculative decoding against llama.cpp's" do
  committed = File.join(__dir__, "fixtures", "speculative", "qwen2.5-coder.json")
  path = if JSON.parse(File.read(committed))["profile"] == Elelem.build_profile[:id]
           committed
         else
           File.join(Elelem::Golden::CACHE_DIR, Elelem.build_profile[:id], File.basename(committed))
         end
  fixture = JSON.parse(File.read(path))
  options = { max_tokens: fixture["max_tokens"], draft_tokens: fixture["draft_tokens"] }

  it "drafts with the 0.5B for the 1.5B as llama-speculative-simple does, to the same ids" do
    Elelem.open(SpecModels.path(fixture["target"]), n_ctx: fixture["n_ctx"], n_threads: 2,
                                                    draft: SpecModels.path(fixture["draft"])) do |model|
      fixture["cases"].each do |c|
        theirs = c["speculative"]
        completion = model.complete(c["prompt"], **options)
        expect(completion.tokens).to eq(theirs["ids"]), "#{c["name"]}: #{completion.tokens} vs #{theirs["ids"]}"
        expect(completion.timings.values_at(:draft_proposed, :draft_accepted, :decode_passes))
          .to eq(theirs.values_at("drafted", "accepted", "passes"))
      end
    end
  end

  it "looks up drafts in the prompt as llama-lookup does, to the same ids" do
    Elelem.open(SpecModels.path(fixture["lookup_model"]), n_ctx: fixture["n_ctx"], n_threads: 2) do |model|
      fixture["cases"].each do |c|
        theirs = c["lookup"]
        completion = model.complete(c["prompt"], draft: :lookup, **options)
        expect(completion.tokens).to eq(theirs["ids"]), "#{c["name"]}: #{completion.tokens} vs #{theirs["ids"]}"
        expect(completion.timings.values_at(:draft_proposed, :draft_accepted, :decode_passes))
          .to eq(theirs.values_at("drafted", "accepted", "passes"))
      end
    end
  end
end
