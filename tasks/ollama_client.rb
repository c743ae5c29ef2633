# frozen_string_literal: true

require_relative "python_venv"
require_relative "node_packages"

# Ollama's official clients, version-pinned with everything they pull in and cached under
# ~/.cache/elelem: the Python package from PyPI and the JavaScript one from npm, which the
# Ollama spec talks to `elelem serve` with (spec/support/ollama_client.py and .js).
module OllamaClient
  VERSION = "0.6.3"
  # What ollama 0.6.3 installs from PyPI, pinned.
  PACKAGES = %W[
    ollama==#{VERSION} annotated-types==0.8.0 anyio==4.16.0 certifi==2026.10.19.post1 h11==0.16.0
    httpcore==1.0.9 httpx==0.28.1 idna==3.20 pydantic==2.14.4 pydantic_core==2.50.5 typing-inspection==0.4.5
    typing_extensions==4.16.0
  ].freeze
  # The npm package and its one dependency, pinned.
  NODE_VERSION = "0.6.4"
  NODE_PACKAGES = %W[ollama@#{NODE_VERSION} whatwg-fetch@3.6.20].freeze
  NODE_DIR = File.join(Dir.home, ".cache", "elelem", "ollama-js-#{NODE_VERSION}")

  module_function

  # The venv's python, with ollama installed; creates the venv on first use.
  def python
    PythonVenv.pinned("ollama", VERSION, PACKAGES)
  end

  # The node_modules folder holding the ollama npm package; installs it on first use.
  def node_modules
    NodePackages.modules(NODE_DIR, NODE_PACKAGES)
  end
end
