# frozen_string_literal: true

require "fileutils"
require "English"
require "json"

# The reference implementation: llama.cpp from the same pinned package as our
# ggml, built with its own CMake defaults into tmp/reference, driven by
# tools/reference/reference.cpp. It makes the goldens and is the benchmark peer.
module Reference
  ROOT = File.expand_path("..", __dir__)
  BUILD = File.join(ROOT, "tmp", "reference")
  BINARY = File.join(BUILD, "elelem-reference")
  GOLDENS = File.join(ROOT, "spec", "fixtures", "goldens")
  N_CTX = 4096
  N_THREADS = 2
  N_PREDICT = 32

  module_function

  # Configures once (llama.cpp's build takes minutes); later calls only bring
  # the driver up to date.
  def build
    unless File.exist?(File.join(BUILD, "CMakeCache.txt"))
      llama = File.join(VendorGgml.package_dir, "llama.cpp")
      FileUtils.mkdir_p(BUILD)
      system("cmake", "-S", File.join(ROOT, "tools", "reference"), "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release",
             "-DLLAMA_CPP_DIR=#{llama}", exception: true)
    end
    system("cmake", "--build", BUILD, "--target", "elelem-reference", "-j", Etc.nprocessors.to_s, exception: true)
    BINARY
  end

  def run(*args)
    out = IO.popen([BINARY, *args.map(&:to_s)], &:read)
    raise "reference #{args.first} failed: #{args.join(" ")}" unless $CHILD_STATUS.success?

    out
  end

  def tokenize(model, text)
    Tempfile.create("elelem-tokenize") do |f|
      f.puts(text.unpack1("H*"))
      f.flush
      run("tokenize", model, f.path).lines.first.split.map(&:to_i)
    end
  end

  # The reference is built natively (GGML_NATIVE, ggml's default), so its recordings are
  # labelled with this build's profile only when this build is native too.
  def check_profile!
    flags = Elelem.build_profile[:cpu_flags]
    return if flags == "-march=native"

    raise "elelem was built with #{flags.inspect}, the reference with -march=native: its recordings " \
          "would carry the wrong build profile (rebuild without ELELEM_CPU_FLAGS / ELELEM_PORTABLE)"
  end
end
