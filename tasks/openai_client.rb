# frozen_string_literal: true

require_relative "python_venv"

# OpenAI's official Python client from PyPI, version-pinned with everything it pulls in,
# in a virtual environment cached under ~/.cache/elelem: the real client the server spec
# talks to `elelem serve` with (spec/support/openai_client.py).
module OpenAIClient
  VERSION = "3.51.0"
  # What openai 3.51.0 installs, pinned, so that the spec's client is the same everywhere.
  PACKAGES = %W[
    openai==#{VERSION} annotated-types==0.8.0 anyio==4.16.0 h11==0.16.0 httpcore2==2.16.2 httpx2==2.16.2
    idna==3.20 jiter==0.19.0 pydantic==2.14.4 pydantic_core==2.50.5 sniffio==1.3.1 truststore==0.10.5
    typing-inspection==0.4.5 typing_extensions==4.16.0
  ].freeze

  module_function

  # The venv's python, with openai installed; creates the venv on first use.
  def python
    PythonVenv.pinned("openai", VERSION, PACKAGES)
  end
end
