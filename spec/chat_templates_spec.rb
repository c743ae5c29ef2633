# frozen_string_literal: true

require "spec_helper"
require "open3"
require_relative "../tasks/jinja2"

# Every real chat template in llama.cpp's models/templates (fetched by `rake peer_suite`)
# renders through elelem exactly as Hugging Face transformers renders it: Python's jinja2
# from PyPI, set up as transformers sets it up (spec/support/jinja2_reference.py), is the
# reference, run here on the same conversations. Where jinja2 raises, elelem must raise.
RSpec.describe "chat templates" do
  templates_dir = File.join(ROOT, "vendor", "llama.cpp", "models", "templates")
  # strftime_now's time, pinned so that both renderers format the same date.
  now = Time.at(1_773_480_413)

  weather = {
    type: "function",
    function: {
      name: "get_weather", description: "Get the current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string", description: "The city, e.g. Zürich" },
                                                  unit: { type: "string", enum: %w[celsius fahrenheit] } },
                    required: ["city"] }
    }
  }
  clock = { type: "function", function: { name: "get_time", description: "The time now, in a time zone",
                                          parameters: { type: "object", properties: { tz: { type: "string" } } } } }
  system = { role: "system", content: "You are a helpful assistant. Answer in <b>one</b> line." }
  turns = [{ role: "user", content: "Hello! Où est le café? 東京" },
           { role: "assistant", content: "Bonjour! It's \"around\" the corner." },
           { role: "user", content: "  And the museum?\n" }]
  ask = { role: "user", content: "What's the weather in Paris?" }
  call = { role: "assistant", tool_calls: [{ id: "call_1", type: "function",
                                             function: { name: "get_weather",
                                                         arguments: { city: "Paris", unit: "celsius" } } }] }
  result = { role: "tool", tool_call_id: "call_1", name: "get_weather", content: '{"temperature": 18, "sky": "clear"}' }
  # Each: the messages, then the keywords of chat_prompt (add_generation_prompt:, tools:, variables).
  conversations = {
    "system and turns" => [[system, *turns], {}],
    "no system, no generation prompt" => [turns.take(2), { add_generation_prompt: false }],
    "tool call and result" => [[system, ask, call, result], { tools: [weather, clock] }],
    "tool round trip" => [
      [ask, { role: "assistant", content: "Let me check.",
              tool_calls: [{ id: "call_2", type: "function",
                             function: { name: "get_weather", arguments: '{"city": "Zürich"}' } }] },
       result.merge(tool_call_id: "call_2"), { role: "assistant", content: "It is 18 °C and clear." },
       { role: "user", content: "Thanks!" }],
      { tools: [weather] }
    ],
    "extra variables" => [
      [system, turns[0]],
      { enable_thinking: false, documents: [{ title: "Paris", text: "Paris is the capital of France." }],
        custom_flag: true }
    ]
  }

  before(:all) { @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 256, n_threads: 2) }
  after(:all) { @model.close }

  # What jinja2 gives for every template and conversation: {"text" => ...} or {"error" => ...}.
  def jinja2(templates, conversations, now)
    bos, eos = @model.chat_prompt([{ role: "user", content: "" }], template: "{{ bos_token }}\n{{ eos_token }}")
                     .split("\n")
    request = {
      templates:, bos_token: bos, eos_token: eos, now: now.to_i,
      conversations: conversations.transform_values do |messages, keywords|
        { messages:, add_generation_prompt: keywords.fetch(:add_generation_prompt, true),
          variables: keywords.except(:add_generation_prompt) }
      end
    }
    script = File.join(ROOT, "spec", "support", "jinja2_reference.py")
    out, err, status = Open3.capture3(Jinja2Reference.python, script, stdin_data: JSON.generate(request))
    raise "jinja2_reference.py failed: #{err}" unless status.success?

    JSON.parse(out)
  end

  # elelem's rendering, or the error it raised.
  def elelem(source, messages, keywords, now)
    { "text" => @model.chat_prompt(messages, template: source, now:, **keywords) }
  rescue Elelem::TemplateError => e
    { "error" => e.message }
  end

  # Where two renderings part, for the failure message.
  def difference(name, conversation, reference, ours)
    return "#{name} / #{conversation}: jinja2 #{reference.inspect[0, 300]}, elelem #{ours.inspect[0, 300]}" \
      unless reference["text"] && ours["text"]

    a = reference["text"]
    b = ours["text"]
    at = (0...[a.size, b.size].min).find { |i| a[i] != b[i] } || [a.size, b.size].min
    "#{name} / #{conversation} at #{at}: jinja2 #{a[[at - 60, 0].max, 160].inspect}\n  " \
      "elelem #{b[[at - 60, 0].max, 160].inspect}"
  end

  it "renders all of llama.cpp's real templates as transformers' jinja2 does, or raises where it raises" do
    files = Dir[File.join(templates_dir, "*.jinja")].sort
    raise "#{templates_dir} has no templates: run `rake peer_suite`" if files.empty?

    templates = files.to_h { |f| [File.basename(f, ".jinja"), File.read(f)] }
    reference = jinja2(templates, conversations, now)
    failures = []
    rows = templates.map do |name, source|
      same = conversations.count do |conversation, (messages, keywords)|
        ours = elelem(source, messages, keywords, now)
        expected = reference.fetch(name).fetch(conversation)
        next true if ours.key?("error") && expected.key?("error")
        next true if ours == expected

        failures << difference(name, conversation, expected, ours)
        false
      end
      [name, same]
    end
    width = rows.map { |name, _| name.size }.max
    puts "\n#{"template".ljust(width)}  identical to jinja2"
    rows.each { |name, same| puts "#{name.ljust(width)}  #{same}/#{conversations.size}" }
    puts "#{"total".ljust(width)}  #{rows.sum { |_, same| same }}/#{rows.size * conversations.size}"
    expect(files.size).to eq(70)
    expect(failures).to be_empty, failures.join("\n")
  end
end
