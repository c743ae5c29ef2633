# frozen_string_literal: true

require_relative "hub/reference"
require_relative "hub/choice"
require_relative "hub/cache"
require_relative "hub/status"
require_relative "hub/client"
require_relative "hub/progress"
require_relative "hub/download"
require_relative "hub/resolver"

module Elelem
  # Models by their Hugging Face names, downloaded into the Hub's own cache on first use:
  #
  #   Elelem.open("hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M")  # the repo's Q4_K_M GGUF
  #   Elelem.open("hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q8_0.gguf")
  #   Elelem::Hub.pull("hf:org/repo:Q8_0")  # every part, for `elelem pull`
  #
  # A tag picks the file as llama.cpp's `-hf` does ({Choice}); with none, Q4_K_M, else Q8_0,
  # else the first GGUF. Files live where huggingface_hub keeps them ({Cache}), so either finds
  # what the other downloaded. The environment is huggingface_hub's: `HF_ENDPOINT`, `HF_TOKEN`
  # (or the token file `huggingface-cli login` writes), `HF_HUB_CACHE` / `HF_HOME`, `HF_HUB_OFFLINE`.
  module Hub
    # The Hub, unless `HF_ENDPOINT` names another.
    DEFAULT_ENDPOINT = "https://huggingface.co"
    # The branch a reference follows.
    REVISION = "main"
    # The values that switch a flag such as `HF_HUB_OFFLINE` on (huggingface_hub's `_is_true`).
    TRUTHY = %w[1 ON YES TRUE].freeze

    class << self
      # Whether `name` is a Hugging Face reference: `hf:...`, or `org/repo/file.gguf` where no
      # local file has that name.
      # @param name [Object]
      # @return [Boolean]
      def reference?(name)
        return false unless name.is_a?(String)

        prefixed?(name) || (Reference.unprefixed?(name) && !File.exist?(name))
      end

      # Downloads (where missing) every part of the model a reference names.
      # @param name [String] see {reference?}
      # @param out [IO, nil] where notes and the progress bar (on a terminal) go
      # @return [Array<String>] the files in the cache, in part order
      # @raise [Elelem::HubError] (a subclass saying which) when it cannot
      def pull(name, out: $stderr)
        resolving(name) { |ref| Resolver.new(out).pull(ref) }
      end

      # The file to load for a reference, downloaded on first use.
      # @param (see pull)
      # @return [String] the file in the cache
      # @raise [Elelem::HubError] as {pull}, and for a multi-part GGUF, which elelem cannot load
      def path(name, out: $stderr)
        resolving(name) { |ref| Resolver.new(out).path(ref) }
      end

      # @return [String] the cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
      #   `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`
      def cache_dir
        File.expand_path(env("HF_HUB_CACHE") || env("HUGGINGFACE_HUB_CACHE") || File.join(home, "hub"))
      end

      # @return [String] the Hub's base URL: `$HF_ENDPOINT` or {DEFAULT_ENDPOINT}
      def endpoint
        (env("HF_ENDPOINT") || DEFAULT_ENDPOINT).chomp("/")
      end

      # @return [String, nil] `$HF_TOKEN`, else the token file (`$HF_TOKEN_PATH`, else `$HF_HOME/token`)
      def token
        return env("HF_TOKEN") if env("HF_TOKEN")

        file = File.expand_path(env("HF_TOKEN_PATH") || File.join(home, "token"))
        saved = File.file?(file) ? File.read(file).strip : ""
        saved.empty? ? nil : saved
      end

      # @return [Boolean] whether `HF_HUB_OFFLINE` keeps to the cache
      def offline?
        TRUTHY.include?(ENV.fetch("HF_HUB_OFFLINE", "").strip.upcase)
      end

      private

      def prefixed?(name)
        Reference::PREFIXES.any? { |p| name.start_with?(p) }
      end

      # A name without `hf:` may have been meant as a local file: its errors say both.
      def resolving(name)
        yield Reference.parse(name)
      rescue HubError => e
        raise if prefixed?(name)

        raise e.class, "#{name}: no such file, and as a Hugging Face reference: #{e.message}"
      end

      def home
        env("HF_HOME") || File.join(env("XDG_CACHE_HOME") || File.join(Dir.home, ".cache"), "huggingface")
      end

      def env(name)
        value = ENV.fetch(name, nil)
        value unless value.nil? || value.strip.empty?
      end
    end
  end
end
