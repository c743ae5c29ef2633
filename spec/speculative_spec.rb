# frozen_string_literal: true

require "spec_helper"
require "timeout"

# Speculative decoding through Ruby: a draft model (Elelem.open(..., draft:)) or prompt
# lookup (draft: :lookup) proposes tokens that the model verifies several at a time.
# Greedy text is the model's own choices; on the synthetic canary (F32 weights, whose
# kernels give every row of a pass the bits of a lone row) it equals plain decoding.
RSpec.describe "speculative decoding" do
  let(:prompt) { [1, 50, 60, 70, 80, 90, 50, 60, 70, 80, 91, 50] }

  describe "with a draft model" do
    before(:all) do
      @model = Elelem.open(SpecModels.canary, n_ctx: 256, n_threads: 2, draft: SpecModels.synthetic("tiny-llama3"),
                                              draft_tokens: 3)
    end
    after(:all) { @model.close }

    it "keeps the model's greedy tokens and reports how the drafts fared" do
      completion = @model.complete(prompt, max_tokens: 24, ignore_eos: true)
      expect(completion.tokens).to eq(@model.generate(prompt, max_tokens: 24, ignore_eos: true, draft: false))
      timings = completion.timings
      expect(timings[:draft_proposed]).to be > 0
      expect(timings[:draft_accepted]).to be_between(0, timings[:draft_proposed])
      expect(timings[:decode_passes]).to be <= timings[:decode_tokens]
      expect(@model.info).to include(draft: a_kind_of(String), draft_tokens: 3)
    end

    it "drafts per call as asked: lookup, another length, or not at all" do
      plain = @model.generate(prompt, max_tokens: 16, ignore_eos: true, draft: false)
      expect(@model.generate(prompt, max_tokens: 16, ignore_eos: true, draft: :lookup)).to eq(plain)
      expect(@model.generate(prompt, max_tokens: 16, ignore_eos: true, draft: :copy)).to eq(plain)
      expect(@model.generate(prompt, max_tokens: 16, ignore_eos: true, draft_tokens: 7)).to eq(plain)
      expect(@model.complete(prompt, max_tokens: 4, draft: false).timings).not_to include(:draft_proposed)
    end

    it "refuses a call from its own streaming block, which would wait for it, and closes from it" do
      expect { @model.generate(prompt, max_tokens: 4) { @model.generate([1], max_tokens: 1) } }
        .to raise_error(Elelem::BusyError, /speculative generation holds the model/)
      expect(@model.generate([1, 2], max_tokens: 2, ignore_eos: true).size).to eq(2)
    end

    it "carries on through the signals Ruby raises nothing for (children exiting), with the same tokens" do
      run = ->(draft) { @model.generate(prompt, max_tokens: 200, ignore_eos: true, draft:) }
      quiet = %i[model lookup].to_h { |draft| [draft, run.call(draft)] }
      exits = 0
      running = true
      children = Thread.new do
        while running
          Process.wait(Process.spawn("true"))
          exits += 1
        end
      end
      signalled = Array.new(3) { quiet.keys.to_h { |draft| [draft, run.call(draft)] } }
      running = false
      children.join
      expect(signalled).to all(eq(quiet))
      expect(exits).to be > 3
    end

    it "samples with a seed" do
      run = -> { @model.generate(prompt, max_tokens: 20, ignore_eos: true, temperature: 0.9, seed: 3) }
      expect(run.call).to eq(run.call)
      expect(run.call.size).to eq(20)
    end

    it "leaves a constrained call to plain decoding, and refuses to speculate one when asked" do
      expect(@model.generate(prompt, regex: "[a-z]{1,4}", max_tokens: 8)).to be_an(Array)
      expect { @model.generate(prompt, regex: "[a-z]+", draft: :model) }
        .to raise_error(ArgumentError, /speculative decoding takes no constraint/)
      expect { @model.generate_all([prompt], draft: :lookup) }.to raise_error(ArgumentError, /one\s+sequence/)
    end
  end

  it "refuses options it cannot honour, naming them" do
    Elelem.open(SpecModels.canary, n_ctx: 128, n_threads: 1) do |model|
      expect { model.generate(prompt, draft: :model) }.to raise_error(ArgumentError, /needs a draft model/)
      expect { model.generate(prompt, draft: :guess) }.to raise_error(ArgumentError, /draft must be/)
      expect { model.generate(prompt, draft: :lookup, draft_tokens: 0) }.to raise_error(ArgumentError, /draft_tokens/)
      expect { model.generate(prompt, draft_tokens: 2) }.to raise_error(ArgumentError, /draft: :lookup/)
      expect(model.info[:draft]).to be_nil
    end
    expect { Elelem.open(SpecModels.canary, draft: 42) }.to raise_error(ArgumentError, /draft must be/)
    Elelem.open(SpecModels.canary, n_ctx: 128, n_threads: 1, draft: :copy) do |model|
      expect(model.info).to include(draft: :copy, draft_tokens: :auto)
      completion = model.complete(prompt * 3, max_tokens: 16, ignore_eos: true)
      expect(completion.tokens).to eq(model.generate(prompt * 3, max_tokens: 16, ignore_eos: true, draft: false))
      expect(completion.timings[:draft_accepted]).to be_positive
    end
    expect { Elelem.open(SpecModels.canary, draft: :lookup, draft_tokens: 99) }
      .to raise_error(ArgumentError, /draft_tokens/)
  end

  it "refuses a draft model of another vocabulary with its own error" do
    expect { Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 256, draft: SpecModels.path("gemma-3-270m")) }
      .to raise_error(Elelem::IncompatibleDraftError, /cannot draft for this model: .*vocabular/)
  end

  it "refuses a draft for an embedding model, which generates nothing to draft" do
    expect { Elelem.open(SpecModels.path("all-minilm-l6-v2"), draft: SpecModels.path("qwen2.5-coder-0.5b")) }
      .to raise_error(Elelem::IncompatibleDraftError, /embedding model/)
  end

  describe "prompt lookup on Qwen2.5-Coder-0.5B" do
    before(:all) do
      @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 1024, n_threads: 2, draft: :lookup)
    end
    after(:all) { @model.close }

    let(:edit) do
      "Rename the variable total to sum:\n\ndef add_all(values):\n    total = 0\n    for v in values:\n        " \
        "total += v\n    return total\n\nRenamed:\n"
    end

    it "streams its text, ends it at a stop string, and accepts most drafts of an edit" do
      pieces = []
      text = @model.generate(edit, max_tokens: 48, stop: ["return"]) { |piece| pieces << piece }
      expect(pieces.join).to eq(text)
      expect(text).to include("def add_all").and(satisfy { |t| !t.include?("return") })
      expect(@model.last_stop_reason).to eq(:stop)
      timings = @model.complete(edit, max_tokens: 32).timings
      expect(timings[:draft_accepted]).to be > timings[:draft_proposed] / 2
      expect(timings[:decode_passes]).to be < timings[:decode_tokens]
    end

    it "keeps a chat's earlier turns in the cache" do
      messages = [{ role: "user", content: "Write a Ruby method that adds two numbers. Code only." }]
      reply = @model.chat(messages, max_tokens: 48)
      @model.chat(messages + [{ role: "assistant", content: reply }, { role: "user", content: "Now subtract." }],
                  max_tokens: 8)
      expect(@model.stats[:reused_prompt_tokens]).to be > 20
    end

    it "stops on an interrupt and keeps working" do
      expect { Timeout.timeout(0.3) { @model.generate(edit, max_tokens: 900, ignore_eos: true) } }
        .to raise_error(Timeout::Error)
      expect(@model.last_stop_reason).to eq(:interrupted)
      expect(@model.generate("def add(a, b):", max_tokens: 4)).to be_a(String)
    end
  end

  it "ends with ClosedError when its block closes the model" do
    model = Elelem.open(SpecModels.canary, n_ctx: 128, n_threads: 1, draft: :lookup)
    expect { model.generate(prompt, max_tokens: 8, ignore_eos: true) { model.close } }
      .to raise_error(Elelem::ClosedError)
    expect(model).to be_closed
  end

  it "takes an open model as the draft, sharing its weights" do
    Elelem.open(SpecModels.synthetic("tiny-llama3"), n_ctx: 64, n_threads: 1) do |draft|
      Elelem.open(SpecModels.canary, n_ctx: 256, n_threads: 2, draft:) do |model|
        expect(model.complete(prompt, max_tokens: 12, ignore_eos: true).timings[:draft_proposed]).to be > 0
      end
    end
  end
end
