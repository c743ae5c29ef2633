# frozen_string_literal: true

require "fileutils"
require "tmpdir"

# What ggml's Vulkan backend needs to build on Debian 12 (script/setup's, unless ELELEM_VULKAN=0): the packages,
# and Vulkan C++ headers recent enough for the pinned ggml-vulkan. Debian 12's (1.3.239) lack
# VK_EXT_layer_settings (`vk::LayerSettingEXT`), which ggml-vulkan.cpp uses; Debian 13's
# `libvulkan-dev` (1.4.309) has it. Its package is fetched with apt from Debian 13's
# archive through a private apt configuration under ~/.cache/elelem (this machine's apt sources
# stay as they are) and unpacked there with `dpkg -x`; ext/ggml-sys/build_vulkan.rs and the
# reference's Vulkan build look for it there. The loader and glslc stay Debian 12's.
module VulkanBuild
  CACHE = File.join(Dir.home, ".cache", "elelem")
  # Debian 12's packages: the loader and headers, the shader compiler, CMake's SPIR-V headers
  # (for the reference's build), Mesa's drivers (lavapipe, a Vulkan device on the CPU), vulkaninfo.
  PACKAGES = %w[libvulkan-dev glslc spirv-headers mesa-vulkan-drivers vulkan-tools].freeze
  HEADERS_PACKAGE = "libvulkan-dev"
  SUITE = "trixie"
  MIRROR = ENV.fetch("ELELEM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
  # Mesa's lavapipe, as ggml-vulkan names its device.
  LAVAPIPE = /llvmpipe/

  module_function

  # The first folder of headers with `vulkan/vulkan.hpp` recent enough for ggml-vulkan, in
  # the order ext/ggml-sys/build_vulkan.rs looks: $ELELEM_VULKAN_INCLUDE, unpacked ones
  # (newest first), /usr/include.
  # @return [String, nil]
  def headers
    candidates = [ENV.fetch("ELELEM_VULKAN_INCLUDE", nil),
                  *Dir[File.join(CACHE, "vulkan-headers-*", "usr", "include")].reverse, "/usr/include"]
    candidates.compact.find do |dir|
      file = File.join(dir, "vulkan", "vulkan_structs.hpp")
      File.exist?(file) && File.read(file).include?("struct LayerSettingEXT")
    end
  end

  # Unpacks Debian 13's Vulkan headers unless recent enough ones are there.
  # @return [String] their folder
  def ensure_headers!
    found = headers
    return found if found

    apt = File.join(CACHE, "#{SUITE}-apt")
    %w[lists/partial cache/archives/partial debs].each { |d| FileUtils.mkdir_p(File.join(apt, d)) }
    File.write(File.join(apt, "sources.list"), "deb #{MIRROR} #{SUITE} main\n")
    options = ["-o", "Dir::Etc::SourceList=#{apt}/sources.list", "-o", "Dir::Etc::SourceParts=/dev/null",
               "-o", "Dir::State::Lists=#{apt}/lists", "-o", "Dir::Cache=#{apt}/cache"]
    system("apt-get", *options, "update", "-qq", exception: true)
    Dir.chdir(File.join(apt, "debs")) { system("apt-get", *options, "download", HEADERS_PACKAGE, exception: true) }
    deb = Dir[File.join(apt, "debs", "#{HEADERS_PACKAGE}_*.deb")].max
    version = File.basename(deb)[/_([\d.]+)-/, 1]
    dest = File.join(CACHE, "vulkan-headers-#{version}")
    system("dpkg", "-x", deb, dest, exception: true)
    found = headers or raise "#{deb} unpacked into #{dest}, but its headers lack VK_EXT_layer_settings"
    # A build made without them runs its build script again (which watches this file), and finds them.
    FileUtils.touch(File.join(__dir__, "..", "ext", "ggml-sys", "build_vulkan.rs"))
    found
  end

  # The Vulkan device lavapipe is when ggml-vulkan is told to use it (it leaves out devices of
  # type CPU otherwise): its description, or nil when Mesa's lavapipe is not installed.
  # @return [String, nil]
  def lavapipe
    return @lavapipe if defined?(@lavapipe)

    out = IO.popen(["vulkaninfo", "--summary"], err: File::NULL, &:read)
    @lavapipe = out[/deviceName\s*=\s*(llvmpipe[^\n]*)/, 1]&.strip
  rescue SystemCallError
    @lavapipe = nil
  end
end
