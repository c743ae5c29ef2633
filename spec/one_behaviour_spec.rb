# frozen_string_literal: true

require "spec_helper"
require "elelem/cli"
require "rack/lint"
require "rack/mock"
require "stringio"
require "tmpdir"

# What a new user tries first, answered the same way in Ruby, the CLI and over HTTP:
# clear errors in the caller's own terms (never the template's or the grammar's
# internals), the small conveniences OpenAI's API taught them, and base models and
# template limits said out loud.
RSpec.describe "one behaviour in Ruby, the CLI and HTTP" do
  def cli(*argv)
    out = StringIO.new
    err = StringIO.new
    status = Elelem::CLI.new(out, err, StringIO.new("")).run(argv)
    [status, out.string, err.string]
  end

  context "with Qwen2.5-Coder-0.5B" do
    before(:all) { @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 512, n_threads: 2) }
    after(:all) { @model.close }

    let(:model) { @model }

    it "takes a String as one user message" do
      expect(model.chat_tokens("hi")).to eq(model.chat_tokens([{ role: "user", content: "hi" }]))
      expect(model.chat("Say OK.", max_tokens: 4)).to eq(model.chat([{ role: "user", content: "Say OK." }],
                                                                    max_tokens: 4))
    end

    it "names the message that has no content, but for an assistant's tool calls" do
      messages = [{ role: "user", content: "hi" }, { role: "assistant" }, { role: "user", content: "and?" }]
      expect { model.chat(messages) }.to raise_error(ArgumentError, /message 1 \(assistant\) has no content/)
      expect { model.chat([{ role: "user", content: nil }]) }.to raise_error(ArgumentError, /message 0 \(user\)/)
      call = { role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: {} } }] }
      expect(model.chat_prompt([{ role: "user", content: "hi" }, call])).to include("<tool_call>")
    end

    it "suggests the option a misspelt keyword meant, and takes max_completion_tokens" do
      expect { model.chat("hi", max_token: 5) }
        .to raise_error(ArgumentError, "unknown keyword: :max_token (did you mean :max_tokens?)")
      expect { model.chat("hi", no_such_variable: 1) }.to raise_error(ArgumentError, /chat template reads/)
      expect(model.complete([{ role: "user", content: "Count to ten." }], max_completion_tokens: 3).tokens.size)
        .to eq(3)
      expect { model.chat("hi", max_tokens: 2, max_completion_tokens: 3) }.to raise_error(ArgumentError, /disagree/)
    end

    it "gives a Completion as plain data" do
      completion = model.complete("def add(a, b):", max_tokens: 4)
      expect(completion.to_h).to include(text: completion.text, tokens: completion.tokens, finish_reason: :length,
                                         prompt_tokens: completion.prompt_tokens, tool_calls: [])
      expect(JSON.parse(JSON.generate(completion.to_h))["tokens"]).to eq(completion.tokens)
    end

    it "names a GBNF grammar's own rules in its errors" do
      expect { model.generate("x", grammar: "root ::= answer-Part\n", max_tokens: 2) }
        .to raise_error(ArgumentError) do |e|
          expect([e.message, e.message.include?("g_")]).to match([/answer-Part/, false])
        end
    end

    it "opens a tokenizer by a known model's name" do
      expect(Elelem::Tokenizer.open("qwen2.5-coder-0.5b").tokenize("def hello")).to eq(model.tokenize("def hello"))
    end

    it "raises for tools that the template cannot show" do
      plain = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
      tool = { type: "function", function: { name: "f", parameters: { type: "object" } } }
      expect { model.chat("hi", template: plain, tools: [tool], max_tokens: 1) }
        .to raise_error(Elelem::ToolsNotSupportedError, /cannot show tools/)
      expect(model.chat("hi", template: plain, max_tokens: 1)).to be_a(String)
    end

    it "asks a decoder without pooling for one, in Ruby, the CLI and over HTTP" do
      expect { model.embed("x") }.to raise_error(ArgumentError, /no pooling of its own: pass pooling: :mean/)
      expect(model.embed("x", pooling: :last).size).to eq(model.info[:embedding_length])
      status, _, err = cli("embed", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "-t", "2", "x")
      expect([status, err]).to match([1, /missing argument: --pooling \(.* has no pooling of its own/])
      app = Rack::Lint.new(Elelem::Server.new(model, model_name: "q"))
      post = lambda do |body|
        response = Rack::MockRequest.new(app).request("POST", "/v1/embeddings", input: JSON.generate(body),
                                                                                "CONTENT_TYPE" => "application/json")
        [response.status, JSON.parse(response.body)]
      end
      expect(post.call({ input: "x" })).to match([400, { "error" => hash_including("param" => "pooling") }])
      status, body = post.call({ input: [[750, 23_811]], pooling: "last" })
      expect(status).to eq(200)
      expect(body["data"][0]["embedding"]).to eq(model.embed([750, 23_811], pooling: :last))
      expect(post.call({ input: "x", pooling: "none" }))
        .to match([400, { "error" => hash_including("param" => "pooling") }])
    end
  end

  context "with an encoder over HTTP (tiny BERT)" do
    before(:all) { @bert = Elelem.open(SpecModels.synthetic("tiny-bert"), n_threads: 1) }
    after(:all) { @bert.close }

    def post(body)
      app = Rack::Lint.new(Elelem::Server.new(@bert, model_name: "m"))
      response = Rack::MockRequest.new(app).request("POST", "/v1/embeddings", input: JSON.generate(body),
                                                                              "CONTENT_TYPE" => "application/json")
      [response.status, JSON.parse(response.body)]
    end

    it "says how to cut a long text in HTTP's terms, and cuts it when asked" do
      long = [2] + ([17] * 300) + [3]
      status, body = post({ input: [long] })
      expect(status).to eq(400)
      expect(body["error"]).to include("code" => "context_length_exceeded", "param" => "input")
      expect(body["error"]["message"]).to end_with('(send "truncate": true to cut it)')
      status, body = post({ input: [long], truncate: true })
      expect(status).to eq(200)
      expect(body["data"][0]["embedding"]).to eq(@bert.embed(long, truncate: true))
      expect(post({ input: "x", truncate: "yes" }))
        .to match([400, { "error" => hash_including("param" => "truncate") }])
    end

    it "takes dimensions equal to the model's, and refuses others" do
      size = @bert.info[:embedding_length]
      expect(post({ input: "x", dimensions: size }).first).to eq(200)
      status, body = post({ input: "x", dimensions: size / 2 })
      expect(status).to eq(400)
      expect(body["error"]).to include("param" => "dimensions")
      expect(body["error"]["message"]).to include("dimensions must be #{size}")
    end
  end

  context "with gemma-3-270m (a base model, and a built-in format without tools)" do
    before(:all) { @gemma = Elelem.open(SpecModels.path("gemma-3-270m"), n_ctx: 256, n_threads: 2) }
    after(:all) { @gemma.close }

    it "is marked in the catalog, and a chat with it warns once" do
      expect(Elelem::Models.list.find { |m| m[:name] == "gemma-3-270m" }).to include(base: true)
      expect(Elelem::Models.list.find { |m| m[:name] == "qwen2.5-coder-0.5b" }).to include(base: false)
      expect { @gemma.chat_prompt("hi") }.to output(/gemma-3-270m is a base model/).to_stderr
      expect { @gemma.chat_prompt("hi") }.not_to output.to_stderr
    end

    it "raises for tools rather than dropping them" do
      tool = { type: "function", function: { name: "f", parameters: { type: "object" } } }
      expect { @gemma.complete([{ role: "user", content: "hi" }], tools: [tool], max_tokens: 1) }
        .to raise_error(Elelem::ToolsNotSupportedError)
    end
  end

  context "the CLI" do
    it "says a --template file is missing in one line" do
      status, _, err = cli("generate", "--template", "/nonexistent.jinja", "hi")
      expect([status, err]).to eq([1, "elelem: --template /nonexistent.jinja: cannot read it (No such file or " \
                                      "directory)\n"])
    end

    it "prints a seed that doubles cannot hold as a string in --json" do
      qwen = SpecModels.path("qwen2.5-coder-0.5b")
      big = (2**64) - 1
      status, out, = cli("generate", "-m", qwen, "-t", "2", "-c", "64", "-n", "1", "--seed", big.to_s, "--json", "x")
      expect([status, JSON.parse(out)["seed"]]).to eq([0, big.to_s])
      status, out, = cli("generate", "-m", qwen, "-t", "2", "-c", "64", "-n", "1", "--json", "x")
      seed = JSON.parse(out)["seed"]
      expect([status, seed.class, seed <= Elelem::Options::MAX_EXACT_SEED]).to eq([0, Integer, true])
    end
  end
end
