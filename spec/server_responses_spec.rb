# frozen_string_literal: true

require "spec_helper"
require "rack" # Debian's ruby-rack, for the specs only: Rack::Lint and Rack::MockRequest
require "timeout"

# OpenAI's Responses API on Elelem::Server, called as Rack calls it: the request turned into
# a chat completion as llama-server turns it, the response and its events in llama-server's
# shapes (tools/server/server-chat.cpp and server-task.cpp of the llama-cpp-python 0.3.36
# sdist), and a 400 naming the field for what it does not take.
RSpec.describe "Elelem::Server's /v1/responses" do
  before(:all) do
    @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 4096, n_threads: 1, parallel: 2)
  end
  after(:all) { @model.close }

  around { |example| Timeout.timeout(120) { example.run } }

  let(:server) { Elelem::Server.new(@model, max_tokens: 64) }
  let(:weather) do
    { type: "function", name: "get_weather", description: "The current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }
  end
  let(:ask) { "What is the weather in Paris?" }

  def post(body)
    Rack::MockRequest.new(Rack::Lint.new(server)).post("/v1/responses", input: JSON.generate(body),
                                                                        "CONTENT_TYPE" => "application/json")
  end

  def respond(body)
    response = post(body)
    expect(response.status).to eq(200), response.body
    JSON.parse(response.body)
  end

  # The stream's events as `[name, data]`, each named by its data's type.
  def events(body)
    response = post(body.merge(stream: true))
    expect(response.status).to eq(200), response.body
    expect(response.headers["content-type"]).to eq("text/event-stream")
    response.body.split("\n\n").map do |event|
      name, data = event.match(/\Aevent: (\S+)\ndata: (.*)\z/m).captures
      JSON.parse(data).tap { |object| expect(object["type"]).to eq(name) }
    end
  end

  def output(response, type)
    response["output"].select { |item| item["type"] == type }
  end

  it "answers instructions and a string input with a message, its usage and llama-server's fields" do
    response = respond(model: "qwen", instructions: "Answer in one word.", input: "The capital of France?",
                       max_output_tokens: 8, temperature: 0)
    expect(response).to include("id" => start_with("resp_"), "object" => "response", "status" => "completed",
                                "model" => File.basename(@model.info[:path], ".gguf"), "created_at" => Integer,
                                "completed_at" => Integer)
    message, = output(response, "message")
    expect(message).to include("id" => start_with("msg_"), "role" => "assistant", "status" => "completed")
    text = message["content"].first
    expect(text).to include("type" => "output_text", "annotations" => [], "logprobs" => [])
    chat = @model.complete([{ role: "system", content: "Answer in one word." },
                            { role: "user", content: "The capital of France?" }], max_tokens: 8)
    expect(text["text"].strip).to eq(chat.text.strip)
    expect(response["usage"]).to eq("input_tokens" => chat.prompt_tokens, "output_tokens" => chat.tokens.size,
                                    "total_tokens" => chat.prompt_tokens + chat.tokens.size,
                                    "input_tokens_details" => { "cached_tokens" => response["usage"]
                                      .dig("input_tokens_details", "cached_tokens") })
  end

  it "takes a conversation of items: messages, a function call and its output" do
    input = [{ role: "developer", content: "You are terse." },
             { type: "message", role: "user", content: [{ type: "input_text", text: ask }] },
             { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
             { type: "function_call_output", call_id: "call_1", output: '{"celsius": 18}' }]
    response = respond(input:, tools: [weather], tool_choice: "none", max_output_tokens: 24, temperature: 0)
    expect(output(response, "message").first["content"].first["text"]).not_to be_empty
  end

  it "streams llama-server's events, the text as deltas that make the final text" do
    events = events(input: "Count: one, two,", max_output_tokens: 6, temperature: 0)
    types = events.map { |e| e["type"] }
    expect(types.first(4)).to eq(%w[response.created response.in_progress response.output_item.added
                                    response.content_part.added])
    expect(types.last(4)).to eq(%w[response.output_text.done response.content_part.done response.output_item.done
                                   response.completed])
    expect(events.map { |e| e["sequence_number"] }).to eq((0...events.size).to_a)
    deltas = events.select { |e| e["type"] == "response.output_text.delta" }
    expect(deltas.size).to be > 1
    completed = events.last["response"]
    text = output(completed, "message").first["content"].first["text"]
    expect(deltas.map { |e| e["delta"] }.join).to eq(text)
    expect(events.find { |e| e["type"] == "response.output_text.done" }["text"]).to eq(text)
    expect(completed["usage"]["output_tokens"]).to be_between(1, 6)
    expect(text).to eq(output(respond(input: "Count: one, two,", max_output_tokens: 6, temperature: 0),
                              "message").first["content"].first["text"])
  end

  it "calls a function: its arguments streamed in pieces that make the unstreamed call" do
    body = { input: ask, tools: [weather], tool_choice: "required", temperature: 0 }
    call, = output(respond(body), "function_call")
    expect(call).to include("id" => start_with("fc_"), "call_id" => start_with("call_"), "name" => "get_weather",
                            "status" => "completed")
    expect(JSON.parse(call["arguments"])).to match("city" => String)

    events = events(body)
    added = events.find { |e| e["type"] == "response.output_item.added" }["item"]
    expect(added).to include("type" => "function_call", "name" => "get_weather", "arguments" => "",
                             "status" => "in_progress")
    pieces = events.select { |e| e["type"] == "response.function_call_arguments.delta" }
    expect(pieces.size).to be > 1
    expect(pieces.map { |e| e["item_id"] }.uniq).to eq([added["id"]])
    expect(pieces.map { |e| e["delta"] }.join).to eq(call["arguments"])
    done = events.find { |e| e["type"] == "response.output_item.done" }["item"]
    expect(done).to include("arguments" => call["arguments"], "status" => "completed", "id" => added["id"])
    expect(output(events.last["response"], "function_call")).to eq([done])
  end

  it "constrains the text to text.format's JSON Schema" do
    schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"],
               additionalProperties: false }
    response = respond(input: "A French city, as JSON.", max_output_tokens: 40, temperature: 0,
                       text: { format: { type: "json_schema", name: "city", schema:, strict: true } })
    expect(JSON.parse(output(response, "message").first["content"].first["text"])).to match("city" => String)
  end

  it "refuses what it does not take with a 400 naming the field" do
    {
      "input" => [{}, { input: 5 }, { input: [] }, { input: [{ type: "mystery" }] },
                  { input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png" }] }] },
                  { input: [{ type: "function_call", name: "f", arguments: "{}" }] },
                  { input: [{ role: "robot", content: "hi" }] }],
      "previous_response_id" => [{ input: "hi", previous_response_id: "resp_1" }],
      "reasoning" => [{ input: "hi", reasoning: { effort: "low" } }],
      "tools" => [{ input: "hi", tools: [{ type: "web_search" }] }, { input: "hi", tools: "get_weather" }],
      "tool_choice" => [{ input: "hi", tools: [weather], tool_choice: { type: "function", name: "other" } },
                        { input: "hi", tool_choice: { type: "file_search" } }],
      "max_output_tokens" => [{ input: "hi", max_output_tokens: -1 }, { input: "hi", max_output_tokens: "9" }],
      "text" => [{ input: "hi", text: { format: { type: "yaml" } } }, { input: "hi", text: { verbosity: "low" } }],
      "temperature" => [{ input: "hi", temperature: 5 }]
    }.each do |field, bodies|
      bodies.each do |body|
        response = post(body)
        expect(response.status).to eq(400), "#{body}: #{response.status} #{response.body}"
        error = JSON.parse(response.body)["error"]
        expect(error).to include("param" => field, "type" => "invalid_request_error"), body.to_s
      end
    end
    expect(post(input: "hi", max_output_tokens: 1).status).to eq(200)
    schema_refusal = JSON.parse(post(input: "hi", text: { format: { type: "json_schema", schema: 5 } }).body)
    expect(schema_refusal["error"]["message"]).to start_with("text.format.schema must be an object")
  end
end
