# frozen_string_literal: true

require "English"
require "digest"
require "fileutils"
require "json"
require "open3"
require "tempfile"
require_relative "reference"

# Embeddings as llama.cpp computes them: the reference driver's `embed` mode does what
# llama-embedding does (one sequence a text, texts packed into batches, pooling, then
# --embd-normalize), and prints each float's bits. `rake embedding_goldens` records, for
# each model below, the outputs of its cases into spec/fixtures/embeddings/<model>.json;
# the specs check elelem's `embed` against them bit for bit. As with the other goldens,
# the bits hold for the build profile they were recorded under: the committed fixtures
# carry one profile, and `rake goldens` records a missing one into
# Elelem::Golden::CACHE_DIR/<profile>/ from the reference built here.
module EmbeddingGolden
  DIR = File.join(Reference::ROOT, "spec", "fixtures", "embeddings")
  SYNTHETIC_DIR = File.join(Reference::ROOT, "tmp", "synthetic")
  N_THREADS = Reference::N_THREADS
  # llama.cpp's pooling types by name (`enum llama_pooling_type`).
  POOLINGS = %w[none mean cls last rank].freeze
  # --embd-normalize: -1 none, 0 max-abs scaled to int16's range, 1 taxicab, 2 euclidean, 3 a p-norm.
  NORMALIZATIONS = [-1, 0, 1, 2, 3].freeze

  # Token ids of made-up texts of different lengths, each inside the vocabulary's
  # specials. Each batch of four stays within the 128-token context, so that packing
  # by n_ctx or by llama-embedding's larger n_batch gives the same batches.
  def self.texts(lengths, first, last, salt)
    lengths.each_with_index.map do |n, t|
      [*first, *(0...n).map { |i| 5 + ((((t + (salt * 11)) * 7919) + (i * 104_729)) % 507) }, *last]
    end
  end

  LENGTHS = [1, 7, 16, 30, 4, 45, 11].freeze
  # A WordPiece vocabulary (canary::set_wordpiece_vocab): [CLS]=2 text [SEP]=3, as
  # llama.cpp's tokenizer adds them (add_special).
  BERT_INPUTS = texts(LENGTHS, [2], [3], 0).freeze
  # Cross-encoder pairs as llama-embedding builds them without a rerank template
  # (query, the EOS text since add_eos is true, document; add_sep is false), which a
  # WordPiece vocabulary tokenizes to [CLS] query [SEP] document [SEP].
  RERANK_INPUTS = texts([3, 5, 2, 9, 4, 6, 1], [], [], 1)
                  .zip(texts([12, 20, 8, 30, 2, 15, 25], [], [], 2))
                  .map { |q, d| [2, *q, 3, *d, 3] }.freeze
  # Qwen3-Embedding's inputs: the text then its end-of-text token (2 in the canary's
  # vocabulary), no BOS, as its add_bos/add_eos keys say.
  DECODER_INPUTS = texts(LENGTHS, [], [2], 3).freeze
  # A whole context: position embeddings to the last row.
  BERT_LONG = texts([126], [2], [3], 4).freeze
  # Text for the real models and for the tiny BERT's WordPiece tokenizer (tokenized
  # by the reference, as common_tokenize(add_special: true) does).
  TEXTS = ["The cat sat on the mat.", "Paris is the capital of France!", "Searching documents quickly: ruby gems",
           "東京 and Zürich, naïvely", "what", "A model reads text, then writes code; the canary looks up."].freeze

  # The retrieval check's queries and passages (spec/fixtures/retrieval/pairs.json).
  RETRIEVAL = JSON.parse(File.read(File.join(Reference::ROOT, "spec", "fixtures", "retrieval", "pairs.json")))["pairs"]
  RETRIEVAL_TEXTS = (RETRIEVAL.map { |p| p["query"] } + RETRIEVAL.map { |p| p["passage"] }).freeze

  # The models and their cases. A synthetic model (tmp/synthetic, `rake canary`) gives
  # its inputs as ids; a real model (Elelem::Models) as text.
  MODELS = {
    "all-minilm-l6-v2" => { pooling: "mean", n_ctx: 512, texts: TEXTS + RETRIEVAL_TEXTS },
    "tiny-bert" => { pooling: "mean", inputs: BERT_INPUTS, overrides: %w[cls none],
                     extra: { "long" => BERT_LONG }, texts: TEXTS },
    "tiny-bert-rerank" => { pooling: "rank", inputs: RERANK_INPUTS, overrides: %w[mean] },
    "tiny-nomic-bert" => { pooling: "mean", inputs: BERT_INPUTS, overrides: %w[none], extra: { "long" => BERT_LONG } },
    "tiny-qwen3-embed" => { pooling: "last", inputs: DECODER_INPUTS, overrides: %w[mean none] }
  }.freeze

  module_function

  def fixture(name)
    File.join(DIR, "#{name}.json")
  end

  # The recording this build profile checks against: the committed one if it was made
  # under this profile, else the one `rake goldens` made here.
  def fixture_path(name)
    committed = fixture(name)
    return committed if File.exist?(committed) && JSON.parse(File.read(committed))["profile"] == profile

    File.join(Elelem::Golden::CACHE_DIR, profile, File.basename(committed))
  end

  def profile
    Elelem.build_profile[:id]
  end

  def model_path(name)
    return File.join(SYNTHETIC_DIR, "#{name}.gguf") unless Elelem::Models.names.include?(name)

    Elelem::Models.fetch(name)
  end

  # `rake goldens`: records from the reference the models this profile has no recording of.
  def ensure_recorded
    missing = MODELS.keys.reject { |name| File.exist?(fixture_path(name)) }
    return if missing.empty?

    binary = Reference.build
    missing.each { |name| record(name, binary:, path: fixture_path(name)) }
  end

  # `rake embedding_goldens`: records every model into the committed fixtures.
  def run(binary: Reference.build)
    MODELS.each_key { |name| record(name, binary:, path: fixture(name)) }
  end

  def record(name, binary:, path:)
    Reference.check_profile!
    spec = MODELS.fetch(name)
    model = model_path(name)
    n_ctx = spec.fetch(:n_ctx, 128)
    cases = cases(model, spec).map do |c|
      c.merge("outputs" => embed(binary, model, c, n_ctx))
    end
    doc = { "model" => name, "sha256" => Digest::SHA256.file(model).hexdigest, "profile" => profile,
            "n_ctx" => n_ctx, "n_threads" => N_THREADS, "cases" => cases }
    FileUtils.mkdir_p(File.dirname(path))
    File.write(path, "#{compact(JSON.pretty_generate(doc))}\n")
    puts "wrote #{path}"
  end

  # Pretty JSON with each array of numbers or strings on one line: a text's ids, or a
  # text's embedding lines, read as one line each.
  def compact(json)
    json.gsub(/\[\n\s*((?:(?:-?\d+|"[^"\n]*"),\n\s*)*(?:-?\d+|"[^"\n]*"))\n\s*\]/) do
      "[#{Regexp.last_match(1).split(/,\n\s*/).join(", ")}]"
    end
  end

  # A model's cases: all its inputs four texts a batch and one a batch, each
  # normalization on one batch (but for rank, whose scores are never normalized:
  # llama-server's /v1/rerank reads them raw), the pooling overrides, the extra
  # inputs, and its texts tokenized by the reference.
  def cases(model, spec)
    pooling = spec.fetch(:pooling)
    inputs, input_texts, texts = inputs_of(model, spec)
    norm = pooling == "rank" ? -1 : 2
    list = [make_case("batched", pooling, inputs, texts: input_texts, normalize: norm),
            make_case("single", pooling, inputs, texts: input_texts, normalize: norm, batch_texts: 1)]
    list += normalization_cases(pooling, inputs, input_texts) unless pooling == "rank"
    list += spec.fetch(:overrides, []).map { |p| make_case("pooling-#{p}", p, inputs, texts: input_texts) }
    list += spec.fetch(:extra, {}).map { |name, ids| make_case(name, pooling, ids) }
    list << make_case("texts", pooling, texts, texts: spec[:texts], normalize: norm) if texts
    list
  end

  # A model's inputs as ids (its texts tokenized where it has no ids), the texts they
  # are (nil for ids), and its texts tokenized as a case of their own (where it has
  # both, as the tiny BERT does to check the WordPiece tokenizer).
  def inputs_of(model, spec)
    tokenized = spec[:texts] && tokenize(model, spec[:texts])
    return [tokenized, spec[:texts], nil] unless spec[:inputs]

    [spec[:inputs], nil, tokenized]
  end

  def normalization_cases(pooling, inputs, texts)
    NORMALIZATIONS.map do |n|
      make_case("normalize#{n}", pooling, inputs.first(4), texts: texts&.first(4), normalize: n)
    end
  end

  def make_case(name, pooling, inputs, texts: nil, normalize: 2, batch_texts: 4)
    raise ArgumentError, "unknown pooling #{pooling}" unless POOLINGS.include?(pooling)

    kase = { "name" => name, "pooling" => pooling, "normalize" => normalize, "batch_texts" => batch_texts }
    kase["texts"] = texts if texts
    kase.merge("inputs" => inputs)
  end

  def tokenize(model, texts)
    texts.map { |text| Reference.tokenize(model, text) }
  end

  # The reference's hex lines for one case: one a text, or one a token with pooling none.
  def embed(binary, model, kase, n_ctx)
    Tempfile.create("elelem-embed") do |f|
      kase["inputs"].each { |ids| f.puts(ids.join(",")) }
      f.flush
      args = [binary, "embed", model, f.path, n_ctx, N_THREADS, kase["pooling"], kase["normalize"],
              kase["batch_texts"]].map(&:to_s)
      out, err, status = Open3.capture3(*args)
      raise "reference embed failed for #{File.basename(model)} #{kase["name"]}: #{err}" unless status.success?

      check_outputs(out.lines.map(&:strip), kase)
    end
  end

  # The reference wrote as many lines as the case has texts (tokens for none), each
  # of finite values, and not all the same (a model that ignores its input would).
  def check_outputs(lines, kase)
    expected = expected_lines(kase)
    raise "#{kase["name"]}: #{lines.size} lines, expected #{expected}" unless lines.size == expected
    raise "#{kase["name"]}: a value is not finite" unless lines.all? { |l| finite?(l) }
    raise "#{kase["name"]}: constant outputs" if lines.size > 1 && lines.uniq.size == 1

    lines
  end

  def expected_lines(kase)
    kase["pooling"] == "none" ? kase["inputs"].sum(&:size) : kase["inputs"].size
  end

  def finite?(line)
    line.split.all? { |h| [h.to_i(16)].pack("L").unpack1("f").finite? }
  end
end
