# frozen_string_literal: true

require "spec_helper"
require_relative "support/serve_process"

# A hybrid model (lfm2's short convolutions, whose state is kept per sequence, beside
# attention layers) behind `elelem serve --batch-invariant`: eight requests at once,
# continuously batched, each get the tokens the same request gets alone.
RSpec.describe "a hybrid model served to eight streams at once" do
  around { |example| Timeout.timeout(300) { example.run } }

  before(:all) do
    @server = ServeProcess.new("-m", SpecModels.synthetic("tiny-lfm2"), "--parallel", "8", "--batch-invariant")
  end
  after(:all) { @server&.stop }

  # Prompts of different lengths (the longest past the convolution window and a micro-batch's
  # worth of other sequences' tokens), so the streams join and leave each other's passes.
  let(:prompts) { (0...8).map { |i| [1, *Array.new(3 + (37 * i), &->(j) { 3 + (((i * 131) + (j * 17)) % 500) })] } }

  def complete(prompt)
    response = @server.request("POST", "/completion",
                               { prompt:, n_predict: 24, temperature: 0, return_tokens: true, cache_prompt: false })
    expect(response.code).to eq("200"), response.body
    JSON.parse(response.body).fetch("tokens")
  end

  it "gives each of eight concurrent requests the tokens it gets alone" do
    alone = prompts.map { |prompt| complete(prompt) }
    expect(alone.map(&:size)).to all(be_positive)
    together = prompts.each_with_index.map do |prompt, i|
      Thread.new do
        sleep(0.02 * i) # staggered: later prompts join passes that decode earlier ones
        complete(prompt)
      end
    end.map(&:value)
    expect(together).to eq(alone)
  end
end
