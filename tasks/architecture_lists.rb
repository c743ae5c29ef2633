# frozen_string_literal: true

# The README's table of the architectures elelem runs, generated from the engine's
# registry (Elelem.supported_architectures) between two markers: `rake readme` rewrites
# it, and spec/readme_spec.rb fails while it is stale.
module ReadmeArchitectures
  README = File.expand_path("../README.md", __dir__)
  BEGIN_MARK = "<!-- architectures: written by `rake readme` from Elelem.supported_architectures -->"
  END_MARK = "<!-- end of architectures -->"

  module_function

  # The table, a row per architecture in the registry's order.
  def table
    rows = Elelem.supported_architectures.map do |name, arch|
      kind = arch[:kind] == :encoder ? "encoder (embeddings, reranking)" : "decoder"
      "| `#{name}` | #{arch[:models]} | #{kind}#{", mixture of experts" if arch[:experts]} |"
    end
    ["| architecture | models | kind |", "|---|---|---|", *rows].join("\n")
  end

  # What the marked block should hold.
  def block
    "#{BEGIN_MARK}\n#{table}\n#{END_MARK}"
  end

  # What the marked block holds now.
  def current(text = File.read(README))
    text[/#{Regexp.escape(BEGIN_MARK)}.*?#{Regexp.escape(END_MARK)}/m] or
      raise "README.md has no block between #{BEGIN_MARK} and #{END_MARK}"
  end

  def write
    text = File.read(README)
    File.write(README, text.sub(current(text)) { block })
  end
end
