# frozen_string_literal: true

require "fileutils"
require "open3"
require "tempfile"
require "zlib"
require_relative "reference"
require_relative "vision_golden"

# `rake bench`'s image and audio rows (BENCH_VISION=0 skips them): a prompt with one image or
# audio file through each pair of `mmproj::bench_pairs` and `audio::bench_pairs` (random
# weights at real models' sizes, written by the testkit into tmp/bench-models/vision once),
# beside llama.cpp's libmtmd as llama-mtmd-cli runs it (the reference driver's `mtmd` mode),
# on the same files and threads:
# - `bench-smolvlm-256m`: SmolVLM-256M's (an Idefics3 projector, SigLIP-B/16 at 512 in F16,
#   before a Llama of SmolLM2-135M's shape in Q8_0), which tiles an image;
# - `bench-qwen25vl-3b`: Qwen2.5-VL-3B's projector (32 layers 1280 wide, window attention) in
#   F16 before a Qwen2.5-VL language model of Qwen2.5-0.5B's shape in Q8_0, which takes an
#   image at its own resolution (smart-resized);
# - `bench-qwen3vl-2b`: Qwen3-VL-2B's projector (24 layers 1024 wide, 3 deepstack mergers) in
#   F16 before a Qwen3-VL language model of Qwen3-0.6B's width and depth in Q8_0.
# Each repetition opens the model afresh on both sides (the driver is a process a run), so each
# encode is the file's first, uncached one. Per file: the encoder's time for all of it, every
# tile and the overview of an image, every 30 s piece of audio (elelem: Completion#timings'
# `:image_encode_seconds` or `:audio_encode_seconds`; llama.cpp: the sum of
# mtmd_encode_chunk's times), the prompt's evaluation speed over all its tokens, the
# file's among them (neither side counting the encoding), and the decode speed after it.
# Medians of BENCH_REPS, A B A B.
module BenchVision
  DIR = File.join(Reference::ROOT, "tmp", "bench-models", "vision")
  # Within the context length the testkit writes (2048): 13 SmolVLM tiles of 64 tokens fit.
  N_CTX = 2048
  TOKENS = 64
  FIXTURE = File.join(Reference::ROOT, "ext", "testkit", "tests", "fixtures", "vision", "160x120-420.jpg")
  # What each kind of pair is asked, and the names of its rows and timing.
  MEDIA = {
    image: { prompt: "User: <__media__>Describe this image in detail.\nAssistant:", option: :images,
             timing: :image_encode_seconds, rows: ["image encode ms", "pp t/s with an image", "t/s after an image"] },
    audio: { prompt: "User: <__media__>What is said in this recording?\nAssistant:", option: :audio,
             timing: :audio_encode_seconds, rows: ["audio encode ms", "pp t/s with audio", "t/s after audio"] }
  }.freeze
  # Each image pair's images: the fixture, and one made here of a size (width, height) that
  # it lays out otherwise: for SmolVLM 2:1, tiled otherwise than the fixture's 4:3; for
  # Qwen2.5-VL 391 tokens (23 x 17) in 6 x 5 windows, partial at the right and bottom edges
  # (the fixture's 6 x 4 are two windows); for Qwen3-VL 300 tokens (20 x 15). The audio
  # pair's files, made here: 10 s (one piece) and 45 s (two, the second padded).
  PAIRS = {
    "bench-smolvlm-256m" => [:image, [2048, 1024]],
    "bench-qwen25vl-3b" => [:image, [640, 480]],
    "bench-qwen3vl-2b" => [:image, [640, 480]],
    "bench-qwen2-audio" => [:audio, [10, 45]]
  }.freeze

  module_function

  def enabled? = ENV.fetch("BENCH_VISION", "1") == "1"

  def model(name) = File.join(DIR, "#{name}.gguf")
  def mmproj(name) = File.join(DIR, "#{name}.mmproj.gguf")

  def rows(threads)
    write_models
    PAIRS.flat_map do |name, (kind, size)|
      files = kind == :image ? [FIXTURE, generated_image(*size)] : size.map { |seconds| generated_wav(seconds) }
      files.flat_map { |file| media_rows(name, kind, file, threads) }
    end
  end

  def write_models
    system("cargo", "run", "--quiet", "--release", "--locked", "-p", "elelem-testkit", "--example",
           "write_bench_models", "--", File.dirname(DIR), exception: true)
  end

  # The three rows of a file, from BENCH_REPS runs of each engine in turn; the model column
  # names the file, its chunks (an image's tiles and overview, audio's pieces) and the
  # prompt's tokens.
  def media_rows(name, kind, file, threads)
    runs = Array.new(Bench.reps) { [ours(name, kind, file, threads), theirs(name, kind, file, threads)] }
    check_same_prompt(file, runs)
    peer = runs.first.last
    label = "#{name}, #{File.basename(file)} (#{peer[:chunks]} chunks, #{peer[:prompt_tokens]} tokens)"
    encode, pp, tg = MEDIA.fetch(kind)[:rows]
    [[encode, :encode_ms], [pp, :pp], ["tg#{TOKENS} #{tg}", :tg]]
      .map do |metric, key|
        { "model" => label, "threads" => threads, "metric" => metric,
          "elelem" => Bench.median(runs.map { |r| r.first[key] }),
          "llama.cpp" => Bench.median(runs.map { |r| r.last[key] }) }
      end
  end

  # elelem through its Ruby API, the model opened for this run.
  def ours(name, kind, file, threads)
    media = MEDIA.fetch(kind)
    Elelem.open(model(name), mmproj: mmproj(name), n_ctx: N_CTX, n_threads: threads, flash_attn: true) do |m|
      t = m.complete(media[:prompt], media[:option] => [file], max_tokens: TOKENS, ignore_eos: true).timings
      { encode_ms: 1000 * t.fetch(media[:timing]), pp: t[:prompt_tokens_per_s], tg: t[:decode_tokens_per_s],
        prompt_tokens: t[:prompt_tokens] }
    end
  end

  # llama.cpp's libmtmd, the driver's `mtmd` mode: a process a run.
  def theirs(name, kind, file, threads)
    Tempfile.create("elelem-bench-vision") do |f|
      f.puts(MEDIA.fetch(kind)[:prompt].unpack1("H*"))
      f.flush
      out, err, status = Open3.capture3(Reference.binary, "-fa", "on", "mtmd", model(name), mmproj(name), f.path,
                                        TOKENS.to_s, N_CTX.to_s, threads.to_s, file)
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

  # The prompt's tokens: each text chunk's ids and each image or audio chunk's tokens. Not the
  # driver's `n_past`, which counts positions: an M-RoPE model's image takes fewer positions
  # than tokens (mtmd gives it max(nx, ny)), where elelem's timings count tokens.
  def prompt_size(chunks)
    chunks.sum { |c| c["type"] == "text" ? c["ids"].size : c["n_tokens"] }
  end

  # Both engines laid the prompt out in as many tokens, or the rows compare different work.
  def check_same_prompt(file, runs)
    counts = runs.flat_map { |ours, theirs| [ours[:prompt_tokens], theirs[:prompt_tokens]] }.uniq
    raise "#{File.basename(file)}: the prompts' lengths differ (#{counts.join(", ")})" unless counts.size == 1
  end

  # A 16 kHz mono WAV of `seconds`: two tones gliding under a little noise, written once.
  def generated_wav(seconds)
    path = File.join(DIR, "speech-like-#{seconds}s.wav")
    return path if File.exist?(path)

    FileUtils.mkdir_p(DIR)
    random = Random.new(seconds)
    samples = Array.new(seconds * 16_000) do |i|
      t = i / 16_000.0
      tone = Math.sin(2 * Math::PI * (220 + (40 * t)) * t) + (0.5 * Math.sin(2 * Math::PI * 1300 * t))
      (((0.3 * tone) + (0.05 * (random.rand - 0.5))) * 20_000).round
    end
    File.binwrite("#{path}.partial", VisionGolden.wav(samples))
    File.rename("#{path}.partial", path)
    path
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
