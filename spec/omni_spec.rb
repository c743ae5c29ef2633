# frozen_string_literal: true

require "base64"
require "stringio"
require_relative "spec_helper"
require_relative "support/projector_pairs"
require_relative "support/cli_runner"

# Images and audio in one prompt, against llama.cpp's libmtmd: the synthetic Qwen2-VL language
# model with a Qwen2.5-Omni projector of tmp/synthetic/vision (`tiny-qwen25o-omni`: a
# Qwen2.5-VL vision encoder and a Qwen2-Audio one in one file, `qwen2.5o`; written by `rake
# canary`) with the cases and greedy ids the reference driver's `mtmd` mode recorded
# (spec/fixtures/goldens/vision): an image, a WAV, an image then a WAV, a WAV then an image.
RSpec.describe "images and audio together" do
  vision_dir = File.join(SYNTHETIC_DIR, "vision")
  images_dir = File.join(ROOT, "ext", "testkit", "tests", "fixtures", "vision")
  audio_dir = File.join(ROOT, "ext", "testkit", "tests", "fixtures", "audio")
  file = ->(name) { File.join(name.end_with?(".wav") ? audio_dir : images_dir, name) }
  # Message contents rendered as they are, the media parts as their markers.
  template = "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}" \
             "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}"

  let(:pair) { ProjectorPairs.recording("tiny-qwen25o-omni") }
  let(:model) { ProjectorPairs.open_pair(vision_dir, "tiny-qwen25o-omni", n_ctx: pair[0]["n_ctx"]) }
  let(:outputs) { pair[1]["outputs"] }

  after { model.close }

  it "says it takes images and audio" do
    expect(model.vision?).to be(true)
    expect(model.audio?).to be(true)
    expect(model.info).to include(mmproj: "qwen2.5vl_merger+qwen2a", vision: true, audio: true)
    expect(model.inspect).to include("mmproj=qwen2.5vl_merger+qwen2a")
  end

  it "gives the greedy ids libmtmd gives for every case, through media:" do
    pair[0]["cases"].each do |kase|
      media = kase["images"].map { |i| file.call(i["file"]) }
      completion = model.complete(kase["prompt_text"], media:, max_tokens: kase["max_tokens"])
      expect(completion.tokens).to eq(outputs[kase["name"]]["ids"]), kase["name"]
      # Every token of mtmd's chunks (an image's take fewer positions, `n_past`, on its grid).
      tokens = kase["chunks"].sum { |chunk| chunk["ids"]&.size || chunk["n_tokens"] }
      expect(completion.prompt_tokens).to eq(tokens), kase["name"]
    end
  end

  it "times each encoder apart, and takes images: or audio: alone as before" do
    media = [file.call("noise-0.25s.wav"), file.call("97x61-cmyk.jpg")]
    first = model.complete("compare <__media__> to <__media__> in it", media:, max_tokens: 1).timings
    expect(first[:image_encode_seconds]).to be_positive
    expect(first[:audio_encode_seconds]).to be_positive
    image = model.complete("describe <__media__>", images: [file.call("97x61-422.jpg")], max_tokens: 16)
    expect(image.tokens).to eq(outputs["jpeg-97x61"]["ids"])
    expect(image.timings).not_to have_key(:audio_encode_seconds)
    audio = model.complete("listen to <__media__> and say", audio: [file.call("tones-1s.wav")], max_tokens: 16)
    expect(audio.tokens).to eq(outputs["wav-tones-1s"]["ids"])
  end

  it "takes a conversation's image and audio parts in their order, as the same prompt" do
    wav = Base64.strict_encode64(File.binread(file.call("tones-1s.wav")))
    content = [{ type: "text", text: "compare " }, { type: "image", image: file.call("97x61-grey.jpg") },
               { type: "text", text: " to " }, { type: "input_audio", input_audio: { data: wav, format: "wav" } },
               { type: "text", text: " in it" }]
    reply = model.complete([{ role: "user", content: }], template:, max_tokens: 16, temperature: 0)
    expect(reply.tokens).to eq(outputs["image-then-wav"]["ids"])
    swapped = [content[0], { type: "audio", audio: StringIO.new(File.binread(file.call("noise-0.25s.wav"))) },
               content[2], { type: "image", image: file.call("160x120-progressive-420.jpg") }, content[4]]
    reply = model.complete([{ role: "user", content: swapped }], template:, max_tokens: 16, temperature: 0)
    expect(reply.tokens).to eq(outputs["wav-then-image"]["ids"])
  end

  it "refuses media of the wrong kind for their slot, and more than one of images:, audio: and media:" do
    image = file.call("97x61-422.jpg")
    wav = file.call("tones-1s.wav")
    prompt = "compare <__media__> to <__media__>"
    expect { model.generate(prompt, images: [image], audio: [wav]) }.to raise_error(ArgumentError, /media:/)
    expect { model.generate(prompt, media: [image, wav], images: [image]) }.to raise_error(ArgumentError, /together/)
    expect { model.generate(prompt, images: [image, wav]) }.to raise_error(Elelem::ImageError, /WAV/)
    expect { model.generate(prompt, audio: [wav, image]) }.to raise_error(Elelem::AudioError, /not a WAV, MP3 or FLAC/)
    mp3 = File.join(ROOT, "spec", "fixtures", "audio", "tones-16k-mono-cbr32.mp3")
    expect { model.generate(prompt, images: [image, mp3]) }.to raise_error(Elelem::ImageError, /an audio file/)
    expect { model.generate("<__media__>", media: [image, wav]) }.to raise_error(ArgumentError, /markers/)
    parts = [{ type: "input_audio", input_audio: { data: Base64.strict_encode64(File.binread(image)), format: "wav" } }]
    expect { model.complete([{ role: "user", content: parts }], template:) }
      .to raise_error(Elelem::AudioError, /not a WAV, MP3 or FLAC/)
    expect { model.generate_all(%w[a b], images: [nil, nil], media: [nil, nil]) }
      .to raise_error(ArgumentError, /together/)
    expect(model.generate_all(["describe <__media__>"], media: [[image]], max_tokens: 16))
      .to eq([model.generate("describe <__media__>", media: [image], max_tokens: 16)])
  end

  describe "the elelem command" do
    include CliRunner

    it "takes --image and --audio together, in their order" do
      base = ProjectorPairs.cli_args(vision_dir, "tiny-qwen25o-omni", 16)
      kase = pair[0]["cases"].find { |c| c["name"] == "wav-then-image" }
      wav, image = kase["images"].map { |i| file.call(i["file"]) }
      status, out, = run(*base, "--audio", wav, "--image", image, kase["prompt_text"])
      expected = model.complete(kase["prompt_text"], media: [wav, image], max_tokens: 16)
      expect(expected.tokens).to eq(outputs["wav-then-image"]["ids"])
      expect([status, JSON.parse(out)["text"]]).to eq([0, expected.text])
    end
  end

  it "takes media: on a model with one encoder, and refuses the kind it lacks" do
    audio_model = ProjectorPairs.open_pair(vision_dir, "tiny-qwen2a-audio")
    image_model = ProjectorPairs.open_pair(vision_dir, "tiny-qwen25vl-vision")
    wav = file.call("tones-1s.wav")
    image = file.call("97x61-422.jpg")
    expect(audio_model.generate("listen to <__media__>", media: [wav], max_tokens: 4))
      .to eq(audio_model.generate("listen to <__media__>", audio: [wav], max_tokens: 4))
    expect(image_model.generate("describe <__media__>", media: [image], max_tokens: 4))
      .to eq(image_model.generate("describe <__media__>", images: [image], max_tokens: 4))
    expect { audio_model.generate("<__media__>", media: [image]) }.to raise_error(Elelem::ImageError, /takes audio/)
    expect { image_model.generate("<__media__>", media: [wav]) }.to raise_error(Elelem::AudioError, /audio projector/)
  ensure
    audio_model&.close
    image_model&.close
  end
end
