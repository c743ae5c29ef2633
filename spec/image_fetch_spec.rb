# frozen_string_literal: true

require "base64"
require "socket"
require_relative "spec_helper"

# Image URLs: a server started with `allow_fetch: true` (`elelem serve --allow-fetch`) fetches
# the http(s) URL of an `image_url` part, bounded in time, size and redirects; without it, a
# URL is a 400. Served here by a small HTTP responder on loopback.
RSpec.describe Elelem::Server::ImageFetch do
  vision_dir = File.join(SYNTHETIC_DIR, "vision")
  jpeg = File.binread(File.join(ROOT, "ext", "testkit", "tests", "fixtures", "vision", "160x120-420.jpg"))
  template = "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}" \
             "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}"

  # Answers each GET by its path: an image, redirects, a 404, a body said to be too large.
  def self.responder(jpeg)
    listener = TCPServer.new("127.0.0.1", 0)
    routes = {
      "/cat.jpg" => "200 OK\r\ncontent-type: image/jpeg\r\ncontent-length: #{jpeg.bytesize}\r\n\r\n#{jpeg}",
      "/moved" => "302 Found\r\nlocation: /cat.jpg\r\ncontent-length: 0\r\n\r\n",
      "/loop" => "302 Found\r\nlocation: /loop\r\ncontent-length: 0\r\n\r\n",
      "/huge" => "200 OK\r\ncontent-length: #{30 << 20}\r\n\r\n"
    }
    thread = Thread.new do
      loop do
        client = listener.accept
        path = client.gets.to_s.split[1]
        nil until client.gets.to_s.chomp.empty?
        client.write("HTTP/1.1 #{routes.fetch(path, "404 Not Found\r\ncontent-length: 0\r\n\r\n")}")
        client.close
      end
    end
    [listener, thread]
  end

  before(:context) do
    @model = Elelem.open(File.join(vision_dir, "tiny-gemma3-vision.gguf"),
                         mmproj: File.join(vision_dir, "tiny-gemma3-vision.mmproj.gguf"), n_ctx: 512, n_threads: 2)
    @listener, @thread = self.class.responder(jpeg)
  end

  after(:context) do
    @thread&.kill
    @listener&.close
    @model&.close
  end

  let(:base) { "http://127.0.0.1:#{@listener.addr[1]}" }
  let(:post) do
    lambda do |server, path, body|
      Rack::MockRequest.new(Rack::Lint.new(server))
                       .request("POST", path, input: JSON.generate(body), "CONTENT_TYPE" => "application/json")
    end
  end
  let(:chat) do
    lambda do |url|
      parts = [{ type: "text", text: "describe " }, { type: "image_url", image_url: { url: } }]
      { messages: [{ role: "user", content: parts }], max_tokens: 8, temperature: 0 }
    end
  end
  let(:data_uri) { "data:image/jpeg;base64,#{Base64.strict_encode64(jpeg)}" }

  before { require "rack" }

  it "refuses image URLs unless the server fetches them, naming --allow-fetch" do
    response = post.call(Elelem::Server.new(@model, template:), "/v1/chat/completions", chat.call("#{base}/cat.jpg"))
    expect(response.status).to eq(400)
    error = JSON.parse(response.body)["error"]
    expect([error["code"], error["param"]]).to eq(%w[image_fetch_not_allowed messages])
    expect(error["message"]).to include("--allow-fetch")
  end

  it "fetches them with allow_fetch, following redirects, as a data URI of the same bytes answers" do
    server = Elelem::Server.new(@model, template:, allow_fetch: true)
    expected = JSON.parse(post.call(server, "/v1/chat/completions", chat.call(data_uri)).body)
    %w[/cat.jpg /moved].each do |path|
      reply = JSON.parse(post.call(server, "/v1/chat/completions", chat.call("#{base}#{path}")).body)
      expect(reply["choices"][0]["message"]["content"]).to eq(expected["choices"][0]["message"]["content"]), path
      expect(reply["usage"]["prompt_tokens"]).to eq(expected["usage"]["prompt_tokens"])
    end
  end

  it "answers a URL it cannot fetch with a 400 saying why, then serves on" do
    server = Elelem::Server.new(@model, template:, allow_fetch: true)
    { "#{base}/missing" => /answered 404/, "#{base}/loop" => /more than 3 redirects/,
      "#{base}/huge" => /larger than 20 MiB/, "http://127.0.0.1:1/x.png" => /Errno::ECONNREFUSED|refused/i,
      "http:///nohost" => /not an http\(s\) URL with a host|bad URI|Errno/ }.each do |url, why|
      response = post.call(server, "/v1/chat/completions", chat.call(url))
      expect(response.status).to eq(400), url
      error = JSON.parse(response.body)["error"]
      expect(error["message"]).to match(why), url
      expect(error["code"]).to eq("image_fetch_failed")
    end
    expect(post.call(server, "/v1/chat/completions", chat.call("#{base}/cat.jpg")).status).to eq(200)
  end

  it "takes the Responses API's input_image, a data URI or a fetched URL" do
    server = Elelem::Server.new(@model, template:, allow_fetch: true)
    expected = JSON.parse(post.call(server, "/v1/chat/completions", chat.call(data_uri)).body)
    [data_uri, "#{base}/cat.jpg"].each do |url|
      input = [{ role: "user", content: [{ type: "input_text", text: "describe " },
                                         { type: "input_image", image_url: url }] }]
      reply = JSON.parse(post.call(server, "/v1/responses", { input:, max_output_tokens: 8, temperature: 0 }).body)
      expect(reply["output"].last["content"][0]["text"]).to eq(expected["choices"][0]["message"]["content"])
      expect(reply["usage"]["input_tokens"]).to eq(expected["usage"]["prompt_tokens"])
    end
    stored = [{ role: "user", content: [{ type: "input_image", file_id: "file-1" }] }]
    response = post.call(server, "/v1/responses", { input: stored })
    expect(response.status).to eq(400)
    expect(JSON.parse(response.body)["error"]["message"]).to match(/file_id is not supported/)
  end
end
