# frozen_string_literal: true

require "fileutils"
require "json"

module Elelem
  class Golden
    # A golden file's JSON as it is read and written: the format checked on reading, the
    # fields in one order on writing.
    module Document
      # The fields a golden file holds, in the order they are written.
      FIELDS = %w[format model n_ctx n_threads parallel flash_attn cache_type_k cache_type_v rpc_workers n_gpu_layers
                  kv_offload main_gpu gpu cases recordings].freeze

      module_function

      # @return [Hash] a file with no cases yet
      def empty = { "format" => FORMAT, "cases" => [], "recordings" => {} }

      # @param path [String] a golden file
      # @return [Hash] its contents
      # @raise [Elelem::Error] when `path` is not a golden file
      def read(path)
        doc = JSON.parse(File.read(path))
        raise Error, "#{path} is not an elelem golden file (#{FORMAT})" unless doc["format"] == FORMAT

        doc
      end

      # Writes only what changed, so checking in CI leaves a committed file as it is.
      # @param doc [Hash] the file's contents ({FIELDS}; any other key is left out)
      # @return [void]
      def write(path, doc)
        text = "#{JSON.pretty_generate(doc.slice(*FIELDS))}\n"
        return if File.exist?(path) && File.read(path) == text

        FileUtils.mkdir_p(File.dirname(path))
        File.write(path, text)
      end
    end
  end
end
