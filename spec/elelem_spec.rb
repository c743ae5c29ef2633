# frozen_string_literal: true

require "spec_helper"

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
end
