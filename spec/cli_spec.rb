# frozen_string_literal: true

require "spec_helper"
require_relative "support/cli_runner"
require "tmpdir"

RSpec.describe Elelem::CLI do
  include CliRunner

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
    expect(run("generate", "-m", qwen, "-t", "2", "--fixed-threads", "-n", "8", "def hello")).to eq(expected)
    invariant = Elelem.open(qwen, n_threads: 2, batch_invariant: true) { |m| m.generate("def hello", max_tokens: 8) }
    status, out, = run("generate", "-m", qwen, "-t", "2", "--batch-invariant", "-n", "8", "def hello")
    expect([status, out]).to eq([0, "#{invariant}\n"])
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

  it "lists serve's flags, and refuses what it does not take before opening a model" do
    status, out, = run("serve", "--help")
    expect(status).to eq(0)
    expect(out).to include("--host", "--port", "--parallel", "--queue", "--api-key", "--workers", "--n-ctx")
    expect(run("serve", "-m", SpecModels.canary, "extra")[0..2]).to eq([1, "", "elelem: needless argument: extra\n"])
    expect(run("serve", "--port", "eighty")[2]).to eq("elelem: invalid argument: --port eighty\n")
  end

  it "says how to get Puma when serve cannot load it, before opening a model" do
    runner = Elelem::Server::Runner
    allow(runner).to receive(:require).and_call_original
    allow(runner).to receive(:require).with("puma").and_raise(LoadError, "cannot load such file -- puma")
    expect(Elelem).not_to receive(:open)
    expect(run("serve", "-m", SpecModels.canary)).to eq(
      [1, "", "elelem: serving runs on Puma, which this Ruby cannot load (cannot load such file -- puma): " \
              "`gem install puma`, or Debian's `apt install puma`\n"]
    )
  end

  it "embeds texts given or piped in, one JSON array a line, with all-MiniLM-L6-v2 by default" do
    texts = ["hello world", "a second text"]
    status, out, = run("embed", "-t", "2", *texts)
    expect(status).to eq(0)
    vectors = out.lines.map { |line| JSON.parse(line) }
    expect(vectors.map(&:size)).to eq([384, 384])
    Elelem.open(SpecModels.path("all-minilm-l6-v2"), n_threads: 2) { |m| expect(vectors).to eq(m.embed(texts)) }
    expect(run("embed", "-t", "2", input: texts.join("\n"))[1]).to eq(out)
    expect(run("embed", "--pooling", "max", "x")[0..2]).to eq([1, "", "elelem: invalid argument: --pooling max\n"])
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

  it "chats, keeping the history, with prompts on stderr when stdout is not a terminal" do
    status, out, err = run("chat", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "-n", "12", "--temp", "0",
                           input: "My name is Ada.\nWhat is my name?\n")
    expect(status).to eq(0)
    expect(err).to include("qwen2", "temperature 0.0, seed ")
    expect(err.scan("> ").size).to eq(3)
    expect(out).not_to include("> ")
    expect(out.lines[1]).to include("Ada")
  end

  it "reads plain lines at a terminal where Reline does not load (a Gemfile without it, from Ruby 4.0)" do
    terminal = ->(io) { io.tap { |i| i.define_singleton_method(:tty?) { true } } }
    out = terminal.call(StringIO.new)
    chat = Elelem::CLI::Chat.new(nil, [out, StringIO.new, terminal.call(StringIO.new("hello\n"))], generation: {})
    allow(chat).to receive(:require).with("reline").and_raise(LoadError, "cannot load such file -- reline")
    expect(chat.send(:read_line)).to eq("hello\n")
    expect(out.string).to eq("> ")
  end

  it "takes /reset, /system and /quit in a chat instead of sending them to the model" do
    input = "My name is Ada.\n/reset\n/system Answer in French.\n/help\nWhat is my name?\n/quit\nnever read\n"
    status, out, err = run("chat", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "-n", "16", "--temp", "0",
                           input:)
    expect(status).to eq(0)
    expect(err).to include("(conversation reset)", "(conversation reset; system message: \"Answer in French.\")",
                           "/system TEXT")
    expect(out.lines.size).to eq(3) # two replies and the closing newline
    expect(out.lines[1]).not_to include("Ada")
    expect(err.scan("> ").size).to eq(6)
  end

  it "chats with a Gemma 3 GGUF, which carries no template, in llama.cpp's built-in format" do
    status, out, err = run("chat", "-m", SpecModels.path("gemma-3-270m"), "-n", "8", "--system", "Be brief.",
                           input: "Hello!\n")
    expect(status).to eq(0)
    expect(out.strip).not_to be_empty
    expect(err).not_to include("elelem: this model has no chat template")
  end

  it "prints its version" do
    expect(run("--version")).to eq([0, "elelem #{Elelem::VERSION} (ggml #{Elelem.ggml_version})\n", ""])
  end

  it "lists each command's own flags with the defaults it uses" do
    _, generate, = run("generate", "--help")
    _, chat, = run("chat", "--help")
    _, fetch, = run("fetch", "--help")
    expect(generate).to include("--max-tokens N", "(default 256)", "--json", "--system TEXT", "--template FILE",
                                "0 is greedy (default 0.0)", "(default #{Etc.nprocessors})")
    expect(chat).to include("(default 1024)", "(default 0.7)", "1 is off (default 1.1)")
    expect(chat).not_to include("--json")
    expect(fetch).not_to include("--model", "--temp")
    expect(run("info", "--help")[1]).to include("context size (default 256)")
    expect(run("tokenize", "--help")[1]).not_to include("--ctx")
  end

  it "prints one JSON object with --json, and notes on stderr where output stopped short" do
    status, out, err = run("generate", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "-n", "4", "--json",
                           input: "def hello")
    expect(status).to eq(0)
    json = JSON.parse(out)
    expect(json).to include("finish_reason" => "length", "prompt_tokens" => 2, "completion_tokens" => 4)
    expect(json.keys).to eq(%w[text finish_reason prompt_tokens completion_tokens seed model timings])
    expect(json["timings"]).to include("prompt_tokens_per_s", "decode_tokens_per_s")
    expect(err).to eq("elelem: stopped at 4 tokens (-n sets more)\n")
  end

  it "sends PROMPT through the chat template with --system or --template" do
    Dir.mktmpdir do |dir|
      template = File.join(dir, "t.jinja")
      File.write(template, "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:")
      status, out, = run("generate", "-m", SpecModels.canary, "--template", template, "--system", "S", "-n", "2",
                         "--json", "hi")
      expect(status).to eq(0)
      expect(JSON.parse(out)["prompt_tokens"]).to be > 3
    end
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
