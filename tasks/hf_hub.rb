# frozen_string_literal: true

require_relative "python_venv"

# huggingface_hub, the Hub's own Python client, version-pinned with everything it pulls in,
# in a virtual environment cached under ~/.cache/elelem: the spec checks that elelem and it
# find each other's downloads in the shared cache (spec/support/hf_hub_client.py).
module HfHubClient
  VERSION = "2.4.0"
  # What huggingface_hub 2.4.0 installs, pinned, so that the spec's client is the same everywhere.
  PACKAGES = %W[
    huggingface_hub==#{VERSION} anyio==4.16.0 click==8.5.1 filelock==4.3.1 fsspec==2026.9.0 h11==0.16.0
    hf-xet==1.8.0 httpcore2==2.16.2 httpx2==2.16.2 idna==3.20 packaging==26.4 PyYAML==6.0.4 tqdm==4.70.1
    truststore==0.10.5 typing_extensions==4.16.0
  ].freeze

  # The venv's python, with huggingface_hub installed; creates the venv on first use.
  def self.python
    PythonVenv.pinned("huggingface_hub", VERSION, PACKAGES)
  end
end
