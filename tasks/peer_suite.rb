# frozen_string_literal: true

require "digest"
require "fileutils"
require "rubygems/package"
require "zlib"

# llama.cpp's own test material, from the PyPI source distribution of
# llama-cpp-python 0.3.36 (its vendor/llama.cpp is llama.cpp's full tree), into the
# git-ignored vendor/llama.cpp: the tokenizer suite's vocab-only GGUFs with their
# .inp/.out cases, and the real chat templates of models/templates/*.jinja. Never
# committed; the download is checksum-pinned and cached.
module PeerSuite
  ROOT = File.expand_path("..", __dir__)
  DEST = File.join(ROOT, "vendor", "llama.cpp")
  SDIST = "llama_cpp_python-0.3.36.tar.gz"
  SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
  CACHE = File.join(Dir.home, ".cache", "elelem", "peer")
  # What is taken from the tree.
  WANTED = %r{\Allama_cpp_python-0\.3\.36/vendor/llama\.cpp/(models/(?:ggml-vocab-[^/]+|templates/[^/]+\.jinja))\z}
  # What the marker says was taken; a tree from an older extraction lacks the templates.
  CONTENTS = "the tokenizer suite and models/templates"

  module_function

  def run
    marker = File.join(DEST, "SOURCE")
    if File.exist?(marker) && File.read(marker).include?(CONTENTS)
      return puts("vendor/llama.cpp is present (#{File.read(marker).strip})")
    end

    extract(download)
    File.write(marker, "#{SDIST} (PyPI, sha256 #{SHA256}): #{CONTENTS}\n")
    puts "vendor/llama.cpp: #{Dir[File.join(DEST, "models", "*")].size} files of llama.cpp's tokenizer suite, " \
         "#{Dir[File.join(DEST, "models", "templates", "*.jinja")].size} chat templates"
  end

  def download
    path = File.join(CACHE, SDIST)
    unless File.exist?(path) && Digest::SHA256.file(path).hexdigest == SHA256
      FileUtils.mkdir_p(CACHE)
      system("python3", "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-python",
             "llama-cpp-python==0.3.36", "-d", CACHE, exception: true)
    end
    actual = Digest::SHA256.file(path).hexdigest
    raise "#{path}: sha256 #{actual}, expected #{SHA256}" unless actual == SHA256

    path
  end

  def extract(tarball)
    FileUtils.mkdir_p(File.join(DEST, "models", "templates"))
    Zlib::GzipReader.open(tarball) do |gz|
      long_name = nil
      Gem::Package::TarReader.new(gz).each do |entry|
        # A pax header carries the full name of the next entry when it is too long for
        # the ustar header (some template names are), which RubyGems' reader ignores.
        next long_name = entry.read[/^\d+ path=(.*)$/, 1] if entry.header.typeflag == "x"

        name = long_name || entry.full_name
        long_name = nil
        relative = name[WANTED, 1] or next
        File.binwrite(File.join(DEST, relative), entry.read) if entry.file?
      end
    end
  end
end
