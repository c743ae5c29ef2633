# frozen_string_literal: true

require_relative "node_packages"

# OpenAI's official JavaScript client from npm, version-pinned, in a folder cached under
# ~/.cache/elelem: the Node client the server spec talks to `elelem serve` with
# (spec/support/openai_client.mjs).
module OpenAIJs
  VERSION = "7.59.0"
  # What openai 7.59.0 installs: itself alone (`npm view openai@7.59.0 dependencies` lists
  # none; its peers, ws, zod and the cloud SDKs, are all optional and left out).
  PACKAGES = %W[openai@#{VERSION}].freeze
  DIR = File.join(Dir.home, ".cache", "elelem", "openai-js-#{VERSION}")

  module_function

  # The node_modules folder holding the client; installs it on first use.
  def modules
    NodePackages.modules(DIR, PACKAGES)
  end
end
