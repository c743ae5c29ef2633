# frozen_string_literal: true

require "spec_helper"

# Tool calls through the Ruby API: `complete(messages, tools:)` reads the calls out of
# the reply in the format the model's chat template teaches, with the arguments held to
# the tool's JSON Schema by a lazy constraint; a real round trip on Qwen2.5-Coder-1.5B.
RSpec.describe "tool calls" do
  let(:weather) do
    { type: "function",
      function: { name: "get_weather", description: "The current weather in a city",
                  parameters: { type: "object", properties: { city: { type: "string" },
                                                              unit: { type: "string", enum: %w[celsius fahrenheit] } },
                                required: %w[city unit], additionalProperties: false } } }
  end

  context "with Qwen2.5-Coder-1.5B" do
    before(:all) { @model = Elelem.open(SpecModels.path("qwen2.5-coder-1.5b"), n_ctx: 2048, n_threads: 2) }
    after(:all) { @model.close }

    let(:model) { @model }

    it "calls a tool, takes its result, and answers with it" do
      messages = [{ role: "user", content: "What is the weather in Paris right now, in celsius?" }]
      call = model.complete(messages, tools: [weather], max_tokens: 96)
      expect(call.tool_calls.size).to eq(1)
      expect(call.tool_calls.first.name).to eq("get_weather")
      expect(call.tool_calls.first.arguments).to eq("city" => "Paris", "unit" => "celsius")
      expect(call.message).to include(role: "assistant", tool_calls: [weather_call_message(call)])

      messages += [call.message, { role: "tool", name: "get_weather", content: '{"temperature": 18, "sky": "sunny"}' }]
      # Still offered the tool, the 1.5B calls it again rather than answer, copying the doubled
      # braces its GGUF template shows (`{{"name": ...}}`): the call is read, not left in the text.
      again = model.complete(messages, tools: [weather], max_tokens: 96)
      paris = { "city" => "Paris", "unit" => "celsius" }
      expect(again.tool_calls.map(&:to_h)).to eq([{ name: "get_weather", arguments: paris, id: nil }])
      expect(again.text).to eq("")
      # The answer turn offers no tool, as the README's round trip does.
      answer = model.complete(messages, max_tokens: 96)
      expect(answer.tool_calls).to be_empty
      expect(answer.finish_reason).to eq(:eos)
      expect(answer.text).to include("18")
      expect(answer.text).not_to include("<tool_call>")
    end

    it "leaves a plain reply unconstrained, and chat still returns the raw String" do
      question = [{ role: "user", content: "Which city is the capital of France? One word." }]
      reply = model.complete(question, tools: [weather], max_tokens: 16)
      expect(reply.tool_calls).to be_empty
      expect(reply.text).to match(/Paris/)
      expect(model.chat(question, tools: [weather], max_tokens: 16)).to eq(reply.text)
    end
  end

  def weather_call_message(call)
    { type: "function", function: { name: "get_weather", arguments: call.tool_calls.first.arguments } }
  end

  context "reading replies" do
    before(:all) { @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 512, n_threads: 2) }
    after(:all) { @model.close }

    it "puts <think> text in #reasoning, not in #text" do
      content, reasoning, calls = @model.send(:_parse_reply, "<think>Paris is in France.</think>It is sunny.", nil)
      expect([content, reasoning, calls]).to eq(["It is sunny.", "Paris is in France.", []])
    end

    it "reads Hermes calls, the format of Qwen's template" do
      expect(@model.send(:_tool_call_format, nil)).to eq(:hermes)
      text = %(<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>)
      _, _, calls = @model.send(:_parse_reply, text, nil)
      expect(calls.map { |name, args| [name, JSON.parse(args)] })
        .to eq([["get_weather", { "city" => "Oslo", "unit" => "celsius" }]])
    end
  end
end
