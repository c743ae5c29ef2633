# frozen_string_literal: true

require "spec_helper"

# `cache_type_k:` / `cache_type_v:` (llama.cpp's -ctk / -ctv). Their bits against llama.cpp's
# are the `*-kv-q8_0` goldens (golden_spec.rb).
RSpec.describe "KV cache types" do
  it "rejects an unknown type with the allowed ones" do
    expect { Elelem.open(SpecModels.canary, cache_type_k: :q8) }
      .to raise_error(ArgumentError, /cache_type_k must be one of :f16, :q8_0, :q4_0, got :q8/)
    expect { Elelem.open(SpecModels.canary, cache_type_v: "q8_0") }.to raise_error(ArgumentError, /cache_type_v/)
  end

  it "refuses, as llama.cpp does, blocks larger than the heads" do
    expect { Elelem.open(SpecModels.canary, n_ctx: 64, cache_type_k: :q8_0) }
      .to raise_error(ArgumentError, /K cache type q8_0 \(blocks of 32\) does not divide the model's head dimension 8/)
  end

  context "with Qwen2.5-Coder-0.5B" do
    let(:path) { SpecModels.path("qwen2.5-coder-0.5b") }

    it "stores a q8_0 cache in 34 bytes per 32 values, says so, and generates" do
      f16 = Elelem.open(path, n_ctx: 512, n_threads: 2) { |m| m.stats[:kv_cache_bytes] }
      Elelem.open(path, n_ctx: 512, n_threads: 2, cache_type_k: :q8_0, cache_type_v: :q8_0) do |model|
        expect(model.info.values_at(:cache_type_k, :cache_type_v)).to eq(%i[q8_0 q8_0])
        expect(model.stats[:kv_cache_bytes] * 64).to eq(f16 * 34)
        expect(model.generate("def add(a, b):", max_tokens: 4)).not_to be_empty
      end
    end

    it "refuses a quantized V cache without flash attention, as llama.cpp does" do
      expect { Elelem.open(path, n_ctx: 512, flash_attn: false, cache_type_v: :q8_0) }
        .to raise_error(ArgumentError, /quantized V cache \(q8_0\) needs flash attention/)
      Elelem.open(path, n_ctx: 512, n_threads: 2, flash_attn: false, cache_type_k: :q8_0) do |model|
        expect(model.info.values_at(:flash_attn, :cache_type_k, :cache_type_v)).to eq([false, :q8_0, :f16])
      end
    end
  end
end
