# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

# elelem/rspec as a user meets it: recording a golden file, checking it, and the
# failures that say what to do. The canary model keeps it fast.
RSpec.describe Elelem::RSpec do
  around do |example|
    Dir.mktmpdir("elelem-golden") do |dir|
      @dir = dir
      Elelem.open(SpecModels.canary, n_ctx: 256, n_threads: 2) do |model|
        @model = model
        example.run
      end
    end
  end

  let(:model) { @model }
  let(:path) { File.join(@dir, "canary.json") }
  let(:prompt) { [1, 50, 60, 70, 80] }
  let(:profile) { Elelem.build_profile }

  def recording_env(value)
    old = ENV.fetch(Elelem::Golden::RECORD_ENV, nil)
    ENV[Elelem::Golden::RECORD_ENV] = value
    yield
  ensure
    ENV[Elelem::Golden::RECORD_ENV] = old
  end

  def record
    recording_env("1") { expect(model).to decode(prompt, max_tokens: 12, ignore_eos: true).into(path) }
  end

  def edit_file
    doc = JSON.parse(File.read(path))
    yield doc
    File.write(path, JSON.generate(doc))
  end

  it "records a prompt the file lacks when asked to, then checks against it" do
    record
    doc = JSON.parse(File.read(path))
    expect(doc["format"]).to eq("elelem-golden/1")
    expect(doc["model"]["sha256"]).to eq(Digest::SHA256.file(SpecModels.canary).hexdigest)
    expect(doc.values_at("n_ctx", "n_threads")).to eq([256, 2])
    rec = doc["recordings"].fetch(profile[:id])
    expect(rec["build"]["isa"]).to eq(profile[:isa])
    expect(rec["build"]["libm"]).to eq(profile[:libm]).and match(/\A\h{12}\z/)
    expect(rec["cpu"]).to eq(profile[:cpu])
    expect(rec["recorder"]).to start_with("elelem")
    expect(rec["outputs"]["1,50,60,70,80"]["ids"].size).to eq(12)

    expect(model).to decode(prompt, max_tokens: 12, ignore_eos: true).into(path)
  end

  it "fails without recording when the file lacks the prompt, saying how to record it" do
    matcher = decode(prompt, max_tokens: 12).into(path)
    expect(matcher.matches?(model)).to be(false)
    expect(matcher.failure_message).to include("has no case for", "ELELEM_RECORD_GOLDENS=1")
    expect(File.exist?(path)).to be(false)
  end

  it "names the step, both ids, the recorder's margin and the CPU when the ids differ" do
    record
    edit_file do |doc|
      out = doc["recordings"][profile[:id]]["outputs"]["1,50,60,70,80"]
      @expected = out["ids"][3] = (out["ids"][3] + 1) % 500
      out["margins"] = Array.new(12, 0.0625)
    end
    matcher = decode(prompt, max_tokens: 12, ignore_eos: true).into(path)
    expect(matcher.matches?(model)).to be(false)
    got = model.generate(prompt, max_tokens: 12, ignore_eos: true)[3]
    expect(matcher.failure_message).to include(
      "the ids differ first at step 3 (0-based): expected #{@expected}, got #{got}",
      "top-two logit margin there: 0.0625", "on #{profile[:cpu]} (this CPU: #{profile[:cpu]})",
      "build profile #{profile[:id]}"
    )
  end

  it "never uses another build profile's recording: it says which profiles were recorded, on which CPU" do
    record
    edit_file do |doc|
      rec = doc["recordings"].delete(profile[:id])
      doc["recordings"]["x86_64-000000000000"] = rec.merge("cpu" => "Intel(R) Xeon(R) Processor")
    end
    matcher = decode(prompt, max_tokens: 12, ignore_eos: true).into(path)
    expect(matcher.matches?(model)).to be(false)
    expect(matcher.failure_message).to include(
      "no recording of case \"1,50,60,70,80\" for this build profile #{profile[:id]}",
      "recorded: x86_64-000000000000 (Intel(R) Xeon(R) Processor)"
    )
    recording_env("1") { expect(model).to decode(prompt, max_tokens: 12, ignore_eos: true).into(path) }
    expect(JSON.parse(File.read(path))["recordings"].keys).to contain_exactly("x86_64-000000000000", profile[:id])
  end

  it "refuses a model or settings other than the recorded ones" do
    record
    Elelem.open(SpecModels.canary, n_ctx: 256, n_threads: 1) do |other|
      matcher = decode(prompt, max_tokens: 12, ignore_eos: true).into(path)
      expect(matcher.matches?(other)).to be(false)
      expect(matcher.failure_message).to include("recorded with n_threads 2", "open it with n_threads: 2")
    end
    edit_file { |doc| doc["model"]["sha256"] = "0" * 64 }
    matcher = decode(prompt, max_tokens: 12, ignore_eos: true).into(path)
    expect(matcher.matches?(model)).to be(false)
    expect(matcher.failure_message).to include("recorded with another model file")
  end

  it "takes text prompts, named cases and a Golden with a cache of this machine's recordings" do
    text = model.detokenize([50, 60, 70])
    cache = File.join(@dir, "cache")
    golden = Elelem::Golden.new(path, cache:)
    recording_env("1") { expect(model).to decode(text, max_tokens: 4, name: "text").into(golden) }
    expect(File.exist?(File.join(cache, profile[:id], "canary.json"))).to be(true)
    expect(Elelem::Golden.new(path, cache:).output("text")["ids"].size).to eq(4)
    expect(Elelem::Golden.new(path).recording).to be_nil
  end

  it "records into a cache without undoing what was written to the file meanwhile" do
    golden = Elelem::Golden.new(path, cache: File.join(@dir, "cache"))
    golden.add_case("first", prompt, max_tokens: 3)
    golden.record(model)
    committed = { "cpu" => "another CPU", "recorder" => "llama.cpp", "outputs" => {} }
    edit_file { |doc| doc["recordings"]["x86_64-000000000000"] = committed }
    golden.record(model)
    expect(JSON.parse(File.read(path))["recordings"]).to eq("x86_64-000000000000" => committed)

    golden.add_case("second", prompt.take(3), max_tokens: 3)
    golden.record(model, only: ["second"])
    doc = JSON.parse(File.read(path))
    expect(doc["cases"].map { |c| c["name"] }).to eq(%w[first second])
    expect(doc["recordings"]).to eq("x86_64-000000000000" => committed)
    expect(golden.output("second")["ids"].size).to eq(3)
  end
end
