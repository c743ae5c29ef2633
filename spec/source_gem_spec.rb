# frozen_string_literal: true

require "spec_helper"
require "open3"

# `gem install elelem` builds the source gem wherever no platform gem fits. Its files are
# globbed, not git-listed (vendor/ggml ships but is not tracked), so a file a crate starts
# to need can be left out of it, and only a fresh install notices: cargo fails in the
# build script. The install itself takes a full release build, so this checks the list.
RSpec.describe "The source gem" do
  it "ships every tracked file of lib/, exe/ and the crates, but the crates' tests and examples" do
    gem_files = Dir.chdir(ROOT) { Gem::Specification.load("elelem.gemspec").files }
    tracked, status = Open3.capture2("git", "-C", ROOT, "ls-files", "lib", "exe", "ext")
    expect(status).to be_success
    built_from = tracked.lines(chomp: true).grep_v(%r{\Aext/[^/]+/(tests|examples|benches)/})
    expect(built_from).not_to be_empty
    expect(built_from - gem_files).to eq([])
  end
end
