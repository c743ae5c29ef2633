# frozen_string_literal: true

require_relative "lib/elelem/version"

Gem::Specification.new do |spec|
  spec.name = "elelem"
  spec.version = Elelem::VERSION
  spec.summary = "Run GGUF language models from Ruby, on ggml, as fast as llama.cpp"
  spec.description = "A native extension in Rust that runs GGUF models (llama, qwen2, qwen3, qwen3moe, gemma2, " \
                     "gemma3, olmo2, granite, smollm3, phi3) on the ggml tensor library's CPU backend, with greedy " \
                     "decoding identical to llama.cpp's."
  spec.authors = ["The elelem developers"]
  spec.license = "MIT"
  spec.homepage = "https://rubygems.org/gems/elelem"
  spec.required_ruby_version = ">= 3.1"
  spec.metadata["rubygems_mfa_required"] = "true"

  # vendor/ggml is git-ignored (fetched by `rake vendor`) but shipped in the gem, so
  # installing a built gem needs no network for ggml: files are globbed, not git-listed.
  spec.files = Dir[
    "lib/**/*.rb", "exe/*", "ext/elelem/*.rb", "ext/*/Cargo.toml", "ext/*/*.{rs,md}", "ext/*/wrapper.h",
    "ext/*/include/*.h", "ext/*/native/*", "ext/*/layouts.hpp", "ext/*/src/**/*.rs", "vendor/ggml/**/*",
    "Cargo.toml", "Cargo.lock",
    "README.md", "CHANGELOG.md", "LICENSE", "docs/*.md"
  ]
  spec.bindir = "exe"
  spec.executables = Dir["exe/*"].map { |f| File.basename(f) }
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/elelem/extconf.rb"]
end
