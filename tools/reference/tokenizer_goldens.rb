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
#   MODEL.VARIANT.jsonl, MODEL.VARIANT.detok.jsonl
#                         the same with metadata overridden (VARIANTS below), so
#                         paths these two vocabularies do not take get checked
# All of them come from the driver, tools/reference/reference.cpp.
#
# Environment: ELELEM_REFERENCE_DIR (default tmp/reference, holding
# elelem-reference), ELELEM_MODEL_DIR (default ~/.cache/elelem/models).

require "fileutils"
require "json"
require "open3"

ROOT = File.expand_path("../..", __dir__)
FIXTURES = File.join(ROOT, "spec/fixtures/tokenizer")
REFERENCE = ENV.fetch("ELELEM_REFERENCE_DIR", File.join(ROOT, "tmp/reference"))
MODEL_DIR = ENV.fetch("ELELEM_MODEL_DIR", File.join(Dir.home, ".cache/elelem/models"))
WORK = File.join(ROOT, "tmp/tokenizer-goldens")

MODELS = {
  "qwen2.5-coder-0.5b" => "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
  "gemma-3-270m" => "gemma-3-270m-q4_k_m.gguf"
}.freeze

# Metadata overrides, per model, that exercise other paths of the same code.
VARIANTS = {
  "gemma-3-270m" => {
    "space-prefix" => { "tokenizer.ggml.add_space_prefix" => true }
  },
  "qwen2.5-coder-0.5b" => {
    "bos-eos" => { "tokenizer.ggml.add_bos_token" => true, "tokenizer.ggml.add_eos_token" => true }
  }
}.freeze

def run(*cmd)
  out, err, status = Open3.capture3(*cmd)
  abort "#{cmd.join(" ")} failed:\n#{err}" unless status.success?
  out
end

def parse_ids(text)
  text.lines(chomp: true).map { |line| line.split.map { |id| Integer(id) } }
end

def write_jsonl(path, rows)
  File.write(path, rows.map { |r| "#{JSON.generate(r)}\n" }.join)
end

# The goldens of one model.
class ModelGoldens
  def initialize(name, model, corpus, tools)
    @name = name
    @model = model
    @corpus = corpus
    @hex_file, @driver = tools.values_at(:hex_file, :driver)
  end

  def write
    ids = tokenize(1, 1, [])
    write_jsonl(fixture("jsonl"), ids)
    write_jsonl(fixture("raw.jsonl"), tokenize(0, 0, []))
    write_jsonl(fixture("detok.jsonl"), detokenize(ids, []))
    VARIANTS.fetch(@name).each do |variant, settings|
      options = settings.flat_map { |key, value| ["-o", "#{key}=#{value}"] }
      rows = tokenize(1, 1, options)
      write_jsonl(fixture("#{variant}.jsonl"), rows)
      write_jsonl(fixture("#{variant}.detok.jsonl"), detokenize(rows, options))
    end
    File.write(fixture("vocab.json"), "#{JSON.pretty_generate(vocab_facts)}\n")
    puts "#{@name}: #{@corpus.size} strings, #{ids.sum(&:size)} tokens"
  end

  private

  def fixture(suffix)
    File.join(FIXTURES, "#{@name}.#{suffix}")
  end

  def checked(rows)
    abort "#{@name}: #{rows.size} lines for #{@corpus.size} strings" unless rows.size == @corpus.size
    rows
  end

  def tokenize(add_special, parse_special, options)
    checked(parse_ids(run(@driver, "tokenize", @model, @hex_file, add_special.to_s, parse_special.to_s, *options)))
  end

  def detokenize(rows, options)
    ids_file = File.join(WORK, "#{@name}.ids")
    File.write(ids_file, rows.map { |row| "#{row.join(" ")}\n" }.join)
    checked(run(@driver, "detokenize", @model, ids_file, *options).lines(chomp: true).map { |l| l.split(/ /, -1) })
  end

  def vocab_facts
    facts = run(@driver, "vocab", @model).lines(chomp: true).to_h { |l| [l.split.first, l.split.drop(1)] }
    {
      "n_vocab" => Integer(facts.fetch("n_vocab")[0]),
      "bos" => Integer(facts.fetch("bos")[0]),
      "eos" => Integer(facts.fetch("eos")[0]),
      "add_bos" => facts.fetch("add_bos")[0] == "1",
      "add_eos" => facts.fetch("add_eos")[0] == "1",
      "eog" => facts.fetch("eog").map { |id| Integer(id) },
      "piece_block" => 4096,
      "pieces_special_0" => facts.fetch("pieces_special_0"),
      "pieces_special_1" => facts.fetch("pieces_special_1")
    }
  end
end

driver = File.join(REFERENCE, "elelem-reference")
abort "no reference driver at #{driver}" unless File.executable?(driver)
FileUtils.mkdir_p(WORK)
corpus = File.readlines(File.join(FIXTURES, "corpus.jsonl"), chomp: true).map { |l| JSON.parse(l) }
hex_file = File.join(WORK, "corpus.hex")
File.write(hex_file, corpus.map { |s| "#{s.unpack1("H*")}\n" }.join)
tools = { hex_file:, driver: }

MODELS.each do |name, file|
  model = File.join(MODEL_DIR, file)
  abort "missing #{model}: run `rake models`" unless File.exist?(model)

  ModelGoldens.new(name, model, corpus, tools).write
end
