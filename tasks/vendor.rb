# frozen_string_literal: true

require "fileutils"
require "json"

# Copies the share of ggml that elelem builds (ggml-base, the CPU backend, the RPC backend,
# and the Vulkan backend, built where its pieces are there), llama.cpp's stb_image (its JPEG
# decoder decodes elelem's JPEG images: ext/ggml-sys/native/stb_jpeg.c) and its miniaudio (its
# MP3 and FLAC decoders decode elelem's MP3 and FLAC audio: ext/ggml-sys/native/miniaudio_decode.c)
# out of the pinned llama-cpp-sys-2 package
# (downloaded and checksum-verified by cargo through vendor/fetch/Cargo.lock)
# into the git-ignored vendor/ggml.
module VendorGgml
  ROOT = File.expand_path("..", __dir__)
  DEST = File.join(ROOT, "vendor", "ggml")
  MANIFEST = File.join(ROOT, "vendor", "fetch", "Cargo.toml")
  PACKAGE = "llama-cpp-sys-2"
  VERSION = "0.1.161"
  # Only what ggml-base and the CPU backend compile from (see ext/ggml-sys/build.rs).
  CPU_SKIP = %w[kleidiai spacemit].freeze
  # The RPC backend's TCP transport (its RDMA ones are left out: no verbs library is linked).
  RPC_SOURCES = %w[ggml-rpc.cpp transport.cpp transport.h].freeze
  # The Vulkan backend: its sources and its shaders (compiled by ext/ggml-sys/build.rs when asked).
  VULKAN = "ggml-vulkan"
  # llama.cpp's copy of stb_image, as mtmd-helper includes it.
  STB_IMAGE = File.join("stb", "stb_image.h")
  # llama.cpp's copy of miniaudio, as mtmd-helper includes it.
  MINIAUDIO = File.join("miniaudio", "miniaudio.h")

  module_function

  def package_dir
    system("cargo", "fetch", "--locked", "--manifest-path", MANIFEST, exception: true)
    meta = JSON.parse(IO.popen(["cargo", "metadata", "--locked", "--format-version", "1",
                                "--manifest-path", MANIFEST], &:read))
    pkg = meta.fetch("packages").find { |p| p["name"] == PACKAGE && p["version"] == VERSION }
    raise "cargo metadata does not list #{PACKAGE} #{VERSION}" unless pkg

    File.dirname(pkg.fetch("manifest_path"))
  end

  def run
    return puts("vendor/ggml is present (#{File.read(File.join(DEST, "VERSION")).strip})") if present?

    llama = File.join(package_dir, "llama.cpp")
    staging = "#{DEST}.tmp"
    FileUtils.rm_rf(staging)
    copy_sources(File.join(llama, "ggml"), staging)
    [STB_IMAGE, MINIAUDIO].each do |header|
      FileUtils.mkdir_p(File.join(staging, File.dirname(header)))
      FileUtils.cp(File.join(llama, "vendor", header), File.join(staging, header))
    end
    FileUtils.cp(File.join(llama, "LICENSE"), File.join(staging, "LICENSE"))
    File.write(File.join(staging, "SOURCE"), "#{PACKAGE} #{VERSION} (crates.io), llama.cpp/ggml\n")
    FileUtils.rm_rf(DEST)
    FileUtils.mv(staging, DEST)
    puts "vendored ggml #{File.read(File.join(DEST, "VERSION")).strip} from #{PACKAGE} #{VERSION} into vendor/ggml"
  end

  def copy_sources(ggml, staging)
    FileUtils.mkdir_p(File.join(staging, "src"))
    FileUtils.cp_r(File.join(ggml, "include"), staging)
    Dir[File.join(ggml, "src", "*.{c,cpp,h}")].each { |f| FileUtils.cp(f, File.join(staging, "src")) }
    copy_cpu_backend(File.join(ggml, "src", "ggml-cpu"), File.join(staging, "src", "ggml-cpu"))
    FileUtils.mkdir_p(File.join(staging, "src", "ggml-rpc"))
    RPC_SOURCES.each { |f| FileUtils.cp(File.join(ggml, "src", "ggml-rpc", f), File.join(staging, "src", "ggml-rpc")) }
    FileUtils.cp_r(File.join(ggml, "src", VULKAN), File.join(staging, "src", VULKAN))
    File.write(File.join(staging, "VERSION"), "#{ggml_version(ggml)}\n")
  end

  def present?
    File.exist?(File.join(DEST, "VERSION")) && File.exist?(File.join(DEST, "include", "ggml.h")) &&
      RPC_SOURCES.all? { |f| File.exist?(File.join(DEST, "src", "ggml-rpc", f)) } &&
      File.exist?(File.join(DEST, "src", VULKAN, "ggml-vulkan.cpp")) &&
      [STB_IMAGE, MINIAUDIO].all? { |header| File.exist?(File.join(DEST, header)) }
  end

  def copy_cpu_backend(from, to)
    FileUtils.mkdir_p(to)
    Dir.children(from).each do |entry|
      next if CPU_SKIP.include?(entry) || entry == "CMakeLists.txt" || entry == "cmake"

      FileUtils.cp_r(File.join(from, entry), to)
    end
  end

  def ggml_version(src)
    cmake = File.read(File.join(src, "CMakeLists.txt"))
    %w[MAJOR MINOR PATCH].map { |part| cmake[/set\(GGML_VERSION_#{part} (\d+)\)/, 1] }.join(".")
  end
end
