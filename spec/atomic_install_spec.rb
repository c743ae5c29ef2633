# frozen_string_literal: true

require "spec_helper"
require "fileutils"
require "open3"
require "rbconfig"
require "tmpdir"
require_relative "../ext/elelem/atomic_install"

# `rake compile` beside a process that has the extension loaded (a server, the parent rake
# that ran the goldens, another spec run). The Makefile installs every library with
# ext/elelem/atomic_install.rb; a copy over the old file killed such a process with SIGBUS.
# This installs other builds, with that same command, under a process that renders a chat
# template and tokenizes in a loop. It works in a copy of lib/ in a temporary folder, so the
# suite's own lib/elelem/elelem.so is never touched.
RSpec.describe AtomicInstall do
  script = File.join(ROOT, "ext", "elelem", "atomic_install.rb")

  # Prints where it loaded the extension from, then renders in a loop; for each line on its
  # stdin it renders 20 more times and prints how many it made; at the end of its stdin it
  # prints "done" and the count. A render that differs from the first aborts it.
  child = <<~'RUBY'
    $stdout.sync = true
    require "elelem"
    model = Elelem.open(ARGV.fetch(0), n_ctx: 256)
    messages = [{ role: "user", content: "Où est le café? 東京" }]
    template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>"
    render = -> { [model.chat_prompt(messages, template:), model.tokenizer.tokenize(messages[0][:content])] }
    first = render.call
    check = lambda do
      got = render.call
      abort "a render changed: #{got.inspect}, not #{first.inspect}" unless got == first
    end
    puts $LOADED_FEATURES.grep(%r{/elelem\.so\z}).first
    n = 0
    loop do
      check.call
      n += 1
      next unless IO.select([$stdin], nil, nil, 0)
      break unless $stdin.gets

      20.times { check.call }
      puts n += 20
    end
    puts "done #{n}"
  RUBY

  def install(script, *args)
    system(RbConfig.ruby, script, *args, exception: true)
  end

  it "replaces the libraries under a process that has them loaded, which renders on unharmed" do
    Dir.mktmpdir do |dir|
      lib = File.join(dir, "lib")
      FileUtils.cp_r(File.join(ROOT, "lib"), lib)
      installed = File.join(lib, "elelem")
      libraries = Dir[File.join(installed, "*.so")].map { |f| File.basename(f) }
      expect(libraries).to include("elelem.so")
      # Two builds: this one, and one whose files differ by a tail that the loader never
      # reads, so that both load.
      builds = %w[a b].to_h { |name| [name, FileUtils.mkdir_p(File.join(dir, name)).first] }
      libraries.each do |name|
        bytes = File.binread(File.join(installed, name))
        File.binwrite(File.join(builds["a"], name), bytes)
        File.binwrite(File.join(builds["b"], name), "#{bytes}elelem: another build\n")
      end
      extension = File.join(installed, "elelem.so")

      Open3.popen2(RbConfig.ruby, "-I", lib, "-e", child, SpecModels.canary) do |stdin, stdout, wait|
        expect(stdout.gets).to eq("#{extension}\n")
        renders = 0
        # b, a, b: the last install leaves the build the process never loaded.
        %w[b a b].each do |build|
          install(script, "--prune", "libggml-cpu-*.so", *libraries.map { |f| File.join(builds[build], f) }, installed)
          # It renders on with the new file in place.
          stdin.puts "renders?"
          renders = Integer(stdout.gets).tap { |n| expect(n).to be >= renders + 20 }
        end
        # Its mapping is still the file it loaded, now unlinked; the name is another inode.
        mapped = File.readlines("/proc/#{wait.pid}/maps").grep(%r{ #{Regexp.escape(extension)}})
        expect(mapped).not_to be_empty
        expect(mapped).to all(end_with(" (deleted)\n"))
        expect(mapped.map { |line| Integer(line.split[4]) }.uniq).not_to include(File.stat(extension).ino)
        stdin.close
        out = stdout.read
        expect(wait.value).to be_success, "the process died: #{wait.value.inspect}"
        expect(out.lines.last).to match(/\Adone \d+\n\z/)
      end

      # The library in place is the new build's, and loads.
      libraries.each do |name|
        expect(FileUtils.compare_file(File.join(installed, name), File.join(builds["b"], name))).to be(true)
      end
      loads = 'require "elelem"; puts $LOADED_FEATURES.grep(%r{/elelem\.so\z}), Elelem.ggml_version'
      out, status = Open3.capture2(RbConfig.ruby, "-I", lib, "-e", loads)
      expect(status).to be_success
      expect(out.lines.first).to eq("#{extension}\n")

      # The same bytes again: nothing written, the same inode.
      inode = File.stat(extension).ino
      expect(AtomicInstall.install(File.join(builds["b"], "elelem.so"), installed)).to be(false)
      expect(File.stat(extension).ino).to eq(inode)
      expect(Dir.children(installed).grep(/\.tmp\z/)).to be_empty
    end
  end

  it "removes, with --prune, the CPU variants an earlier build made and this one did not" do
    Dir.mktmpdir do |dir|
      built = FileUtils.mkdir_p(File.join(dir, "built")).first
      installed = FileUtils.mkdir_p(File.join(dir, "installed")).first
      %w[libelelem-ggml.so libggml-cpu-haswell.so].each { |f| File.write(File.join(built, f), f) }
      File.write(File.join(installed, "libggml-cpu-sandybridge.so"), "an earlier build's")
      File.write(File.join(installed, "elelem.so"), "the extension")
      install(script, "--prune", "libggml-cpu-*.so", *Dir[File.join(built, "*")], installed)
      expect(Dir.children(installed).sort).to eq(%w[elelem.so libelelem-ggml.so libggml-cpu-haswell.so])
      expect(File.read(File.join(installed, "libggml-cpu-haswell.so"))).to eq("libggml-cpu-haswell.so")
    end
  end
end
