# frozen_string_literal: true

require "English"
require "fileutils"
require "json"
require "rbconfig"
require "rubygems/package"

# The precompiled platform gem (`rake native`): the extension and ggml's CPU backend built
# for each ISA level of llama.cpp's variant list (ELELEM_CPU_VARIANTS, see
# ext/ggml-sys/src/variants.rs), loaded and scored at run time, so that `gem install`
# compiles nothing. `rake native:check` installs it where no compiler is on the PATH and
# checks every golden with each variant this CPU runs, against llama.cpp's release-style
# build forced to the same variant.
module NativeGem
  ROOT = File.expand_path("..", __dir__)
  PLATFORM = "x86_64-linux"
  # A target directory of its own (ELELEM_NATIVE_TARGET_DIR): the variants build never
  # disturbs the source build's.
  TARGET_DIR = ENV.fetch("ELELEM_NATIVE_TARGET_DIR") { File.join(ROOT, "target", "native") }
  WORK = File.join(ROOT, "tmp", "native")
  STAGE = File.join(WORK, PLATFORM)
  PKG = File.join(ROOT, "pkg")
  # What a user's gem holds besides the libraries.
  FILES = ["lib/**/*.rb", "exe/*", "README.md", "CHANGELOG.md", "LICENSE", "docs/*.md"].freeze

  module_function

  def variants
    ENV.fetch("ELELEM_CPU_VARIANTS", "default")
  end

  def build_env
    { "ELELEM_CPU_VARIANTS" => variants, "CARGO_TARGET_DIR" => TARGET_DIR }
  end

  def gem_path
    require_relative "../lib/elelem/version"
    File.join(PKG, "elelem-#{Elelem::VERSION}-#{PLATFORM}.gem")
  end

  # `rake native`: compiles (cargo, once per change), stages and packages the gem.
  def build
    unless RUBY_PLATFORM.start_with?("x86_64-linux")
      raise "the platform gem is built on x86_64 Linux (this is #{RUBY_PLATFORM})"
    end

    system(build_env, "cargo", "build", "--release", "--locked", "-p", "elelem", chdir: ROOT, exception: true)
    stage
    FileUtils.mkdir_p(PKG)
    gemspec = spec
    file = Dir.chdir(STAGE) { Gem::Package.build(gemspec) }
    FileUtils.mv(File.join(STAGE, file), gem_path)
    puts "built #{gem_path} (#{format("%.1f", File.size(gem_path) / 1e6)} MB; " \
         "CPU variants: #{variant_names.join(", ")})"
  end

  def variant_names
    Dir[File.join(STAGE, "lib", "elelem", "libggml-cpu-*.so")]
      .map { |f| File.basename(f, ".so").delete_prefix("libggml-cpu-") }.sort
  end

  # tmp/native/x86_64-linux: the Ruby files, and the libraries (stripped of what only a
  # debugger reads) in lib/elelem, where `require "elelem/elelem"` finds the extension and
  # the extension finds the rest ($ORIGIN).
  def stage
    FileUtils.rm_rf(STAGE)
    Dir.chdir(ROOT) { Dir[*FILES] }.each do |file|
      FileUtils.mkdir_p(File.join(STAGE, File.dirname(file)))
      FileUtils.cp(File.join(ROOT, file), File.join(STAGE, file), preserve: true)
    end
    release = File.join(TARGET_DIR, "release")
    libs = { "libelelem.so" => "elelem.so", "libelelem-ggml.so" => "libelelem-ggml.so" }
    Dir[File.join(release, "libggml-cpu-*.so")].each { |f| libs[File.basename(f)] = File.basename(f) }
    # strip writes each into the fresh stage itself: stripping a copy would rewrite it in
    # place (binutils 2.40 truncates the file it strips).
    libs.each do |from, to|
      system("strip", "--strip-unneeded", "-o", File.join(STAGE, "lib", "elelem", to), File.join(release, from),
             exception: true)
    end
  end

  # The source gem's specification, made a platform gem: no extension to build, the
  # libraries in its files, for the Ruby version (ABI) it was built with.
  def spec
    spec = Gem::Specification.load(File.join(ROOT, "elelem.gemspec"))
    spec.platform = Gem::Platform.new(PLATFORM)
    spec.extensions = []
    spec.files = Dir.glob("**/*", base: STAGE).select { |f| File.file?(File.join(STAGE, f)) }.sort
    major, minor = RbConfig::CONFIG.values_at("MAJOR", "MINOR")
    spec.required_ruby_version = [">= #{major}.#{minor}", "< #{major}.#{minor.to_i + 1}.dev"]
    spec.metadata["cpu_variants"] = variant_names.join(" ")
    spec
  end

  # A directory whose PATH holds ruby, gem and nothing else: no cc, no cargo, no clang.
  def bare_path
    dir = File.join(WORK, "bare-bin")
    FileUtils.rm_rf(dir)
    FileUtils.mkdir_p(dir)
    # Debian's gem is gem3.1 (with a `gem` alternative).
    gem = File.join(RbConfig::CONFIG["bindir"], "gem#{RbConfig::CONFIG["ruby_version"][/\d+\.\d+/]}")
    gem = File.join(RbConfig::CONFIG["bindir"], "gem") unless File.exist?(gem)
    { "ruby" => RbConfig.ruby, "gem" => gem }.each do |name, target|
      File.symlink(File.realpath(target), File.join(dir, name))
    end
    dir
  end

  def bare_env(gem_home)
    { "PATH" => bare_path, "HOME" => Dir.home, "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "LANG" => "C.UTF-8" }
      .merge(ENV.slice("ELELEM_MODEL_DIR"))
  end

  def run_bare(env, *command)
    system(env, *command, unsetenv_others: true)
  end

  # `rake native:check`.
  def check
    gem_home = File.join(WORK, "gem-home")
    FileUtils.rm_rf(gem_home)
    env = bare_env(gem_home)
    puts "== in an environment whose PATH is #{env["PATH"]} (#{Dir.children(env["PATH"]).sort.join(", ")}):"
    found = run_bare(env, "/usr/bin/which", "cc", "gcc", "c++", "clang", "cargo", "rustc")
    status = $CHILD_STATUS.exitstatus
    puts "which cc gcc c++ clang cargo rustc: #{found ? "found some" : "none found (exit status #{status})"}"
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    run_bare(env, "gem", "install", "--local", "--no-document", gem_path) or raise "gem install failed"
    puts format("gem install --local took %.2f s", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
    run_bare(env, "ruby", "-e", <<~'RUBY') or raise "the installed gem does not run"
      require "elelem"
      puts "loaded #{$LOADED_FEATURES.grep(/elelem\.so/).first}"
      puts Elelem.system_info, Elelem.build_profile[:id]
      Elelem.open("qwen2.5-coder-0.5b") { |m| p m.generate("def fibonacci(n):", max_tokens: 16) }
    RUBY
    check_variants(gem_home)
  end

  # `rake native:bench`: the installed gem (its best variant for this CPU, or
  # ELELEM_CPU_VARIANT's) beside the source build of this checkout (lib/, -march=native),
  # speed rows measured A B A B in a fresh process each, medians of BENCH_REPS.
  def bench
    gem_home = File.join(WORK, "gem-home")
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

  # Each variant this CPU runs, forced in turn: the goldens its profile lacks recorded from
  # the reference (tmp/reference-variants, forced to it too), then every golden checked, in a
  # Ruby that loads the installed gem (not the checkout's lib/).
  def check_variants(gem_home)
    env = { "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "RUBYLIB" => nil, "RUBYOPT" => nil }
    runnable = runnable_variants(env)
    puts "== goldens for each CPU variant this CPU runs: #{runnable.join(", ")}"
    results = runnable.map do |variant|
      script = "require \"elelem\"; require #{File.join(ROOT, "tasks", "native_gem").dump}; NativeGem.check_goldens"
      [variant, system(env.merge("ELELEM_CPU_VARIANT" => variant), RbConfig.ruby, "-e", script)]
    end
    failed = results.reject(&:last).map(&:first)
    raise "goldens failed for #{failed.join(", ")}" unless failed.empty?
  end

  # The installed gem's variants that this CPU runs (or those of ELELEM_CHECK_VARIANTS).
  def runnable_variants(env)
    out = IO.popen(env, [RbConfig.ruby, "-e", 'require "elelem"; puts JSON.generate(Elelem.cpu_variants)'], &:read)
    runnable = JSON.parse(out).select { |v| v["runnable"] }.map { |v| v["name"] }
    only = ENV["ELELEM_CHECK_VARIANTS"]&.split(",")
    only ? only & runnable : runnable
  end

  # In a process running one variant: records what its profile lacks, then checks every
  # golden file's every case (Elelem::Golden, as spec/golden_spec.rb does), or those whose
  # names match ELELEM_CHECK_GOLDENS (a regular expression).
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

  # The reference's recordings for this variant's profile that the cache lacks.
  def record_missing(names)
    missing = names.map { |name| [name, Elelem::Golden.new(Goldens.fixture(name), cache: Elelem::Golden::CACHE_DIR)] }
                   .reject { |_, golden| golden.recorded? }
    return if missing.empty?

    Reference.build
    missing.each { |name, golden| Goldens.record(golden, name) }
  end

  def check_fixtures(names)
    passed = 0
    failed = []
    names.each do |name|
      golden = Elelem::Golden.new(Goldens.fixture(name), cache: Elelem::Golden::CACHE_DIR)
      Elelem.open(Goldens.model_path(name), n_ctx: golden.n_ctx, n_threads: golden.n_threads,
                                            parallel: golden.parallel, flash_attn: golden.flash_attn) do |model|
        golden.cases.each do |c|
          mismatch = golden.check(model, c["name"])
          mismatch ? failed << "#{name}: #{mismatch.message}" : passed += 1
        end
      end
    end
    [passed, failed]
  end
end
