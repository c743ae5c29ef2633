# frozen_string_literal: true

require "spec_helper"
require "open3"
require_relative "support/serve_process"
require_relative "../tasks/openai_client"
require_relative "../tasks/openai_js"

# The whole chat surface of `elelem serve` as OpenAI's clients use it, Python's and
# JavaScript's, on one server; then the exact payloads ruby_llm sends.
RSpec.describe "elelem serve, OpenAI's chat surface" do
  around { |example| Timeout.timeout(600) { example.run } }

  before(:all) do
    @qwen = SpecModels.path("qwen2.5-coder-0.5b")
    @server = ServeProcess.new("-m", @qwen, "-t", "1", "-c", "2048", "--parallel", "2")
    tokenizer = Elelem::Tokenizer.open(@qwen)
    @bias_token = tokenizer.tokenize(" banana", add_special: false).then { |ids| ids.size == 1 ? ids.first : nil }
    @banana = tokenizer.detokenize([@bias_token] * 3)
  end

  after(:all) { expect(@server.stop.exitstatus).to eq(0) }

  def arguments(call)
    JSON.parse(call["arguments"])
  end

  # What both clients must have received (`label` names the client in failures).
  def check_surface(out, label)
    aggregate_failures(label) do
      check_replies(out)
      check_json(out)
      check_forced_calls(out)
      check_streamed_calls(out)
      check_choices(out)
      check_logprobs(out)
      expect(out["sampling"]).to eq("content" => @banana, "finish_reason" => "length", "completion_tokens" => 3)
      expect(out["unknown_field"]).to include("status" => 400, "param" => "audio")
      expect(out["too_many"]).to include("status" => 400, "param" => "n")
    end
  end

  # Plain replies: a developer or system prompt, tool_choice none, the answer after a tool's result.
  def check_replies(out)
    %w[roles system tools_none round_trip].each do |name|
      expect(out[name]).to include("tool_calls" => [], "finish_reason" => match(/\A(stop|length)\z/)), name
      expect(out[name]["content"]).to be_a(String).and(satisfy { |c| !c.strip.empty? }), name
    end
    expect(out["tools_auto"]["finish_reason"]).to match(/\A(stop|length|tool_calls)\z/)
    expect(out["tools_auto"]["tool_calls"].map { |c| c["name"] } - %w[get_weather get_time]).to eq([])
  end

  def check_json(out)
    expect(out["json_object"]["finish_reason"]).to eq("stop")
    expect(JSON.parse(out["json_object"]["content"])).to be_a(Hash)
    expect(out["json_schema"]["finish_reason"]).to eq("stop")
    person = JSON.parse(out["json_schema"]["content"])
    expect(person.keys).to eq(%w[name age])
    expect([person["name"], person["age"]]).to match([String, Integer])
  end

  def check_forced_calls(out)
    %w[tools_required tools_named].each do |name|
      reply = out[name]
      expect(reply).to include("content" => nil, "finish_reason" => "tool_calls"), name
      expect(reply["tool_calls"]).not_to be_empty
      reply["tool_calls"].each do |call|
        expect(call).to include("type" => "function", "id" => start_with("call_"))
        expect(arguments(call)).to match("city" => String)
      end
    end
    expect(out["tools_named"]["tool_calls"].map { |c| c["name"] }.uniq).to eq(["get_time"])
  end

  # The id, type and name in a call's first delta only; the arguments in several pieces, as
  # they are generated, which put together are the arguments of the same request unstreamed.
  def check_streamed_calls(out)
    stream = out["stream_tools"]
    expect(stream["finish_reason"]).to eq("tool_calls")
    expect(named_arguments(stream["calls"])).to eq(named_arguments(out["tools_required"]["tool_calls"]))
    expect(stream["calls"].map { |c| c["pieces"] }).to all(be > 1)
    opening, *later = stream["chunks"]
    expect(opening).to match("type" => "function", "id" => start_with("call_"), "name" => /\Aget_(weather|time)\z/)
    expect(later).to all(eq("later_id" => nil, "later_name" => nil))
  end

  def named_arguments(calls)
    calls.map { |c| [c["name"], c["arguments"]] }
  end

  def check_choices(out)
    expect(out["n"]["indexes"]).to eq([0, 1])
    expect(out["n"]["contents"]).to all(be_a(String))
    expect(out["n"]["completion_tokens"]).to be_between(2, 24)
    expect(out["n_stream"]["contents"].size).to eq(2)
    expect(out["n_stream"]["usage"]).to match("completion_tokens" => be_between(2, 24), "choices" => 0)
  end

  def check_logprobs(out)
    logprobs = out["logprobs"]
    expect(logprobs["tokens"]).to eq(logprobs["completion_tokens"])
    expect(logprobs["top"]).to all(eq(3))
    expect(logprobs["text"]).to eq(logprobs["content"])
  end

  def run_client(*command)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    out, err, status = Open3.capture3(*command, @server.base_url, JSON.generate(bias_token: @bias_token))
    expect(status).to be_success, err
    [JSON.parse(out), Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
  end

  it "answers OpenAI's Python client: roles, JSON modes, each tool_choice, a round trip, streamed calls, n, logprobs" do
    expect(@bias_token).to be_an(Integer)
    out, seconds = run_client(OpenAIClient.python, File.join(ROOT, "spec", "support", "openai_surface.py"))
    puts "\n    openai (Python) #{out["version"]}: 24 requests in #{seconds.round(1)} s; required call " \
         "#{out["tools_required"]["tool_calls"].map { |c| "#{c["name"]}(#{c["arguments"]})" }.join(", ")}; " \
         "round trip #{out["round_trip"]["content"][0, 60].inspect}"
    check_surface(out, "python")
    check_responses(out)
  end

  # The Responses API through client.responses.create, unstreamed and streamed.
  def check_responses(out)
    aggregate_failures("responses") do
      said = out["responses"]
      expect(said).to include("id" => start_with("resp_"), "status" => "completed", "types" => ["message"])
      expect(said["text"]).to match(/\S/)
      expect(said["usage"]).to match([Integer, be_between(1, 24), said["usage"][0] + said["usage"][1]])
      expect(out["responses_refused"]).to eq("status" => 400, "param" => "previous_response_id")
      check_responses_stream(out["responses_stream"], said["text"])
      check_responses_call(out)
    end
  end

  # The same reply streamed: its text deltas, and the whole response at the end.
  def check_responses_stream(stream, text)
    expect(stream.values_at("text", "completed")).to eq([text, text])
    expect(stream["types"].values_at(0, 1, -1)).to eq(%w[response.created response.in_progress response.completed])
  end

  # A forced function call by the Responses API, its arguments streamed in pieces.
  def check_responses_call(out)
    call, = out["responses_call"]
    expect(call).to include("type" => "function_call", "name" => "get_weather", "call_id" => start_with("call_"))
    expect(JSON.parse(call["arguments"])).to match("city" => String)
    streamed = out["responses_call_stream"]
    expect(streamed["pieces"]).to be > 1
    expect(streamed.values_at("arguments", "done")).to eq([call["arguments"], [call["arguments"]]])
  end

  it "answers OpenAI's JavaScript client (npm openai) the same" do
    node_path = OpenAIJs.modules
    out, seconds = run_client({ "NODE_PATH" => node_path }, "node",
                              File.join(ROOT, "spec", "support", "openai_surface.js"))
    puts "\n    openai (npm) #{out["version"]}: 19 requests in #{seconds.round(1)} s"
    expect(out["version"]).to eq(OpenAIJs::VERSION)
    check_surface(out, "node")
  end

  # The payloads of ruby_llm 1.x's OpenAI provider, built as its code builds them
  # (crmne/ruby_llm, lib/ruby_llm/providers/openai/chat.rb `render_payload` and
  # `format_messages` at commit ea034967f53c; tools.rb `chat_tool_for`, `tool_parameters_for`
  # and `format_tool_calls` at commit c59373e987d8; media.rb `format_content` at 8e2a41a8371b,
  # which passes a plain String content as it is), and read back as its
  # `parse_completion_response` and `parse_tool_calls` read them.
  describe "ruby_llm's payloads" do
    # `RubyLLM::Tool` subclass `Weather` with `param :city, desc: "The city"`: `chat_tool_for`.
    let(:weather_tool) do
      { type: "function", function: { name: "weather", description: "The current weather in a city",
                                      parameters: { type: "object",
                                                    properties: { city: { type: "string", description: "The city" } },
                                                    required: [:city] } } }
    end

    def post(payload)
      response = @server.request("POST", "/v1/chat/completions", payload)
      expect(response.code).to eq("200"), response.body
      data = JSON.parse(response.body)
      message = data.dig("choices", 0, "message")
      # parse_completion_response and parse_tool_calls.
      calls = message["tool_calls"]&.to_h do |tc|
        arguments = tc.dig("function", "arguments")
        [tc["id"], { name: tc.dig("function", "name"), arguments: arguments.empty? ? {} : JSON.parse(arguments) }]
      end
      expect([data["usage"]["prompt_tokens"], data["usage"]["completion_tokens"], data["model"]])
        .to match([Integer, Integer, String])
      [message["content"], calls]
    end

    it "with_instructions: the system prompt as a developer message" do
      content, calls = post(model: "qwen", stream: false,
                            messages: [{ role: "developer", content: "You answer in one word." },
                                       { role: "user", content: "What colour is the sky?" }])
      expect(content).to be_a(String).and(satisfy { |c| !c.empty? })
      expect(calls).to be_nil
    end

    it "with_schema: response_format json_schema, named response, strict" do
      schema = { type: "object", properties: { colour: { type: "string" }, certain: { type: "boolean" } },
                 required: %w[colour certain], additionalProperties: false }
      content, = post(model: "qwen", stream: false,
                      messages: [{ role: "user", content: "What colour is the sky?" }],
                      response_format: { type: "json_schema",
                                         json_schema: { name: "response", schema:, strict: true } })
      expect(JSON.parse(content)).to match("colour" => String, "certain" => be(true).or(be(false)))
    end

    it "with_tool: tools without tool_choice, then the call and its result sent back" do
      ask = { role: "user", content: "What is the weather in Paris?" }
      content, calls = post(model: "qwen", stream: false, messages: [ask], tools: [weather_tool])
      # Sampled (ruby_llm sends no temperature: OpenAI's default, 1), and the tool's schema allows
      # properties beside `city` (no additionalProperties: false), so a call may carry more. (The 0.5B
      # sometimes echoes the tool's definition instead, which is text, not a call whose arguments
      # are the schema: 1 seed in 60 was so read before.)
      (calls || {}).each_value do |call|
        expect(call).to match(name: "weather", arguments: a_hash_including("city" => String))
      end
      expect(content).to be_a(String) if calls.nil?

      # The second turn as format_messages writes it: the assistant's content nil (compacted
      # away), its calls' arguments JSON.generate'd, the tool's result with its call's id.
      call = { id: "call_1", type: "function", function: { name: "weather", arguments: JSON.generate(city: "Paris") } }
      content, calls = post(model: "qwen", stream: false, tools: [weather_tool],
                            messages: [ask, { role: "assistant", tool_calls: [call] },
                                       { role: "tool", content: "18 degrees, clear sky", tool_call_id: "call_1" }])
      expect(calls || content).not_to be_empty
    end
  end
end
