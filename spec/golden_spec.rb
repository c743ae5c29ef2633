# frozen_string_literal: true

require "spec_helper"

# Greedy ids identical to llama.cpp's (the goldens come from the reference only).
RSpec.describe "golden generations" do
  {
    "tiny-llama-canary" => -> { SpecModels.canary },
    "qwen2.5-coder-0.5b" => -> { SpecModels.path("qwen2.5-coder-0.5b") },
    "qwen2.5-coder-1.5b" => -> { SpecModels.path("qwen2.5-coder-1.5b") },
    "gemma-3-270m" => -> { SpecModels.path("gemma-3-270m") }
  }.each do |name, path|
    context name do
      golden = SpecModels.golden(name)

      golden["cases"].each do |c|
        it "generates #{c["output"].size} tokens identical to llama.cpp for the #{c["name"]} prompt" do
          Elelem.open(path.call, n_ctx: golden["n_ctx"], n_threads: golden["n_threads"]) do |model|
            tokens = []
            out = model.generate(c["prompt"], max_tokens: c["max_tokens"],
                                              ignore_eos: c.fetch("ignore_eos", false)) do |t|
              tokens << t
            end
            expect(out).to eq(c["output"])
            expect(tokens).to eq(out)
            stats = model.stats
            expect(stats[:compute_buffer_bytes_min]).to eq(stats[:compute_buffer_bytes_max])
            expect(stats[:compute_buffer_bytes_max]).to eq(stats[:compute_buffer_bytes])
            expect(stats[:decode_tokens]).to eq(out.size - 1)
          end
        end
      end
    end
  end
end
