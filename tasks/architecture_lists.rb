# frozen_string_literal: true

# The lists of the architectures elelem runs, generated from the engine's registry
# (Elelem.supported_architectures) between two markers: the README names them by kind, and
# docs/MODELS.md has a row each with the models they run. `rake readme` rewrites both, and
# spec/readme_spec.rb fails while either is stale.
module ArchitectureLists
  ROOT = File.expand_path("..", __dir__)
  BEGIN_MARK = "<!-- architectures: written by `rake readme` from Elelem.supported_architectures -->"
  END_MARK = "<!-- end of architectures -->"
  PAGES = %w[README.md docs/MODELS.md].freeze
  # Each kind's heading in the README, and its cell in the table.
  KINDS = {
    decoder: %w[Decoders decoder],
    experts: ["Mixtures of experts", "decoder, mixture of experts"],
    encoder: ["Encoders (embeddings, reranking)", "encoder (embeddings, reranking)"]
  }.freeze

  module_function

  # @return [Hash{String => String}] each page's path under the root, and what its block holds
  def blocks
    PAGES.zip([by_kind, table]).to_h.transform_values { |text| "#{BEGIN_MARK}\n#{text}\n#{END_MARK}" }
  end

  # The README's lines, one per kind, each naming the architectures in the registry's order.
  def by_kind
    names = Elelem.supported_architectures.group_by { |_, arch| kind(arch) }
    KINDS.filter_map do |key, (title, _)|
      "- **#{title}:** #{names[key].map { |name, _| "`#{name}`" }.join(", ")}" if names[key]
    end.join("\n")
  end

  # docs/MODELS.md's table, a row per architecture in the registry's order.
  def table
    rows = Elelem.supported_architectures.map do |name, arch|
      "| `#{name}` | #{arch[:models]} | #{KINDS.fetch(kind(arch)).last} |"
    end
    ["| architecture | models | kind |", "|---|---|---|", *rows].join("\n")
  end

  def kind(arch)
    return :encoder if arch[:kind] == :encoder

    arch[:experts] ? :experts : :decoder
  end

  # What the marked block of `page` holds now.
  def current(page, text = File.read(File.join(ROOT, page)))
    text[/#{Regexp.escape(BEGIN_MARK)}.*?#{Regexp.escape(END_MARK)}/m] or
      raise "#{page} has no block between #{BEGIN_MARK} and #{END_MARK}"
  end

  def write
    blocks.each do |page, block|
      path = File.join(ROOT, page)
      text = File.read(path)
      File.write(path, text.sub(current(page, text)) { block })
    end
  end
end
