#!/usr/bin/env ruby
# frozen_string_literal: true

# Round-trip goldens from the reference llama.cpp, never from elelem:
#
#   ruby tools/reference/round_trip_goldens.rb
#
# For every vocabulary of llama.cpp's tokenizer suite (vendor/llama.cpp/models,
# `rake peer_suite`) it runs `elelem-reference roundtrip`, the round trips of
# llama.cpp's test-tokenizer-1-bpe/-spm run to the end, and writes
# spec/fixtures/tokenizer/llama_cpp_round_trips.jsonl: per vocabulary, how many
# tokens and code points fail to come back and a digest of which.
#
# Environment: ELELEM_REFERENCE_DIR (default tmp/reference, holding
# elelem-reference).

require "json"
require "open3"

ROOT = File.expand_path("../..", __dir__)
REFERENCE = ENV.fetch("ELELEM_REFERENCE_DIR", File.join(ROOT, "tmp/reference"))
MODELS = File.join(ROOT, "vendor/llama.cpp/models")
OUT = File.join(ROOT, "spec/fixtures/tokenizer/llama_cpp_round_trips.jsonl")

vocabs = Dir[File.join(MODELS, "ggml-vocab-*.gguf")]
abort "no vocabularies in #{MODELS}: run `rake peer_suite`" if vocabs.empty?

lines = vocabs.map do |path|
  out, err, status = Open3.capture3(File.join(REFERENCE, "elelem-reference"), "roundtrip", path)
  abort "roundtrip #{path} failed:\n#{err}" unless status.success?
  counts = out.lines.to_h do |line|
    name, n, digest = line.split
    [name, [Integer(n), digest]]
  end
  JSON.generate({ "vocab" => File.basename(path), "tokens" => counts.fetch("tokens"),
                  "code_points" => counts.fetch("code_points") })
end
File.write(OUT, "#{lines.join("\n")}\n")
puts "wrote #{OUT}: #{lines.size} vocabularies"
