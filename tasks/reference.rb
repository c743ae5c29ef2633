# frozen_string_literal: true

require "fileutils"
require "English"
require "json"
require_relative "platforms"
require_relative "vendor"

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
  # llama.cpp built with GGML_VULKAN too, for the Vulkan goldens (tasks/vulkan_golden.rb).
  VULKAN_BUILD = File.join(ROOT, "tmp", "reference-vulkan")
  VULKAN_BINARY = File.join(VULKAN_BUILD, "elelem-reference")
  GOLDENS = File.join(ROOT, "spec", "fixtures", "goldens")
  N_CTX = 4096
  N_THREADS = 2
  N_PREDICT = 32

  module_function

  # The CPU variant elelem runs (nil for a native build); the reference runs it too.
  def variant
    Elelem.build_profile[:variant]
  end

  # The driver built like this elelem: natively, or with CPU variants; or the one
  # ELELEM_REFERENCE names, built beforehand by a process that could build it (for a Ruby in
  # a chroot or under emulation, which has no compiler: see NativeGem.check).
  def binary
    ENV["ELELEM_CPU_VARIANT"] = variant if variant
    return ENV["ELELEM_REFERENCE"] if ENV["ELELEM_REFERENCE"]

    variant ? VARIANTS_BINARY : BINARY
  end

  # Configures once (llama.cpp's build takes minutes); later calls only bring the driver
  # up to date.
  def build
    if ENV["ELELEM_REFERENCE"]
      # built beforehand
    elsif variant
      build_variants(Platforms.host_platform, [variant])
    else
      configure(BUILD)
      system("cmake", "--build", BUILD, "--target", "elelem-reference", "-j", Etc.nprocessors.to_s, exception: true)
    end
    binary
  end

  # llama.cpp's release-style build for `platform` (cross-compiled for aarch64 with Debian's
  # toolchain), of which only the driver and the CPU variants named are compiled: ggml's
  # library depends on every variant of llama.cpp's list, and GCC 12 cannot compile the
  # SME ones, so each target is built alone (`make <target>/fast`, without what it depends on).
  # @return [String] the driver
  def build_variants(platform, variants)
    dir = platform == Platforms.host_platform ? VARIANTS_BUILD : File.join(ROOT, "tmp", "reference-#{platform}")
    toolchain = File.join(ROOT, "tools", "reference", "#{Platforms.arch(platform)[:gnu]}.cmake")
    configure(dir, "-DELELEM_REFERENCE_VARIANTS=ON",
              *("-DCMAKE_TOOLCHAIN_FILE=#{toolchain}" unless platform == Platforms.host_platform))
    targets = ["ggml-base", *variants.flat_map { |v| ["ggml-cpu-#{v}-feats", "ggml-cpu-#{v}"] }, "ggml", "llama",
               "vendor-hash", "mtmd", "elelem-reference"]
    targets.each { |t| system("make", "-C", dir, "-j", Etc.nprocessors.to_s, "#{t}/fast", exception: true) }
    File.join(dir, "bin", "elelem-reference")
  end

  # The driver over llama.cpp built natively with ggml's Vulkan backend (GGML_VULKAN), against
  # the Vulkan headers elelem's own build uses (VulkanBuild.headers: Debian 12's are too old
  # for the pinned ggml-vulkan, Debian 13's unpacked beside them are not).
  # @return [String] the driver
  def build_vulkan
    require_relative "vulkan"
    include = VulkanBuild.headers or raise "no Vulkan headers recent enough for ggml-vulkan: run script/setup"
    configure(VULKAN_BUILD, "-DGGML_VULKAN=ON", "-DVulkan_INCLUDE_DIR=#{include}")
    system("cmake", "--build", VULKAN_BUILD, "--target", "elelem-reference", "-j", Etc.nprocessors.to_s,
           exception: true)
    VULKAN_BINARY
  end

  def configure(dir, *options)
    cache = File.join(dir, "CMakeCache.txt")
    # A build configured before the driver took --rpc, or before it linked libmtmd, is configured
    # again (incrementally; `make <target>/fast` of build_variants would not).
    configured = File.exist?(cache) ? File.read(cache) : ""
    unless %w[GGML_RPC:BOOL=ON LLAMA_BUILD_MTMD:BOOL=ON].all? { |option| configured.include?(option) }
      llama = File.join(VendorGgml.package_dir, "llama.cpp")
      FileUtils.mkdir_p(dir)
      system("cmake", "-S", File.join(ROOT, "tools", "reference"), "-B", dir, "-DCMAKE_BUILD_TYPE=Release",
             "-DLLAMA_CPP_DIR=#{llama}", *options, exception: true)
    end
    check_forced_header(dir)
  end

  # The reference compiles ggml's CPU backend as elelem does, with elelem_amx.h forced in
  # (tools/reference/CMakeLists.txt); a build configured without it would compute other bits
  # on an AMX CPU, or crash there.
  def check_forced_header(dir)
    flags = Dir[File.join(dir, "llama.cpp", "ggml", "src", "CMakeFiles", "ggml-cpu*.dir", "flags.make")]
    missing = flags.reject { |file| File.read(file).include?("elelem_amx.h") }
    return if flags.any? && missing.empty?

    raise "#{dir}: ggml's CPU backend is configured without elelem_amx.h " \
          "(#{flags.empty? ? "no ggml-cpu flags.make" : missing.join(", ")}): remove #{dir} and build again"
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

  # The reference is built natively (GGML_NATIVE, ggml's default: -march=native, or
  # -mcpu=native on aarch64), or with the CPU variants
  # and forced to elelem's, so its recordings are labelled with this build's profile only
  # when this build is native or runs a variant.
  def check_profile!
    flags = Elelem.build_profile[:cpu_flags]
    return if ["-march=native", "-mcpu=native"].include?(flags) || variant

    raise "elelem was built with #{flags.inspect}, the reference natively: its recordings " \
          "would carry the wrong build profile (rebuild without ELELEM_CPU_FLAGS / ELELEM_PORTABLE)"
  end
end
