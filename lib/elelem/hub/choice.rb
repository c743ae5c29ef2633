# frozen_string_literal: true

module Elelem
  module Hub
    # Which GGUF of a repository a reference means, by llama.cpp's rules for `-hf org/repo[:tag]`
    # (common/download.cpp, `find_best_model`, `get_gguf_split_info`,
    # `common_download_get_all_parts`), so that a name picks the same file in both.
    module Choice
      # The tags tried, in order, when a reference names none.
      DEFAULT_TAGS = %w[Q4_K_M Q8_0].freeze
      # Files that sit beside a model but are not one (projectors, importance matrices, draft heads).
      NOT_MODELS = %w[mmproj imatrix mtp- eagle3- dflash- dspark-].freeze
      # The part suffix of a multi-part GGUF, as llama.cpp's gguf-split names the parts.
      SPLIT = /-(\d{5})-of-(\d{5})\.gguf\z/i

      module_function

      # The file that `tag` picks among `files`: the first model GGUF whose path has the tag
      # followed by `.` or `-` (any case), the first part of a multi-part one; with no tag,
      # Q4_K_M, else Q8_0, else the first model GGUF.
      # @param files [Array<String>] the repository's file paths
      # @param tag [String, nil]
      # @return [String, nil]
      def best(files, tag)
        models = files.select { |f| first_part?(f) && model?(f) }
        return tagged(models, tag) if tag

        DEFAULT_TAGS.lazy.filter_map { |t| tagged(models, t) }.first || models.first
      end

      # @param files [Array<String>]
      # @param tag [String]
      # @return [String, nil] the first file whose path has `tag` followed by `.` or `-`, in any case
      def tagged(files, tag)
        files.find { |f| f.match?(/#{Regexp.escape(tag)}[.-]/i) }
      end

      # Every part of the model `file` belongs to, in order (`file` alone unless multi-part).
      # @param file [String]
      # @return [Array<String>]
      def parts(file)
        count = part_count(file)
        return [file] if count == 1

        (1..count).map { |i| file.sub(SPLIT, format("-%<i>05d-of-%<count>05d.gguf", i:, count:)) }
      end

      # @param file [String]
      # @return [Integer] how many parts the GGUF has (1 unless its name says `-0000i-of-0000n`)
      def part_count(file)
        file[SPLIT, 2].to_i.clamp(1, nil)
      end

      # @param file [String]
      # @return [Boolean] a GGUF holding a model, not one of {NOT_MODELS}
      def model?(file)
        name = File.basename(file)
        file.end_with?(".gguf") && NOT_MODELS.none? { |word| name.include?(word) }
      end

      # @param file [String]
      # @return [Boolean] a one-part GGUF, or the first part of a multi-part one
      def first_part?(file)
        file[SPLIT, 1].nil? || file[SPLIT, 1].to_i == 1
      end
    end
  end
end
