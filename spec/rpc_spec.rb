# frozen_string_literal: true

require "spec_helper"
require_relative "support/cli_runner"
require "json"
require "socket"
require "timeout"
require_relative "support/rpc_workers"

# Models spread over ggml RPC workers on loopback (`elelem rpc-server` processes of this
# build): greedy ids identical to llama.cpp's `--rpc` run over the same workers, and every
# way a worker can fail giving a clear error while the process and its other models go on.
RSpec.describe "models over RPC workers" do
  fixtures = Dir[File.join(ROOT, "spec", "fixtures", "goldens", "rpc", "*.json")]
  by_setup = fixtures.group_by { |f| File.basename(f)[/\Arpc\d(-(half|kv-host|main\d))?/] }

  by_setup.each do |setup, files|
    context setup do
      before(:context) do
        @workers = RpcWorkers.start_all(SpecModels.golden(File.basename(files.first, ".json"), dir: "rpc").rpc_workers)
      end

      after(:context) { @workers&.each(&:kill) }

      files.each do |file|
        name = File.basename(file, ".json")
        golden = SpecModels.golden(name, dir: "rpc")
        model = name.delete_prefix("#{setup}-")
        golden.cases.each do |c|
          it "#{model}: the #{c["name"]} case gives llama.cpp's ids over #{golden.rpc_workers} workers" do
            options = { n_ctx: golden.n_ctx, n_threads: golden.n_threads, parallel: golden.parallel,
                        rpc: @workers.map(&:endpoint), n_gpu_layers: golden.n_gpu_layers,
                        kv_offload: golden.kv_offload }
            options.merge!(split_mode: :none, main_gpu: golden.main_gpu) if golden.main_gpu
            Elelem.open(SpecModels.golden_model(model.delete_prefix("lockstep-")), **options) do |opened|
              mismatch = golden.check(opened, c["name"])
              expect(mismatch).to be_nil, mismatch.to_s
              expect(opened.info[:n_gpu_layers]).to eq(golden.n_gpu_layers)
            end
          end
        end
      end
    end
  end
end

RSpec.describe "RPC worker failures" do
  let(:tiny) { SpecModels.synthetic("tiny-qwen3") }
  let(:ids) { [1, 50, 60, 70, 80] }

  # A server that takes the client's hello (1 byte of command, 8 of size, 24 of capabilities)
  # and answers with `reply`.
  def fake_worker(&reply)
    server = TCPServer.new("127.0.0.1", 0)
    Thread.new do
      loop do
        client = server.accept
        Thread.new(client) do |c|
          c.read(1 + 8 + 24)
          reply.call(c)
        rescue IOError, SystemCallError
          nil
        end
      end
    rescue IOError
      nil
    end
    "127.0.0.1:#{server.addr[1]}"
  end

  it "refuses a worker that is down at open" do
    endpoint = "127.0.0.1:#{LoopbackPort.free}"
    expect { Elelem.open(tiny, n_ctx: 256, rpc: [endpoint]) }
      .to raise_error(Elelem::BackendError, /#{endpoint}: Failed to connect .*Connection refused/)
  end

  it "refuses a worker of another protocol version, naming it" do
    old = fake_worker { |c| c.write([28].pack("Q<") + [3, 0, 0, 0].pack("C4") + ("\0" * 24)) && sleep(5) }
    expect { Elelem.open(tiny, n_ctx: 256, rpc: [old]) }
      .to raise_error(Elelem::BackendError, /version mismatch: 3\.0\.0/)
  end

  it "refuses a worker that answers garbage" do
    garbage = fake_worker { |c| c.write(Random.new(7).bytes(64)) && sleep(5) }
    expect { Elelem.open(tiny, n_ctx: 256, rpc: [garbage]) }
      .to raise_error(Elelem::BackendError, /malformed response/)
  end

  it "gives up on a worker that does not answer within rpc_timeout" do
    silent = fake_worker { sleep 30 }
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    expect { Elelem.open(tiny, n_ctx: 256, rpc: [silent], rpc_timeout: 1) }
      .to raise_error(Elelem::BackendError, /did not answer within 1 s/)
    expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).to be < 5
  end

  it "refuses endpoints that are not host:port before connecting" do
    expect { Elelem.open(tiny, n_ctx: 256, rpc: ["nonsense"]) }.to raise_error(ArgumentError, /host:port/)
    expect { Elelem.open(tiny, n_ctx: 256, rpc: [1]) }.to raise_error(ArgumentError, /rpc must be/)
  end

  it "raises on the calling thread when a worker dies mid-generation, and the process goes on" do
    RpcWorkers.with(2) do |endpoints, workers|
      model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 512, rpc: endpoints)
      begin
        streamed = []
        expect do
          model.generate("def fibonacci(n):", max_tokens: 64, ignore_eos: true) do |piece|
            workers.last.kill if streamed.empty?
            streamed << piece
          end
        end.to raise_error(Elelem::BackendError, /#{workers.last.endpoint} failed: .*reopen the model/)
        expect(streamed.size).to be < 4
        expect { model.generate("x", max_tokens: 2) }.to raise_error(Elelem::BackendError)
      ensure
        model.close
      end
      expect(Elelem.open(tiny, n_ctx: 256) { |m| m.generate(ids, max_tokens: 4, ignore_eos: true).size }).to eq(4)
    end
  end

  it "stops a generation waiting on workers at an interrupt, and the model goes on" do
    RpcWorkers.with(2) do |endpoints|
      Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 1024, rpc: endpoints) do |model|
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        expect { Timeout.timeout(0.5) { model.generate("def fibonacci(n):", max_tokens: 500, ignore_eos: true) } }
          .to raise_error(Timeout::Error)
        expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).to be < 3
        expect(model.generate("def add(a, b):", max_tokens: 4).size).to be_positive
      end
    end
  end

  it "runs structured output, speculation and embeddings over workers" do
    RpcWorkers.with(2) do |endpoints|
      Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 1024, rpc: endpoints) do |model|
        schema = { type: "object", properties: { lang: { enum: %w[ruby python] } }, required: ["lang"],
                   additionalProperties: false }
        answer = model.generate("The language of `def hello; end`, as JSON: ", json_schema: schema, max_tokens: 24)
        expect(JSON.parse(answer)).to match("lang" => a_string_matching(/\A(ruby|python)\z/))
        expect(model.generate("def add(a, b):", max_tokens: 12, ignore_eos: true, draft: :lookup).size).to be_positive
      end
      minilm = SpecModels.path("all-minilm-l6-v2")
      over = Elelem.open(minilm, rpc: endpoints) { |m| m.embed(["a cat on a mat"]).first }
      here = Elelem.open(minilm) { |m| m.embed(["a cat on a mat"]).first }
      expect(over.zip(here).sum { |a, b| a * b }).to be > 0.9999
    end
  end

  it "says which worker has too little memory for its share" do
    RpcWorkers.with(1, limit_bytes: 400 << 20) do |endpoints, workers|
      expect { Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 512, rpc: endpoints) }
        .to raise_error(Elelem::BackendError, /\(#{workers.first.endpoint}\) could not allocate .* MiB of weights/)
    end
  end

  it "reports where the layers are" do
    RpcWorkers.with(2) do |endpoints|
      Elelem.open(tiny, n_ctx: 256, rpc: endpoints, n_gpu_layers: 2) do |model|
        info = model.info
        expect(info[:n_gpu_layers]).to eq(2)
        expect(info[:rpc]).to eq(endpoints)
        expect(info[:devices].map { |d| d[:description] }).to eq(endpoints)
        expect(info[:devices].sum { |d| d[:layers] + (d[:output] ? 1 : 0) }).to eq(2)
        expect(info[:devices].map { |d| d[:weights_bytes] }).to all(be_positive)
      end
    end
  end
end

RSpec.describe "elelem's commands and RPC workers" do
  include CliRunner

  it "spreads a model over workers with --rpc, as Elelem.open(rpc:) does" do
    qwen = SpecModels.path("qwen2.5-coder-0.5b")
    RpcWorkers.with(2) do |endpoints|
      expected = Elelem.open(qwen, n_threads: 2, rpc: endpoints) { |m| m.generate("def hello", max_tokens: 8) }
      status, out, = run("generate", "-m", qwen, "-t", "2", "-n", "8", "--rpc", endpoints.join(","), "def hello")
      expect([status, out]).to eq([0, "#{expected}\n"])
      status, out, = run("info", "-m", qwen, "--rpc", endpoints.join(","), "--ngl", "3")
      expect(status).to eq(0)
      expect(out).to include("RPC")
    end
  end

  it "says what is wrong with an RPC flag or worker in one line" do
    status, _, err = run("generate", "-m", SpecModels.path("qwen2.5-coder-0.5b"), "--rpc", "nonsense", "hi")
    expect([status, err.lines.size]).to eq([1, 1])
    expect(err).to include("host:port")
    status, _, err = run("rpc-server", "--port", "0")
    expect([status, err]).to eq([1, "elelem: port must be an Integer in 1..65535, got 0\n"])
  end

  it "documents rpc-server's flags" do
    status, out, = run("rpc-server", "--help")
    expect(status).to eq(0)
    expect(out).to include("--host", "--port", "--threads", "--cache")
  end
end
