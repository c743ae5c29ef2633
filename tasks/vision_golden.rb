# frozen_string_literal: true

require "digest"
require "fileutils"
require "json"
require "open3"
require "tempfile"
require "time"
require_relative "reference"

# Image and text prompts as llama.cpp answers them through libmtmd: the reference driver's
# `mtmd` mode does what llama-mtmd-cli does (the projector loaded for the model, the prompt
# cut by mtmd_tokenize into text and image chunks at its `<__media__>` markers, the chunks
# evaluated in order, then greedy decoding). `rake vision_golden` records, for each language
# model and projector pair of tmp/synthetic/vision (`mmproj::pairs()`, written by `rake
# canary`), its cases into spec/fixtures/goldens/vision/<model>.json:
#
# - each case's prompt text, images (files of ext/testkit/tests/fixtures/vision, with their
#   SHA-256), `max_tokens`, and the chunks mtmd made of them, which hold for any build: a text
#   chunk's ids (`"type": "text"`), an image chunk's token and position counts and its grid
#   (`"type": "image"`, `n_tokens`, `n_pos`, `nx`, `ny`), an audio chunk's (one log-mel piece:
#   `"type": "audio"`, `n_tokens`, `n_pos`: the audio pairs' cases, WAV files of
#   ext/testkit/tests/fixtures/audio); and `n_past`, the
#   positions the prompt took;
# - per build profile (Elelem.build_profile, as the other goldens: greedy ids hold only within
#   one), the greedy ids, their text where it is UTF-8, each step's top-two logit margin, and
#   the SHA-256 of each image chunk's embeddings (mtmd_get_output_embd, raw f32: n_tokens x
#   n_embd), so that an encoder can be compared end to end.
#
# ext/testkit/tests/vision_golden.rs and spec/vision_spec.rb check elelem against them. A
# build profile the fixtures lack is recorded by `rake goldens` into the cache of recordings
# ({ensure_recorded}).
module VisionGolden
  FORMAT = "elelem-vision-golden/1"
  DIR = File.join(Reference::GOLDENS, "vision")
  MODELS_DIR = File.join(Reference::ROOT, "tmp", "synthetic", "vision")
  IMAGES_DIR = File.join(Reference::ROOT, "ext", "testkit", "tests", "fixtures", "vision")
  AUDIO_DIR = File.join(Reference::ROOT, "ext", "testkit", "tests", "fixtures", "audio")
  # The MP3 and FLAC files (made with lame and flac: its README).
  COMPRESSED_AUDIO_DIR = File.join(Reference::ROOT, "spec", "fixtures", "audio")
  N_PREDICT = 16
  MARKER = "<__media__>"

  # The cases: prompt text (a marker per image) and images, of different sizes, aspects and
  # formats; one prompt has two, with text between and after them. Gemma 3's projector resizes
  # every image to its square (one chunk of 16 tokens, framed by <start_of_image> and
  # <end_of_image>); Idefics3's scales it to a longest edge of 256 and cuts it into tiles of
  # 128 (2 x 2 for these images) and an overview, a chunk of 64 tokens each, framed by its
  # row and column tokens.
  SINGLE_IMAGE = {
    "jpeg-160x120" => ["describe #{MARKER}", ["160x120-420.jpg"]],
    "jpeg-97x61" => ["describe #{MARKER}", ["97x61-422.jpg"]],
    "png-47x31" => ["describe #{MARKER}", ["47x31-rgba-16bit.png"]]
  }.freeze
  TWO_IMAGES = {
    "two-images" => ["compare #{MARKER} to #{MARKER} in it", ["97x61-grey.jpg", "160x120-progressive-420.jpg"]]
  }.freeze
  # LFM2-VL's projector resizes an image within 64 to 256 tokens (a token per 32 x 32 pixels)
  # and, past twice that, cuts it into tiles of 512 (here 3 x 2 of 256 tokens each, framed by
  # their <|img_row_R_col_C|>) and a thumbnail (after <|img_thumbnail|>); the small images
  # are one chunk each, between <|image_start|> and <|image_end|>.
  TILED_IMAGE = {
    "png-1100x700-tiled" => ["describe #{MARKER}", ["1100x700-rgb.png"]]
  }.freeze
  # LLaVA 1.6's projector (mtmd's LLaVA-UHD slicing at its grid pinpoints, 64 x 128, 128 x 64
  # and 128 x 128 here) cuts each image into the slices of the best fitting pinpoint and an
  # overview, a chunk of 64 tokens each, with no text around them: a prompt that ended with
  # its image would have no text to take the logits of (mtmd's helper asks none of an image
  # chunk), so its single-image prompts go on after the image.
  # MobileVLM V2's (ldpv2) is one chunk of 144 tokens an image, with no text around it either.
  # InternVL's (the same slicing, at the grids of 1 to 12 tiles of 64) puts the overview after
  # the tiles, 16 tokens each, all between <img> and </img>.
  TEXT_AFTER = SINGLE_IMAGE.transform_values { |(prompt, images)| ["#{prompt} briefly", images] }.freeze
  # Qwen2-VL's projector smart-resizes an image to multiples of 28 pixels within 8 to 4096
  # tokens, one chunk between <|vision_start|> and <|vision_end|>; its language model places
  # the chunk's tokens at [t, t + row, t + column] and the text after it at t + max(nx, ny)
  # (the large image: 39 x 25 tokens in 39 positions). Qwen2.5-VL's does the same, its encoder
  # attending within windows of 4 x 4 tokens in all layers but every second (the large image:
  # 10 x 7 windows, the last column's and row's partial; the small ones a window or less).
  # Qwen3-VL's does the same at a token
  # per 32 x 32 pixels, each token's embedding its main path's and its 2 deepstack layers'
  # (n_embd x 3 values), which its language model adds to its first 2 layers' outputs.
  # Pixtral's resizes an image within 8 to 1024 tokens (a token per 32 x 32 pixels here) and
  # encodes it whole, an [IMG_BREAK] embedding after each row of tokens but the last, then
  # [IMG_END]: the large image is one chunk of 34 x 22 tokens and 21 breaks. Llama 4's cuts an
  # image into LLaVA-UHD's tiles of 128 (up to 3 x 3) and an overview, 64 tokens each, between
  # <|image_start|> and <|image_end|>. Gemma 4's resizes an image within 70 to 1120 tokens (a
  # token per 24 x 24 pixels) into one chunk between <|image> and <image|>, decoded non-causally.
  # Qwen2-Audio's projector turns an audio file into 30 s log-mel pieces of 750 tokens each,
  # a chunk per piece between <|audio_bos|> and <|audio_eos|>, each token a position (under
  # M-RoPE too: mtmd's helper places an audio chunk's tokens as text's, not on a grid). The
  # MP3 (44.1 kHz stereo, an ID3v2 tag) and the FLAC (8 kHz, 24-bit) are read by the
  # reference through its mtmd-helper's miniaudio.
  AUDIO = {
    "wav-tones-1s" => ["listen to #{MARKER} and say", ["tones-1s.wav"]],
    "two-wavs" => ["compare #{MARKER} to #{MARKER} in it", ["tones-1s.wav", "noise-0.25s.wav"]],
    "mp3-tones" => ["listen to #{MARKER} and say", ["tones-44k-stereo-cbr128-id3v2.mp3"]],
    "flac-then-wav" => ["compare #{MARKER} to #{MARKER} in it", ["tones-8k-mono-24bit.flac", "noise-0.25s.wav"]]
  }.freeze
  # Qwen2.5-Omni's projector holds both encoders (`qwen2.5o`): each medium is an image or a
  # WAV by its bytes (mtmd's helper), laid out and encoded by its own encoder, Qwen2.5-VL's
  # (between <|vision_start|> and <|vision_end|>, on its grid) or Qwen2-Audio's (between
  # <|audio_bos|> and <|audio_eos|>, a position each), in one prompt in either order.
  OMNI = {
    "jpeg-97x61" => ["describe #{MARKER}", ["97x61-422.jpg"]],
    "wav-tones-1s" => ["listen to #{MARKER} and say", ["tones-1s.wav"]],
    "image-then-wav" => ["compare #{MARKER} to #{MARKER} in it", ["97x61-grey.jpg", "tones-1s.wav"]],
    "wav-then-image" => ["compare #{MARKER} to #{MARKER} in it", ["noise-0.25s.wav", "160x120-progressive-420.jpg"]]
  }.freeze
  CASES = {
    "tiny-gemma3-vision" => SINGLE_IMAGE.merge(TWO_IMAGES),
    "tiny-llava-vision" => TEXT_AFTER.merge(TWO_IMAGES),
    "tiny-mobilevlm-vision" => TEXT_AFTER.merge(TWO_IMAGES),
    "tiny-internvl-vision" => SINGLE_IMAGE.merge(TWO_IMAGES),
    "tiny-idefics3-vision" => SINGLE_IMAGE.merge(TWO_IMAGES),
    "tiny-lfm2-vision" => SINGLE_IMAGE.merge(TWO_IMAGES, TILED_IMAGE),
    "tiny-qwen2vl-vision" => SINGLE_IMAGE.merge(TWO_IMAGES, TILED_IMAGE),
    "tiny-qwen25vl-vision" => SINGLE_IMAGE.merge(TWO_IMAGES, TILED_IMAGE),
    "tiny-qwen3vl-vision" => SINGLE_IMAGE.merge(TWO_IMAGES, TILED_IMAGE),
    "tiny-qwen3vlmoe-vision" => SINGLE_IMAGE.merge(TWO_IMAGES, TILED_IMAGE),
    "tiny-pixtral-vision" => SINGLE_IMAGE.merge(TWO_IMAGES, TILED_IMAGE),
    "tiny-llama4-vision" => SINGLE_IMAGE.merge(TWO_IMAGES, TILED_IMAGE),
    "tiny-gemma4-vision" => SINGLE_IMAGE.merge(TWO_IMAGES),
    "tiny-qwen2a-audio" => AUDIO,
    "tiny-qwen2a-mrope-audio" => AUDIO,
    "tiny-qwen25o-omni" => OMNI
  }.freeze

  module_function

  def fixture(name)
    File.join(DIR, "#{name}.json")
  end

  def model_path(name) = File.join(MODELS_DIR, "#{name}.gguf")

  def mmproj_path(name) = File.join(MODELS_DIR, "#{name}.mmproj.gguf")

  # `rake vision_golden`: every pair's fixture (or those of `pairs`, `rake vision_golden
  # PAIRS=a,b`), with this build profile's recording.
  # @param pairs [Array<String>, nil] the pairs to record; nil: all
  def run(pairs = nil)
    unknown = Array(pairs) - CASES.keys
    raise ArgumentError, "no such vision pairs: #{unknown.join(", ")}" unless unknown.empty?

    Reference.build
    (pairs || CASES.keys).each { |name| record(name) }
  end

  # `rake goldens`: each pair whose fixture has no recording for this build profile is
  # recorded from the reference into `<cache>/<profile>/<name>.json` (the fixture with this
  # profile's recording), as the other goldens are, unless the cache has it already.
  def ensure_recorded(cache)
    id = Elelem.build_profile[:id]
    CASES.each_key do |name|
      next if JSON.parse(File.read(fixture(name)))["recordings"].key?(id)

      cached = File.join(cache, id, "#{name}.json")
      next if File.exist?(cached) && JSON.parse(File.read(cached))["recordings"]&.key?(id)

      Reference.build
      FileUtils.mkdir_p(File.dirname(cached))
      File.write(cached, "#{JSON.pretty_generate(document(name))}\n")
      puts "recorded #{name} for build profile #{id} into #{cached}"
    end
  end

  # Records `name`'s cases under this build profile into its fixture ({document}).
  # @return [Hash] the fixture
  def record(name)
    write(name, document(name))
  end

  # `name`'s fixture with this build profile's recording. Other profiles' recordings stay
  # while the model, the projector and the cases (their chunks included) are what they were
  # recorded with; otherwise they go.
  # @return [Hash]
  def document(name)
    Reference.check_profile!
    files = { "model" => file_entry(model_path(name)), "mmproj" => file_entry(mmproj_path(name)) }
    runs = CASES.fetch(name).map { |case_name, (prompt, images)| run_case(name, case_name, prompt, images) }
    cases = runs.map(&:first)
    recordings = kept_recordings(name, files.merge("cases" => cases))
    recordings[Elelem.build_profile[:id]] = recording(cases.map { |c| c["name"] }.zip(runs.map(&:last)).to_h)
    { "format" => FORMAT, **files, "n_ctx" => Reference::N_CTX, "n_threads" => Reference::N_THREADS,
      "cases" => cases, "recordings" => recordings }
  end

  def write(name, doc)
    FileUtils.mkdir_p(DIR)
    File.write(fixture(name), "#{JSON.pretty_generate(doc)}\n")
    puts "recorded #{File.basename(fixture(name))} for build profile #{Elelem.build_profile[:id]}"
    doc
  end

  # The fixture's recordings, if it holds `what` (the files and the cases) as they are now.
  def kept_recordings(name, what)
    return {} unless File.exist?(fixture(name))

    old = JSON.parse(File.read(fixture(name)))
    return old["recordings"] if old.slice(*what.keys) == what

    puts "#{name}: the other profiles' recordings are dropped (new files or cases)"
    {}
  end

  # One case through the driver: the case (what holds for any build) and this build's output.
  def run_case(name, case_name, prompt, images)
    out = Tempfile.create("elelem-vision") do |embd|
      embd.close
      lines = mtmd(name, prompt, images, embd.path)
      lines.merge("embd" => File.binread(embd.path))
    end
    kase = { "name" => case_name, "prompt_text" => prompt,
             "images" => images.map { |f| { "file" => f, "sha256" => Digest::SHA256.file(image(f)).hexdigest } },
             "max_tokens" => N_PREDICT, "ignore_eos" => false, "chunks" => out["chunks"], "n_past" => out["n_past"] }
    tokens = out["chunks"].reject { |c| c["type"] == "text" }.map { |c| c["n_tokens"] }
    puts "#{name} #{case_name}: media tokens #{tokens.join(",")}, encode_ms #{out["encode_ms"].join(",")}"
    [kase, output(out)]
  end

  # A case's image (or, a `.wav`, `.mp3` or `.flac`, audio) file.
  def image(file)
    return File.join(AUDIO_DIR, file) if file.end_with?(".wav")
    return File.join(COMPRESSED_AUDIO_DIR, file) if file.end_with?(".mp3", ".flac")

    File.join(IMAGES_DIR, file)
  end

  # The large test image, 1100 x 700 (ext/testkit/tests/fixtures/vision/1100x700-rgb.png, made
  # by `write_test_image`): an 8-bit RGB PNG of gradients, stripes and a checkerboard,
  # computed from the pixel's coordinates alone, each row filtered by Sub, compressed by Zlib.
  def test_image_png(width = 1100, height = 700)
    require "zlib"
    rows = Array.new(height) { |row| sub_filtered(test_image_row(row, width, height)) }
    chunk = ->(type, data) { [data.bytesize, type, data, Zlib.crc32(type + data)].pack("Na4a*N") }
    "\x89PNG\r\n\x1a\n".b + chunk.call("IHDR", [width, height, 8, 2, 0, 0, 0].pack("NNCCCCC")) +
      chunk.call("IDAT", Zlib::Deflate.deflate(rows.join, Zlib::BEST_COMPRESSION)) + chunk.call("IEND", "")
  end

  # Row `row`'s RGB bytes.
  def test_image_row(row, width, height)
    Array.new(width) do |x|
      [(x * 255 / (width - 1)) ^ (((x / 64) + (row / 64)).odd? ? 0x40 : 0),
       row * 255 / (height - 1), (((x / 8) + (row / 8)) * 5) % 256]
    end.flatten
  end

  # PNG's Sub filter (type 1) of an RGB row: each byte less the byte a pixel before.
  def sub_filtered(bytes)
    [1, *bytes.each_with_index.map { |b, i| i < 3 ? b : (b - bytes[i - 3]) & 0xff }].pack("C*")
  end

  def write_test_image = File.binwrite(image("1100x700-rgb.png"), test_image_png)

  # The audio test files (ext/testkit/tests/fixtures/audio, made by `write_test_audio`):
  # 16 kHz mono 16-bit PCM WAVs, a second of two gliding tones under an envelope, and a
  # quarter of a second of noise from a linear congruential generator.
  def write_test_audio
    File.binwrite(image("tones-1s.wav"), wav(test_tones))
    File.binwrite(image("noise-0.25s.wav"), wav(test_noise))
  end

  def test_tones
    Array.new(16_000) do |i|
      t = i / 16_000.0
      glide = ->(f0, f1) { Math.sin(2 * Math::PI * ((f0 * t) + ((f1 - f0) * t * t / 2))) }
      envelope = 0.5 + (0.5 * Math.sin(2 * Math::PI * 3 * t))
      (envelope * ((0.4 * glide.call(220, 330)) + (0.2 * glide.call(1400, 900))) * 32_767).round
    end
  end

  def test_noise
    state = 1
    Array.new(4_000) { ((state = ((state * 1_103_515_245) + 12_345) % (2**31)) >> 15) - 16_384 }
  end

  # A 16 kHz mono 16-bit PCM WAV of `samples`.
  def wav(samples)
    n = samples.size * 2
    ["RIFF", 36 + n, "WAVE", "fmt ", 16, 1, 1, 16_000, 32_000, 2, 16, "data", n].pack("a4Va4a4VvvVVvva4V") +
      samples.pack("s<*")
  end

  # The driver's lines, parsed: the chunks, n_embd, n_past, encode_ms, then generate's ids,
  # hex text and margins.
  def mtmd(name, prompt, images, embd_path)
    Tempfile.create("elelem-vision-prompt") do |f|
      f.puts(prompt.unpack1("H*"))
      f.flush
      args = ["--embd-out", embd_path, "mtmd", model_path(name), mmproj_path(name), f.path, N_PREDICT,
              Reference::N_CTX, Reference::N_THREADS, *images.map { |i| image(i) }]
      out, err, status = Open3.capture3(Reference.binary, *args.map(&:to_s))
      raise "reference mtmd failed (#{status}): #{err.lines.last(3).join}" unless status.success?

      parse(out.lines.map(&:chomp))
    end
  end

  def parse(lines)
    chunks = lines.take_while { |l| l.start_with?("chunk ") }.map { |l| chunk(l.split.drop(1)) }
    rest = lines.drop(chunks.size)
    n_embd, n_past, encode_ms = keyed(rest.first(3), %w[n_embd n_past encode_ms])
    ids, hex, margins = rest.drop(3)
    { "chunks" => chunks, "n_embd" => n_embd.first.to_i, "n_past" => n_past.first.to_i,
      "encode_ms" => encode_ms.map(&:to_f), "ids" => ids.split.map(&:to_i), "hex" => hex,
      "margins" => margins.split.map(&:to_f) }
  end

  # The values of lines "KEY VALUE...", in the order of `keys`.
  def keyed(lines, keys)
    keys.zip(lines).map do |key, line|
      printed, *values = line.to_s.split
      printed == key ? values : raise("the driver printed #{line.inspect} where #{key} was expected")
    end
  end

  def chunk((type, *values))
    return { "type" => "text", "ids" => values.map(&:to_i) } if type == "text"
    # One log-mel piece of an audio file: its tokens take a position each.
    return %w[n_tokens n_pos].zip(values.map(&:to_i)).to_h.merge("type" => "audio") if type == "audio"

    %w[n_tokens n_pos nx ny].zip(values.map(&:to_i)).to_h.merge("type" => "image")
                            .slice("type", "n_tokens", "n_pos", "nx", "ny")
  end

  # The build's part: the ids, their text, the margins, and each image (and audio) chunk's
  # embeddings' SHA-256 (the driver wrote them one after the other).
  def output(out)
    text = [out["hex"]].pack("H*").force_encoding(Encoding::UTF_8)
    { "ids" => out["ids"], "text" => (text if text.valid_encoding?), "margins" => out["margins"],
      "n_embd" => out["n_embd"], "embd_sha256" => embd_digests(out) }.compact
  end

  def embd_digests(out)
    media = out["chunks"].select { |c| %w[image audio].include?(c["type"]) }
    sizes = media.map { |c| c["n_tokens"] * out["n_embd"] * 4 }
    embd = out["embd"]
    raise "the embeddings are #{embd.bytesize} bytes, not #{sizes.sum}" unless embd.bytesize == sizes.sum

    sizes.each_with_index.map { |n, i| Digest::SHA256.hexdigest(embd.byteslice(sizes.first(i).sum, n)) }
  end

  def recording(outputs)
    profile = Elelem.build_profile
    { "build" => profile.except(:id, :cpu).transform_keys(&:to_s), "cpu" => profile[:cpu],
      "recorder" => "llama.cpp (#{File.basename(Reference.binary)} mtmd, greedy)",
      "recorded_at" => Time.now.utc.iso8601, "outputs" => outputs }
  end

  def file_entry(path)
    raise "#{path} is missing: run `rake canary`" unless File.exist?(path)

    { "file" => File.basename(path), "sha256" => Digest::SHA256.file(path).hexdigest }
  end
end
