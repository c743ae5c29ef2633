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

  it "reads PROMPT from standard input when none is given, or when it is -" do
    qwen = SpecModels.path("qwen2.5-coder-0.5b")
    expected = run("generate", "-m", qwen, "-t", "2", "-n", "8", "def hello")
    expect(expected[0]).to eq(0)
    expect(run("generate", "-m", qwen, "-t", "2", "-n", "8", input: "def hello\n")).to eq(expected)
    expect(run("generate", "-m", qwen, "-t", "2", "-n", "8", "-", input: "def hello\n")).to eq(expected)
    expect(run("tokenize", "-m", qwen, "-", input: "def hello")[1]).to eq("750 23811\n")
  end

  it "describes the default model when none is named, and refuses extra arguments" do
    status, out, = run("info")
    expect(status).to eq(0)
    expect(out).to start_with("#<Elelem::Model qwen2")
    expect(out).to include(Elelem::Models.path(Elelem::Models::DEFAULT))
    status, _, err = run("info", "-m", SpecModels.canary, "other.gguf")
    expect([status, err]).to eq([1, "elelem: needless argument: other.gguf\n"])
    expect(run("chat", "-m", SpecModels.canary, "hello")[0]).to eq(1)
  end

  it "tokenizes" do
    _, out, = run("tokenize", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "def hello")
    expect(out).to eq("750 23811\n")
  end

  it "streams a generation" do
    golden = SpecModels.golden("qwen2.5-coder-0.5b")["cases"].find { |c| c["name"] == "prose" }
    status, out, = run("generate", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "-t", "2", "-n", "32",
                       golden["prompt_text"])
    expect(status).to eq(0)
    expect(out).to eq("#{golden["output_text"]}\n")
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
