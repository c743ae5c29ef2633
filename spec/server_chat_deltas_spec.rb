# frozen_string_literal: true

require "spec_helper"
require "elelem/server"

# How a chat choice's raw text becomes OpenAI's deltas: thinking as reasoning_content (as
# llama-server splits it), text that may be a tool call held back from the content, the calls
# in it streamed as they are written.
RSpec.describe Elelem::Server::ChatDeltas do
  def deltas(pieces, calls = [], thinking: false, opened: false, tools: false, format: :hermes)
    splitter = described_class.new(thinking:, opened:, tools:, format:)
    pieces.flat_map { |piece| splitter.piece(piece) } + splitter.finish(calls)
  end

  it "splits <think>…</think> off as reasoning_content, whatever the pieces cut" do
    expect(deltas(["<th", "ink>\nhmm ", "ok</th", "ink>\n\nHello", " world"], thinking: true))
      .to eq([{ reasoning_content: "hmm " }, { reasoning_content: "ok" }, { content: "Hello" }, { content: " world" }])
    # The template opened the thinking in the prompt: the reply only closes it.
    expect(deltas(["hmm</think>Hi"], thinking: true, opened: true))
      .to eq([{ reasoning_content: "hmm" }, { content: "Hi" }])
    expect(described_class.split("plain <think> text", thinking: true, opened: false)).to eq(["plain <think> text", ""])
    expect(described_class.split("<think>x</think>", thinking: false, opened: false)).to eq(["<think>x</think>", ""])
  end

  def call(name, arguments)
    Elelem::ToolCall.new(name:, arguments:)
  end

  def opening(index, name)
    { tool_calls: [{ index:, id: match(/\Acall_\w{24}\z/), type: "function", function: { name:, arguments: "" } }] }
  end

  def pieces(out, index)
    out.filter_map { |d| d[:tool_calls]&.first&.then { |c| c[:function][:arguments] if c[:index] == index } }
  end

  it "holds back what may open a tool call, and streams the call's arguments as they are written" do
    out = deltas(["Let me <tool", "_call>\n{\"name\"", ": \"get_weather\", ", "\"arguments\": {\"ci", "ty\": \"Pa",
                  "ris\", \"days\": 3", "}}\n</tool_call>"],
                 [call("get_weather", { "city" => "Paris", "days" => 3 })], tools: true)
    expect(out[0..1]).to match([{ content: "Let me " }, opening(0, "get_weather")])
    expect(pieces(out, 0)).to eq(["", '{"ci', 'ty":"Pa', 'ris","days":', "3}"]) # a number once it ends
    expect(out.size).to eq(6)
  end

  it "streams parallel calls in each format whose heads it reads, and completes each from the parsed reply" do
    calls = [call("a", { "x" => [1, 2.5] }), call("b", {})]
    hermes = ["<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2.50", "]}}\n</tool_call>\n<tool_call>",
              "\n{\"name\": \"b\", \"arguments\": {", "}}\n</tool_call>"]
    mistral_args = ["[TOOL_CALLS]a[ARGS]{\"x\": [1, 2.50", "]}[TOOL_CALLS]b[ARGS]{", "}"]
    { hermes:, mistral_args:, mistral: ["[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": [1,",
                                        " 2.50]}}, {\"name\": \"b\", \"arguments\": {}}]"] }
      .each do |format, written|
        out = deltas(written, calls, tools: true, format:)
        openings = out.select { |d| d[:tool_calls]&.first&.key?(:id) }
        expect(openings).to match([opening(0, "a"), opening(1, "b")]), format.to_s
        expect(pieces(out, 0).join).to eq('{"x":[1,2.5]}'), format.to_s
        expect(pieces(out, 1).join).to eq("{}"), format.to_s
      end
  end

  it "sends at the end what it cannot stream: doubled braces, the arguments before the name, a call cut short" do
    doubled = deltas(["{{\"name\": \"a\", \"arguments\": {{\"x\": ", "1}}}}"], [call("a", { "x" => 1 })], tools: true)
    expect(pieces(doubled, 0)).to eq(["", "{", '"x":1}'])
    reversed = deltas(["<tool_call>{\"arguments\": {\"x\": 1}, ", "\"name\": \"a\"}"], [call("a", { "x" => 1 })],
                      tools: true)
    expect(reversed).to match([opening(0, "a"), { tool_calls: [{ index: 0, function: { arguments: '{"x":1}' } }] }])
    # Cut short by max_tokens: no call in the parsed reply, the held text is content.
    cut = deltas(["<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1"], tools: true)
    expect(cut).to match([opening(0, "a"), { tool_calls: [{ index: 0, function: { arguments: '{"x":' } }] },
                          { content: "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1" }])
  end

  it "sends held text as content when it was no call" do
    expect(deltas([" {\"na", "me\": 1}"], tools: true)).to eq([{ content: " {\"name\": 1}" }])
    expect(deltas(["a <to", "y> b"], tools: true)).to eq([{ content: "a " }, { content: "<toy> b" }])
    expect(deltas(["a <to", "y> b"])).to eq([{ content: "a <to" }, { content: "y> b" }])
  end
end

RSpec.describe Elelem::Server::CompactJson do
  # The value written in pieces of `size` characters: the text sent, and the characters taken.
  def rewrite(text, size)
    json = described_class.new
    out = +""
    used = 0
    text.each_char.each_slice(size).map(&:join).each do |piece|
      break if json.done? || json.broken?

      written, taken = json.feed(piece)
      out << written
      used += taken
    end
    [out, used, json]
  end

  it "writes what JSON.generate writes of the parsed value, however the text is cut" do
    text = '{ "a" : [1, -0, 2.50, 1e5, 123456789012345678901234, true, false, null, ' \
           '{"b": "\\u00e9\\n\\ud83d\\ude00\\/ \\" \u2028"}], "c": {} , "d": []}  after'
    value = JSON.parse(text[0...text.rindex("}") + 1])
    [1, 2, 7].each do |size|
      out, used, json = rewrite(text, size)
      # serde_json, which reads the calls, takes an integer past 64 bits as a float.
      expect(out).to eq(JSON.generate(value).sub("123456789012345678901234", 123_456_789_012_345_678_901_234.0.to_s)),
                     size.to_s
      expect(text[used..]).to eq("  after") if size == 1
      expect(json).to be_done
    end
  end

  it "stops where the text is not JSON, what it wrote a prefix of the value's text" do
    ['{{"a": 1}}', '{"a" 1}', '{"a": "\\q"}', "{\"a\": \"\u0001\"}", '{"a": tru}', '{"a": "\\ud83d"}'].each do |text|
      out, _, json = rewrite(text, 1)
      expect(json).to be_broken, text
      expect(out.size).to be < text.size
    end
  end
end
