# frozen_string_literal: true

require "fileutils"
require "English"
require "json"

# The reference implementation: llama.cpp from the same pinned package as our
# ggml, built with its own CMake defaults into tmp/reference, driven by
# tools/reference/reference.cpp. It makes the goldens and is the benchmark peer.
#
# When elelem runs a CPU variant (the platform gem's build, `Elelem.build_profile[:variant]`),
# the reference is llama.cpp's release-style build instead (GGML_BACKEND_DL,
# GGML_CPU_ALL_VARIANTS, not native) in tmp/reference-variants, and every run of it loads
# the same variant (ELELEM_CPU_VARIANT, set for this process and its children).
module Reference
  ROOT = File.expand_path("..", __dir__)
  BUILD = File.join(ROOT, "tmp", "reference")
  BINARY = File.join(BUILD, "elelem-reference")
  VARIANTS_BUILD = File.join(ROOT, "tmp", "reference-variants")
  VARIANTS_BINARY = File.join(VARIANTS_BUILD, "bin", "elelem-reference")
  GOLDENS = File.join(ROOT, "spec", "fixtures", "goldens")
  N_CTX = 4096
  N_THREADS = 2
  N_PREDICT = 32

  module_function

  # The CPU variant elelem runs (nil for a native build); the reference runs it too.
  def variant
    Elelem.build_profile[:variant]
  end

  # The driver built like this elelem: natively, or with CPU variants.
  def binary
    return BINARY unless variant

    ENV["ELELEM_CPU_VARIANT"] = variant
    VARIANTS_BINARY
  end

  # Configures once (llama.cpp's build takes minutes; with every CPU variant, longer);
  # later calls only bring the driver up to date.
  def build
    dir = variant ? VARIANTS_BUILD : BUILD
    unless File.exist?(File.join(dir, "CMakeCache.txt"))
      llama = File.join(VendorGgml.package_dir, "llama.cpp")
      FileUtils.mkdir_p(dir)
      system("cmake", "-S", File.join(ROOT, "tools", "reference"), "-B", dir, "-DCMAKE_BUILD_TYPE=Release",
             "-DLLAMA_CPP_DIR=#{llama}", *("-DELELEM_REFERENCE_VARIANTS=ON" if variant), exception: true)
    end
    system("cmake", "--build", dir, "--target", "elelem-reference", "-j", Etc.nprocessors.to_s, exception: true)
    binary
  end

  def run(*args)
    out = IO.popen([binary, *args.map(&:to_s)], &:read)
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

  # The reference is built natively (GGML_NATIVE, ggml's default), or with the CPU variants
  # and forced to elelem's, so its recordings are labelled with this build's profile only
  # when this build is native or runs a variant.
  def check_profile!
    flags = Elelem.build_profile[:cpu_flags]
    return if flags == "-march=native" || variant

    raise "elelem was built with #{flags.inspect}, the reference with -march=native: its recordings " \
          "would carry the wrong build profile (rebuild without ELELEM_CPU_FLAGS / ELELEM_PORTABLE)"
  end
end
