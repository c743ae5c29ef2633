# frozen_string_literal: true

require "spec_helper"
require "open3"
require "shellwords"
require "tmpdir"
require "fileutils"

# What `gem install elelem` gets where no platform gem fits: the source gem, built on the
# user's machine, in whatever Ruby and Gemfile the user has.
RSpec.describe "The source gem" do
  # Libraries Ruby moved from its default gems to its bundled gems (3.4: base64 and others; 4.0: reline,
  # logger and others, as Ruby's lib/bundled_gems.rb lists them). Under Bundler a Gemfile that does not name
  # one hides it, and this gem depends on no gem.
  moved_to_bundled_gems = %w[abbrev base64 bigdecimal csv drb getoptlong mutex_m nkf observer racc resolv-replace
                             rinda syslog ostruct pstore benchmark logger rdoc win32ole irb reline readline fiddle]

  # Its files are globbed, not git-listed (vendor/ggml ships but is not tracked), so a file a
  # crate starts to need can be left out, and only a fresh install notices: cargo fails in the
  # build script. The install itself takes a full release build, so this checks the list.
  it "ships every tracked file of lib/, exe/ and the crates, but the crates' tests and examples" do
    gem_files = Dir.chdir(ROOT) { Gem::Specification.load("elelem.gemspec").files }
    tracked, status = Open3.capture2("git", "-C", ROOT, "ls-files", "lib", "exe", "ext")
    expect(status).to be_success
    built_from = tracked.lines(chomp: true).grep_v(%r{\Aext/[^/]+/(tests|examples|benches)/})
    expect(built_from).not_to be_empty
    expect(built_from - gem_files).to eq([])
  end

  it "requires no library that newer Rubies took out of their default gems, but Reline where it may be missing" do
    required = Dir[File.join(ROOT, "lib/**/*.rb"), File.join(ROOT, "exe/*")].flat_map do |file|
      File.read(file).scan(%r{^\s*require\s+["']([^"'/]+)}).flatten.map do |lib|
        "#{lib} (#{file.delete_prefix("#{ROOT}/")})"
      end
    end
    expect(required.size).to be > 20
    moved = required.select { |req| moved_to_bundled_gems.include?(req.split.first) }
    # `elelem chat` edits lines with Reline at a terminal, and reads plain lines where it does not load.
    expect(moved).to eq(["reline (lib/elelem/cli/chat.rb)"])
  end

  # A gem installed under a folder whose name has a space (a Bundler path in "My Projects")
  # compiles there; split, the scratch target's `rm -rf` would remove other folders.
  it "writes a Makefile whose commands keep the gem's folder whole when its name has a space" do
    Dir.mktmpdir do |dir|
      root = File.join(dir, "elelem gem")
      FileUtils.mkdir_p([File.join(root, "ext/elelem"), File.join(root, "vendor/ggml/include"), File.join(root, "b")])
      FileUtils.touch(File.join(root, "vendor/ggml/include/ggml.h"))
      FileUtils.cp(File.join(ROOT, "ext/elelem/extconf.rb"), File.join(root, "ext/elelem"))
      _, err, status = Open3.capture3({ "CARGO_TARGET_DIR" => nil }, RbConfig.ruby, "../ext/elelem/extconf.rb",
                                      chdir: File.join(root, "b"))
      expect(status).to be_success, err
      out, status = Open3.capture2("make", "-n", "install", "sitearchdir=x", chdir: File.join(root, "b"))
      expect(status).to be_success
      commands = out.gsub("\\\n", " ").lines.map { |line| Shellwords.split(line) }
      cargo = commands.find { |words| words.include?("cargo") }
      expect(cargo).to include("CARGO_TARGET_DIR=#{root}/target")
      expect(cargo.each_cons(2)).to include(["--manifest-path", "#{root}/Cargo.toml"])
      expect(commands.last).to eq(["rm", "-rf", "#{root}/target"])
    end
  end
end
