# frozen_string_literal: true

require "spec_helper"
require "elelem/server"

# How a chat choice's raw text becomes OpenAI's deltas: thinking as reasoning_content (as
# llama-server splits it), text that may be a tool call held back until the reply is parsed.
RSpec.describe Elelem::Server::ChatDeltas do
  def deltas(pieces, calls = [], thinking: false, opened: false, tools: false)
    splitter = described_class.new(thinking:, opened:, tools:)
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

  it "holds back what may open a tool call, and sends the calls as OpenAI streams them" do
    call = Elelem::ToolCall.new(name: "get_weather", arguments: { "city" => "Paris" })
    out = deltas(["Let me <tool", "_call>\n{\"name\"", "...}</tool_call>"], [call], tools: true)
    expect(out[0]).to eq(content: "Let me ")
    expect(out[1]).to match(tool_calls: [{ index: 0, id: /\Acall_\w{24}\z/, type: "function",
                                           function: { name: "get_weather", arguments: "" } }])
    expect(out[2]).to eq(tool_calls: [{ index: 0, function: { arguments: '{"city":"Paris"}' } }])
    expect(out.size).to eq(3)
  end

  it "sends held text as content when it was no call" do
    expect(deltas([" {\"na", "me\": 1}"], tools: true)).to eq([{ content: " {\"name\": 1}" }])
    expect(deltas(["a <to", "y> b"], tools: true)).to eq([{ content: "a " }, { content: "<toy> b" }])
    expect(deltas(["a <to", "y> b"])).to eq([{ content: "a <to" }, { content: "y> b" }])
  end
end
