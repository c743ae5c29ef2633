# frozen_string_literal: true

require "spec_helper"

RSpec.describe Elelem::Bench do
  around do |example|
    Elelem.open(SpecModels.canary, n_ctx: 1024, n_threads: 2) do |model|
      @model = model
      example.run
    end
  end

  let(:bench) { described_class.new(@model) }

  it "fills a deep context once and keeps it for the next depths" do
    bench.decode_rate(8, depth: 200)
    bench.decode_rate(8, depth: 200)
    expect(@model.stats[:reused_prompt_tokens]).to eq(199)
    bench.decode_rate(8, depth: 500)
    expect(@model.stats).to include(reused_prompt_tokens: 200, prompt_tokens: 300)
  end

  it "measures prompts, first tokens and the Ruby side's share" do
    expect(bench.prompt_rate(64)).to be_positive
    expect(bench.first_token_ms(16)).to be_positive
    expect(bench.ruby_overhead_us(16)).to be_finite
    expect(described_class.open_ms(SpecModels.canary, n_ctx: 64)).to be_positive
  end
end
