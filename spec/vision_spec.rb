# frozen_string_literal: true

require "base64"
require "pathname"
require "stringio"
require "tmpdir"
require "zlib"
require_relative "spec_helper"
require_relative "support/projector_pairs"

# Images in prompts, against llama.cpp's libmtmd: the synthetic language model and projector
# pairs of tmp/synthetic/vision (written by `rake canary`) with the cases and greedy ids the
# reference driver's `mtmd` mode recorded (spec/fixtures/goldens/vision; a build profile they
# lack is recorded by `rake goldens` into the cache).
RSpec.describe "images in prompts" do
  vision_dir = File.join(SYNTHETIC_DIR, "vision")
  images_dir = File.join(ROOT, "ext", "testkit", "tests", "fixtures", "vision")
  image = ->(file) { File.join(images_dir, file) }
  jpeg = image.call("160x120-420.jpg")

  %w[tiny-gemma3-vision tiny-idefics3-vision tiny-lfm2-vision tiny-llava-vision tiny-mobilevlm-vision
     tiny-internvl-vision tiny-qwen2vl-vision tiny-qwen25vl-vision tiny-qwen3vl-vision tiny-qwen3vlmoe-vision
     tiny-pixtral-vision tiny-llama4-vision tiny-gemma4-vision].each do |name|
    it "gives #{name}'s greedy ids, as libmtmd does, for every case" do
      fixture, recording = ProjectorPairs.recording(name)
      model = ProjectorPairs.open_pair(vision_dir, name, n_ctx: fixture["n_ctx"])
      fixture["cases"].each do |kase|
        images = kase["images"].map { |i| image.call(i["file"]) }
        completion = model.complete(kase["prompt_text"], images:, max_tokens: kase["max_tokens"])
        expect(completion.tokens).to eq(recording["outputs"][kase["name"]]["ids"]), "#{name} #{kase["name"]}"
        # The chunks' tokens: mtmd's n_past where each takes a position, more than it where an
        # image's take the longer side of its grid (Qwen2-VL's).
        tokens = kase["chunks"].sum { |c| c["type"] == "text" ? c["ids"].size : c["n_tokens"] }
        expect(completion.prompt_tokens).to eq(tokens)
      end
    ensure
      model&.close
    end
  end

  context "with the Gemma 3 pair" do
    let(:model) { ProjectorPairs.open_pair(vision_dir, "tiny-gemma3-vision") }
    let(:expected) { ProjectorPairs.recording("tiny-gemma3-vision")[1]["outputs"]["jpeg-160x120"]["ids"] }

    after { model.close }

    it "says it takes images" do
      expect(model.vision?).to be(true)
      expect(model.info[:mmproj]).to eq("gemma3")
      expect(model.inspect).to include("mmproj=gemma3")
    end

    it "takes an image as a path, a Pathname, bytes, an IO or a data URI alike" do
      uri = "data:image/jpeg;base64,#{Base64.strict_encode64(File.binread(jpeg))}"
      [jpeg, Pathname(jpeg), File.binread(jpeg), StringIO.new(File.binread(jpeg)), uri].each do |form|
        tokens = model.complete("describe <__media__>", images: [form], max_tokens: 16).tokens
        expect(tokens).to eq(expected), form.class.name
      end
    end

    it "times the encoder for images not yet in its cache" do
      first = model.complete("describe <__media__>", images: [jpeg], max_tokens: 2).timings
      again = model.complete("describe <__media__>", images: [jpeg], max_tokens: 2).timings
      expect(first[:image_encode_seconds]).to be_positive
      expect(again[:image_encode_seconds]).to eq(0.0)
      expect(model.complete("describe", max_tokens: 2).timings).not_to have_key(:image_encode_seconds)
    end

    it "takes each prompt's images in generate_all, decoded together as each alone" do
      # Batch-invariant: a sequence's bits are then those it gets alone on any CPU.
      model = ProjectorPairs.open_pair(vision_dir, "tiny-gemma3-vision", n_ctx: 512, parallel: 3, batch_invariant: true)
      prompts = ["describe <__media__>", "compare <__media__> to <__media__>", "describe"]
      images = [[jpeg], [image.call("97x61-422.jpg"), jpeg], nil]
      alone = prompts.zip(images).map { |prompt, imgs| model.generate(prompt, images: imgs, max_tokens: 12) }
      expect(model.generate_all(prompts, images:, max_tokens: 12)).to eq(alone)
      expect { model.generate_all(prompts, images: [[jpeg]]) }.to raise_error(ArgumentError, /an entry per prompt/)
      expect { model.generate_all([[1, 2]], images: [[jpeg]]) }.to raise_error(ArgumentError, /not token ids/)
    ensure
      model&.close
    end

    it "places images first when the prompt has no marker, as llama-mtmd-cli does" do
      placed = model.complete("describe ", images: [jpeg], max_tokens: 4).prompt_tokens
      expect(placed).to eq(model.complete("<__media__>describe ", images: [jpeg], max_tokens: 4).prompt_tokens)
    end

    it "reads image parts of chat messages (an image, or an image_url data URI) where they are" do
      template = "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"
      uri = "data:image/jpeg;base64,#{Base64.strict_encode64(File.binread(jpeg))}"
      [{ type: "image", image: jpeg }, { type: "image_url", image_url: { url: uri } }].each do |part|
        messages = [{ role: "user", content: [{ type: "text", text: "describe " }, part] }]
        expect(model.complete(messages, template:, max_tokens: 16).tokens).to eq(expected)
      end
    end

    it "refuses bad images and prompts with clear errors, and keeps working" do
      chunk = ->(type, data) { [data.bytesize].pack("N") + type + data + [Zlib.crc32(type + data)].pack("N") }
      # An 8-bit RGB PNG's signature and header (and, given rows, its pixels).
      png = lambda do |width, height, rows = nil|
        header = "\x89PNG\r\n\x1a\n".b + chunk.call("IHDR", [width, height, 8, 2, 0, 0, 0].pack("NNCCCCC"))
        rows ? header + chunk.call("IDAT", Zlib::Deflate.deflate(rows)) + chunk.call("IEND", "") : header
      end
      refusals = {
        "random bytes" => [Random.new(1).bytes(4096), Elelem::ImageError, /not an image/],
        "a cut JPEG" => [File.binread(jpeg)[0, 600], Elelem::ImageError, /JPEG/],
        "100,000 x 100,000 pixels" => [png.call(100_000, 100_000), Elelem::ImageError, /beyond the limits/],
        "an empty file" => ["".b, Elelem::ImageError, /empty/],
        "a missing file" => ["/nonexistent/cat.png", Elelem::ImageError, /cannot read/]
      }
      refusals.each do |what, (bytes, error, message)|
        expect { model.generate("describe <__media__>", images: [bytes]) }.to raise_error(error, message), what
      end
      expect { model.generate("<__media__><__media__>", images: [jpeg]) }
        .to raise_error(ArgumentError, /media markers in text \(2\).*images \(1\)/)
      expect { model.generate([1, 2, 3], images: [jpeg]) }.to raise_error(ArgumentError, /text, not token ids/)
      expect { model.chat([{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/a.png" } }] }]) }
        .to raise_error(Elelem::ImageError, /data URI/)
      # A one-pixel image is resized like any other.
      one = png.call(1, 1, "\x00\x10\x20\x30".b)
      expect(model.complete("describe <__media__>", images: [one], max_tokens: 2).tokens.size).to eq(2)
      expect(model.complete("describe <__media__>", images: [jpeg], max_tokens: 16).tokens).to eq(expected)
    end

    it "takes images without speculative decoding only" do
      drafting = ProjectorPairs.open_pair(vision_dir, "tiny-gemma3-vision", n_ctx: 256, draft: :lookup)
      expect { drafting.generate("describe <__media__>", images: [jpeg]) }
        .to raise_error(ArgumentError, /draft: false/)
      expect(drafting.complete("describe <__media__>", images: [jpeg], max_tokens: 16, draft: false).tokens)
        .to eq(expected)
    ensure
      drafting&.close
    end

    it "refuses images that do not fit the context" do
      small = ProjectorPairs.open_pair(vision_dir, "tiny-gemma3-vision", n_ctx: 32)
      expect { small.generate("<__media__> <__media__>", images: [jpeg, jpeg]) }
        .to raise_error(Elelem::ContextFullError)
    ensure
      small&.close
    end
  end

  it "opens the projector beside the model (mmproj-<file>), unless told mmproj: nil" do
    Dir.mktmpdir do |dir|
      FileUtils.ln_s(File.join(vision_dir, "tiny-gemma3-vision.gguf"), File.join(dir, "tiny.gguf"))
      FileUtils.ln_s(File.join(vision_dir, "tiny-gemma3-vision.mmproj.gguf"), File.join(dir, "mmproj-tiny.gguf"))
      Elelem.open(File.join(dir, "tiny.gguf"), n_ctx: 256) { |m| expect(m.vision?).to be(true) }
      Elelem.open(File.join(dir, "tiny.gguf"), n_ctx: 256, mmproj: nil) do |m|
        expect(m.vision?).to be(false)
        expect { m.generate("describe", images: [jpeg]) }.to raise_error(ArgumentError, /without a projector/)
      end
    end
  end

  it "refuses a projector that does not fit the model" do
    mmproj = File.join(vision_dir, "tiny-gemma3-vision.mmproj.gguf")
    # tiny-llama-canary's embeddings are 64 wide, the projector's 128.
    expect { Elelem.open(SpecModels.canary, mmproj:) }.to raise_error(Elelem::LoadError, /128.*64|64.*128/)
    expect { Elelem.open(SpecModels.synthetic("tiny-gemma4-e"), mmproj:) }.to raise_error(Elelem::LoadError)
    expect { Elelem.open(SpecModels.canary, mmproj: File.join(vision_dir, "missing.gguf")) }
      .to raise_error(Elelem::LoadError, /missing.gguf/)
  end

  it "serves images: OpenAI's image_url parts and Ollama's images, a bad image a 400, then serves on" do
    require "rack"
    template = "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}" \
               "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}"
    model = ProjectorPairs.open_pair(vision_dir, "tiny-gemma3-vision", n_ctx: 512)
    server = Elelem::Server.new(model, template:, max_tokens: 8)
    post = lambda do |path, body|
      app = Rack::Lint.new(server)
      Rack::MockRequest.new(app).request("POST", path, input: JSON.generate(body), "CONTENT_TYPE" => "application/json")
    end
    bytes = File.binread(jpeg)
    parts = [{ type: "text", text: "describe " },
             { type: "image_url", image_url: { url: "data:image/jpeg;base64,#{Base64.strict_encode64(bytes)}" } }]
    # The server answers a chat without tools from its rendered prompt, as complete does given it.
    expected = model.complete(model.chat_input([{ role: "user", content: parts }], template:), max_tokens: 8)
    chat = { messages: [{ role: "user", content: parts }], max_tokens: 8, temperature: 0 }
    reply = JSON.parse(post.call("/v1/chat/completions", chat).body)
    expect(reply["choices"][0]["message"]["content"]).to eq(expected.text)
    expect(reply["usage"]["prompt_tokens"]).to eq(30)
    ollama = { messages: [{ role: "user", content: "describe", images: [Base64.strict_encode64(bytes)] }],
               stream: false, options: { temperature: 0, num_predict: 4 } }
    # Ollama's images come before the message's text.
    image_first = [{ role: "user", content: [{ type: "image", image: jpeg }, { type: "text", text: "describe" }] }]
    image_first_tokens = model.complete(model.chat_input(image_first, template:), max_tokens: 1).prompt_tokens
    expect(JSON.parse(post.call("/api/chat", ollama).body)["prompt_eval_count"]).to eq(image_first_tokens)
    broken = [{ type: "image_url", image_url: { url: "data:image/png;base64,#{Base64.strict_encode64("nope")}" } }]
    response = post.call("/v1/chat/completions", { messages: [{ role: "user", content: broken }] })
    expect(response.status).to eq(400)
    expect(JSON.parse(response.body)["error"]["message"]).to match(/not an image/)
    expect(post.call("/api/chat", ollama).status).to eq(200)
    generated = JSON.parse(post.call("/api/generate", { prompt: "describe", images: [Base64.strict_encode64(bytes)],
                                                        stream: false, options: { num_predict: 2 } }).body)
    expect(generated["prompt_eval_count"]).to eq(image_first_tokens)
    expect(generated["context"].size).to eq(2)
    expect { model.chat_tokens([{ role: "user", content: parts }], template:) }
      .to raise_error(ArgumentError, /chat_input/)
    expect(model.chat_input([{ role: "user", content: parts }], template:).text).to eq("describe <__media__>")
  ensure
    model&.close
  end

  it "takes Ollama's images, base64 before the message's text, and refuses what is not base64" do
    b64 = Base64.strict_encode64(File.binread(jpeg))
    body = { "model" => "m", "messages" => [{ "role" => "user", "content" => "describe", "images" => [b64] }] }
    request = Elelem::Server::Ollama::Request.new(body, :chat, max_tokens: 16, n_ctx: 4096, reuse_prefix: true)
    content = request.messages.first["content"]
    expect(content.map { |p| p["type"] }).to eq(%w[image text])
    expect(content.first["image"]).to eq(File.binread(jpeg))
    generate = { "model" => "m", "prompt" => "describe", "images" => [b64] }
    request = Elelem::Server::Ollama::Request.new(generate, :completion, max_tokens: 16, n_ctx: 4096,
                                                                         reuse_prefix: true)
    expect(request.messages.last["content"].first["type"]).to eq("image")
    bad = body.merge("messages" => [{ "role" => "user", "content" => "x", "images" => ["not base64!"] }])
    expect { Elelem::Server::Ollama::Request.new(bad, :chat, max_tokens: 16, n_ctx: 4096, reuse_prefix: true) }
      .to raise_error(Elelem::Server::HTTPError, /not base64/)
    raw = generate.merge("raw" => true)
    expect { Elelem::Server::Ollama::Request.new(raw, :completion, max_tokens: 16, n_ctx: 4096, reuse_prefix: true) }
      .to raise_error(Elelem::Server::HTTPError, /raw/)
  end
end
