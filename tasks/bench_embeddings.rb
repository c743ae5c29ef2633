# frozen_string_literal: true

require "open3"
require "tempfile"
require_relative "reference"

# `rake bench`'s embedding rows: all-MiniLM-L6-v2 embedding EMBED_TEXTS texts of about
# EMBED_TOKENS tokens, `batch` texts a pass, elelem (Model#embed, in this process) beside
# llama.cpp (the reference driver's `embed` mode: llama-embedding's loop, timed from its
# first batch to its last, load excluded), and the peak RSS of a process doing it once.
module BenchEmbeddings
  MODEL = "all-minilm-l6-v2"
  N_CTX = 512
  EMBED_TEXTS = 256
  EMBED_TOKENS = 64
  BATCHES = [1, 32].freeze
  # The words the texts are drawn from (seeded: every run embeds the same texts).
  WORDS = %w[the a model reads every token of this sentence and returns one vector that
             places similar meanings close together while distant topics stay apart ruby rails
             database query index search retrieval ranking document passage answer question].freeze

  module_function

  def enabled? = ENV.fetch("BENCH_EMBEDDINGS", "1") == "1"

  def rows(threads)
    path = Elelem::Models.fetch(MODEL)
    Elelem.open(path, n_ctx: N_CTX, n_threads: threads) do |model|
      ids = texts(model)
      Tempfile.create(["elelem-embed", ".ids"]) do |file|
        file.puts(ids.map { |t| t.join(",") })
        file.flush
        job = { model:, ids:, path:, ids_file: file.path, threads: }
        rates = BATCHES.map { |batch| rate_row(job, batch) }
        ours, theirs = peak_rss(path, file.path, threads)
        (rates + [{ "metric" => "embed peak RSS MiB", "elelem" => ours, "llama.cpp" => theirs }])
          .map { |r| r.merge("model" => MODEL, "threads" => threads) }
      end
    end
  end

  def texts(model)
    random = Random.new(64)
    Array.new(EMBED_TEXTS) do
      words = []
      words << WORDS.sample(random:) while model.tokenize(words.join(" ")).size < EMBED_TOKENS
      model.tokenize(words.join(" "))
    end
  end

  # `job`: the model open, the texts' ids, its path, the file of ids, the threads.
  def rate_row(job, batch)
    ids = job[:ids]
    ours = lambda do
      start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      job[:model].embed(ids, batch_size: batch)
      ids.size / (Process.clock_gettime(Process::CLOCK_MONOTONIC) - start)
    end
    theirs = -> { ids.size / Float(reference(job[:path], job[:ids_file], job[:threads], batch)[/seconds (\S+)/, 1]) }
    [ours, theirs].each(&:call) # warm-up
    Bench.interleaved("embed #{EMBED_TEXTS}×#{EMBED_TOKENS} texts/s batch #{batch}", ours, theirs, &:call)
  end

  def reference(path, ids_file, threads, batch)
    _, err, status = Open3.capture3(Reference.binary, "embed", path, ids_file, N_CTX.to_s, threads.to_s,
                                    "default", "2", batch.to_s)
    raise "reference embed failed: #{err[-500..]}" unless status.success?

    err
  end

  def peak_rss(path, ids_file, threads)
    ruby = ["ruby", "-I#{File.join(Reference::ROOT, "lib")}", "-relelem", "-e",
            "ids = File.readlines(ARGV[1]).map { |l| l.split(',').map(&:to_i) }; " \
            "Elelem.open(ARGV[0], n_ctx: #{N_CTX}, n_threads: #{threads}) { |m| m.embed(ids, batch_size: 32) }",
            path, ids_file]
    [Bench.peak_rss_mib(*ruby),
     Bench.peak_rss_mib(Reference.binary, "embed", path, ids_file, N_CTX.to_s, threads.to_s, "default", "2", "32")]
  end
end
