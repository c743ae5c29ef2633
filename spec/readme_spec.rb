# frozen_string_literal: true

require "spec_helper"
require "stringio"
require_relative "../tasks/architecture_lists"

# The Ruby examples of the README, docs/API.md and docs/MEDIA.md run as they are written: each ```ruby
# block, and where a "prints" block follows it, exactly that output. Greedy decoding is deterministic on a
# build profile and the examples are short prompts on the small models, so the text is
# compared whole; printed floats are rounded in the examples themselves.
module ReadmeExamples
  Example = Struct.new(:file, :line, :code, :output, keyword_init: true)
  PAGES = %w[README.md docs/API.md docs/MEDIA.md].freeze

  module_function

  # @return [Array<Example>] the page's ```ruby blocks, each with the plain block
  #   that follows it after a line ending in "prints:" (or nil when none does)
  def all(page)
    lines = File.readlines(File.join(ROOT, page))
    blocks = fenced_blocks(lines)
    blocks.each_with_index.filter_map do |block, i|
      next unless block[:lang] == "ruby"

      after = blocks[i + 1]
      output = after[:body] if after && after[:lang].empty? && prints_between?(lines, block, after)
      Example.new(file: page, line: block[:first], code: block[:body], output:)
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
  def run(example)
    out = StringIO.new
    saved = $stdout
    $stdout = out
    Object.new.instance_eval { binding }.eval(example.code, example.file, example.line + 2)
    out.string
  ensure
    $stdout = saved
  end

  # The outputs are written as Ruby 3.1 to 3.3 print them; from 3.4, Hash#inspect spaces its `=>`.
  def as_written(printed)
    Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.4") ? printed.gsub(" => ", "=>") : printed
  end

  # The known models an example opens by name: they must be downloaded (`rake models`), not
  # fetched in the middle of a spec.
  def models(code)
    Elelem::Models.names.select { |name| code.include?(%("#{name}")) }
  end
end

RSpec.describe "The examples of README.md and docs/API.md" do
  examples = ReadmeExamples::PAGES.flat_map { |page| ReadmeExamples.all(page) }

  ArchitectureLists::PAGES.each do |page|
    it "lists the architectures the engine runs in #{page} (`rake readme` rewrites the list)" do
      expect(ArchitectureLists.current(page)).to eq(ArchitectureLists.blocks.fetch(page))
    end
  end

  it "has Ruby examples on each page, the README's first with its printed output" do
    expect(examples.map(&:file).tally.values_at(*ReadmeExamples::PAGES)).to all(be >= 3)
    expect(examples.first.output).not_to be_nil
  end

  examples.each do |example|
    it "runs the example at #{example.file}:#{example.line + 1}#{" and prints what it says" if example.output}" do
      ReadmeExamples.models(example.code).each { |name| SpecModels.path(name) }
      printed = ReadmeExamples.as_written(ReadmeExamples.run(example))
      expect(printed).to eq(example.output) if example.output
    end
  end
end
