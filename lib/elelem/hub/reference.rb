# frozen_string_literal: true

module Elelem
  module Hub
    # A model as people name it on the Hugging Face Hub: a repository and either a file in it
    # or a quantization tag (llama.cpp's `-hf org/repo:Q4_K_M`).
    #
    #   Reference.parse("hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M")
    #   # => repo "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", tag "Q4_K_M", file nil
    #   Reference.parse("hf:org/repo/sub/model-q8_0.gguf")
    #   # => repo "org/repo", file "sub/model-q8_0.gguf", tag nil
    Reference = Struct.new(:repo, :file, :tag, keyword_init: true) do
      # @return [String] the reference as `hf:` spells it
      def to_s
        "hf:#{repo}#{file ? "/#{file}" : ""}#{tag ? ":#{tag}" : ""}"
      end
    end

    # How a reference is written: what `hf:` is followed by.
    class Reference
      # The prefixes that mark a reference (`hf://` is fsspec's spelling of the same).
      PREFIXES = ["hf://", "hf:"].freeze
      # One part of a repository id as the Hub allows it: letters, digits, `_`, `-` and `.`,
      # neither first nor last a `-` or `.` (huggingface_hub's `validate_repo_id`).
      REPO_PART = /\A[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?\z/
      # The longest repository id the Hub takes.
      MAX_REPO_LENGTH = 96
      # A quantization tag, as llama.cpp matches it in file names (`Q4_K_M`, `IQ2_XS`, `F16`).
      TAG = /\A[A-Za-z0-9_]+\z/
      # The longest file path taken inside a repository.
      MAX_FILE_LENGTH = 1024

      class << self
        # @param name [String] `hf:org/repo`, `hf:org/repo:TAG` or `hf:org/repo/path/file.gguf`
        #   (also without `hf:` when {.unprefixed?})
        # @return [Reference]
        # @raise [Elelem::HubError] a repository id the Hub would refuse, or a file path that
        #   is absolute, climbs out with `..`, or is not a `.gguf`
        def parse(name)
          rest = PREFIXES.reduce(name) { |n, prefix| n.delete_prefix(prefix) }
          org, repo, *path = rest.split("/", -1)
          tag = nil
          repo, tag = repo.split(":", 2) if path.empty? && repo&.include?(":")
          new(repo: checked_repo(name, org, repo), file: checked_file(name, path), tag: checked_tag(name, tag)).freeze
        end

        # Whether `name`, without `hf:`, reads as a file in a Hub repository (`org/repo/file.gguf`,
        # relative, with a valid repository id): the caller has checked that no local file has that name.
        # @param name [String]
        # @return [Boolean]
        def unprefixed?(name)
          org, repo, *path = name.split("/")
          !path.empty? && name.end_with?(".gguf") && [org, repo].all? { |part| repo_part?(part) } &&
            path.none? { |part| %w[. ..].include?(part) || part.empty? }
        end

        private

        def repo_part?(part)
          part.match?(REPO_PART) && !part.include?("--") && !part.include?("..")
        end

        def checked_repo(name, org, repo)
          id = "#{org}/#{repo}"
          unless org && repo && repo_part?(org) && repo_part?(repo) && id.size <= MAX_REPO_LENGTH
            raise HubError, "#{name.inspect}: #{id.inspect} is not a Hugging Face repository id (org/name: letters, " \
                            "digits, _ - and ., at most #{MAX_REPO_LENGTH} characters); write hf:org/repo[:QUANT] " \
                            "or hf:org/repo/file.gguf"
          end
          id
        end

        # A file inside the repository: relative, no `.`/`..`/empty parts, a GGUF (the only kind
        # elelem loads), so that no name reaches outside the cache's snapshot folder.
        def checked_file(name, path)
          return nil if path.empty?

          file = path.join("/")
          unless inside?(path, file)
            raise HubError, "#{name.inspect}: #{file.inspect} is not a file path inside a repository (no leading " \
                            "/, no empty, . or .. parts)"
          end
          raise HubError, "#{name.inspect}: #{file.inspect} is not a .gguf file" unless file.end_with?(".gguf")

          file
        end

        def inside?(path, file)
          path.none? { |part| part.empty? || %w[. ..].include?(part) } && !file.match?(/[\\[:cntrl:]]/) &&
            file.size <= MAX_FILE_LENGTH
        end

        def checked_tag(name, tag)
          return nil if tag.nil?
          return tag if tag.match?(TAG)

          raise HubError, "#{name.inspect}: #{tag.inspect} is not a quantization tag (such as Q4_K_M or Q8_0)"
        end
      end
    end
  end
end
