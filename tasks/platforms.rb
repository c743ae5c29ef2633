# frozen_string_literal: true

require "English"
require "fileutils"
require "rbconfig"

# The platforms and Ruby ABIs the precompiled gems are built for, and the Rubies that
# build and check them. This machine's own Ruby is Debian 12's 3.1 on x86-64; every other
# one comes from Debian's packages, in a root of its own under ~/.cache/elelem/roots
# (ELELEM_ROOTS) made by debootstrap, so this machine's apt sources and architectures stay
# as they are: Debian 13's Ruby 3.3 on x86-64 runs in a chroot there, and the arm64 Rubies
# run under qemu-user with their root as its library prefix.
module Platforms
  ROOT = File.expand_path("..", __dir__)
  ROOTS = ENV.fetch("ELELEM_ROOTS") { File.join(Dir.home, ".cache", "elelem", "roots") }
  MIRROR = ENV.fetch("ELELEM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
  # The Ruby ABIs the platform gems carry, and the Debian release whose Ruby each one is.
  RUBIES = { "3.1" => "bookworm", "3.3" => "trixie" }.freeze
  ARCHES = {
    "x86_64-linux" => { rust: "x86_64-unknown-linux-gnu", debian: "amd64", gnu: "x86_64-linux-gnu" },
    "aarch64-linux" => { rust: "aarch64-unknown-linux-gnu", debian: "arm64", gnu: "aarch64-linux-gnu",
                         qemu: "/usr/bin/qemu-aarch64" }
  }.freeze
  # qemu's most capable CPU (SVE, SVE2, i8mm, dot product, half precision), with the SVE
  # vector length of Graviton 3 (Neoverse V1), 256 bits: ggml's SVE kernels branch on it,
  # so it is part of the build profile on aarch64 and goldens hold for one length.
  QEMU_CPU = "max,sve-default-vector-length=32"
  # Enters a chroot with this worktree and elelem's cache (models, goldens) at their own
  # paths, in a mount namespace of its own (the mounts vanish with it). Programs by path:
  # the PATH is the chroot's.
  CHROOT = <<~'SH'
    root=$1; shift
    for dir in /proc /dev /sys; do /usr/bin/mount --rbind "$dir" "$root$dir"; done
    for dir in "$ELELEM_WORKTREE" "$ELELEM_CACHE"; do
      /usr/bin/mkdir -p "$root$dir" && /usr/bin/mount --bind "$dir" "$root$dir"
    done
    exec /usr/sbin/chroot "$root" "$@"
  SH

  # This machine's programs that building and checking a platform's gem need, with the
  # Debian package of each: debootstrap makes the target Rubies' roots (every platform's 3.3
  # and aarch64's 3.1), the cross compilers build for aarch64 and qemu-user runs it.
  TOOLS = {
    "x86_64-linux" => { "/usr/sbin/debootstrap" => "debootstrap" },
    "aarch64-linux" => {
      "/usr/sbin/debootstrap" => "debootstrap",
      "/usr/bin/aarch64-linux-gnu-gcc" => "gcc-aarch64-linux-gnu",
      "/usr/bin/aarch64-linux-gnu-g++" => "g++-aarch64-linux-gnu",
      "/usr/bin/qemu-aarch64" => "qemu-user"
    }
  }.freeze

  module_function

  # Installs the Debian packages of `platform`'s tools that are missing, as script/setup
  # installs its own, and Rust's standard library for its target.
  def ensure_tools!(platform)
    missing = TOOLS.fetch(platform).reject { |program, _| File.executable?(program) }.values.uniq
    unless missing.empty?
      puts "== installing #{missing.join(", ")} (the #{platform} gem's build and check need them)"
      sudo = Process.uid.zero? ? [] : ["sudo"]
      system(*sudo, "apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq", exception: true)
      system({ "DEBIAN_FRONTEND" => "noninteractive" }, *sudo, "apt-get", "-o", "DPkg::Lock::Timeout=600",
             "install", "-y", "-qq", *missing, exception: true)
    end
    rust = arch(platform)[:rust]
    installed = IO.popen(%w[rustup target list --installed], &:read).split
    system("rustup", "target", "add", rust, exception: true) unless installed.include?(rust)
  end

  def host_platform = RUBY_PLATFORM.sub(/-gnu\z/, "")

  def host_abi = RUBY_VERSION[/\A\d+\.\d+/]

  def arch(platform)
    ARCHES.fetch(platform) { raise ArgumentError, "no platform #{platform} (known: #{ARCHES.keys.join(", ")})" }
  end

  # A Ruby of `abi` for `platform`.
  Target = Struct.new(:platform, :abi) do
    def initialize(platform, abi = Platforms::RUBIES.keys.first)
      Platforms.arch(platform)
      Platforms::RUBIES.fetch(abi) do
        raise ArgumentError, "no Ruby #{abi} (the platform gems carry #{Platforms::RUBIES.keys.join(", ")})"
      end
      super
    end

    def to_s = "Ruby #{abi} on #{platform}"

    def arch = Platforms.arch(platform)

    def host? = platform == Platforms.host_platform && abi == Platforms.host_abi

    def emulated? = platform != Platforms.host_platform

    def root = host? ? "/" : File.join(Platforms::ROOTS, "#{Platforms::RUBIES[abi]}-#{arch[:debian]}")

    # The target Ruby's own RbConfig, inside its root.
    def rbconfig_file = File.join(root, "usr", "lib", arch[:gnu], "ruby", "#{abi}.0", "rbconfig.rb")

    # Makes the root once: Debian's Ruby, its headers (for the build) and libgomp (for
    # llama.cpp's reference, which runs there too).
    def ensure_root!
      return if host? || File.exist?(rbconfig_file)

      suite = Platforms::RUBIES[abi]
      packages = ["ruby", "ruby#{abi}-dev", "libgomp1"]
      puts "== debootstrap #{suite} #{arch[:debian]} into #{root} (#{packages.join(", ")})"
      system("debootstrap", "--variant=minbase", "--arch=#{arch[:debian]}", "--include=#{packages.join(",")}",
             *("--foreign" if emulated?), suite, root, Platforms::MIRROR, exception: true)
      unpack_included if emulated?
    end

    # A foreign debootstrap unpacks the base system only: the other packages wait in apt's
    # cache for a second stage that runs the root's own (arm64) programs. Unpacked is enough
    # for headers and for qemu.
    def unpack_included
      Dir[File.join(root, "var", "cache", "apt", "archives", "*.deb")].each do |deb|
        system("sh", "-c", 'dpkg-deb --fsys-tarfile "$1" | tar -x --keep-directory-symlink -C "$2"', "sh", deb, root,
               exception: true)
      end
    end

    # What cargo needs to build the extension for this Ruby: `RUBY` that rb-sys asks for
    # RbConfig (here, this machine's Ruby reading the target's rbconfig.rb, as
    # rake-compiler's cross builds do), and the target's linker.
    def cargo_env
      env = { "RUBY" => host? ? RbConfig.ruby : cross_ruby }
      env["CARGO_TARGET_#{arch[:rust].upcase.tr("-", "_")}_LINKER"] = "#{arch[:gnu]}-gcc" if emulated?
      env
    end

    # This Ruby's own folder of cross-build and emulation helpers.
    def cross_dir = File.join(Platforms::ROOT, "tmp", "cross", "#{platform}-#{abi}")

    def cross_ruby
      dir = cross_dir
      FileUtils.mkdir_p(dir)
      version = File.read(rbconfig_file)[/ruby lib version \(([\d.]+)\)/, 1]
      # rbconfig.rb checks RUBY_VERSION from inside module RbConfig: the constant found
      # there first is the target's. Its paths follow the file's location (the root).
      File.write(File.join(dir, "rbconfig.rb"), <<~RUBY)
        module RbConfig
          RUBY_VERSION = #{version.dump}
        end
        load #{rbconfig_file.dump}
      RUBY
      ruby = File.join(dir, "ruby")
      File.write(ruby, "#!/bin/sh\nexec #{RbConfig.ruby} -I #{dir} \"$@\"\n")
      File.chmod(0o755, ruby)
      ruby
    end

    # The command that runs this Ruby, as seen from this machine.
    def ruby_command
      return [RbConfig.ruby] if host?
      return emulator + [File.join(root, "usr", "bin", "ruby#{abi}")] if emulated?

      ["/usr/bin/unshare", "--mount", "/bin/sh", "-c", Platforms::CHROOT, "sh", root, "/usr/bin/ruby#{abi}"]
    end

    def emulator = [arch[:qemu], "-L", root, "-cpu", Platforms::QEMU_CPU]

    # Its `gem` command (Debian names it after the version), as that Ruby sees it.
    def gem_script = host? ? File.join(RbConfig::CONFIG["bindir"], "gem#{abi}") : "/usr/bin/gem#{abi}"

    # What the chroot needs to find this worktree and the cache at their own paths.
    def env
      { "ELELEM_WORKTREE" => Platforms::ROOT, "ELELEM_CACHE" => File.join(Dir.home, ".cache", "elelem") }
    end

    # A wrapper that runs `program`, built for this platform, from this Ruby: under
    # emulation an arm64 program cannot be started by another one (no binfmt here), so it
    # is started by a shell script of this machine's, which runs qemu. One per Ruby: each
    # names its own root (C library), and two Rubies' checks may run at once.
    def runner(program)
      return program unless emulated?

      wrapper = File.join(cross_dir, File.basename(program))
      FileUtils.mkdir_p(File.dirname(wrapper))
      File.write(wrapper, "#!/bin/sh\nexec #{emulator.join(" ")} #{program} \"$@\"\n")
      File.chmod(0o755, wrapper)
      wrapper
    end
  end
end
