# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

RSpec.describe Elelem do
  it "has a version" do
    expect(Elelem::VERSION).to match(/\A\d+\.\d+\.\d+\z/)
  end

  it "reports the vendored ggml's version" do
    expect(Elelem.ggml_version).to eq(File.read(File.join(ROOT, "vendor", "ggml", "VERSION")).strip)
  end

  it "reports the CPU features ggml was built with" do
    expect(Elelem.system_info).to include("REPACK")
  end

  it "opens a known model by name, and hints at the names when a file is missing" do
    Elelem.open(Elelem::Models::DEFAULT, n_ctx: 64) { |model| expect(model.info[:architecture]).to eq("qwen2") }
    expect { Elelem.open("qwen2.5-coder") }
      .to raise_error(Elelem::LoadError, /No such file.*known model names open too.*qwen2\.5-coder-0\.5b/)
  end

  it "lists the known models with their sizes and whether they are on disk" do
    list = Elelem::Models.list
    expect(list.map { |m| m[:name] }).to eq(Elelem::Models.names)
    list.select { |m| m[:downloaded] }.each { |m| expect(File.size(m[:path])).to eq(m[:size]) }
    expect(list.count { |m| m[:downloaded] }).to eq(Elelem::Models.names.size) # the specs need them all
  end

  it "warns when n_ctx is above the model's training context" do
    expect { Elelem.open(SpecModels.canary, n_ctx: 4096).close }.to output(/n_ctx 4096 is above the 2048/).to_stderr
    expect { Elelem.open(SpecModels.canary, n_ctx: 2048).close }.not_to output.to_stderr
  end

  it "says when fetching a model needs pip it cannot find" do
    Dir.mktmpdir do |dir|
      env = { "ELELEM_MODEL_DIR" => dir, "ELELEM_PYTHON" => File.join(dir, "no-python") }
      stub_const("ENV", ENV.to_h.merge(env))
      expect { Elelem::Models.fetch("gemma-3-270m", out: nil) }.to raise_error(Elelem::Error, /needs Python 3 with pip/)
    end
  end
end
