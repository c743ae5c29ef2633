# frozen_string_literal: true

require "spec_helper"
require "open3"
require_relative "../tasks/jsonschema"

# Constrained generation through the Ruby API: JSON Schemas, GBNF, Lark, regexes and
# choices on the real Qwen2.5-Coder-0.5B, the outputs validated by Python's jsonschema
# (an independent validator, formats checked), never by elelem's own code.
RSpec.describe "structured output" do
  before(:all) do
    @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 4096, n_threads: 2, parallel: 8)
  end
  after(:all) { @model.close }

  let(:model) { @model }
  let(:person) do
    { type: "object", properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer", minimum: 0 } },
      required: %w[name age], additionalProperties: false }
  end

  def prompt(task)
    model.chat_prompt([{ role: "user", content: "#{task} Answer in JSON." }])
  end

  # Validates [schema, text] pairs with jsonschema; returns one verdict per pair.
  def validate(pairs)
    input = pairs.map { |schema, text| JSON.generate({ schema:, text: }) }.join("\n")
    script = File.join(__dir__, "support", "validate_json.py")
    out, err, status = Open3.capture3(JsonSchemaReference.python, script, stdin_data: "#{input}\n")
    raise "validator failed: #{err}" unless status.success?

    out.lines.map(&:chomp)
  end

  it "generates JSON valid against a schema (Hash or JSON String), greedy, and #json parses it" do
    text = model.generate(prompt("Describe a person."), json_schema: person, max_tokens: 64)
    expect(validate([[person, text]])).to eq(["ok"])
    completion = model.complete(prompt("Describe a person."), json_schema: JSON.generate(person), max_tokens: 64)
    expect(completion.text).to eq(text)
    expect(completion.json).to eq(JSON.parse(text))
    expect(completion.finish_reason).to eq(:stop).or eq(:eos)
  end

  it "says :length when max_tokens cuts the structure short, and #json says why it fails" do
    completion = model.complete(prompt("Describe a person."), json_schema: person, max_tokens: 3)
    expect(completion.finish_reason).to eq(:length)
    expect { completion.json }.to raise_error(Elelem::Error, /max_tokens cut it short/)
  end

  it "constrains to a GBNF grammar, a Lark grammar, a regex and a list of choices" do
    gbnf = %(root ::= "yes" | "no")
    expect(%w[yes no]).to include(model.generate(prompt("Is water wet? yes or no."), grammar: gbnf))
    lark = %(start: "The answer is " NUM "."\nNUM: /[0-9]{1,3}/)
    expect(model.generate(prompt("What is 6 times 7?"), lark:)).to match(/\AThe answer is \d{1,3}\.\z/)
    expect(model.generate(prompt("Give a flight code."), regex: "[A-Z]{3}-[0-9]{4}")).to match(/\A[A-Z]{3}-\d{4}\z/)
    expect(%w[red green blue]).to include(model.generate(prompt("Pick a colour."), choice: %w[red green blue]))
  end

  it "keeps streaming, stop strings, sampling and raw logprobs working under a constraint" do
    pieces = []
    text = model.generate(prompt("Describe a person."), json_schema: person, max_tokens: 64,
                                                        temperature: 1.0, seed: 7) { |piece| pieces << piece }
    expect(pieces.join).to eq(text)
    expect(validate([[person, text]])).to eq(["ok"])
    stopped = model.complete(prompt("Describe a person."), json_schema: person, stop: ["age"], max_tokens: 64)
    expect(stopped.finish_reason).to eq(:stop)
    expect(stopped.text).not_to include("age")
    with_logprobs = model.complete(prompt("Pick a colour."), choice: %w[red green blue], logprobs: 2)
    # The model's own distribution: alternatives the constraint masked may be among the likeliest.
    expect(with_logprobs.logprobs.map { |l| l[:logprob] }).to all(be_finite)
  end

  it "refuses what it cannot enforce with an ArgumentError naming the part, before generating" do
    expect { model.generate("x", json_schema: { type: "object", dependentSchemas: { a: {} } }) }
      .to raise_error(ArgumentError, /dependentSchemas/)
    expect(model.last_stop_reason).to be_nil
    expect { model.generate("x", grammar: "root ::= missing") }.to raise_error(ArgumentError, /missing/)
    expect { model.generate("x", json_schema: "{not json") }.to raise_error(ArgumentError, /not valid JSON/)
    expect { model.generate("x", choice: []) }.to raise_error(ArgumentError, /choice/)
    expect { model.generate("x", regex: "a", choice: ["a"]) }.to raise_error(ArgumentError, /at most one/)
  end

  it "applies a constraint to each prompt of generate_all" do
    texts = model.generate_all([prompt("Describe a person."), prompt("Describe an old person.")],
                               json_schema: person, max_tokens: 64)
    expect(validate(texts.map { |t| [person, t] })).to eq(%w[ok ok])
  end

  # ≥ 500 generations over 28 schemas (ELELEM_JSON_SWEEP=N: N prompts per schema and
  # temperature; 10 gives 560), greedy and at temperature 1.0, decoded 8 at a time.
  it "validates every generation over 28 schemas, greedy and at temperature 1.0" do
    per = Integer(ENV.fetch("ELELEM_JSON_SWEEP", "1"))
    cases = JSON.parse(File.read(File.join(__dir__, "fixtures", "json_schemas.json")))
    subjects = ["", " Be brief.", " Use realistic values.", " For a test fixture.", " Be creative.",
                " Keep it simple.", " For a museum.", " For a game.", " For a bank.", " For a school."]
    pairs = []
    cut = 0
    cases.each do |c|
      prompts = (0...per).map { |i| prompt("#{c["task"]}#{subjects[i % subjects.size]}") }
      [{ temperature: 0.0 }, { temperature: 1.0, seed: 42 }].each do |sampling|
        completions = prompts.map do |p|
          Thread.new { model.complete(p, json_schema: c["schema"], max_tokens: 160, **sampling) }
        end.map(&:value)
        cut += completions.count { |x| x.finish_reason == :length }
        pairs.concat(completions.reject { |x| x.finish_reason == :length }.map { |x| [c["schema"], x.text] })
      end
    end
    verdicts = validate(pairs)
    failures = pairs.zip(verdicts).reject { |_, v| v == "ok" }
    warn "structured output: #{pairs.size + cut} generations over #{cases.size} schemas, " \
         "#{verdicts.count("ok")} valid, #{cut} cut by max_tokens"
    expect(failures).to be_empty
    expect(cut).to be <= (pairs.size / 20)
  end
end
