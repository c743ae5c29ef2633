# frozen_string_literal: true

require "fileutils"

# Puts built libraries in place without touching the files that running processes have
# mapped: the one install step of the extension's Makefile (ext/elelem/extconf.rb), whose
# rules call this file as a command. ext/ggml-sys/build.rs does the same in Rust for the
# copies it makes beside cargo's artifacts.
#
# A copy over the old file (`cp`, `FileUtils.cp`) truncates and rewrites the inode that
# every process with the library loaded has mapped: their code pages become the new build's
# bytes, or past the end of a file being written, and they die of SIGBUS or SIGSEGV (a chat
# template render did, beside a `rake compile`). GNU `install -C` compares, but then unlinks
# and creates (strace): for a moment there is no library to load. A rename over the old name
# is neither: whoever opens the name gets the old file or the new one, whole, and whoever has
# the old one mapped keeps it.
module AtomicInstall
  # What the command line takes.
  USAGE = "usage: atomic_install.rb [--prune GLOB] SOURCE... DEST (a directory for several sources or --prune)"

  module_function

  # Installs +source+ at +dest+ unless +dest+ holds the same bytes already: the bytes go to
  # a temporary file beside +dest+ (a rename is atomic only within one file system), which is
  # then renamed over it. An unchanged build writes nothing, so its file keeps its inode and
  # time stamp.
  #
  # @param source [String] the built file
  # @param dest [String] the file to write, or a directory to put +source+ in under its name
  # @return [Boolean] whether +dest+ was written
  def install(source, dest)
    dest = File.join(dest, File.basename(source)) if File.directory?(dest)
    return false if File.file?(dest) && FileUtils.compare_file(source, dest)

    # The process id keeps two builds running at once from writing the same temporary file.
    temp = "#{dest}.#{Process.pid}.tmp"
    begin
      FileUtils.cp(source, temp)
      File.rename(temp, dest)
    ensure
      FileUtils.rm_f(temp)
    end
    true
  end

  # Installs each of +sources+ at +dest+ ({install}); with +pattern+, then removes what
  # matches it in +dest+ and is not one of them ({prune}).
  #
  # @param sources [Array<String>] the built files
  # @param dest [String] a directory, or the file to write for a single source
  # @param pattern [String, nil] a glob of the files to prune
  # @return [void]
  def install_all(sources, dest, pattern: nil)
    sources.each { |source| install(source, dest) }
    prune(dest, pattern, sources.map { |source| File.basename(source) }) if pattern
  end

  # Removes the files in +dir+ that match +pattern+ but are not in +keep+ (base names): a
  # CPU variant an earlier build made and this one does not. Unlinking, like a rename, leaves
  # a process that has the file mapped alone.
  #
  # @param dir [String] the directory the libraries were installed in
  # @param pattern [String] a glob of the files to consider, e.g. `libggml-cpu-*.so`
  # @param keep [Array<String>] the base names just installed
  # @return [Array<String>] the paths removed
  def prune(dir, pattern, keep)
    stale = Dir.glob(pattern, base: dir).reject { |name| keep.include?(name) }.map { |name| File.join(dir, name) }
    FileUtils.rm_f(stale)
    stale
  end

  # The command line: `ruby atomic_install.rb [--prune GLOB] SOURCE... DEST` ({install_all}).
  # With several sources, or `--prune`, DEST must be a directory.
  #
  # @param args [Array<String>] the arguments
  # @return [void]
  def main(args)
    pattern = args.shift(2).last if args.first == "--prune"
    *sources, dest = args
    abort USAGE if sources.empty? || ((sources.size > 1 || pattern) && !File.directory?(dest))

    install_all(sources, dest, pattern:)
  end
end

AtomicInstall.main(ARGV) if $PROGRAM_NAME == __FILE__
