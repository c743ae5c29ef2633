# frozen_string_literal: true

require "digest"
require "fileutils"
require "json"
require "open3"
require "tempfile"
require_relative "reference"
require_relative "embedding_golden"

# The Vulkan goldens of the modes beyond one greedy sequence, on Mesa's lavapipe, every layer
# there (llama.cpp's default, `-ngl` with the count elelem reports): several sequences in one
# pass (lockstep, Elelem::Golden files `lavapipe-lockstep-<fixture>.json`), and files of their
# own format (a `"mode"` key, checked by spec/support/vulkan_check.rb) for greedy decoding
# under a GBNF grammar (`lavapipe-grammar-*`, the driver's `grammar`), embeddings
# (`lavapipe-embed-*`, its `embed`) and speculative decoding with a draft model and with prompt
# lookup (`lavapipe-speculative-*`, its `speculative` and `lookup`). Every id and bit comes
# from llama.cpp built with GGML_VULKAN (Reference.build_vulkan), never from elelem; each file
# holds for the build profile and the device (`gpu`) it names.
module VulkanModes
  SHORT = [1, 50, 60, 70, 80].freeze
  TINY = [1, 90, 91, 92].freeze
  LONG = ([1] + (0...700).map { |i| 3 + ((i * 7919) % 509) }).freeze

  # Sequences decoded together (Model#generate_all, the driver's lockstep). tiny-gemma2's
  # 609 prompt tokens take two passes (of 512), so the second mixes a prompt's chunk with
  # decoding sequences; its sliding window gives each sequence its ring. The experts model
  # keeps its KV caches on the host (`kv_offload: false`, `-nkvo`): with them on lavapipe, two
  # sequences in one pass crash Mesa 22.3.6's lavapipe (SIGSEGV in libvulkan_lvp.so) under
  # llama.cpp and elelem alike.
  LOCKSTEP = {
    "tiny-qwen3" => { prompts: [SHORT, TINY, LONG.first(40), LONG.last(20)] },
    "tiny-gemma2" => { prompts: [SHORT, LONG.first(600), TINY] },
    "tiny-qwen3moe" => { prompts: [SHORT, TINY, LONG.first(30)], open: { kv_offload: false } }
  }.freeze
  LOCKSTEP_MAX_TOKENS = 16

  # Greedy under the GBNF llama.cpp's json_schema_to_grammar writes for {name, age}
  # (spec/fixtures/grammar/person.gbnf; the CPU's recordings of the same models are
  # GrammarGolden's).
  GBNF = File.join(Reference::ROOT, "spec", "fixtures", "grammar", "person.gbnf")
  GRAMMAR = { "tiny-glm4moe" => { "short" => SHORT, "tiny" => TINY } }.freeze
  GRAMMAR_MAX_TOKENS = 32

  # Encoders and a decoder's embeddings: each model's cases by name (EmbeddingGolden's inputs).
  EMBED = {
    "tiny-bert" => [
      EmbeddingGolden.make_case("batched", "mean", EmbeddingGolden::BERT_INPUTS),
      EmbeddingGolden.make_case("single", "mean", EmbeddingGolden::BERT_INPUTS.first(3), batch_texts: 1),
      EmbeddingGolden.make_case("pooling-cls", "cls", EmbeddingGolden::BERT_INPUTS.first(4)),
      EmbeddingGolden.make_case("pooling-none", "none", EmbeddingGolden::BERT_INPUTS.first(2))
    ],
    "tiny-qwen3-embed" => [
      EmbeddingGolden.make_case("batched", "last", EmbeddingGolden::DECODER_INPUTS),
      EmbeddingGolden.make_case("pooling-mean", "mean", EmbeddingGolden::DECODER_INPUTS.first(4))
    ]
  }.freeze
  EMBED_N_CTX = 128

  # A draft model (its vocabulary the target's) and prompt lookup, K guesses a round.
  SPECULATIVE = {
    "tiny-llama-canary" => { draft: "tiny-llama3", prompts: {
      "repeats" => [1, 50, 60, 70, 80, 90, 50, 60, 70, 80, 91, 50], "short" => SHORT
    } }
  }.freeze
  DRAFT_TOKENS = 3
  SPECULATIVE_MAX_TOKENS = 24

  module_function

  def synthetic(name) = File.join(Reference::ROOT, "tmp", "synthetic", "#{name}.gguf")

  def path(mode, name) = File.join(VulkanGolden::DIR, "lavapipe-#{mode}-#{name}.json")

  # Records every file missing, or lacking this build profile's recording (a mode's file into
  # `cache`, Golden::CACHE_DIR, `<profile>/<file>`, where given, as a golden file's recording is).
  def record_all(binary, cache: nil)
    LOCKSTEP.each { |name, spec| record_lockstep(binary, name, spec, cache) }
    GRAMMAR.each { |name, prompts| write_once(path("grammar", name), cache) { grammar(binary, name, prompts) } }
    EMBED.each { |name, cases| write_once(path("embed", name), cache) { embed(binary, name, cases) } }
    SPECULATIVE.each do |name, spec|
      write_once(path("speculative", name), cache) { speculative(binary, name, spec) }
    end
  end

  # Whether a file lacks this build profile's recording (in it, or in `cache`).
  def missing?(cache = nil)
    LOCKSTEP.any? { |name, spec| !lockstep_golden(name, spec, cache).recorded? } ||
      [GRAMMAR, EMBED, SPECULATIVE].zip(%w[grammar embed speculative]).any? do |models, mode|
        models.keys.any? { |name| !recorded?(path(mode, name), cache) }
      end
  end

  def lockstep_golden(name, spec, cache)
    golden = Elelem::Golden.new(path("lockstep", name), cache:)
    golden.add_lockstep_case("lockstep", spec[:prompts], max_tokens: LOCKSTEP_MAX_TOKENS, ignore_eos: true) \
      unless golden.find("lockstep")
    golden
  end

  def record_lockstep(binary, name, spec, cache)
    prompts = spec[:prompts]
    golden = lockstep_golden(name, spec, cache)
    return if golden.recorded?

    info = Elelem.open(synthetic(name), n_ctx: Reference::N_CTX, n_threads: Reference::N_THREADS,
                                        parallel: prompts.size, **spec.fetch(:open, {}), &:info)
    raise "#{name}: nothing went to lavapipe (#{info[:devices].inspect})" if info[:devices].empty?

    golden.record(VulkanGolden::Opened.new(info), reference: binary)
    puts "recorded #{File.basename(golden.path)} for build profile #{Elelem.build_profile[:id]}"
  end

  # The file of one of the other modes recorded for this build profile, in the repository or
  # in `cache` (`<cache>/<profile>/<file>`); nil when neither has one.
  def recording(file, cache = nil)
    profile = Elelem.build_profile[:id]
    [file, (File.join(cache, profile, File.basename(file)) if cache)].compact.find do |f|
      File.exist?(f) && JSON.parse(File.read(f))["profile"] == profile
    end
  end

  def recorded?(file, cache) = !recording(file, cache).nil?

  # A file of one of the other modes, when this profile has none (written into `cache` where given).
  def write_once(file, cache = nil)
    return if recorded?(file, cache)

    doc = yield
    target = cache ? File.join(cache, Elelem.build_profile[:id], File.basename(file)) : file
    FileUtils.mkdir_p(File.dirname(target))
    File.write(target, "#{EmbeddingGolden.compact(JSON.pretty_generate(doc))}\n")
    puts "recorded #{File.basename(file)} for build profile #{Elelem.build_profile[:id]}"
  end

  # How elelem puts `model` on lavapipe with every layer there: the layers and the device,
  # which the reference is given (`-ngl`) and the check opens the model with.
  def placement(model, **options)
    info = Elelem.open(model, n_ctx: 64, n_threads: Reference::N_THREADS, **options, &:info)
    raise "#{model}: nothing went to lavapipe (#{info[:devices].inspect})" if info[:devices].empty?

    { "n_gpu_layers" => info[:n_gpu_layers], "gpu" => Elelem::Golden::Settings.gpu(info) }
  end

  def header(mode, name, model, placed)
    { "mode" => mode, "model" => name, "sha256" => Digest::SHA256.file(model).hexdigest, **placed,
      "profile" => Elelem.build_profile[:id], "recorder" => "llama.cpp (elelem-reference #{mode}, GGML_VULKAN)" }
  end

  def driver(binary, *args)
    out, err, status = Open3.capture3(binary, *args.map(&:to_s))
    raise "reference #{args.first} failed (#{status}): #{err.lines.last(3).join}" unless status.success?

    [out, err]
  end

  def grammar(binary, name, prompts)
    model = synthetic(name)
    placed = placement(model)
    cases = prompts.map do |case_name, ids|
      out, = driver(binary, "grammar", model, ids.join(","), GRAMMAR_MAX_TOKENS, GBNF, Reference::N_CTX,
                    Reference::N_THREADS, "-ngl", -1)
      lines = out.lines
      { "name" => case_name, "prompt" => ids, "tokens" => lines[0].split.map(&:to_i),
        "text" => [lines[1].strip].pack("H*").force_encoding(Encoding::UTF_8) }
    end
    header("grammar", name, model, placed).merge("gbnf" => File.basename(GBNF), "max_tokens" => GRAMMAR_MAX_TOKENS,
                                                 "n_ctx" => Reference::N_CTX, "cases" => cases)
  end

  def embed(binary, name, cases)
    model = synthetic(name)
    placed = placement(model)
    recorded = cases.map do |kase|
      Tempfile.create("elelem-embed") do |f|
        kase["inputs"].each { |ids| f.puts(ids.join(",")) }
        f.flush
        out, = driver(binary, "embed", model, f.path, EMBED_N_CTX, Reference::N_THREADS, kase["pooling"],
                      kase["normalize"], kase["batch_texts"], "-ngl", -1)
        kase.merge("outputs" => EmbeddingGolden.check_outputs(out.lines.map(&:strip), kase))
      end
    end
    header("embed", name, model, placed).merge("n_ctx" => EMBED_N_CTX, "n_threads" => Reference::N_THREADS,
                                               "cases" => recorded)
  end

  def speculative(binary, name, spec)
    model = synthetic(name)
    draft = synthetic(spec[:draft])
    placed = placement(model)
    draft_placed = placement(draft)
    raise "#{spec[:draft]} would not be all on lavapipe under -ngl #{placed["n_gpu_layers"]}" \
      if draft_placed["n_gpu_layers"] > placed["n_gpu_layers"]

    cases = spec[:prompts].map do |case_name, ids|
      common = [ids.join(","), SPECULATIVE_MAX_TOKENS, DRAFT_TOKENS, Reference::N_CTX, Reference::N_THREADS,
                "-ngl", -1]
      { "name" => case_name, "prompt" => ids,
        "speculative" => speculated(*driver(binary, "speculative", model, draft, *common)),
        "lookup" => speculated(*driver(binary, "lookup", model, *common)) }
    end
    header("speculative", name, model, placed).merge("draft" => spec[:draft], "draft_tokens" => DRAFT_TOKENS,
                                                     "max_tokens" => SPECULATIVE_MAX_TOKENS,
                                                     "n_ctx" => Reference::N_CTX, "cases" => cases)
  end

  def speculated(out, err)
    stats = err.match(/drafted (\d+) accepted (\d+) passes (\d+)/) or raise "no draft statistics: #{err}"
    { "ids" => out.lines[0].split.map(&:to_i), "drafted" => stats[1].to_i, "accepted" => stats[2].to_i,
      "passes" => stats[3].to_i }
  end
end
