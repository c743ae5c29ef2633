# frozen_string_literal: true

require "base64"
require "pathname"
require "stringio"
require "tempfile"
require_relative "spec_helper"
require_relative "support/projector_pairs"
require_relative "support/cli_runner"

# Audio in prompts, against llama.cpp's libmtmd: the synthetic language models with a
# Qwen2-Audio projector of tmp/synthetic/vision (`tiny-qwen2a-audio`, and
# `tiny-qwen2a-mrope-audio` under M-RoPE; written by `rake canary`) with the cases and
# greedy ids the reference driver's `mtmd` mode recorded from WAV, MP3 and FLAC files
# (spec/fixtures/goldens/vision).
RSpec.describe "audio in prompts" do
  vision_dir = File.join(SYNTHETIC_DIR, "vision")
  media_dir = File.join(ROOT, "ext", "testkit", "tests", "fixtures", "audio")
  # The MP3, FLAC and Ogg files (spec/fixtures/audio/README.md).
  compressed_dir = File.join(ROOT, "spec", "fixtures", "audio")
  wav_path = File.join(media_dir, "tones-1s.wav")
  mp3_path = File.join(compressed_dir, "tones-44k-stereo-cbr128-id3v2.mp3")
  audio_file = ->(name) { File.join(name.end_with?(".wav") ? media_dir : compressed_dir, name) }

  # A 16-bit mono PCM WAV of `samples` at `rate`.
  def self.wav(samples, rate)
    n = samples.size * 2
    ["RIFF", 36 + n, "WAVE", "fmt ", 16, 1, 1, rate, rate * 2, 2, 16, "data", n].pack("a4Va4a4VvvVVvva4V") +
      samples.pack("s<*")
  end

  %w[tiny-qwen2a-audio tiny-qwen2a-mrope-audio].each do |name|
    it "gives #{name}'s greedy ids, as libmtmd does, for every case" do
      fixture, recording = ProjectorPairs.recording(name)
      model = ProjectorPairs.open_pair(vision_dir, name, n_ctx: fixture["n_ctx"])
      fixture["cases"].each do |kase|
        audio = kase["images"].map { |i| audio_file.call(i["file"]) }
        completion = model.complete(kase["prompt_text"], audio:, max_tokens: kase["max_tokens"])
        expect(completion.tokens).to eq(recording["outputs"][kase["name"]]["ids"]), "#{name} #{kase["name"]}"
        expect(completion.prompt_tokens).to eq(kase["n_past"])
      end
    ensure
      model&.close
    end
  end

  context "with the Qwen2-Audio pair" do
    let(:model) { ProjectorPairs.open_pair(vision_dir, "tiny-qwen2a-audio") }
    let(:expected) { ProjectorPairs.recording("tiny-qwen2a-audio")[1]["outputs"]["wav-tones-1s"]["ids"] }
    let(:prompt) { "listen to <__media__> and say" }

    after { model.close }

    it "says it takes audio, not images" do
      expect(model.audio?).to be(true)
      expect(model.vision?).to be(false)
      expect(model.info).to include(mmproj: "qwen2a", audio: true)
    end

    it "takes a WAV file as a path, a Pathname, bytes or an IO alike" do
      bytes = File.binread(wav_path)
      [wav_path, Pathname(wav_path), bytes, StringIO.new(bytes)].each do |form|
        expect(model.complete(prompt, audio: [form], max_tokens: 16).tokens).to eq(expected), form.class.name
      end
    end

    it "takes each prompt's audio in generate_all, decoded together as each alone" do
      # Batch-invariant: a sequence's bits are then those it gets alone on any CPU.
      noise = File.join(media_dir, "noise-0.25s.wav")
      batched = ProjectorPairs.open_pair(vision_dir, "tiny-qwen2a-audio", n_ctx: 6144, parallel: 3,
                                                                          batch_invariant: true)
      prompts = [prompt, "compare <__media__> to <__media__>", "say"]
      audio = [[wav_path], [noise, wav_path], nil]
      alone = prompts.zip(audio).map { |text, files| batched.generate(text, audio: files, max_tokens: 12) }
      expect(batched.generate_all(prompts, audio:, max_tokens: 12)).to eq(alone)
      expect { batched.generate_all(prompts, audio: [[wav_path]]) }
        .to raise_error(ArgumentError, /audio: must hold an entry per prompt .* got 1 for 3 prompts/)
      expect { batched.generate_all(prompts, images: [nil] * 3, audio:) }.to raise_error(ArgumentError, /together/)
      expect { model.generate_all([prompt], audio: [["missing.wav"]]) }.to raise_error(Elelem::AudioError)
    ensure
      batched&.close
    end

    it "takes an MP3 as a path, bytes, an IO or input_audio with format mp3, as libmtmd reads it" do
      mp3 = ProjectorPairs.recording("tiny-qwen2a-audio")[1]["outputs"]["mp3-tones"]["ids"]
      bytes = File.binread(mp3_path)
      [mp3_path, bytes, StringIO.new(bytes)].each do |form|
        expect(model.complete(prompt, audio: [form], max_tokens: 16).tokens).to eq(mp3), form.class.name
      end
      template = "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"
      part = { type: "input_audio", input_audio: { data: Base64.strict_encode64(bytes), format: "mp3" } }
      messages = [{ role: "user", content: [{ type: "text", text: "listen to " }, part, " and say"] }]
      expect(model.complete(messages, template:, max_tokens: 16).tokens).to eq(mp3)
      flac = Base64.strict_encode64(File.binread(audio_file.call("tones-16k-mono-16bit.flac")))
      flac = { type: "input_audio", input_audio: { data: flac, format: "flac" } }
      expect(model.complete([{ role: "user", content: [flac] }], template:, max_tokens: 1).tokens.size).to eq(1)
    end

    it "refuses Ogg, AAC and other audio it does not read with an AudioError naming what it reads" do
      ogg = File.join(compressed_dir, "tone-16k-mono.ogg")
      expect { model.generate(prompt, audio: [ogg]) }
        .to raise_error(Elelem::AudioError, /an Ogg file: Vorbis, Opus\): elelem reads WAV, MP3 and FLAC/)
      adts = "\xFF\xF1\x50\x80\x02\x1F\xFC".b + ("\x21".b * 200)
      expect { model.generate(prompt, audio: [adts]) }.to raise_error(Elelem::AudioError, /reads WAV, MP3 and FLAC/)
      data = Base64.strict_encode64(File.binread(ogg))
      ogg_part = { type: "input_audio", input_audio: { data:, format: "ogg" } }
      expect { model.chat([{ role: "user", content: [ogg_part] }]) }
        .to raise_error(Elelem::AudioError, /format must be one of wav, mp3, flac/)
      expect(model.complete(prompt, audio: [wav_path], max_tokens: 16).tokens).to eq(expected)
    end

    it "times the encoder for audio not yet in its cache, under its own name" do
      first = model.complete(prompt, audio: [wav_path], max_tokens: 2).timings
      again = model.complete(prompt, audio: [wav_path], max_tokens: 2).timings
      expect(first[:audio_encode_seconds]).to be_positive
      expect(again[:audio_encode_seconds]).to eq(0.0)
      expect(first).not_to have_key(:image_encode_seconds)
    end

    it "reads audio parts of chat messages (input_audio's base64 WAV, or an audio file) where they are" do
      template = "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"
      data = Base64.strict_encode64(File.binread(wav_path))
      parts = [{ type: "input_audio", input_audio: { data:, format: "wav" } }, { type: "audio", audio: wav_path }]
      parts.each do |part|
        messages = [{ role: "user", content: [{ type: "text", text: "listen to " }, part, " and say"] }]
        expect(model.complete(messages, template:, max_tokens: 16).tokens).to eq(expected), part[:type]
      end
    end

    it "refuses audio it does not read with an AudioError naming what is wrong, and keeps working" do
      refusals = {
        "0 Hz" => [self.class.wav([0] * 800, 0), /0 Hz.*from 1 Hz/],
        "random bytes" => ["\x01".b + Random.new(1).bytes(4095), /not an audio file .*: elelem reads WAV, MP3 and/],
        "a cut WAV" => [File.binread(wav_path)[0, 30], /WAV/],
        "a truncated WAV" => [File.binread(wav_path)[0, 4000], /truncated/]
      }
      refusals.each do |what, (bytes, message)|
        expect { model.generate(prompt, audio: [bytes]) }.to raise_error(Elelem::AudioError, message), what
      end
      parts = [{ type: "input_audio", input_audio: { data: "!!", format: "wav" } },
               { type: "input_audio", input_audio: { data: "", format: "aac" } },
               { type: "audio_url", audio_url: { url: "https://example.com/a.wav" } }]
      parts.each do |part|
        expect { model.chat([{ role: "user", content: [part] }]) }.to raise_error(Elelem::AudioError), part.inspect
      end
      expect { model.generate(prompt, images: [wav_path]) }.to raise_error(Elelem::ImageError, /takes audio/)
      expect { model.generate(prompt, images: [wav_path], audio: [wav_path]) }.to raise_error(ArgumentError, /together/)
      expect(model.complete(prompt, audio: [wav_path], max_tokens: 16).tokens).to eq(expected)
    end

    it "takes a WAV file of another rate, resampled to 16 kHz as miniaudio does" do
      # 0.5 s of a 440 Hz tone at 48 kHz (the samples against miniaudio's: tests/audio.rs).
      tone = Array.new(24_000) { |i| (Math.sin(2 * Math::PI * 440 * i / 48_000.0) * 16_000).round }
      expect(model.generate(prompt, audio: [self.class.wav(tone, 48_000)], max_tokens: 4)).to be_a(String)
    end
  end

  it "serves audio: OpenAI's input_audio parts (WAV and MP3), a bad WAV a 400, then serves on" do
    require "rack"
    template = "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}" \
               "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}"
    model = ProjectorPairs.open_pair(vision_dir, "tiny-qwen2a-audio")
    server = Elelem::Server.new(model, template:, max_tokens: 8)
    post = lambda do |body|
      Rack::MockRequest.new(Rack::Lint.new(server))
                       .request("POST", "/v1/chat/completions", input: JSON.generate(body),
                                                                "CONTENT_TYPE" => "application/json")
    end
    parts = [{ type: "text", text: "listen to " },
             { type: "input_audio",
               input_audio: { data: Base64.strict_encode64(File.binread(wav_path)), format: "wav" } }]
    expected = model.complete(model.chat_input([{ role: "user", content: parts }], template:), max_tokens: 8)
    reply = JSON.parse(post.call({ messages: [{ role: "user", content: parts }], max_tokens: 8, temperature: 0 }).body)
    expect(reply["choices"][0]["message"]["content"]).to eq(expected.text)
    expect(reply["usage"]["prompt_tokens"]).to eq(expected.prompt_tokens)
    mp3 = [parts[0], { type: "input_audio",
                       input_audio: { data: Base64.strict_encode64(File.binread(mp3_path)), format: "mp3" } }]
    expected = model.complete(model.chat_input([{ role: "user", content: mp3 }], template:), max_tokens: 8)
    reply = JSON.parse(post.call({ messages: [{ role: "user", content: mp3 }], max_tokens: 8, temperature: 0 }).body)
    expect(reply["choices"][0]["message"]["content"]).to eq(expected.text)
    broken = [{ type: "input_audio", input_audio: { data: Base64.strict_encode64("RIFF"), format: "wav" } }]
    response = post.call({ messages: [{ role: "user", content: broken }] })
    expect(response.status).to eq(400)
    expect(JSON.parse(response.body)["error"]["message"]).to match(/WAV/)
    expect(post.call({ messages: [{ role: "user", content: parts }], max_tokens: 2 }).status).to eq(200)
  ensure
    model&.close
  end

  describe "the elelem command" do
    include CliRunner

    it "takes --audio, with a chat template too, and refuses --image for an audio projector" do
      base = ProjectorPairs.cli_args(vision_dir, "tiny-qwen2a-audio", 4)
      model = ProjectorPairs.open_pair(vision_dir, "tiny-qwen2a-audio")
      prompt = "listen to <__media__> and say"
      status, out, = run(*base, "--audio", wav_path, prompt)
      expected = model.complete(prompt, audio: [wav_path], max_tokens: 4)
      expect([status, JSON.parse(out).values_at("text", "prompt_tokens")]).to eq([0, [expected.text, 772]])
      template = "{% for m in messages %}{% for p in m.content %}{{ p.text or p }}{% endfor %}{% endfor %}"
      Tempfile.create(["template", ".jinja"]) do |file|
        File.write(file.path, template)
        status, out, = run(*base, "--template", file.path, "--audio", wav_path, "what is it?")
        content = [{ type: "audio", audio: wav_path }, "what is it?"]
        expected = model.complete(model.chat_input([{ role: "user", content: }], template:), max_tokens: 4)
        expect([status, JSON.parse(out).values_at("text", "prompt_tokens")])
          .to eq([0, [expected.text, expected.prompt_tokens]])
      end
      status, _, err = run(*base, "--image", wav_path, "describe")
      expect([status, err]).to match([1, /takes audio/])
    ensure
      model&.close
    end
  end

  it "refuses audio that does not fit the context before encoding any of it" do
    model = ProjectorPairs.open_pair(vision_dir, "tiny-qwen2a-audio", n_ctx: 512)
    # 20 s of silence: 12 tokens, 750 for its one piece, 1 after.
    wav = self.class.wav([0] * 320_000, 16_000)
    expect { model.generate("listen to <__media__>", audio: [wav]) }
      .to raise_error(Elelem::ContextFullError, /763 tokens do not fit: the sequence holds 0 of n_ctx 512/)
    expect(model.complete("hello", max_tokens: 2).tokens.size).to eq(2)
  ensure
    model&.close
  end

  it "tells audio from images by their bytes, by the engine's rule" do
    audio = Dir[File.join(compressed_dir, "*.{mp3,flac}")] + [wav_path]
    images = Dir[File.join(ROOT, "ext", "testkit", "tests", "fixtures", "vision", "*")]
    expect(audio.size).to eq(14)
    expect(audio.reject { |f| Elelem::Media.audio?(File.binread(f)) }).to be_empty
    expect(images.size).to be > 5
    expect(images.select { |f| Elelem::Media.audio?(File.binread(f)) }).to be_empty
    expect(Elelem::Media.audio?(File.binread(File.join(compressed_dir, "tone-16k-mono.ogg")))).to be(false)
    expect(Elelem::Media.audio?("fLaC#{"\0" * 7}".b)).to be(false) # 11 bytes, as mtmd-helper needs 12
  end

  it "refuses audio on a model without an audio projector, by name" do
    model = ProjectorPairs.open_pair(vision_dir, "tiny-gemma3-vision")
    expect { model.generate("listen to <__media__>", audio: [wav_path]) }
      .to raise_error(Elelem::AudioError, /audio projector/)
    part = { type: "input_audio", input_audio: { data: "", format: "wav" } }
    expect { model.chat([{ role: "user", content: [part] }]) }
      .to raise_error(Elelem::AudioError, /audio content parts \(input_audio\) need a model opened with an audio/)
  ensure
    model&.close
  end
end
