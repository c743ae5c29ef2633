# frozen_string_literal: true

require "spec_helper"
require "timeout"

# Elelem.open(..., batch_invariant: true): a sequence's tokens are those it gets alone,
# whatever else the model generates beside it. On Qwen2.5-Coder-0.5B, whose default
# kernels give a row other bits in a batch of several (the engine's own test counts them).
RSpec.describe "batch-invariant generation" do
  around { |example| Timeout.timeout(300) { example.run } }

  before(:all) do
    @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 2048, n_threads: 2, parallel: 4,
                                                                batch_invariant: true)
  end
  after(:all) { @model.close }

  let(:prompts) do
    ["def fibonacci(n):", "class Stack:\n    def __init__(self):", "# Sort a list of numbers in Ruby\n",
     "SELECT name FROM users WHERE"]
  end

  it "says so in info and inspect" do
    expect(@model.info).to include(batch_invariant: true, parallel: 4, n_ctx: 2048)
    expect(@model.inspect).to end_with("n_ctx=2048 batch_invariant>")
  end

  it "gives threads generating together the tokens each gets alone, logprobs included" do
    alone = prompts.map { |prompt| @model.complete(prompt, max_tokens: 24, logprobs: 2) }
    together = prompts.each_with_index.map do |prompt, i|
      Thread.new do
        sleep(0.05 * i) # arrivals staggered: prompts join passes that carry others' decode steps
        @model.complete(prompt, max_tokens: 24, logprobs: 2)
      end
    end.map(&:value)
    expect(together.map(&:tokens)).to eq(alone.map(&:tokens))
    expect(together.map(&:logprobs)).to eq(alone.map(&:logprobs))
    expect(@model.generate_all(prompts, max_tokens: 24)).to eq(alone.map(&:text))
  end

  it "gives greedy speculative decoding the plain greedy tokens" do
    text = "def add_all(values):\n    total = 0\n    for v in values:\n        total += v\n    return total\n\n"
    prompt = "#{text}#{text}# The same, with sum:\n"
    plain = @model.generate(prompt, max_tokens: 40, ignore_eos: true)
    completion = @model.complete(prompt, max_tokens: 40, ignore_eos: true, draft: :lookup)
    expect(completion.text).to eq(plain)
    expect(completion.timings[:draft_accepted]).to be_between(1, completion.timings[:draft_proposed] - 1)
  end

  it "gives each sequence n_ctx / parallel tokens" do
    expect { @model.generate([1] * 513) }
      .to raise_error(Elelem::ContextFullError, /holds 0 of 512 \(n_ctx 2048 split among 4 sequences\)/)
    expect(@model.generate([1] * 500, max_tokens: 4, ignore_eos: true).size).to eq(4)
  end

  it "needs flash attention, and refuses an embedding model" do
    expect { Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 256, batch_invariant: true, flash_attn: false) }
      .to raise_error(ArgumentError, /need flash attention/)
    expect { Elelem.open(SpecModels.path("all-minilm-l6-v2"), batch_invariant: true) }
      .to raise_error(ArgumentError, /embedding model/)
    expect { Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), batch_invariant: 1) }
      .to raise_error(ArgumentError, /batch_invariant/)
  end
end
