# frozen_string_literal: true

require "spec_helper"
require "tmpdir"
require "timeout"

# Elelem::Server::ModelPool without HTTP: names, lazy loading, the memory budget (least
# recently used first), keep-alives on an injected clock, leases, and concurrent first uses,
# on two small synthetic models.
module ModelPoolSpecs
  # How the pool opens the models.
  OPEN = { n_ctx: 256, n_threads: 1, parallel: 1 }.freeze

  # A clock the examples move by hand.
  class HandClock
    attr_reader :now

    def initialize
      @now = Time.at(1_700_000_000)
    end

    def advance(seconds)
      @now += seconds
    end

    def call
      @now
    end
  end
end

RSpec.describe Elelem::Server::ModelPool do
  before(:all) do
    @paths = { "llama" => SpecModels.synthetic("tiny-llama3"), "qwen" => SpecModels.synthetic("tiny-qwen3"),
               "canary" => SpecModels.canary }
    # What each takes once open, as the pool measures it.
    @footprints = @paths.transform_values do |path|
      Elelem.open(path, **ModelPoolSpecs::OPEN) { |model| described_class.footprint(model) }
    end
  end

  around { |example| Timeout.timeout(60) { example.run } }

  let(:clock) { ModelPoolSpecs::HandClock.new }

  def pool(names = %w[llama qwen], **options)
    described_class.new(@paths.slice(*names), open_options: ModelPoolSpecs::OPEN, budget: nil, clock:, **options)
  end

  def status(pool)
    pool.models.to_h { |m| [m[:name], m[:status]] }
  end

  # A budget that holds any one of `names` but no two together.
  def room_for_one(names)
    sizes = @footprints.values_at(*names).sort
    budget = sizes.first(2).sum - 1
    raise "#{names} cannot be told apart by a budget" unless sizes.last <= budget

    budget
  end

  describe "sizes and durations as people write them" do
    it "reads sizes with binary units, and refuses anything else" do
      expect(described_class.bytes("8G")).to eq(8 << 30)
      expect(described_class.bytes("512MiB")).to eq(512 << 20)
      expect(described_class.bytes("1.5g")).to eq(3 << 29)
      expect(described_class.bytes("1000")).to eq(1000)
      %w[0 -1G 8X lots].each do |bad|
        expect { described_class.bytes(bad) }.to raise_error(ArgumentError, /not a size/)
      end
    end

    it "reads durations as Ollama's keep_alive: seconds, Go durations, negative for ever" do
      expect(described_class.seconds(30)).to eq(30)
      expect(described_class.seconds("30")).to eq(30.0)
      expect(described_class.seconds("5m")).to eq(300.0)
      expect(described_class.seconds("1h30m")).to eq(5400.0)
      expect(described_class.seconds("250ms")).to eq(0.25)
      expect(described_class.seconds("0")).to eq(0.0)
      expect(described_class.seconds(-1)).to eq(described_class::FOREVER)
      expect(described_class.seconds("-1m")).to eq(described_class::FOREVER)
      ["5 minutes", "m", "", [], Float::NAN].each do |bad|
        expect { described_class.seconds(bad) }.to raise_error(ArgumentError, /not a duration/)
      end
    end

    it "names the models of a directory by their files, leaving out parts and projectors" do
      Dir.mktmpdir do |dir|
        %w[a.gguf b.gguf notes.txt mmproj-f16.gguf big-00001-of-00002.gguf big-00002-of-00002.gguf].each do |file|
          File.write(File.join(dir, file), "")
        end
        Dir.mkdir(File.join(dir, "sub.gguf"))
        expect(described_class.directory(dir)).to eq("a" => File.join(dir, "a.gguf"), "b" => File.join(dir, "b.gguf"))
      end
      Dir.mktmpdir do |empty|
        expect { described_class.directory(empty) }.to raise_error(ArgumentError, /no .gguf/)
        expect { described_class.directory(File.join(empty, "none")) }.to raise_error(ArgumentError, /not a dir/)
      end
    end
  end

  describe "names" do
    it "resolves the names it has, the first when none is given, and Ollama's :latest tag" do
      models = pool
      expect(models.names).to eq(%w[llama qwen])
      expect([nil, "", "qwen", "qwen:latest"].map { |name| models.resolve(name) }).to eq(%w[llama llama qwen qwen])
    end

    it "refuses unknown, path-like and overlong names, and opens nothing for them" do
      models = pool
      ["mistral", "../llama", "/etc/passwd", @paths["llama"], "llama.gguf", "qwen:7b"].each do |name|
        expect { models.acquire(name) }.to raise_error(described_class::UnknownModelError, "model '#{name}' not found")
      end
      expect { models.acquire("x" * 257) }.to raise_error(ArgumentError, /longer than 256 bytes/)
      expect { models.acquire(7) }.to raise_error(ArgumentError, /must be a string/)
      expect(status(models).values).to all(eq(:unloaded))
    end

    it "gives its one model to any name, as a server of one model does" do
      models = pool(%w[qwen])
      lease = models.acquire("gpt-4o")
      expect(lease.name).to eq("qwen")
      lease.release
    ensure
      models.close
    end

    it "refuses a pool of no models, and a file that is not there" do
      expect { described_class.new({}) }.to raise_error(ArgumentError, /at least one/)
      expect { described_class.new({ "x" => "/nonexistent.gguf" }) }.to raise_error(ArgumentError, /no such file/)
    end
  end

  describe "loading" do
    it "opens a model on its first use only, and lends the same one to later requests" do
      models = pool
      expect(status(models)).to eq("llama" => :unloaded, "qwen" => :unloaded)
      first = models.acquire("qwen")
      expect(first.model).to be_a(Elelem::Model)
      expect(first.model.info[:path]).to eq(@paths["qwen"])
      expect(status(models)).to eq("llama" => :unloaded, "qwen" => :loaded)
      second = models.acquire("qwen")
      expect(second.model).to equal(first.model)
      expect(models.models.find { |m| m[:name] == "qwen" }).to include(bytes: @footprints["qwen"],
                                                                       info: first.model.info)
      [first, second].each(&:release)
    ensure
      models.close
    end

    it "opens a model once for concurrent first requests, and another model meanwhile" do
      opened = Queue.new
      gate = Queue.new
      allow(Elelem::Model).to receive(:open).and_wrap_original do |open, path, **options|
        opened << path
        gate.pop if path == @paths["llama"] # llama's load waits until the example lets it go
        open.call(path, **options)
      end
      models = pool
      waiting = Array.new(4) { Thread.new { models.acquire("llama") } }
      Timeout.timeout(10) { Thread.pass until opened.size == 1 && waiting.all? { |t| t.status == "sleep" } }
      expect(status(models)["llama"]).to eq(:loading)
      other = models.acquire("qwen") # llama's load holds no lock
      expect(other.name).to eq("qwen")
      gate << true
      leases = waiting.map(&:value)
      expect(leases.map(&:model).uniq.size).to eq(1)
      expect(Array.new(opened.size) { opened.pop }).to eq([@paths["llama"], @paths["qwen"]])
      [*leases, other].each(&:release)
    ensure
      models&.close
    end

    it "raises the loader's error for a file that does not load, and keeps serving the others" do
      Dir.mktmpdir do |dir|
        File.write(File.join(dir, "broken.gguf"), "not a GGUF")
        models = described_class.new({ "broken" => File.join(dir, "broken.gguf"), "qwen" => @paths["qwen"] },
                                     open_options: ModelPoolSpecs::OPEN, budget: nil)
        expect { models.acquire("broken") }.to raise_error(Elelem::LoadError)
        expect(status(models)).to eq("broken" => :unloaded, "qwen" => :unloaded)
        expect { models.acquire("broken") }.to raise_error(Elelem::LoadError)
        models.acquire("qwen").release
        expect(status(models)["qwen"]).to eq(:loaded)
        models.close
      end
    end
  end

  describe "the memory budget" do
    it "closes the least recently used idle model to make room" do
      models = pool(%w[llama qwen canary], budget: room_for_one(%w[llama qwen canary]))
      models.acquire("llama").release
      clock.advance(1)
      models.acquire("qwen").release
      expect(status(models)).to eq("llama" => :unloaded, "qwen" => :loaded, "canary" => :unloaded)
      clock.advance(1)
      models.acquire("canary").release
      expect(status(models)).to eq("llama" => :unloaded, "qwen" => :unloaded, "canary" => :loaded)
    ensure
      models.close
    end

    it "keeps the recently used one when two fit" do
      sizes = @footprints.values
      models = pool(%w[llama qwen canary], budget: sizes.max(2).sum + (sizes.min / 2))
      %w[llama qwen].each do |name|
        models.acquire(name).release
        clock.advance(1)
      end
      models.acquire("llama").release # llama is now the more recent
      clock.advance(1)
      models.acquire("canary").release
      expect(status(models)).to eq("llama" => :loaded, "qwen" => :unloaded, "canary" => :loaded)
    ensure
      models.close
    end

    it "never closes a model in use: a model that does not fit beside it is refused until it is idle" do
      models = pool(budget: room_for_one(%w[llama qwen]))
      models.acquire("qwen").release # measured: its share is now what it took, not its file's size
      held = models.acquire("llama")
      expect(status(models)).to eq("llama" => :loaded, "qwen" => :unloaded)
      expect { models.acquire("qwen") }.to raise_error(described_class::NoRoomError, /held by models in use/)
      expect(status(models)).to eq("llama" => :loaded, "qwen" => :unloaded)
      expect(held.model).not_to be_closed
      held.release
      models.acquire("qwen").release
      expect(status(models)).to eq("llama" => :unloaded, "qwen" => :loaded)
      expect(held.model).to be_closed
    ensure
      models.close
    end

    it "refuses a model larger than the whole budget before opening it" do
      models = pool(budget: File.size(@paths["qwen"]) - 1)
      expect { models.acquire("qwen") }.to raise_error(described_class::NoRoomError, /more than the whole memory/)
      expect(status(models)["qwen"]).to eq(:unloaded)
    end
  end

  describe "keep-alive" do
    it "unloads an idle model once its ttl has passed, on the pool's clock" do
      models = pool(ttl: 60)
      models.acquire("llama").release
      clock.advance(59)
      expect(models.reap).to eq([])
      expect(models.models.find { |m| m[:name] == "llama" }[:expires_at]).to eq(clock.now + 1)
      clock.advance(1)
      expect(models.reap).to eq(["llama"])
      expect(status(models)["llama"]).to eq(:unloaded)
    end

    it "takes a request's keep_alive over the ttl: 0 unloads at once, for ever never" do
      models = pool(ttl: 60)
      models.acquire("llama", keep_alive: 0).release
      expect(status(models)["llama"]).to eq(:unloaded)
      models.acquire("qwen", keep_alive: described_class::FOREVER).release
      clock.advance(365 * 86_400)
      expect(models.reap).to eq([])
      expect(models.models.find { |m| m[:name] == "qwen" }).to include(status: :loaded, expires_at: nil)
    ensure
      models.close
    end

    it "never unloads a model while a lease on it is out, however late it is" do
      models = pool(ttl: 0)
      lease = models.acquire("llama")
      clock.advance(3600)
      expect(models.reap).to eq([])
      expect(models.unload("llama")).to be(true) # once the lease ends
      expect(status(models)["llama"]).to eq(:loaded)
      expect(lease.model.generate([1, 2, 3], max_tokens: 2).size).to eq(2)
      lease.release
      lease.release # idempotent
      expect(status(models)["llama"]).to eq(:unloaded)
      expect(lease.model).to be_closed
    end

    it "unloads expired models on a thread of its own, on the real clock" do
      models = described_class.new(@paths.slice("qwen"), open_options: ModelPoolSpecs::OPEN, budget: nil, ttl: 0.2)
      models.acquire("qwen").release
      Timeout.timeout(10) { sleep 0.05 until models.models.first[:status] == :unloaded }
      models.acquire("qwen").release # and again, after the thread ended
      Timeout.timeout(10) { sleep 0.05 until models.models.first[:status] == :unloaded }
    end

    it "never closes a model it was given opened" do
      Elelem.open(@paths["qwen"], **ModelPoolSpecs::OPEN) do |model|
        models = described_class.new({ "qwen" => model }, budget: nil, ttl: 0, clock:)
        expect(status(models)).to eq("qwen" => :loaded)
        models.acquire("qwen", keep_alive: 0).release
        expect(models.unload("qwen")).to be(false)
        models.close
        expect(model).not_to be_closed
      end
    end
  end
end
