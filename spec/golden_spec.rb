# frozen_string_literal: true

require "spec_helper"

# Greedy ids identical to llama.cpp's, checked with elelem/rspec's matcher against the
# recording for this build profile: committed (spec/fixtures/goldens) or, for a profile
# with none, recorded from the reference llama.cpp built here by `rake goldens`.
RSpec.describe "golden generations" do
  # Every golden file: a known model's, or a synthetic model's (rake canary writes them).
  SpecModels.golden_names.each do |name|
    path = -> { SpecModels.golden_model(name) }
    context name do
      golden = SpecModels.golden(name)

      golden.cases.select { |c| c["continuation"] }.each do |c|
        it "continues the #{c["name"]} conversation from its cache identical to llama.cpp" do
          Elelem.open(path.call, n_ctx: golden.n_ctx, n_threads: golden.n_threads) do |model|
            mismatch = golden.check(model, c["name"])
            expect(mismatch).to be_nil, mismatch.to_s
          end
        end
      end

      golden.cases.reject { |c| c["continuation"] }.each do |c|
        it "decodes #{c["max_tokens"]} tokens identical to llama.cpp for the #{c["name"]} prompt" do
          Elelem.open(path.call, n_ctx: golden.n_ctx, n_threads: golden.n_threads, flash_attn: golden.flash_attn,
                                 cache_type_k: golden.cache_type_k, cache_type_v: golden.cache_type_v) do |model|
            expect(model).to decode(c["prompt"], max_tokens: c["max_tokens"], ignore_eos: c["ignore_eos"],
                                                 name: c["name"]).into(golden)
            stats = model.stats
            expect(stats[:compute_buffer_bytes_min]).to eq(stats[:compute_buffer_bytes_max])
            expect(stats[:compute_buffer_bytes_max]).to eq(stats[:compute_buffer_bytes])
          end
        end
      end
    end
  end
end

# Several sequences in one context, started together and decoded in the same passes
# (passes that mix decoding sequences with chunks of prompts still being read): the
# ids of llama.cpp decoding the same sequences with one llama_batch per pass.
RSpec.describe "lockstep generations" do
  SpecModels.lockstep_names.each do |name|
    golden = SpecModels.golden(name)
    it "#{name.delete_prefix("lockstep-")}: #{golden.parallel} sequences give llama.cpp's ids, each" do
      path = SpecModels.golden_model(name.delete_prefix("lockstep-"))
      Elelem.open(path, n_ctx: golden.n_ctx, n_threads: golden.n_threads, parallel: golden.parallel,
                        flash_attn: golden.flash_attn, cache_type_k: golden.cache_type_k,
                        cache_type_v: golden.cache_type_v) do |opened|
        mismatch = golden.check(opened, "lockstep")
        expect(mismatch).to be_nil, mismatch.to_s
      end
    end
  end
end
