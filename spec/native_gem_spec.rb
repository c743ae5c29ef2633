# frozen_string_literal: true

require "spec_helper"
require "open3"
require "rbconfig"
require "fileutils"
require "tmpdir"

# The precompiled gem's run-time choice of ggml's CPU variant, and what a source build says
# instead. Building every variant takes minutes, so the checks of the platform gem itself
# (installed without a compiler, every golden with each variant) are `rake native:check`;
# these run against whichever build the suite has.
RSpec.describe "CPU variants" do
  def ruby_with(env, code)
    Open3.capture3(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-relelem", "-e", code)
  end

  variants = Elelem.cpu_variants

  if variants.empty?
    it "has none in a source build, and refuses ELELEM_CPU_VARIANT rather than ignore it" do
      expect(Elelem.build_profile[:variant]).to be_nil
      expect(Elelem.system_info).not_to include("CPU_VARIANT")
      _, err, status = ruby_with({ "ELELEM_CPU_VARIANT" => "haswell" }, "Elelem.build_profile")
      expect(status).not_to be_success
      expect(err).to include("ELELEM_CPU_VARIANT=haswell: this build has one CPU backend")
      expect(err).to include("Elelem::CpuError")
    end
  else
    it "runs the best variant this CPU runs, named in system_info and the build profile" do
      in_use = variants.select { |v| v[:in_use] }
      expect(in_use.size).to eq(1)
      expect(in_use.first[:runnable]).to be(true)
      expect(Elelem.system_info).to start_with("CPU_VARIANT=#{in_use.first[:name]} ")
      expect(Elelem.build_profile[:variant]).to eq(in_use.first[:name])
    end

    it "runs the variant ELELEM_CPU_VARIANT forces, and refuses one this CPU cannot run" do
      out, = ruby_with({ "ELELEM_CPU_VARIANT" => "x64" }, "puts Elelem.system_info, Elelem.build_profile[:id]")
      expect(out).to start_with("CPU_VARIANT=x64 ")
      expect(out.lines.last.strip).not_to eq(Elelem.build_profile[:id])
      variants.reject { |v| v[:runnable] }.each do |v|
        _, err, status = ruby_with({ "ELELEM_CPU_VARIANT" => v[:name] }, "Elelem.system_info")
        expect(status).not_to be_success
        expect(err).to match(/cannot run the #{v[:name]} variant: it lacks .*\(Elelem::CpuError\)/)
      end
      _, err, = ruby_with({ "ELELEM_CPU_VARIANT" => "pentium" }, "Elelem.system_info")
      expect(err).to include("no such CPU variant in this build")
    end
  end

  # lib/ copied beside empty extensions for the given Ruby ABIs, as a platform gem lays them out.
  def require_from_platform_gem(abis, code = "")
    Dir.mktmpdir do |dir|
      Dir.glob("**/*.rb", base: File.join(ROOT, "lib")).each do |file|
        FileUtils.mkdir_p(File.join(dir, File.dirname(file)))
        FileUtils.cp(File.join(ROOT, "lib", file), File.join(dir, file))
      end
      abis.each do |abi|
        FileUtils.mkdir_p(File.join(dir, "elelem", abi))
        FileUtils.touch(File.join(dir, "elelem", abi, "elelem.#{RbConfig::CONFIG["DLEXT"]}"))
      end
      Open3.capture3(RbConfig.ruby, "-I", dir, "-e", "#{code}; require 'elelem'")
    end
  end

  it "refuses a Ruby whose ABI a platform gem does not carry, naming those it does and what works" do
    _, err, status = require_from_platform_gem(%w[2.7 9.9])
    expect(status).not_to be_success
    expect(err).to include("carries its native extension for CRuby 2.7 and 9.9, not for Ruby #{RUBY_VERSION}")
      .and include("gem uninstall elelem --platform ").and include("&& gem install elelem --platform ruby")
      .and include('gem "elelem", force_ruby_platform: true').and include("(LoadError)")
  end

  it "refuses a Ruby other than CRuby, whatever its version, rather than load a CRuby extension" do
    abi = RUBY_VERSION[/\A\d+\.\d+/]
    _, err, status = require_from_platform_gem(
      [abi], 'Object.send(:remove_const, :RUBY_ENGINE); RUBY_ENGINE = "truffleruby"'
    )
    expect(status).not_to be_success
    expect(err).to include("carries its native extension for CRuby #{abi}, not for truffleruby ")
      .and include("gem install elelem --platform ruby").and include("(LoadError)")
  end

  it "builds the extension under the platform's library name (RbConfig), with the variants' libraries, " \
     "and installs them by renames" do
    Dir.mktmpdir do |dir|
      extconf = File.join(ROOT, "ext", "elelem", "extconf.rb")
      system({ "ELELEM_CPU_VARIANTS" => nil }, RbConfig.ruby, extconf, chdir: dir, exception: true, out: File::NULL)
      makefile = File.read(File.join(dir, "Makefile"))
      soext = RbConfig::CONFIG["SOEXT"]
      expect(makefile).to include("DLLIB = elelem.#{RbConfig::CONFIG["DLEXT"]}")
      expect(makefile).to match(%r{atomic_install\.rb \S+/release/libelelem\.#{soext} \$\(DLLIB\)$})
      expect(makefile).not_to include("ggml-cpu")
      system({ "ELELEM_CPU_VARIANTS" => "default" }, RbConfig.ruby, extconf, chdir: dir, exception: true,
                                                                             out: File::NULL)
      makefile = File.read(File.join(dir, "Makefile"))
      expect(makefile).to include("libelelem-ggml.#{soext}").and include("libggml-cpu-*.#{soext} $(RUBYARCHDIR)")
      # Every library goes in place by a rename (spec/atomic_install_spec.rb), none by a copy.
      expect(makefile.lines.grep(/^\t(cp|install) /)).to be_empty
      expect(makefile.lines.grep(/atomic_install\.rb/).size).to eq(3)
    end
  end
end
