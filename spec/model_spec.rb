# frozen_string_literal: true

require "spec_helper"
require "tmpdir"
require "timeout"

RSpec.describe Elelem::Model do
  let(:model) { Elelem.open(SpecModels.canary, n_ctx: 64, n_threads: 2) }
  let(:prompt) { [1, 50, 60, 70, 80] }

  # Bounded, so that a model left locked fails the example instead of hanging the suite.
  after { Timeout.timeout(20) { model.close } }

  def healthy!
    expect(Elelem.open(SpecModels.canary, n_threads: 1) { |m| m.generate(prompt, max_tokens: 2) }.size).to eq(2)
  end

  it "prints usefully" do
    expect(model.inspect).to eq("#<Elelem::Model llama F32 n_ctx=64>")
  end

  it "describes the model" do
    expect(model.info).to include(architecture: "llama", n_layer: 5, n_embd: 64, n_head: 8, n_head_kv: 4,
                                  n_ff: 512, n_vocab: 512, n_ctx_train: 2048, n_ctx: 64, n_gpu_layers: 0,
                                  adaptive_threads: true, batch_invariant: false)
  end

  it "adapts its thread count to busy cores unless told not to, with the same tokens" do
    Elelem.open(SpecModels.canary, n_ctx: 64, adaptive_threads: false) do |fixed|
      expect(fixed.info[:adaptive_threads]).to be(false)
      expect(fixed.generate(prompt, max_tokens: 8)).to eq(model.generate(prompt, max_tokens: 8))
    end
  end

  it "reports its memory" do
    generated = model.generate(prompt, max_tokens: 8)
    expect(generated.size).to eq(8)
    expect(model.stats).to include(:compute_buffer_bytes, :kv_cache_bytes, :weights_bytes, :prompt_tokens_per_s,
                                   :decode_tokens_per_s)
    expect(model.stats[:kv_cache_bytes]).to eq(2 * 5 * 32 * 256 * 2) # K and V, 5 layers, 32 wide, 256 cells, F16
  end

  it "reports the KV cache's cells in use and the tokens its sequences hold" do
    Elelem.open(SpecModels.canary, n_ctx: 64, parallel: 2) do |fresh|
      expect(fresh.stats.values_at(:kv_cells_used, :kv_cells, :kv_tokens)).to eq([0, 256, 0]) # 64 padded to 256
      fresh.generate(prompt, max_tokens: 8)
      # The prompt and the tokens decoded after it (the last one sampled is never evaluated).
      expect(fresh.stats.values_at(:kv_cells_used, :kv_cells, :kv_tokens, :n_past)).to eq([12, 256, 12, 12])
    end
  end

  it "has a module form" do
    expect(Elelem.generate(model, prompt, max_tokens: 3)).to eq(model.generate(prompt, max_tokens: 3))
  end

  it "runs on the CPU when GPU layers are asked for, as llama.cpp does" do
    Elelem.open(SpecModels.canary, n_gpu_layers: 99) { |m| expect(m.info[:n_gpu_layers]).to eq(0) }
  end

  describe "each_token's enumerator" do
    # A regression would hang: each call gets a deadline instead.
    def soon(&)
      Timeout.timeout(20, &)
    end

    it "never holds the model while paused between pieces" do
      pieces = model.each_token("the canary", max_tokens: 5, ignore_eos: true)
      first = soon { pieces.next }
      expect(soon { model.generate(prompt, max_tokens: 2).size }).to eq(2)
      expect(soon { model.info[:n_vocab] }).to eq(512)
      rest = Array.new(4) { soon { pieces.next } }
      expect { pieces.next }.to raise_error(StopIteration)
      expect([first, *rest].join).to eq(model.generate("the canary", max_tokens: 5, ignore_eos: true))
      expect(soon { model.close }).to be_nil
    end

    it "releases everything when dropped mid-way" do
      2.times { model.each_token("the canary", max_tokens: 5).next }
      GC.start
      expect(soon { model.generate(prompt, max_tokens: 2).size }).to eq(2)
      expect(soon { model.close }).to be_nil
      expect(model).to be_closed
    end

    it "streams when iterated with a block, and stops early" do
      expect(model.each_token("the canary", max_tokens: 8, ignore_eos: true).first(2).size).to eq(2)
      expect(model.stats[:decode_tokens]).to be < 8
    end

    it "never hangs behind a generation paused in another Fiber: the passes carry it along" do
      held = model.enum_for(:generate, "the canary", max_tokens: 5, ignore_eos: true)
      first = held.next
      expect(soon { model.info[:n_vocab] }).to eq(512)
      # The only sequence is the paused one's: this call runs its passes until it ends.
      expect(soon { model.generate(prompt, max_tokens: 2).size }).to eq(2)
      rest = []
      loop { rest << held.next } # StopIteration ends the loop
      expect([first, *rest].join).to eq(model.generate("the canary", max_tokens: 5, ignore_eos: true))
    end
  end

  describe "last_stop_reason" do
    it "says why the last generation stopped, :interrupted when it did not finish" do
      expect(model.last_stop_reason).to be_nil
      model.generate(prompt, max_tokens: 2, ignore_eos: true)
      expect(model.last_stop_reason).to eq(:length)
      model.generate(prompt, max_tokens: 5, ignore_eos: true) { break }
      expect(model.last_stop_reason).to eq(:interrupted)
      model.generate(prompt, max_tokens: 2, ignore_eos: true)
      expect { model.generate(prompt, max_tokens: 5) { raise IOError } }.to raise_error(IOError)
      expect(model.last_stop_reason).to eq(:interrupted)
      model.generate(prompt, max_tokens: 2, ignore_eos: true)
      expect { Timeout.timeout(0.05) { model.generate(prompt, max_tokens: 5) { sleep 1 } } }
        .to raise_error(Timeout::Error)
      expect(model.last_stop_reason).to eq(:interrupted)
    end

    it "is nil when the call was refused before generating" do
      model.generate(prompt, max_tokens: 2, ignore_eos: true)
      expect { model.generate([1] * 65) }.to raise_error(Elelem::ContextFullError)
      expect(model.last_stop_reason).to be_nil
    end
  end

  describe "the block form" do
    it "returns the block's value and closes the model" do
      kept = nil
      expect(Elelem.open(SpecModels.canary) { |m| (kept = m).generate(prompt, max_tokens: 1).size }).to eq(1)
      expect(kept).to be_closed
    end

    it "closes the model when the block raises" do
      kept = nil
      expect { Elelem.open(SpecModels.canary) { |m| (kept = m) && raise("boom") } }.to raise_error("boom")
      expect(kept).to be_closed
    end
  end

  describe "errors" do
    it "raises LoadError naming a missing file" do
      expect { Elelem.open("/nonexistent/model.gguf") }
        .to raise_error(Elelem::LoadError, %r{/nonexistent/model\.gguf})
      healthy!
    end

    it "raises LoadError for a file that is not a GGUF" do
      Dir.mktmpdir do |dir|
        path = File.join(dir, "notes.gguf")
        File.write(path, "just some text, not a model\n" * 10)
        expect { Elelem.open(path) }.to raise_error(Elelem::LoadError, /not a GGUF file/)
      end
      healthy!
    end

    it "raises UnsupportedModel (a LoadError) naming an unknown architecture" do
      Dir.mktmpdir do |dir|
        bytes = File.binread(SpecModels.canary)
        at = bytes.index("general.architecture") + "general.architecture".size + 4 + 8
        bytes[at, 5] = "mambo"
        path = File.join(dir, "mambo.gguf")
        File.binwrite(path, bytes)
        expect { Elelem.open(path) }.to raise_error(Elelem::UnsupportedModel, /architecture 'mambo'/)
      end
      healthy!
    end

    it "rejects token ids out of range or not integers" do
      expect { model.generate([1, 512]) }.to raise_error(ArgumentError, /token id 512 is out of range/)
      expect { model.generate([-1]) }.to raise_error(ArgumentError, /out of range/)
      expect { model.generate([1, 2.0]) }.to raise_error(ArgumentError, /must be Integers/)
      expect { model.generate(:tokens) }.to raise_error(ArgumentError)
      expect { model.generate([]) }.to raise_error(ArgumentError, /empty/)
      expect(model.generate(prompt, max_tokens: 1).size).to eq(1)
    end

    it "rejects bad options" do
      expect { Elelem.open(SpecModels.canary, n_ctx: 0) }.to raise_error(ArgumentError, /n_ctx/)
      expect { Elelem.open(SpecModels.canary, n_threads: -1) }.to raise_error(ArgumentError, /n_threads/)
      expect { Elelem.open(SpecModels.canary, n_ctx: "big") }.to raise_error(ArgumentError, /n_ctx/)
      expect { Elelem.open(SpecModels.canary, adaptive_threads: 1) }.to raise_error(ArgumentError, /adaptive_threads/)
      expect { model.generate(prompt, max_tokens: -5) }.to raise_error(ArgumentError, /max_tokens/)
    end

    it "names the option at fault when opening" do
      open = ->(**options) { Elelem.open(SpecModels.canary, **options) }
      expect { open.call(n_ctxx: 64) }
        .to raise_error(ArgumentError, /unknown keyword: :n_ctxx \(Elelem.open takes n_ctx,/)
      expect { open.call("n_ctx" => 64) }.to raise_error(ArgumentError, /unknown keyword: "n_ctx"/)
      expect { open.call(n_ctx: Elelem::Defaults::MAX_N_CTX + 1) }
        .to raise_error(ArgumentError, /\An_ctx must be an Integer in 1..1048576, got 1048577\z/)
      expect { open.call(n_ctx: 2**70) }.to raise_error(ArgumentError, /n_ctx must be an Integer/)
      expect { open.call(parallel: 1.0) }.to raise_error(ArgumentError, /parallel must be an Integer/)
      expect { open.call(own_kernels: nil) }.to raise_error(ArgumentError, /own_kernels must be true or false, got nil/)
      expect { open.call(flash_attn: :on) }.to raise_error(ArgumentError, /flash_attn must be :auto, true or false/)
      expect { open.call(draft_tokens: 0) }.to raise_error(ArgumentError, /draft_tokens must be an Integer in 1..16/)
    end

    it "gives the same greedy ids with ggml's products only (own_kernels: false)" do
      ours = model.generate(prompt, max_tokens: 8, ignore_eos: true)
      ggml = Elelem.open(SpecModels.canary, n_ctx: 64, own_kernels: false) do |m|
        m.generate(prompt, max_tokens: 8, ignore_eos: true)
      end
      expect(ggml).to eq(ours)
    end

    it "raises ContextFullError for a prompt that does not fit n_ctx" do
      expect { model.generate([1] * 65) }.to raise_error(Elelem::ContextFullError, /n_ctx 64/)
      expect(model.generate(prompt, max_tokens: 1).size).to eq(1)
    end

    it "stops when generation fills the context" do
      out = model.generate([1] * 60, max_tokens: 32, ignore_eos: true)
      expect(out.size).to eq(4)
      expect(model.last_stop_reason).to eq(:context_full)
    end

    it "raises ClosedError after close, which is idempotent" do
      model.close
      model.close
      Elelem.close(model)
      expect(model).to be_closed
      expect { model.generate(prompt) }.to raise_error(Elelem::ClosedError)
      expect { model.info }.to raise_error(Elelem::ClosedError)
      expect(model.inspect).to eq("#<Elelem::Model closed>")
    end
  end
end
