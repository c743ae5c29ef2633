# frozen_string_literal: true

require "spec_helper"
require "open3"
require "rbconfig"
require_relative "support/deny_amx_permission"

# ggml's AMX kernels run only where CPUID, XCR0 and Linux's permission allow them
# (ext/ggml-sys/src/cpu.rs); otherwise the products take the AVX-512 path with one
# warning of ours. Here Linux's refusal is real: a seccomp filter
# (spec/support/deny_amx_permission.c) makes arch_prctl(ARCH_REQ_XCOMP_PERM) fail for a
# child Ruby. On a CPU or build without AMX nothing is asked, so the child must run
# as this process does, and say nothing.
RSpec.describe "AMX" do
  def child(*prefix)
    code = <<~RUBY
      puts Elelem.system_info, Elelem.build_profile[:isa].join(" ")
      Elelem.open(ARGV[0], n_ctx: 64) { |m| p m.generate([1, 50, 60, 70, 80], max_tokens: 4).size }
    RUBY
    Open3.capture3(*prefix, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-relelem", "-e", code, SpecModels.canary)
  end

  # Every line that speaks of AMX, ggml's own included (its "AMX is not ready" goes to
  # ggml's log, which elelem keeps quiet unless ELELEM_DEBUG is set).
  def amx_warnings(err)
    err.lines.grep(/AMX/i)
  end

  it "is named in the build profile exactly when its kernels are in use" do
    in_use = Elelem.system_info.split.include?("AMX_INT8")
    expect(Elelem.build_profile[:isa].include?("AMX_INT8")).to eq(in_use)
    expect(Elelem.system_info).not_to include("AMX=off") if in_use
  end

  it "falls back to AVX-512 with one warning when Linux refuses the tile-data permission" do
    out, err, status = child(DenyAmxPermission.executable(ROOT))
    expect(status).to be_success, err
    info, isa, tokens = out.lines.map(&:chomp)
    expect(tokens).to eq("4")
    expect(isa.split).not_to include("AMX_INT8")
    if Elelem.build_profile[:isa].include?("AMX_INT8")
      expect(info).to include("AMX=off")
      expect(amx_warnings(err).size).to eq(1), err
      expect(amx_warnings(err).first).to include("Linux refused this process the AMX tile-data permission")
    else
      expect(info).to eq(Elelem.system_info)
      expect(amx_warnings(err)).to be_empty
    end
  end

  it "says nothing when it runs" do
    out, err, status = child
    expect(status).to be_success, err
    expect(amx_warnings(err)).to be_empty
    expect(out.lines.first.chomp).to eq(Elelem.system_info)
  end
end
