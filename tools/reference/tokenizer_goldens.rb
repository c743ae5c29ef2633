#!/usr/bin/env ruby
# frozen_string_literal: true

# Tokenizer goldens from the reference llama.cpp, never from elelem:
#
#   ruby tools/reference/tokenizer_goldens.rb
#
# For each model and spec/fixtures/tokenizer/corpus.jsonl (one JSON string per
# line) it writes, under spec/fixtures/tokenizer/:
#   MODEL.jsonl           ids from `elelem-reference tokenize` (add_special=1, parse_special=1)
#   MODEL.raw.jsonl       ids with add_special=0, parse_special=0
#   MODEL.detok.jsonl     [hex(detokenize(ids, special=0)), hex(... special=1)] of the MODEL.jsonl ids
#   MODEL.vocab.json      n_vocab, bos, eos, add_bos, add_eos, EOG ids, piece digests
# The last two come from tools/reference/tokenizer_probe.cpp, compiled here
# against the reference's libllama.
#
# Environment: ELELEM_REFERENCE_DIR (default tmp/reference, holding
# elelem-reference and bin/libllama.so), ELELEM_MODEL_DIR (default
# ~/.cache/elelem/models), LLAMA_CPP_DIR (default: the pinned llama-cpp-sys-2
# sources in the cargo registry).

require "fileutils"
require "json"
require "open3"

ROOT = File.expand_path("../..", __dir__)
FIXTURES = File.join(ROOT, "spec/fixtures/tokenizer")
REFERENCE = ENV.fetch("ELELEM_REFERENCE_DIR", File.join(ROOT, "tmp/reference"))
MODEL_DIR = ENV.fetch("ELELEM_MODEL_DIR", File.join(Dir.home, ".cache/elelem/models"))
LLAMA_CPP = ENV.fetch("LLAMA_CPP_DIR", File.join(
  ENV.fetch("CARGO_HOME", File.join(Dir.home, ".cargo")),
  "registry/src/index.crates.io-1949cf8c6b5b557f/llama-cpp-sys-2-0.1.161/llama.cpp"
))
WORK = File.join(ROOT, "tmp/tokenizer-goldens")

MODELS = {
  "qwen2.5-coder-0.5b" => "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
  "gemma-3-270m" => "gemma-3-270m-q4_k_m.gguf",
}.freeze

def run(*cmd)
  out, err, status = Open3.capture3(*cmd)
  abort "#{cmd.join(' ')} failed:\n#{err}" unless status.success?
  out
end

def build_probe
  probe = File.join(WORK, "tokenizer_probe")
  lib = File.join(REFERENCE, "bin")
  run("g++", "-O1", "-std=c++17", "-o", probe, File.join(__dir__, "tokenizer_probe.cpp"),
      "-I", File.join(LLAMA_CPP, "include"), "-I", File.join(LLAMA_CPP, "ggml/include"),
      "-L", lib, "-lllama", "-Wl,-rpath,#{lib}")
  probe
end

def write_jsonl(path, rows)
  File.write(path, rows.map { |r| JSON.generate(r) + "\n" }.join)
end

driver = File.join(REFERENCE, "elelem-reference")
abort "no reference driver at #{driver}" unless File.executable?(driver)
FileUtils.mkdir_p(WORK)
corpus = File.readlines(File.join(FIXTURES, "corpus.jsonl"), chomp: true).map { |l| JSON.parse(l) }
hex_file = File.join(WORK, "corpus.hex")
File.write(hex_file, corpus.map { |s| s.unpack1("H*") + "\n" }.join)
probe = build_probe

MODELS.each do |name, file|
  model = File.join(MODEL_DIR, file)
  abort "missing #{model}: run `rake models`" unless File.exist?(model)

  tokenize = lambda do |add_special, parse_special|
    lines = run(driver, "tokenize", model, hex_file, add_special.to_s, parse_special.to_s).lines(chomp: true)
    abort "#{name}: #{lines.size} lines for #{corpus.size} strings" unless lines.size == corpus.size
    lines.map { |l| l.split.map { |id| Integer(id) } }
  end
  ids = tokenize.call(1, 1)
  write_jsonl(File.join(FIXTURES, "#{name}.jsonl"), ids)
  write_jsonl(File.join(FIXTURES, "#{name}.raw.jsonl"), tokenize.call(0, 0))

  ids_file = File.join(WORK, "#{name}.ids")
  File.write(ids_file, ids.map { |row| row.join(" ") + "\n" }.join)
  detok = run(probe, "detokenize", model, ids_file).lines(chomp: true).map { |l| l.split(/ /, -1) }
  abort "#{name}: detokenize gave #{detok.size} lines" unless detok.size == corpus.size
  write_jsonl(File.join(FIXTURES, "#{name}.detok.jsonl"), detok)

  facts = run(probe, "vocab", model).lines(chomp: true).to_h { |l| k, *v = l.split; [k, v] }
  vocab = {
    "n_vocab" => Integer(facts.fetch("n_vocab")[0]),
    "bos" => Integer(facts.fetch("bos")[0]),
    "eos" => Integer(facts.fetch("eos")[0]),
    "add_bos" => facts.fetch("add_bos")[0] == "1",
    "add_eos" => facts.fetch("add_eos")[0] == "1",
    "eog" => facts.fetch("eog").map { |id| Integer(id) },
    "piece_block" => 4096,
    "pieces_special_0" => facts.fetch("pieces_special_0"),
    "pieces_special_1" => facts.fetch("pieces_special_1"),
  }
  File.write(File.join(FIXTURES, "#{name}.vocab.json"), JSON.pretty_generate(vocab) + "\n")
  puts "#{name}: #{corpus.size} strings, #{ids.sum(&:size)} tokens"
end
