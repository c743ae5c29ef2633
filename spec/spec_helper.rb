# frozen_string_literal: true

require "json"
require "elelem"
require "elelem/rspec"

# Our goldens come from the reference llama.cpp only (`rake goldens` records a profile
# the fixtures lack into Golden::CACHE_DIR), never from elelem: recording is switched off.
ENV.delete(Elelem::Golden::RECORD_ENV)

ROOT = File.expand_path("..", __dir__)
SYNTHETIC_DIR = File.join(ROOT, "tmp", "synthetic")

# Helpers shared by the specs: real models must be present (no silent skips).
module SpecModels
  module_function

  def path(name)
    path = Elelem::Models.path(name)
    raise "#{path} is missing: run `rake models` (the test command does)" unless File.exist?(path)

    path
  end

  # A small random-weight model of elelem_engine::canary::synthetic(), written by our writer.
  def synthetic(name)
    path = File.join(SYNTHETIC_DIR, "#{name}.gguf")
    unless File.exist?(path)
      system("cargo", "run", "--quiet", "--release", "--locked", "-p", "elelem-testkit", "--example",
             "write_synthetic", "--", SYNTHETIC_DIR, chdir: ROOT, exception: true)
    end
    path
  end

  def canary
    synthetic("tiny-llama-canary")
  end

  # The hostile-file corpus and its manifest (see elelem_engine::hostile).
  def hostile_corpus
    dir = File.join(ROOT, "tmp", "hostile")
    unless File.exist?(File.join(dir, "manifest.tsv"))
      system("cargo", "run", "--quiet", "--release", "--locked", "-p", "elelem-testkit", "--example",
             "write_hostile_corpus", "--", dir, chdir: ROOT, exception: true)
    end
    dir
  end

  def fixture(name)
    JSON.parse(File.read(File.join(ROOT, "spec", "fixtures", "goldens", "#{name}.json")))
  end

  # The golden files' names (the chat template's fixture is not one).
  def golden_names
    names = Dir[File.join(ROOT, "spec", "fixtures", "goldens", "*.json")].map { |f| File.basename(f, ".json") }
    names.reject { |n| n.start_with?("chat-", "lockstep-") }.sort
  end

  # The lockstep golden files: several sequences decoded together (see tasks/golden.rb).
  def lockstep_names
    Dir[File.join(ROOT, "spec", "fixtures", "goldens", "lockstep-*.json")].map { |f| File.basename(f, ".json") }
  end

  # The model of a golden file: a known model's, or a synthetic one; a `-fa-off` golden
  # is its model's with flash attention off, a `-kv-q8_0` one with a q8_0 KV cache, a `-16k`
  # one in a context of 16,384 tokens.
  def golden_model(name)
    model = name.delete_suffix("-fa-off").delete_suffix("-kv-q8_0").delete_suffix("-16k")
    Elelem::Models.names.include?(model) ? path(model) : synthetic(model)
  end

  def golden(name, dir: nil)
    Elelem::Golden.new(File.join(ROOT, "spec", "fixtures", "goldens", *dir, "#{name}.json"),
                       cache: Elelem::Golden::CACHE_DIR)
  end
end

RSpec.configure do |config|
  config.disable_monkey_patching!
  config.order = :defined
  config.expect_with(:rspec) { |c| c.syntax = :expect }
end
