# frozen_string_literal: true

require "spec_helper"
require "elelem/cli"
require "stringio"

RSpec.describe Elelem::CLI do
  def run(*argv, input: "")
    out = StringIO.new
    err = StringIO.new
    status = described_class.new(out, err, StringIO.new(input)).run(argv)
    [status, out.string, err.string]
  end

  it "prints help" do
    status, out, = run("--help")
    expect(status).to eq(0)
    expect(out).to include("generate", "chat", "tokenize", "info", "fetch")
  end

  it "says what is wrong in one line, with exit code 1" do
    status, _, err = run("generate", "-m", "/nonexistent.gguf", "hi")
    expect(status).to eq(1)
    expect(err.lines.size).to eq(1)
    expect(err).to start_with("elelem: ")
  end

  it "tokenizes" do
    _, out, = run("tokenize", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "def hello")
    expect(out).to eq("750 23811\n")
  end

  it "streams a generation" do
    golden = SpecModels.golden("qwen2.5-coder-0.5b")
    status, out, = run("generate", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "-t", "2", "-n", "32",
                       golden.find("prose")["prompt_text"])
    expect(status).to eq(0)
    expect(out).to eq("#{golden.output("prose")["text"]}\n")
  end

  it "chats, keeping the history" do
    status, out, err = run("chat", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "-n", "12",
                           input: "My name is Ada.\nWhat is my name?\n")
    expect(status).to eq(0)
    expect(err).to include("qwen2")
    expect(out.scan("> ").size).to eq(3)
    expect(out.split("> ").last(2).first).to include("Ada")
  end

  it "benchmarks a model, deeper contexts included" do
    status, out, = run("bench", "-m", SpecModels.canary, "--pp", "64", "--tg", "16", "--depth", "100,300", "-r", "1")
    expect(status).to eq(0)
    expect(out.lines.first).to start_with("#<Elelem::Model llama")
    rates = out.lines.drop(1).to_h { |line| [line.split[0], Float(line.split[1])] }
    expect(rates.keys).to eq(%w[pp64 tg16 ttft16 tg32@100 tg32@300])
    expect(rates.values).to all(be_positive)
  end
end
