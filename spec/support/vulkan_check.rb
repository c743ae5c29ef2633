# frozen_string_literal: true

# Checks Vulkan golden files in a process of its own (spec/vulkan_spec.rb runs it), because
# ggml-vulkan decides once per process, when ggml starts, whether lavapipe is visible
# (GGML_VK_VISIBLE_DEVICES=0, which the spec sets for this process only: in the spec's own
# process every model would go to lavapipe). Prints a JSON line per case:
# `{"file", "case", "mismatch", "n_gpu_layers", "gpu"}`, `mismatch` nil when the ids are identical.
# A golden file (Elelem::Golden: one sequence, or several in one pass) is checked by
# Golden#check; a file with a `"mode"` (tasks/vulkan_modes.rb) as its mode says: greedy under a
# grammar, embeddings bit for bit, speculative decoding's ids and rounds. Recordings of a build
# profile the repository lacks are in Elelem::Golden::CACHE_DIR (`rake goldens` makes them).
#
#   ruby spec/support/vulkan_check.rb GOLDEN_FILE...
require "digest"
require "json"
require "elelem"

SYNTHETIC = File.expand_path("../../tmp/synthetic", __dir__)
GRAMMARS = File.expand_path("../fixtures/grammar", __dir__)

def report(file, name, mismatch, model)
  puts JSON.generate("file" => File.basename(file), "case" => name, "mismatch" => mismatch,
                     "n_gpu_layers" => model.info[:n_gpu_layers], "gpu" => Elelem::Golden::Settings.gpu(model.info))
  $stdout.flush
end

# Each case's mismatch (nil: none), an Elelem::Error's message as one.
def each_case(file, doc, model)
  mismatch = if doc["profile"] != Elelem.build_profile[:id]
               "recorded for build profile #{doc["profile"]}, not #{Elelem.build_profile[:id]}: run rake goldens"
             elsif Digest::SHA256.file(model.info[:path]).hexdigest != doc["sha256"]
               "recorded with another #{doc["model"]} (sha256 #{doc["sha256"]})"
             end
  doc["cases"].each do |c|
    found = mismatch || begin
      yield c
    rescue Elelem::Error, ArgumentError => e
      e.message.lines.first.chomp
    end
    report(file, c["name"], found, model)
  end
end

def expected_gpu(doc, model)
  gpu = Elelem::Golden::Settings.gpu(model.info)
  "on #{gpu.inspect}, recorded on #{doc["gpu"].inspect}" unless gpu == doc["gpu"]
end

def differ(what, ours, theirs) = ("#{what}: #{ours.inspect}, llama.cpp's #{theirs.inspect}" unless ours == theirs)

def hex(values) = values.map { |x| [x].pack("e").unpack1("V").to_s(16).rjust(8, "0") }.join(" ")

def check_grammar(file, doc, options)
  gbnf = File.read(File.join(GRAMMARS, doc["gbnf"]))
  Elelem.open(File.join(SYNTHETIC, "#{doc["model"]}.gguf"), n_ctx: doc["n_ctx"], **options) do |model|
    each_case(file, doc, model) do |c|
      next expected_gpu(doc, model) if expected_gpu(doc, model)

      ours = model.generate(c["prompt"], grammar: gbnf, max_tokens: doc["max_tokens"])
      # llama.cpp's grammar then allows only the end-of-turn token, which it samples; elelem
      # stops as soon as the text is complete (as spec/grammar_golden_spec.rb has it).
      theirs = c["tokens"]
      theirs = theirs[0...-1] if model.tokenizer.eog?(theirs.last) && model.last_stop_reason == :stop
      differ("ids", ours, theirs) || differ("text", model.detokenize(ours, special: false), c["text"])
    end
  end
end

# The first row whose bits differ from llama.cpp's hex line, as a mismatch.
def different_row(rows, outputs)
  ours = rows.map { |v| hex(v) }
  row = ours.each_index.find { |i| ours[i] != outputs[i] } || (ours.size if ours.size != outputs.size)
  "embedding #{row} differs from llama.cpp's bits" if row
end

def check_embed(file, doc, options)
  Elelem.open(File.join(SYNTHETIC, "#{doc["model"]}.gguf"), n_ctx: doc["n_ctx"], **options) do |model|
    each_case(file, doc, model) do |c|
      next expected_gpu(doc, model) if expected_gpu(doc, model)

      normalize = Elelem::Embeddings::NORMALIZATIONS.invert.fetch(c["normalize"], c["normalize"])
      vectors = model.embed(c["inputs"], pooling: c["pooling"].to_sym, normalize:, batch_size: c["batch_texts"])
      different_row(c["pooling"] == "none" ? vectors.flatten(1) : vectors, c["outputs"])
    end
  end
end

def check_speculative(file, doc, options)
  model_path = File.join(SYNTHETIC, "#{doc["model"]}.gguf")
  draft = File.join(SYNTHETIC, "#{doc["draft"]}.gguf")
  limits = { max_tokens: doc["max_tokens"], draft_tokens: doc["draft_tokens"] }
  Elelem.open(model_path, n_ctx: doc["n_ctx"], **options, draft:) do |model|
    each_case(file, doc, model) do |c|
      next expected_gpu(doc, model) if expected_gpu(doc, model)

      %w[speculative lookup].filter_map do |how|
        completion = model.complete(c["prompt"], **limits, **(how == "lookup" ? { draft: :lookup } : {}))
        theirs = c[how]
        differ("#{how} ids", completion.tokens, theirs["ids"]) ||
          differ("#{how} drafted, accepted, passes",
                 completion.timings.values_at(:draft_proposed, :draft_accepted, :decode_passes),
                 theirs.values_at("drafted", "accepted", "passes"))
      end.first
    end
  end
end

ARGV.each do |file|
  doc = JSON.parse(File.read(file))
  if doc["mode"]
    # A build profile the repository has no recording of: `rake goldens` records it into the cache.
    cached = File.join(Elelem::Golden::CACHE_DIR, Elelem.build_profile[:id], File.basename(file))
    doc = JSON.parse(File.read(cached)) if doc["profile"] != Elelem.build_profile[:id] && File.exist?(cached)
    options = { n_threads: 2, n_gpu_layers: doc["n_gpu_layers"] }
    send(:"check_#{doc["mode"]}", file, doc, options)
    next
  end

  name = File.basename(file, ".json")
  model = File.join(SYNTHETIC, "#{name.sub(/\Alavapipe(-half|-kv-host|-lockstep)?-/, "")}.gguf")
  golden = Elelem::Golden.new(file, cache: Elelem::Golden::CACHE_DIR)
  options = { n_ctx: golden.n_ctx, n_threads: golden.n_threads, parallel: golden.parallel,
              n_gpu_layers: golden.n_gpu_layers, kv_offload: golden.kv_offload }
  Elelem.open(model, **options) do |opened|
    golden.cases.each do |c|
      mismatch = begin
        golden.check(opened, c["name"])&.to_s
      rescue Elelem::Error => e
        e.message
      end
      report(file, c["name"], mismatch, opened)
    end
  end
end
