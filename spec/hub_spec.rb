# frozen_string_literal: true

require "spec_helper"
require "elelem/cli"
require "fileutils"
require "open3"
require "stringio"
require "tmpdir"
require_relative "support/fake_hub"
require_relative "support/serve_process"
require_relative "../tasks/hf_hub"

RSpec.describe Elelem::Hub do
  tiny = "elelem-test/tiny-weights-GGUF"
  gated = "elelem-test/gated-GGUF"
  split = "elelem-test/split-GGUF"
  plain = "elelem-test/plain-GGUF"
  qwen = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
  qwen_file = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
  parts = (1..3).map { |i| "tiny-llama3-Q8_0-0000#{i}-of-00003.gguf" }

  # The parts of the multi-part repository are byte slices of a synthetic model, not gguf-split's
  # output: elelem refuses a multi-part GGUF by its name, before reading any part.
  before(:context) do
    @scratch = Dir.mktmpdir("elelem-hub-spec")
    llama = File.binread(SpecModels.synthetic("tiny-llama3"))
    third = (llama.bytesize / 3.0).ceil
    split_files = parts.each_with_index.to_h do |name, i|
      path = File.join(@scratch, name)
      File.binwrite(path, llama.byteslice(i * third, third))
      [name, path]
    end
    weights = %w[f16 q4_k q8_0].to_h { |q| ["tiny-weights-#{q}.gguf", SpecModels.synthetic("tiny-weights-#{q}")] }
    @hub = FakeHub.new(
      tiny => { files: weights.merge("README.md" => { text: "# tiny weights\n" }) },
      gated => { files: { "tiny-qwen3-q8_0.gguf" => SpecModels.synthetic("tiny-qwen3") }, gated: true },
      split => { files: split_files },
      plain => { files: { "tiny-bert-f16.gguf" => { source: SpecModels.synthetic("tiny-bert"), lfs: false } } },
      qwen => { files: { qwen_file => SpecModels.path("qwen2.5-coder-0.5b") } }
    )
  end

  after(:context) do
    @hub.stop
    FileUtils.rm_rf(@scratch)
  end

  # Each example has a cache of its own, the fake hub as its endpoint, and no token or offline flag.
  around do |example|
    saved = ENV.to_h
    Dir.mktmpdir("elelem-hf-home") do |home|
      %w[HF_TOKEN HF_TOKEN_PATH HF_HUB_OFFLINE HUGGINGFACE_HUB_CACHE XDG_CACHE_HOME].each { |k| ENV.delete(k) }
      ENV.update("HF_HOME" => home, "HF_HUB_CACHE" => File.join(home, "hub"), "HF_ENDPOINT" => @hub.endpoint,
                 "HF_HUB_DISABLE_TELEMETRY" => "1", "HF_HUB_DISABLE_PROGRESS_BARS" => "1")
      @hub.clear
      example.run
    end
  ensure
    ENV.replace(saved)
  end

  def pull(name, out: nil)
    described_class.pull(name, out:)
  end

  def cache
    ENV.fetch("HF_HUB_CACHE")
  end

  def source(repo, file)
    @hub.entry(repo, file)
  end

  # The requests that carried file bytes (the CDN's, and the Hub's own for small files).
  def downloads
    @hub.requests.select { |r| r.verb == "GET" && (r.listener == :cdn || r.path.include?("/resolve/")) }
  end

  def hf_hub(*args)
    out, err, status = Open3.capture3(HfHubClient.python, File.join(ROOT, "spec", "support", "hf_hub_client.py"),
                                      *args)
    raise "huggingface_hub #{args.join(" ")} failed:\n#{err}" unless status.success?

    JSON.parse(out)
  end

  it "picks the file a quantization tag names, as llama.cpp's -hf does" do
    expect(pull("hf:#{tiny}:Q4_K")).to eq([File.join(cache, "models--elelem-test--tiny-weights-GGUF", "snapshots",
                                                     @hub.commit(tiny), "tiny-weights-q4_k.gguf")])
    expect(File.basename(pull("hf:#{tiny}:f16").first)).to eq("tiny-weights-f16.gguf")
    # No tag: Q4_K_M, else Q8_0, else the first GGUF.
    expect(File.basename(pull("hf:#{tiny}").first)).to eq("tiny-weights-q8_0.gguf")
    expect { pull("hf:#{tiny}:Q5_K") }.to raise_error(
      Elelem::HubNotFoundError, /no GGUF model tagged Q5_K \(its GGUF files: tiny-weights-f16.gguf, tiny-weights-q4_k/
    )
  end

  it "fetches a file named in the repository, with hf: or without" do
    path, = pull("hf:#{tiny}/tiny-weights-f16.gguf")
    expect(FileUtils.compare_file(path, SpecModels.synthetic("tiny-weights-f16"))).to be(true)
    expect(described_class.reference?("#{tiny}/tiny-weights-q4_k.gguf")).to be(true)
    expect(Elelem::Models.resolve("#{tiny}/tiny-weights-q4_k.gguf")).to end_with("/tiny-weights-q4_k.gguf")
    expect { pull("hf:#{tiny}/tiny-weights-q2_k.gguf") }
      .to raise_error(Elelem::HubNotFoundError, /#{tiny} has no file tiny-weights-q2_k.gguf \(its GGUF files: /)
  end

  it "stores files in huggingface_hub's cache layout" do
    path, = pull("hf:#{tiny}:Q8_0")
    repo_dir = File.join(cache, "models--elelem-test--tiny-weights-GGUF")
    sha = source(tiny, "tiny-weights-q8_0.gguf").sha256
    expect(File.read(File.join(repo_dir, "refs", "main"))).to eq(@hub.commit(tiny))
    expect(File.readlink(path)).to eq("../../blobs/#{sha}")
    expect(Digest::SHA256.file(File.join(repo_dir, "blobs", sha)).hexdigest).to eq(sha)
    expect(File.exist?(File.join(cache, ".locks", "models--elelem-test--tiny-weights-GGUF", "#{sha}.lock"))).to be(true)
    expect(Dir[File.join(repo_dir, "blobs", "*.incomplete")]).to be_empty
  end

  it "shares the cache with huggingface_hub both ways" do
    # elelem's download, found by huggingface_hub without the network, and read by its cache scanner.
    path, = pull("hf:#{tiny}:Q8_0")
    found = hf_hub("cached", tiny, "tiny-weights-q8_0.gguf")
    expect(found.values_at("path", "try_to_load_from_cache")).to eq([path, path])
    scan = hf_hub("scan")
    expect(scan["warnings"]).to eq([])
    blob = source(tiny, "tiny-weights-q8_0.gguf").sha256
    revision = { "commit_hash" => @hub.commit(tiny), "refs" => ["main"],
                 "files" => [["tiny-weights-q8_0.gguf", blob, File.size(path)]] }
    expect(scan["repos"]).to eq([{ "repo_id" => tiny, "revisions" => [revision] }])
    # huggingface_hub's downloads (a GGUF through the CDN, a README from the Hub itself), which
    # elelem then opens without fetching their bytes again.
    hf_path = hf_hub("download", tiny, "tiny-weights-q4_k.gguf")["path"]
    hf_hub("download", tiny, "README.md")
    @hub.clear
    expect(pull("hf:#{tiny}:Q4_K")).to eq([hf_path])
    expect(downloads).to be_empty
    puts "\n    huggingface_hub #{found["version"]}: shares the cache (both ways)"
  end

  it "checks a file stored without LFS against its git blob sha1" do
    path, = pull("hf:#{plain}")
    expect(File.readlink(path)).to eq("../../blobs/#{source(plain, "tiny-bert-f16.gguf").git_sha1}")
    expect(FileUtils.compare_file(path, SpecModels.synthetic("tiny-bert"))).to be(true)
    expect(downloads.map(&:listener)).to eq([:hub])
  end

  it "does not fetch a cached file again" do
    first = pull("hf:#{tiny}:Q8_0")
    @hub.clear
    expect(pull("hf:#{tiny}:Q8_0")).to eq(first)
    expect(@hub.requests.map { |r| [r.verb, r.path] }).to eq([["GET", "/api/models/#{tiny}/revision/main"]])
  end

  it "resumes a download after a cut connection, and from a .incomplete left behind" do
    file = "tiny-weights-f16.gguf"
    @hub.cut(tiny, file, after: 300_000)
    path, = pull("hf:#{tiny}/#{file}")
    expect(FileUtils.compare_file(path, SpecModels.synthetic("tiny-weights-f16"))).to be(true)
    expect(downloads.select { |r| r.listener == :cdn }.map(&:range)).to eq([nil, "bytes=300000-"])

    # Another process was stopped halfway: its .incomplete is resumed, not started over.
    FileUtils.rm_rf(File.join(cache, "models--elelem-test--tiny-weights-GGUF"))
    sha = source(tiny, file).sha256
    blob = File.join(cache, "models--elelem-test--tiny-weights-GGUF", "blobs", sha)
    FileUtils.mkdir_p(File.dirname(blob))
    File.binwrite("#{blob}.incomplete", File.binread(SpecModels.synthetic("tiny-weights-f16"), 1_000_000))
    @hub.clear
    pull("hf:#{tiny}/#{file}")
    expect(downloads.map(&:range)).to eq(["bytes=1000000-"])
    expect(Digest::SHA256.file(blob).hexdigest).to eq(sha)
  end

  it "refuses a download whose sha256 is not the Hub's, and keeps nothing of it" do
    @hub.corrupt(tiny, "tiny-weights-q4_k.gguf")
    sha = source(tiny, "tiny-weights-q4_k.gguf").sha256
    expect { pull("hf:#{tiny}:Q4_K") }
      .to raise_error(Elelem::HubIntegrityError, /not the file the Hub announced.*#{sha}/)
    repo_dir = File.join(cache, "models--elelem-test--tiny-weights-GGUF")
    expect(Dir[File.join(repo_dir, "{blobs,snapshots}", "**", "*")].select { |f| File.file?(f) }).to be_empty
  ensure
    @hub.stop_corrupting
  end

  it "sends HF_TOKEN to the Hub (not to the CDN), and says what a gated repository needs" do
    expect { pull("hf:#{gated}") }.to raise_error(Elelem::HubAuthError, /#{gated} is a gated repository.*no HF_TOKEN/)
    ENV["HF_TOKEN"] = "hf_notTheRightTokenAtAll0123456789abcdef"
    expect { pull("hf:#{gated}") }.to raise_error(Elelem::HubAuthError, /refused HF_TOKEN/)
    ENV["HF_TOKEN"] = FakeHub::TOKEN
    @hub.clear
    path, = pull("hf:#{gated}")
    expect(File.basename(path)).to eq("tiny-qwen3-q8_0.gguf")
    by_listener = @hub.requests.group_by(&:listener).transform_values { |rs| rs.map(&:authorization).uniq }
    expect(by_listener).to eq(hub: ["Bearer #{FakeHub::TOKEN}"], cdn: [nil])
    # The token file `huggingface-cli login` writes serves when HF_TOKEN is not set.
    ENV.delete("HF_TOKEN")
    File.write(File.join(ENV.fetch("HF_HOME"), "token"), "#{FakeHub::TOKEN}\n")
    FileUtils.rm_rf(File.join(cache, "models--elelem-test--gated-GGUF"))
    expect(pull("hf:#{gated}")).to eq([path])
  end

  it "works from the cache alone with HF_HUB_OFFLINE=1, and says what is missing" do
    pull("hf:#{tiny}:Q8_0")
    ENV["HF_HUB_OFFLINE"] = "1"
    @hub.clear
    expect(File.basename(pull("hf:#{tiny}").first)).to eq("tiny-weights-q8_0.gguf")
    expect(File.basename(pull("hf:#{tiny}/tiny-weights-q8_0.gguf").first)).to eq("tiny-weights-q8_0.gguf")
    expect(@hub.requests).to be_empty
    expect { pull("hf:#{tiny}:Q4_K") }.to raise_error(
      Elelem::HubOfflineError, /HF_HUB_OFFLINE is set, and the cached #{tiny} has no GGUF model tagged Q4_K/
    )
    expect { pull("hf:#{gated}") }
      .to raise_error(Elelem::HubOfflineError, /HF_HUB_OFFLINE is set, and #{gated} is not in the cache/)
    expect(@hub.requests).to be_empty
  end

  it "falls back to the cache when the Hub cannot be reached" do
    pull("hf:#{tiny}:Q8_0")
    closed = TCPServer.new("127.0.0.1", 0).then { |s| s.addr[1].tap { s.close } }
    ENV["HF_ENDPOINT"] = "http://127.0.0.1:#{closed}"
    notes = StringIO.new
    expect(File.basename(pull("hf:#{tiny}", out: notes).first)).to eq("tiny-weights-q8_0.gguf")
    expect(notes.string).to match(/could not reach .*; using the cached #{@hub.commit(tiny)[0, 12]}/)
    expect { pull("hf:#{gated}") }.to raise_error(Elelem::HubOfflineError, /could not reach .* not in the cache/)
  end

  it "downloads every part of a multi-part GGUF, and refuses to open one" do
    paths = pull("hf:#{split}:Q8_0")
    expect(paths.map { |p| File.basename(p) }).to eq(parts)
    expect(paths.map { |p| File.binread(p) }.join).to eq(File.binread(SpecModels.synthetic("tiny-llama3")))
    FileUtils.rm_rf(File.join(cache, "models--elelem-test--split-GGUF"))
    @hub.clear
    expect { Elelem.open("hf:#{split}/#{parts[1]}") }
      .to raise_error(Elelem::HubError, /in 3 parts, and elelem loads one-file GGUFs only.*llama-gguf-split --merge/)
    expect(downloads).to be_empty
  end

  it "refuses names that are not references, and missing repositories, before any download" do
    ["hf:../etc/passwd", "hf:org/repo/../../x.gguf", "hf:org/repo//x.gguf", "hf:/abs/x.gguf", "hf:org/re--po",
     "hf:org/repo/x.bin", "hf:org/repo:Q4 K"].each do |name|
      expect { pull(name) }.to raise_error(Elelem::HubError, /not a (Hugging Face repository id|file path|.gguf|quant)/)
    end
    expect(@hub.requests).to be_empty
    expect { pull("hf:elelem-test/no-such-repo") }
      .to raise_error(Elelem::HubNotFoundError, %r{elelem-test/no-such-repo: no such repository on 127.0.0.1})
    expect { Elelem::Models.resolve("elelem-test/no-such-repo/x.gguf") }.to raise_error(
      Elelem::HubNotFoundError, %r{\Aelelem-test/no-such-repo/x.gguf: no such file, and as a Hugging Face reference: }
    )
    expect(described_class.reference?("../models/x.gguf")).to be(false)
    expect(described_class.reference?(SpecModels.synthetic("tiny-qwen3"))).to be(false)
  end

  it "draws a progress bar on a terminal" do
    tty = StringIO.new
    def tty.tty? = true
    pull("hf:#{tiny}:Q8_0", out: tty)
    expect(tty.string).to include("elelem: downloading #{tiny}/tiny-weights-q8_0.gguf (2.2 MiB)", "\r", "100% [")
    expect(tty.string).to end_with("\n")
  end

  it "pulls from the command line" do
    out = StringIO.new
    err = StringIO.new
    expect(Elelem::CLI.new(out, err, StringIO.new).run(["pull", "hf:#{split}:Q8_0", "hf:#{tiny}:Q4_K"])).to eq(0)
    expect(out.string.lines.map { |l| File.basename(l.chomp) }).to eq(parts + ["tiny-weights-q4_k.gguf"])
    expect(err.string).to include("elelem: downloading #{split}/#{parts[0]}")
    out = StringIO.new
    expect(Elelem::CLI.new(out, err, StringIO.new).run(["pull", "qwen2.5-coder-0.5b"])).to eq(0)
    expect(out.string).to eq("#{SpecModels.path("qwen2.5-coder-0.5b")}\n")
    err = StringIO.new
    expect(Elelem::CLI.new(out, err, StringIO.new).run(["pull", "hf:#{tiny}:Q5_K"])).to eq(1)
    expect(err.string.lines.size).to eq(1)
    expect(err.string).to start_with("elelem: #{tiny} has no GGUF model tagged Q5_K")
  end

  it "serves a model named by its reference" do
    server = ServeProcess.new("-m", "hf:#{tiny}:Q8_0", "-c", "128", "-t", "1", "--parallel", "1")
    response = server.request("GET", "/v1/models")
    expect(JSON.parse(response.body)["data"].map { |m| m["id"] }).to eq(["hf:#{tiny}:Q8_0"])
  ensure
    server&.stop
  end

  it "opens hf:org/repo:QUANT and generates the text the same file gives" do
    expected = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 128, n_threads: 2) do |m|
      m.generate("def fibonacci(n):", max_tokens: 8)
    end
    ref = "hf:#{qwen}:Q4_K_M"
    text = Elelem.open(ref, n_ctx: 128, n_threads: 2) { |m| m.generate("def fibonacci(n):", max_tokens: 8) }
    expect(text).to eq(expected)
    expect(Elelem::Tokenizer.open(ref).tokenize("def hello", add_special: false)).to eq([750, 23_811])
    expect(downloads.count { |r| r.listener == :cdn }).to eq(1)
  end
end
