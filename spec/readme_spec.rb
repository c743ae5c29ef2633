# frozen_string_literal: true

require "spec_helper"
require "stringio"
require_relative "../tasks/readme_architectures"

# The README's Ruby examples run as they are written: each ```ruby block, and where a
# "prints" block follows it, exactly that output. Greedy decoding is deterministic on a
# build profile and the examples are short prompts on the small models, so the text is
# compared whole; printed floats are rounded in the examples themselves.
module ReadmeExamples
  Example = Struct.new(:line, :code, :output, keyword_init: true)

  module_function

  # @return [Array<Example>] the README's ```ruby blocks, each with the plain block
  #   that follows it after a line ending in "prints:" (or nil when none does)
  def all(path = File.join(ROOT, "README.md"))
    lines = File.readlines(path)
    blocks = fenced_blocks(lines)
    blocks.each_with_index.filter_map do |block, i|
      next unless block[:lang] == "ruby"

      after = blocks[i + 1]
      output = after[:body] if after && after[:lang].empty? && prints_between?(lines, block, after)
      Example.new(line: block[:first], code: block[:body], output:)
    end
  end

  # Fenced blocks, each with its language, body and first and last lines; a fence of four
  # backticks may hold lines of three (a console session that prints Markdown).
  def fenced_blocks(lines)
    blocks = []
    open = nil
    lines.each_with_index do |line, i|
      next unless (fence = line.match(/\A(`{3,})(\w*)\s*\z/))

      if open.nil?
        open = { fence: fence[1], lang: fence[2], first: i }
      elsif fence[1] == open[:fence] && fence[2].empty?
        blocks << open.merge(last: i, body: lines[(open[:first] + 1)...i].join)
        open = nil
      end
    end
    blocks
  end

  # Only a short line ending in "prints:" may stand between an example and its output.
  def prints_between?(lines, block, after)
    between = lines[(block[:last] + 1)...after[:first]].map(&:strip).reject(&:empty?)
    between.size == 1 && between.first.match?(/prints\b.*:\z/)
  end

  # Runs the code in a fresh binding and returns what it wrote to $stdout.
  def run(code, line)
    out = StringIO.new
    saved = $stdout
    $stdout = out
    Object.new.instance_eval { binding }.eval(code, "README.md", line)
    out.string
  ensure
    $stdout = saved
  end

  # The known models an example opens by name: they must be downloaded (`rake models`), not
  # fetched in the middle of a spec.
  def models(code)
    Elelem::Models.names.select { |name| code.include?(%("#{name}")) }
  end
end

RSpec.describe "README.md's examples" do
  examples = ReadmeExamples.all

  it "lists the architectures the engine runs (`rake readme` rewrites the table)" do
    expect(ReadmeArchitectures.current).to eq(ReadmeArchitectures.block)
  end

  it "has Ruby examples, the first with its printed output" do
    expect(examples.size).to be >= 5
    expect(examples.first.output).not_to be_nil
  end

  examples.each do |example|
    it "runs the example at README.md:#{example.line + 1}#{" and prints what it says" if example.output}" do
      ReadmeExamples.models(example.code).each { |name| SpecModels.path(name) }
      printed = ReadmeExamples.run(example.code, example.line + 2)
      expect(printed).to eq(example.output) if example.output
    end
  end
end
