# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

# `rake golden:adopt`: llama.cpp's recordings made on this machine (in its cache) copied into a
# golden file, adding and never changing, and only what holds for the file.
RSpec.describe Elelem::Golden, "#adopt" do
  around do |example|
    Dir.mktmpdir("elelem-adopt") do |dir|
      @dir = dir
      example.run
    end
  end

  let(:path) { File.join(@dir, "fixtures", "tiny.json") }
  let(:cache) { File.join(@dir, "cache") }
  let(:cases) do
    [{ "name" => "short", "prompt" => [1, 50, 60], "max_tokens" => 4, "ignore_eos" => true },
     { "name" => "long", "prompt" => [1, 70, 80, 90], "max_tokens" => 4, "ignore_eos" => true }]
  end
  let(:file) do
    { "format" => Elelem::Golden::FORMAT, "model" => { "file" => "tiny.gguf", "sha256" => "ab" * 32 },
      "n_ctx" => 256, "n_threads" => 2, "cases" => cases, "recordings" => {} }
  end

  def recording(names, cpu: "AMD EPYC", recorder: "llama.cpp (elelem-reference, greedy)")
    { "build" => { "arch" => "x86_64" }, "cpu" => cpu, "recorder" => recorder,
      "outputs" => names.to_h { |n| [n, { "ids" => [n.size, 7], "text" => n, "margins" => [0.5, 0.25] }] },
      "recorded_at" => "2026-12-06T10:00:00Z" }
  end

  def write(doc, to)
    FileUtils.mkdir_p(File.dirname(to))
    File.write(to, "#{JSON.pretty_generate(doc)}\n")
  end

  def cached(profile, rec, doc = file)
    write(doc.merge("recordings" => { profile => rec }), File.join(cache, profile, "tiny.json"))
  end

  def recordings = JSON.parse(File.read(path))["recordings"]

  it "copies the profiles the file lacks, then adds nothing and leaves the file as it is" do
    write(file.merge("recordings" => { "x86_64-intel" => recording(%w[short long], cpu: "Intel Xeon") }), path)
    cached("aarch64-sve", recording(%w[short long], cpu: "qemu"))
    cached("x86_64-amd", recording(%w[short]))

    expect(described_class.new(path).adopt(cache)).to eq("aarch64-sve" => %w[short long], "x86_64-amd" => %w[short])
    expect(recordings.keys).to contain_exactly("x86_64-intel", "aarch64-sve", "x86_64-amd")
    expect(recordings["aarch64-sve"]).to eq(recording(%w[short long], cpu: "qemu"))
    expect(recordings["x86_64-amd"]).to eq(recording(%w[short]))

    before = File.read(path)
    expect(described_class.new(path).adopt(cache)).to eq({})
    expect(File.read(path)).to eq(before)
  end

  it "adds the cases a recording lacks from the same recorder on the same CPU, and takes only the profiles asked" do
    write(file.merge("recordings" => { "x86_64-amd" => recording(%w[short]) }), path)
    later = recording(%w[short long]).merge("recorded_at" => "2026-12-06T12:00:00Z")
    cached("x86_64-amd", later)
    cached("x86_64-other", recording(%w[short]))

    expect(described_class.new(path).adopt(cache, profiles: /amd/)).to eq("x86_64-amd" => %w[long])
    expect(recordings.keys).to eq(%w[x86_64-amd])
    expect(recordings["x86_64-amd"]).to eq(later)
  end

  it "refuses elelem's recordings and anything that does not hold for the file, writing nothing" do
    write(file.merge("recordings" => { "x86_64-amd" => recording(%w[short]) }), path)
    before = File.read(path)
    cached("x86_64-other", recording(%w[short long], recorder: "elelem 0.3.0 (greedy)"))
    expect { described_class.new(path).adopt(cache) }.to raise_error(Elelem::Error, /goldens come only from llama.cpp/)
    FileUtils.rm_r(File.join(cache, "x86_64-other"))
    refusals = {
      "another model" => [recording(%w[long]), file.merge("model" => { "file" => "tiny.gguf", "sha256" => "0" * 64 })],
      "another n_ctx" => [recording(%w[long]), file.merge("n_ctx" => 512)],
      "not #{path}'s" => [recording(%w[long]), file.merge("cases" => [cases[0], cases[1].merge("prompt" => [1])])],
      "otherwise than" => [recording(%w[short]).tap { |r| r["outputs"]["short"]["ids"] = [9, 9] }, file],
      "on Intel Xeon" => [recording(%w[short long], cpu: "Intel Xeon"), file]
    }
    refusals.each do |message, (rec, doc)|
      cached("x86_64-amd", rec, doc)
      expect { described_class.new(path).adopt(cache) }.to raise_error(Elelem::Error, /#{Regexp.escape(message)}/)
      expect(File.read(path)).to eq(before)
    end
  end
end
