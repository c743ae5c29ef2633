# frozen_string_literal: true

require "English"
require "fileutils"
require "json"
require "rbconfig"
require "rubygems/package"
require_relative "platforms"
require_relative "reference"

# The precompiled platform gems (`rake gem:<platform>`, x86_64-linux and aarch64-linux):
# the extension, built once per Ruby ABI the gems carry (Platforms::RUBIES), and ggml's CPU
# backend built for each ISA level of llama.cpp's variant list for that architecture
# (ELELEM_CPU_VARIANTS, see ext/ggml-sys/src/variants.rs), loaded and scored at run time,
# so that `gem install` compiles nothing. aarch64 is cross-compiled here with Debian's
# toolchain. `rake native:check[<platform>,<ruby>]` installs a gem into that Ruby where no
# compiler is on the PATH and checks the goldens with each variant this CPU (or qemu's)
# runs, against llama.cpp's release-style build for the platform forced to the same variant.
module NativeGem
  ROOT = File.expand_path("..", __dir__)
  # A target directory of its own (ELELEM_NATIVE_TARGET_DIR), with cargo's folder per
  # target triple: the variants builds never disturb the source build's.
  TARGET_DIR = ENV.fetch("ELELEM_NATIVE_TARGET_DIR") { File.join(ROOT, "target", "native") }
  WORK = File.join(ROOT, "tmp", "native")
  PKG = File.join(ROOT, "pkg")
  # What a user's gem holds besides the libraries.
  FILES = ["lib/**/*.rb", "exe/*", "README.md", "CHANGELOG.md", "LICENSE", "docs/*.md"].freeze
  # The goldens checked under emulation by default (ELELEM_CHECK_GOLDENS), where a token
  # costs some 20 times what it does natively: every synthetic architecture and weight
  # type, and Qwen2.5-Coder-0.5B.
  EMULATED_GOLDENS = "^(tiny-.*|qwen2\\.5-coder-0\\.5b)$"
  # The variants the gems carry (ELELEM_CPU_VARIANTS), taken out of the environment when the
  # tasks load: it is meant for the gems' cargo builds alone, and `rake compile` (which the
  # checks depend on) would otherwise turn the checkout's source build into a variants one
  # without the variants' libraries beside it.
  VARIANTS = ENV.delete("ELELEM_CPU_VARIANTS") || "default"

  module_function

  def stage_dir(platform) = File.join(WORK, platform)

  def release_dir(platform) = File.join(TARGET_DIR, Platforms.arch(platform)[:rust], "release")

  def gem_path(platform)
    require_relative "../lib/elelem/version"
    File.join(PKG, "elelem-#{Elelem::VERSION}-#{platform}.gem")
  end

  # `rake gem:<platform>`: compiles (cargo, once per change and Ruby), stages and packages the gem.
  def build(platform)
    unless Platforms.host_platform == "x86_64-linux"
      raise "the platform gems are built on x86_64 Linux (this is #{RUBY_PLATFORM})"
    end

    started = now
    Platforms.ensure_tools!(platform)
    stage_ruby_files(stage_dir(platform))
    rubies = Platforms::RUBIES.keys.map { |abi| Platforms::Target.new(platform, abi) }
    rubies.each { |ruby| build_extension(ruby) }
    install_ggml(platform)
    package(platform)
    puts format("built %<gem>s (%<mb>.1f MB; Ruby %<rubies>s; CPU variants: %<variants>s) in %<s>.0f s",
                gem: gem_path(platform), mb: File.size(gem_path(platform)) / 1e6, rubies: rubies.map(&:abi).join(", "),
                variants: variant_names(platform).join(", "), s: now - started)
  end

  # The same ggml for every Ruby (its build does not depend on Ruby's), into lib/elelem/.
  def install_ggml(platform)
    Dir[File.join(release_dir(platform), "lib{elelem-ggml,ggml-cpu-*}.so")].each do |lib|
      install_library(platform, File.basename(lib), File.join(stage_dir(platform), "lib", "elelem", File.basename(lib)))
    end
  end

  # The extension for one Ruby, into lib/elelem/<major>.<minor>/.
  def build_extension(ruby)
    ruby.ensure_root!
    # No Vulkan: a build that links libvulkan.so.1 does not load on a machine without a loader.
    env = ruby.cargo_env.merge("ELELEM_CPU_VARIANTS" => VARIANTS, "ELELEM_VULKAN" => "0",
                               "CARGO_TARGET_DIR" => TARGET_DIR)
    system(env, "cargo", "build", "--release", "--locked", "-p", "elelem", "--target", ruby.arch[:rust],
           chdir: ROOT, exception: true)
    install_library(ruby.platform, "libelelem.so",
                    File.join(stage_dir(ruby.platform), "lib", "elelem", ruby.abi, "elelem.so"))
  end

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def package(platform)
    FileUtils.mkdir_p(PKG)
    gemspec = spec(platform)
    file = Dir.chdir(stage_dir(platform)) { Gem::Package.build(gemspec) }
    FileUtils.mv(File.join(stage_dir(platform), file), gem_path(platform))
  end

  def variant_names(platform)
    Dir[File.join(stage_dir(platform), "lib", "elelem", "libggml-cpu-*.so")]
      .map { |f| File.basename(f, ".so").delete_prefix("libggml-cpu-") }.sort
  end

  # tmp/native/<platform>: the Ruby files; the libraries go to lib/elelem, where
  # `require "elelem"` finds the extension of its Ruby and the extension finds the rest
  # ($ORIGIN/..).
  def stage_ruby_files(stage)
    FileUtils.rm_rf(stage)
    Dir.chdir(ROOT) { Dir[*FILES] }.each do |file|
      FileUtils.mkdir_p(File.join(stage, File.dirname(file)))
      FileUtils.cp(File.join(ROOT, file), File.join(stage, file), preserve: true)
    end
  end

  # A library of the release build, stripped of what only a debugger reads (with the
  # platform's binutils).
  def install_library(platform, name, dest)
    FileUtils.mkdir_p(File.dirname(dest))
    strip = platform == Platforms.host_platform ? "strip" : "#{Platforms.arch(platform)[:gnu]}-strip"
    # strip writes into the fresh stage itself: stripping a copy would rewrite it in place
    # (binutils 2.40 truncates the file it strips).
    system(strip, "--strip-unneeded", "-o", dest, File.join(release_dir(platform), name), exception: true)
  end

  # The source gem's specification, made a platform gem: no extension to build, the
  # libraries in its files, for the Ruby ABIs it carries (lib/elelem.rb refuses others
  # in between with a message naming them).
  def spec(platform)
    spec = Gem::Specification.load(File.join(ROOT, "elelem.gemspec"))
    spec.platform = Gem::Platform.new(platform)
    spec.extensions = []
    stage = stage_dir(platform)
    spec.files = Dir.glob("**/*", base: stage).select { |f| File.file?(File.join(stage, f)) }.sort
    abis = Platforms::RUBIES.keys
    spec.required_ruby_version = [">= #{abis.first}", "< #{abis.last.succ}.dev"]
    spec.metadata["cpu_variants"] = variant_names(platform).join(" ")
    spec.metadata["ruby_abis"] = abis.join(" ")
    spec
  end

  # What `ruby`'s PATH holds while the gem is installed and run: nothing but ruby and gem
  # on this machine (no cc, no cargo, no clang); the root's own /usr/bin in a chroot (its
  # minimal Debian has no compiler); nothing under emulation, where the Ruby is run by path.
  def bare_path(ruby)
    return "/usr/bin:/bin" unless ruby.host? || ruby.emulated?

    dir = File.join(WORK, "bare-bin")
    FileUtils.rm_rf(dir)
    FileUtils.mkdir_p(dir)
    if ruby.host?
      { "ruby" => RbConfig.ruby, "gem" => ruby.gem_script }.each do |name, target|
        File.symlink(File.realpath(target), File.join(dir, name))
      end
    end
    dir
  end

  def bare_env(ruby, gem_home)
    { "PATH" => bare_path(ruby), "HOME" => Dir.home, "GEM_HOME" => gem_home, "GEM_PATH" => gem_home,
      "LANG" => "C.UTF-8" }.merge(ruby.env, ENV.slice("ELELEM_MODEL_DIR"))
  end

  # The folder the check installs into (tmp/native/<platform>-<ruby>/gem-home).
  def gem_home(ruby) = File.join(WORK, "#{ruby.platform}-#{ruby.abi}", "gem-home")

  # `rake native:check[<platform>,<ruby>]`.
  def check(platform, abi)
    ruby = Platforms::Target.new(platform, abi)
    ruby.ensure_root!
    home = gem_home(ruby)
    FileUtils.rm_rf(home)
    env = bare_env(ruby, home)
    puts "== #{ruby}: #{ruby.ruby_command.join(" ")}"
    report_compilers(ruby, env)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    system(env, *ruby.ruby_command, ruby.gem_script, "install", "--local", "--no-document", gem_path(platform),
           unsetenv_others: true) or raise "gem install failed"
    puts format("gem install --local took %.2f s", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
    system(env, *ruby.ruby_command, "-e", <<~'RUBY', unsetenv_others: true) or raise "the installed gem does not run"
      require "elelem"
      puts "Ruby #{RUBY_VERSION} (#{RUBY_PLATFORM}) loaded #{$LOADED_FEATURES.grep(/elelem\.so/).first}"
      puts Elelem.system_info, Elelem.build_profile[:id]
      Elelem.open("qwen2.5-coder-0.5b") { |m| p m.generate("def fibonacci(n):", max_tokens: 16) }
    RUBY
    check_variants(ruby, home)
  end

  def report_compilers(ruby, env)
    which = %w[cc gcc c++ clang cargo rustc]
    command = ruby.host? || ruby.emulated? ? ["/usr/bin/which"] : ruby.ruby_command[0..-2] + ["/usr/bin/which"]
    found = system(env, *command, *which, unsetenv_others: true, out: File::NULL)
    puts "PATH=#{env["PATH"]}: which #{which.join(" ")}: #{found ? "found some" : "none found"}"
  end

  # `rake native:bench`: the installed gem (its best variant for this CPU, or
  # ELELEM_CPU_VARIANT's) beside the source build of this checkout (lib/, -march=native),
  # speed rows measured A B A B in a fresh process each, medians of BENCH_REPS.
  def bench
    gem_home = gem_home(Platforms::Target.new(Platforms.host_platform, Platforms.host_abi))
    raise "run rake native:check first (it installs the gem into #{gem_home})" unless Dir.exist?(gem_home)

    sides = { "precompiled gem" => { "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "RUBYLIB" => nil },
              "source build" => { "RUBYLIB" => File.join(ROOT, "lib") } }
    reps = Integer(ENV.fetch("BENCH_REPS", "3"))
    ENV.fetch("BENCH_MODELS", "qwen2.5-coder-0.5b").split(",").each do |model|
      runs = Array.new(reps) { sides.transform_values { |env| bench_once(env, model) } }
      puts "#{model}, 2 threads, medians of #{reps} (#{runs.first.values.map { |r| r["profile"] }.join(" vs ")}):"
      %w[pp512 tg128].each { |metric| puts bench_line(metric, runs, sides.keys) }
    end
  end

  def bench_line(metric, runs, sides)
    gem, source = sides.map { |side| runs.map { |r| r[side][metric] }.sort[runs.size / 2] }
    format("  %<m>s t/s: gem %<g>.1f, source %<s>.1f, ratio %<r>.3f", m: metric, g: gem, s: source, r: gem / source)
  end

  def bench_once(env, model)
    script = <<~RUBY
      require "elelem"
      require "json"
      Elelem.open(#{model.dump}, n_threads: 2) do |m|
        bench = Elelem::Bench.new(m)
        bench.decode_rate(8) # warm-up
        puts JSON.generate("profile" => "\#{Elelem.build_profile[:variant] || "native"} \#{Elelem.build_profile[:id]}",
                           "pp512" => bench.prompt_rate(512), "tg128" => bench.decode_rate(128))
      end
    RUBY
    out = IO.popen(env, [RbConfig.ruby, "-e", script], &:read)
    raise "the bench of #{env} failed" unless $CHILD_STATUS.success?

    JSON.parse(out.lines.last)
  end

  # Each variant this CPU (or qemu's) runs, forced in turn: the goldens its profile lacks
  # recorded from the reference (llama.cpp's variants build for the platform, forced to it
  # too, built here beforehand and run in the same Ruby's environment), then every golden
  # checked, in the Ruby under check loading the installed gem (not the checkout's lib/).
  def check_variants(ruby, gem_home)
    env = ruby.env.merge("GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "RUBYLIB" => nil, "RUBYOPT" => nil)
    runnable = runnable_variants(ruby, env)
    puts "== goldens for each CPU variant this CPU runs: #{runnable.join(", ")}"
    env["ELELEM_REFERENCE"] = ruby.runner(Reference.build_variants(ruby.platform, runnable))
    env["ELELEM_CHECK_GOLDENS"] = ENV.fetch("ELELEM_CHECK_GOLDENS") { EMULATED_GOLDENS if ruby.emulated? }
    failed = runnable.reject { |variant| check_variant(ruby, env.merge("ELELEM_CPU_VARIANT" => variant)) }
    raise "goldens failed for #{failed.join(", ")}" unless failed.empty?
  end

  # One variant's goldens, in a process of the Ruby under check.
  def check_variant(ruby, env)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    script = "require \"elelem\"; require #{File.join(ROOT, "tasks", "native_gem").dump}; NativeGem.check_goldens"
    ok = system(env, *ruby.ruby_command, "-e", script)
    puts format("variant %<v>s took %<s>.0f s", v: env["ELELEM_CPU_VARIANT"],
                                                s: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
    ok
  end

  # The installed gem's variants that this CPU runs (or those of ELELEM_CHECK_VARIANTS).
  def runnable_variants(ruby, env)
    out = IO.popen(env, [*ruby.ruby_command, "-e", 'require "elelem"; puts JSON.generate(Elelem.cpu_variants)'],
                   &:read)
    raise "the installed gem does not list its variants" unless $CHILD_STATUS.success?

    runnable = JSON.parse(out).select { |v| v["runnable"] }.map { |v| v["name"] }
    only = ENV["ELELEM_CHECK_VARIANTS"]&.split(",")
    only ? only & runnable : runnable
  end

  # In a process running one variant: records what its profile lacks, then checks every
  # golden file's every case (Elelem::Golden, as spec/golden_spec.rb does), or the files whose
  # names match ELELEM_CHECK_GOLDENS and the cases ELELEM_CHECK_CASES (regular expressions).
  def check_goldens
    require_relative "vendor"
    require_relative "golden"
    profile = installed_variant_profile
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    names = checked_fixtures
    record_missing(names)
    recorded = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    passed, failed = check_fixtures(names)
    now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    puts format("variant %<v>s (profile %<id>s): %<p>d of %<n>d cases in %<f>d golden files identical to " \
                "llama.cpp; recording %<r>.0f s, checking %<c>.0f s",
                v: profile[:variant], id: profile[:id], p: passed, n: passed + failed.size, f: names.size,
                r: recorded - started, c: now - recorded)
    failed.each { |f| puts f }
    exit(failed.empty?)
  end

  def installed_variant_profile
    profile = Elelem.build_profile
    raise "not a variant build: #{profile.inspect}" unless profile[:variant]

    extension = $LOADED_FEATURES.grep(/elelem\.so/)
    raise "not the installed gem: #{extension}" if extension.any? { |f| f.start_with?(File.join(ROOT, "lib")) }

    profile
  end

  def checked_fixtures
    only = ENV.fetch("ELELEM_CHECK_GOLDENS", nil)
    only ? Goldens.fixtures.grep(Regexp.new(only)) : Goldens.fixtures
  end

  # The names of a golden file's cases to check: those matching ELELEM_CHECK_CASES (a regular
  # expression), or all.
  def checked_cases(golden)
    names = golden.cases.map { |c| c["name"] }
    only = ENV.fetch("ELELEM_CHECK_CASES", nil)
    only ? names.grep(Regexp.new(only)) : names
  end

  # The reference's recordings of the checked cases this variant's profile lacks (a run
  # stopped midway goes on from the last case it recorded).
  def record_missing(names)
    missing = names.map { |name| [name, Elelem::Golden.new(Goldens.fixture(name), cache: Elelem::Golden::CACHE_DIR)] }
                   .map { |name, golden| [name, golden, golden.unrecorded & checked_cases(golden)] }
                   .reject { |_, _, cases| cases.empty? }
    return if missing.empty?

    Reference.build
    missing.each { |name, golden, cases| Goldens.record(golden, name, only: cases) }
  end

  def check_fixtures(names)
    passed = 0
    failed = []
    names.each do |name|
      golden = Elelem::Golden.new(Goldens.fixture(name), cache: Elelem::Golden::CACHE_DIR)
      Elelem.open(Goldens.model_path(name), n_ctx: golden.n_ctx, n_threads: golden.n_threads,
                                            parallel: golden.parallel, flash_attn: golden.flash_attn,
                                            cache_type_k: golden.cache_type_k,
                                            cache_type_v: golden.cache_type_v) do |model|
        checked_cases(golden).each do |case_name|
          mismatch = golden.check(model, case_name)
          mismatch ? failed << "#{name}: #{mismatch.message}" : passed += 1
        end
      end
    end
    [passed, failed]
  end
end
