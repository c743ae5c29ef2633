# frozen_string_literal: true

require "fileutils"
require "open3"
require "tempfile"
require "zlib"
require_relative "reference"
require_relative "vision_golden"

# `rake bench`'s image rows (BENCH_VISION=0 skips them): a prompt with one image through each
# pair of `mmproj::bench_pairs` (random weights at real models' sizes, written by the testkit
# into tmp/bench-models/vision once), beside llama.cpp's libmtmd as llama-mtmd-cli runs it (the
# reference driver's `mtmd` mode), on the same files and threads:
# - `bench-smolvlm-256m`: SmolVLM-256M's (an Idefics3 projector, SigLIP-B/16 at 512 in F16,
#   before a Llama of SmolLM2-135M's shape in Q8_0), which tiles an image;
# - `bench-qwen25vl-3b`: Qwen2.5-VL-3B's projector (32 layers 1280 wide, window attention) in
#   F16 before a Qwen2.5-VL language model of Qwen2.5-0.5B's shape in Q8_0, which takes an
#   image at its own resolution (smart-resized);
# - `bench-qwen3vl-2b`: Qwen3-VL-2B's projector (24 layers 1024 wide, 3 deepstack mergers) in
#   F16 before a Qwen3-VL language model of Qwen3-0.6B's width and depth in Q8_0.
# Each repetition opens the model afresh on both sides (the driver is a process a run), so each
# encode is the image's first, uncached one. Per image: the encoder's time for the whole
# image, every tile and the overview (elelem: Completion#timings' `:image_encode_seconds`;
# llama.cpp: the sum of mtmd_encode_chunk's times), the prompt's evaluation speed over all
# its tokens, the image's among them (neither side counting the encoding), and the
# decode speed after it. Medians of BENCH_REPS, A B A B.
module BenchVision
  DIR = File.join(Reference::ROOT, "tmp", "bench-models", "vision")
  # Within the context length the testkit writes (2048): 13 SmolVLM tiles of 64 tokens fit.
  N_CTX = 2048
  TOKENS = 64
  PROMPT = "User: <__media__>Describe this image in detail.\nAssistant:"
  FIXTURE = File.join(Reference::ROOT, "ext", "testkit", "tests", "fixtures", "vision", "160x120-420.jpg")
  # Each pair's images: the fixture, and one made here of a size (width, height) that it
  # lays out otherwise: for SmolVLM 2:1, tiled otherwise than the fixture's 4:3; for
  # Qwen2.5-VL 391 tokens (23 x 17) in 6 x 5 windows, partial at the right and bottom edges
  # (the fixture's 6 x 4 are two windows); for Qwen3-VL 300 tokens (20 x 15).
  PAIRS = {
    "bench-smolvlm-256m" => [2048, 1024],
    "bench-qwen25vl-3b" => [640, 480],
    "bench-qwen3vl-2b" => [640, 480]
  }.freeze

  module_function

  def enabled? = ENV.fetch("BENCH_VISION", "1") == "1"

  def model(name) = File.join(DIR, "#{name}.gguf")
  def mmproj(name) = File.join(DIR, "#{name}.mmproj.gguf")

  def rows(threads)
    write_models
    PAIRS.flat_map do |name, size|
      [FIXTURE, generated_image(*size)].flat_map { |image| image_rows(name, image, threads) }
    end
  end

  def write_models
    system("cargo", "run", "--quiet", "--release", "--locked", "-p", "elelem-testkit", "--example",
           "write_bench_models", "--", File.dirname(DIR), exception: true)
  end

  # The three rows of an image, from BENCH_REPS runs of each engine in turn; the model column
  # names the image, its image chunks (tiles and overview) and the prompt's tokens.
  def image_rows(name, image, threads)
    runs = Array.new(Bench.reps) { [ours(name, image, threads), theirs(name, image, threads)] }
    check_same_prompt(image, runs)
    peer = runs.first.last
    label = "#{name}, #{File.basename(image)} (#{peer[:chunks]} chunks, #{peer[:prompt_tokens]} tokens)"
    [["image encode ms", :encode_ms], ["pp t/s with an image", :pp], ["tg#{TOKENS} t/s after an image", :tg]]
      .map do |metric, key|
        { "model" => label, "threads" => threads, "metric" => metric,
          "elelem" => Bench.median(runs.map { |r| r.first[key] }),
          "llama.cpp" => Bench.median(runs.map { |r| r.last[key] }) }
      end
  end

  # elelem through its Ruby API, the model opened for this run.
  def ours(name, image, threads)
    Elelem.open(model(name), mmproj: mmproj(name), n_ctx: N_CTX, n_threads: threads, flash_attn: true) do |m|
      t = m.complete(PROMPT, images: [image], max_tokens: TOKENS, ignore_eos: true).timings
      { encode_ms: 1000 * t.fetch(:image_encode_seconds), pp: t[:prompt_tokens_per_s], tg: t[:decode_tokens_per_s],
        prompt_tokens: t[:prompt_tokens] }
    end
  end

  # llama.cpp's libmtmd, the driver's `mtmd` mode: a process a run.
  def theirs(name, image, threads)
    Tempfile.create("elelem-bench-vision") do |f|
      f.puts(PROMPT.unpack1("H*"))
      f.flush
      out, err, status = Open3.capture3(Reference.binary, "-fa", "on", "mtmd", model(name), mmproj(name), f.path,
                                        TOKENS.to_s, N_CTX.to_s, threads.to_s, image)
      raise "reference mtmd failed: #{err[-500..]}" unless status.success?

      peer_run(out, err)
    end
  end

  # The driver's run, from its output (VisionGolden.parse) and the timings on its stderr.
  def peer_run(out, err)
    prompt_s, decode_s, tokens = err.match(/prompt_s (\S+) prompt_tokens \d+ decode_s (\S+) tokens (\d+)/)
                                    .captures.map(&:to_f)
    parsed = VisionGolden.parse(out.lines.map(&:chomp))
    prompt_tokens = prompt_size(parsed["chunks"])
    { encode_ms: parsed["encode_ms"].sum, pp: prompt_tokens / prompt_s, tg: tokens / decode_s, prompt_tokens:,
      chunks: parsed["encode_ms"].size }
  end

  # The prompt's tokens: each text chunk's ids and each image chunk's tokens. Not the
  # driver's `n_past`, which counts positions: an M-RoPE model's image takes fewer positions
  # than tokens (mtmd gives it max(nx, ny)), where elelem's timings count tokens.
  def prompt_size(chunks)
    chunks.sum { |c| c["type"] == "text" ? c["ids"].size : c["n_tokens"] }
  end

  # Both engines laid the prompt out in as many tokens, or the rows compare different work.
  def check_same_prompt(image, runs)
    counts = runs.flat_map { |ours, theirs| [ours[:prompt_tokens], theirs[:prompt_tokens]] }.uniq
    raise "#{File.basename(image)}: the prompts' lengths differ (#{counts.join(", ")})" unless counts.size == 1
  end

  # A PNG of smooth gradients and a pattern (8-bit RGB) of the size given, written once.
  def generated_image(width, height)
    path = File.join(DIR, "#{width}x#{height}.png")
    return path if File.exist?(path)

    FileUtils.mkdir_p(DIR)
    File.binwrite("#{path}.partial", png(width, height))
    File.rename("#{path}.partial", path)
    path
  end

  def png(width, height)
    rows = Array.new(height) do |y|
      "\0".b + Array.new(width) { |x| [x * 255 / width, y * 255 / height, ((x ^ y) * 7) & 255] }.flatten.pack("C*")
    end
    "\x89PNG\r\n\x1a\n".b + png_chunk("IHDR", [width, height, 8, 2, 0, 0, 0].pack("NNCCCCC")) +
      png_chunk("IDAT", Zlib::Deflate.deflate(rows.join)) + png_chunk("IEND", "")
  end

  def png_chunk(type, data)
    [data.bytesize].pack("N") + type + data + [Zlib.crc32(type + data)].pack("N")
  end
end
