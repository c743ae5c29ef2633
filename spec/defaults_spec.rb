# frozen_string_literal: true

require "etc"
require "spec_helper"

# Each default and limit has one home, the engine's, which Ruby reads as Elelem::Defaults.
# These fail when a second home appears or the two sides disagree.
RSpec.describe Elelem::Defaults do
  keys = (described_class::OPEN.keys + described_class::GENERATION.keys).uniq
  literal = /\b(#{keys.join("|")})(?::\s*|\s*=>\s*|\s*=\s*)(\d[\d_]*(?:\.\d+)?)(?!\.\.)/

  # Where lib/ writes a number for one of those options on purpose, and why. Anything else
  # is a second home of a default: read it from Elelem::Defaults instead.
  deliberate = {
    ["lib/elelem/cli.rb", "max_tokens", "256"] => "the CLI's generate writes a screenful",
    ["lib/elelem/cli.rb", "temperature", "0.7"] => "the CLI's chat samples: greedy small models loop",
    ["lib/elelem/cli.rb", "repeat_penalty", "1.1"] => "... and penalizes repeats",
    ["lib/elelem/cli.rb", "n_ctx", "16"] => "tokenize opens the smallest context it needs",
    ["lib/elelem/cli.rb", "n_ctx", "256"] => "info opens a small context",
    ["lib/elelem/cli/serve.rb", "parallel", "4"] => "a server serves several clients at once",
    ["lib/elelem/cli/serve.rb", "queue", "32"] => "... and turns clients away sooner",
    ["lib/elelem/options.rb", "max_tokens", "1024"] => "a chat reply runs to the end of its turn",
    ["lib/elelem/server/request.rb", "temperature", "1.0"] => "OpenAI's API samples unless told",
    ["lib/elelem/server/request.rb", "top_p", "1.0"] => "... with every token",
    ["lib/elelem/bench.rb", "max_tokens", "1"] => "a prompt's speed is measured by one token",
    ["lib/elelem/bench.rb", "max_tokens", "48"] => "a chat turn of the multi-turn measurement",
    ["lib/elelem/server/native_request.rb", "temperature", "0.8"] => "llama-server's /completion samples unless told",
    ["lib/elelem/server/native_request.rb", "top_k", "40"] => "... with its common_params_sampling",
    ["lib/elelem/server/native_request.rb", "top_p", "0.95"] => "...",
    ["lib/elelem/server/native_request.rb", "min_p", "0.05"] => "...",
    ["lib/elelem/server/ollama/request.rb", "temperature", "0.8"] => "Ollama's API samples unless told",
    ["lib/elelem/server/ollama/request.rb", "top_k", "40"] => "... with its api.DefaultOptions",
    ["lib/elelem/server/ollama/request.rb", "top_p", "0.9"] => "...",
    ["lib/elelem/server/ollama/request.rb", "min_p", "0.0"] => "...",
    ["lib/elelem/server/ollama/request.rb", "repeat_penalty", "1.1"] => "...",
    ["lib/elelem/server/ollama/request.rb", "repeat_last_n", "64"] => "..."
  }

  it "is read by Ruby as the engine gives it" do
    expect(Elelem::Options::GENERATION_DEFAULTS).to include(described_class::GENERATION)
    expect(Elelem::Options::MAX_N_CTX).to eq(described_class::MAX_N_CTX)
    expect(Elelem::Model::DEFAULT_N_CTX).to eq(described_class::OPEN[:n_ctx])
    # Written as the engine's code writes them, not as their f32 widened to a Float.
    expect(described_class::GENERATION.values_at(:top_p, :min_p)).to eq([0.95, 0.05])
    expect([described_class::OPEN, described_class::GENERATION]).to all(be_frozen)
  end

  it "are what a model opened without options gets" do
    info = nil
    # The canary was trained on fewer tokens than the default context, which is warned of.
    expect { info = Elelem.open(SpecModels.canary, &:info) }.to output(/is above the/).to_stderr
    open = described_class::OPEN
    expect(info.slice(:n_ctx, :n_threads, :adaptive_threads, :parallel, :flash_attn, :batch_invariant))
      .to eq(open.slice(:n_ctx, :n_threads, :adaptive_threads, :parallel, :flash_attn, :batch_invariant))
    expect(info.values_at(:cache_type_k, :cache_type_v)).to eq(open.values_at(:cache_type_k, :cache_type_v))
    expect(open[:n_threads]).to eq([Etc.nprocessors, described_class::MAX_THREADS].min)
  end

  it "has no second home in lib/" do
    found = Dir[File.join(ROOT, "lib/**/*.rb")].flat_map do |file|
      relative = file.delete_prefix("#{ROOT}/")
      File.readlines(file).flat_map do |line|
        line.sub(/#(?!\{).*/, "").scan(literal).map { |key, value| [relative, key, value] }
      end
    end
    expect(found.uniq).to match_array(deliberate.keys)
  end

  it "is where lib/'s constants for the limits come from" do
    limits = Dir[File.join(ROOT, "lib/**/*.rb")].flat_map do |file|
      File.readlines(file).grep_v(/^\s*#/).grep(/\b(MAX_N_CTX|MAX_THREADS|DEFAULT_N_CTX|DEFAULT_QUEUE)\s*=/)
    end
    expect(limits).not_to be_empty
    expect(limits).to all(match(/= Defaults::/))
  end
end
