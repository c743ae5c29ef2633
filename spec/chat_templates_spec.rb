# frozen_string_literal: true

require "spec_helper"
require "open3"
require_relative "../tasks/jinja2"

# Every real chat template in llama.cpp's models/templates (fetched by `rake peer_suite`)
# renders through elelem exactly as Hugging Face transformers renders it: Python's jinja2
# from PyPI, set up as transformers sets it up (spec/support/jinja2_reference.py), is the
# reference, run here on the same conversations. Where jinja2 raises, elelem must raise.
# A keyword the template does not read (jinja2.meta says which) is refused with an
# ArgumentError naming it; without it, the rendering is jinja2's with it.
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
  # Arguments of every JSON type, which templates print with tojson or Python's str().
  arguments = { city: "Paris", unit: "celsius", days: 3, detailed: true, hours: [9, 12.5],
                filters: { rain: nil, note: "<b>\"dry\"</b>" } }
  call = { role: "assistant", tool_calls: [{ id: "call_1", type: "function",
                                             function: { name: "get_weather", arguments: } },
                                           { id: "call_9", type: "function",
                                             function: { name: "get_time", arguments: { tz: "Europe/Paris" } } }] }
  result = { role: "tool", tool_call_id: "call_1", name: "get_weather", content: '{"temperature": 18, "sky": "clear"}' }
  time = { role: "tool", tool_call_id: "call_9", name: "get_time", content: "09:26" }
  # Each: the messages, then the keywords of chat_prompt (add_generation_prompt:, tools:, variables).
  conversations = {
    "one user message" => [[turns[0]], {}],
    "system and turns" => [[system, *turns], {}],
    "no system, no generation prompt" => [turns.take(2), { add_generation_prompt: false }],
    "tool calls and results" => [[system, ask, call, result, time], { tools: [weather, clock] }],
    # What most templates expect: one call, an id of 9 letters and digits (Mistral's rule),
    # a content (empty), arguments as a Hash.
    "one tool call, answered" => [
      [system, ask,
       { role: "assistant", content: "",
         tool_calls: [{ id: "a1B2c3D4e", type: "function", function: { name: "get_weather", arguments: } }] },
       result.merge(tool_call_id: "a1B2c3D4e"), { role: "assistant", content: "18 °C and clear." },
       { role: "user", content: "Thanks!" }],
      { tools: [weather, clock] }
    ],
    # As OpenAI's clients send it: a null content beside the call.
    "tool call with a null content" => [
      [ask, { role: "assistant", content: nil,
              tool_calls: [{ id: "x9Y8z7W6v", type: "function", function: { name: "get_time", arguments: {} } }] },
       time.merge(tool_call_id: "x9Y8z7W6v")],
      { tools: [clock] }
    ],
    "tool round trip" => [
      [ask, { role: "assistant", content: "Let me check.",
              tool_calls: [{ id: "call_2", type: "function",
                             function: { name: "get_weather", arguments: '{"city": "Zürich"}' } }] },
       result.merge(tool_call_id: "call_2"), { role: "assistant", content: "It is 18 °C and clear." },
       { role: "user", content: "Thanks!" }],
      { tools: [weather] }
    ],
    "content parts" => [
      [{ role: "system", content: [{ type: "text", text: "Be brief." }] },
       { role: "user", content: [{ type: "text", text: "Read this:" }, { type: "text", text: "Où est le café?" }] }],
      {}
    ],
    "reasoning" => [
      [system, turns[0], turns[1].merge(reasoning_content: "A greeting; answer in French."), turns[2]],
      { enable_thinking: true }
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
  rescue Elelem::TemplateError, ArgumentError => e
    { "error" => e.message }
  end

  # The keywords the template reads, having checked that elelem refuses the others, naming them.
  def read_keywords(label, source, messages, keywords, reads)
    # Variables every template gets, read or not: transformers' arguments, the server's tool_choice,
    # the reasoning switch apps send to any model.
    every_template = %i[add_generation_prompt tools documents tool_choice bos_token eos_token enable_thinking]
    unread = keywords.keys - every_template - reads.to_a.map(&:to_sym)
    return keywords if reads.nil? || unread.empty?

    @refused += 1
    refused = elelem(source, messages, keywords, Time.now)["error"].to_s
    names = "unknown keyword#{"s" if unread.size > 1}: #{unread.map(&:inspect).join(", ")} "
    @failures << "#{label}: #{unread} unread, elelem: #{refused[0, 200]}" unless refused.include?(names)
    keywords.except(*unread)
  end

  # :identical, :raises (both do) or :differs (a failure).
  def outcome(label, ours, expected)
    if ours.key?("error") && expected.key?("error")
      @raised << "#{label}: #{expected["error"][0, 100]}"
      return :raises
    end
    return :identical if ours == expected

    @failures << difference(label, expected, ours)
    :differs
  end

  # Where two renderings part, for the failure message.
  def difference(label, reference, ours)
    return "#{label}: jinja2 #{reference.inspect[0, 300]}, elelem #{ours.inspect[0, 300]}" \
      unless reference["text"] && ours["text"]

    a = reference["text"]
    b = ours["text"]
    at = (0...[a.size, b.size].min).find { |i| a[i] != b[i] } || [a.size, b.size].min
    "#{label} at #{at}: jinja2 #{a[[at - 60, 0].max, 160].inspect}\n  " \
      "elelem #{b[[at - 60, 0].max, 160].inspect}"
  end

  it "renders all of llama.cpp's real templates as transformers' jinja2 does, or raises where it raises" do
    files = Dir[File.join(templates_dir, "*.jinja")]
    raise "#{templates_dir} has no templates: run `rake peer_suite`" if files.empty?

    templates = files.to_h { |f| [File.basename(f, ".jinja"), File.read(f)] }
    reference = jinja2(templates, conversations, now)
    @failures = []
    @raised = []
    @refused = 0
    rows = templates.map do |name, source|
      outcomes = conversations.map do |conversation, (messages, keywords)|
        label = "#{name} / #{conversation}"
        keywords = read_keywords(label, source, messages, keywords, reference.fetch(name).fetch("reads"))
        expected = reference.fetch(name).dig("conversations", conversation)
        outcome(label, elelem(source, messages, keywords, now), expected)
      end
      [name, outcomes.tally]
    end
    table(rows, conversations.size)
    puts "#{@refused} conversations with keywords the template does not read: refused, naming them"
    puts "\nWhere jinja2 raises (and elelem too), jinja2's error:", @raised
    expect(files.size).to eq(70)
    expect(@failures).to be_empty, @failures.join("\n")
  end

  # Per template: the conversations rendered identically (of them, how many both raise on).
  def table(rows, total)
    width = rows.map { |name, _| name.size }.max
    puts "\n#{"template".ljust(width)}  identical  (both raise)"
    same = ->(n) { n.fetch(:identical, 0) + n.fetch(:raises, 0) }
    rows.each { |name, n| puts "#{name.ljust(width)}  #{"#{same[n]}/#{total}".ljust(9)}  #{n.fetch(:raises, 0)}" }
    raises = rows.sum { |_, n| n.fetch(:raises, 0) }
    puts "#{"total".ljust(width)}  #{rows.sum { |_, n| same[n] }}/#{rows.size * total}  (#{raises} both raise); " \
         "#{rows.count { |_, n| same[n] == total }}/#{rows.size} templates identical on every conversation"
  end
end
