# frozen_string_literal: true

require "spec_helper"
require "timeout"

# The process around a model: other threads keep running while it computes,
# every kind of interrupt stops it within about one graph node, threads that
# share it take turns, and a forked child can use it. Bounds are generous (a
# loaded 2-core machine); the measured figures are printed.
RSpec.describe "a model in a living process" do
  let(:model) { @model }

  # Token ids of ordinary text; long enough that its prompt takes seconds.
  def long_prompt
    Array.new(1800) { |i| 1000 + (i * 7919 % 60_000) }
  end

  def short
    [785, 6722, 315, 9625, 374]
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  before(:all) do
    @model = Elelem.open(SpecModels.path("qwen2.5-coder-0.5b"), n_ctx: 2048, n_threads: 2)
    @expected = @model.generate(short, max_tokens: 4)
    @latencies = {}
  end

  after(:all) do
    @model.close
    report = @latencies.map { |how, s| "#{how} #{(s * 1000).round} ms" }.join(", ")
    puts "\n    interrupt latency, mid-prompt (from the interrupt to the exception): #{report}"
  end

  def still_works!
    expect(model.generate(short, max_tokens: 4)).to eq(@expected)
  end

  it "lets other Ruby threads run during a long prompt" do
    ticks = 0
    ticker = Thread.new do
      loop do
        ticks += 1
        sleep 0.01
      end
    end
    started = now
    model.generate(long_prompt.first(600), max_tokens: 1)
    elapsed = now - started
    ticker.kill.join
    puts "\n    another thread ticked #{ticks} times (of at most #{(elapsed / 0.01).round}) " \
         "during a #{elapsed.round(2)} s prompt"
    expect(ticks).to be >= [10, elapsed / 0.01 / 5].max
  end

  it "takes the GVL back for the streaming block, and an exception there stops generation cleanly" do
    pieces = []
    expect do
      model.generate("def fibonacci(n):", max_tokens: 30) do |piece|
        pieces << piece.dup # Ruby work: the block holds the GVL
        GC.start
        raise IOError, "client went away" if pieces.size == 3
      end
    end.to raise_error(IOError, "client went away")
    expect(pieces.size).to eq(3)
    still_works!
  end

  describe "interrupts, mid-prompt" do
    before(:all) do
      @model.generate(long_prompt.first(256), max_tokens: 1)
      # A lower bound: the rate of a short prompt, without the cost of attending far back.
      @prompt_seconds = long_prompt.size / @model.stats[:prompt_tokens_per_s]
    end

    # Runs the long prompt; the block interrupts it about a second in and returns when
    # it did. Records the seconds from the interrupt to the exception.
    def interrupted(how, &interrupt)
      expect(@prompt_seconds).to be > 2.5 # so a second in is mid-prompt
      sent = interrupt.call(-> { model.generate(long_prompt, max_tokens: 1) })
      latency = now - sent
      @latencies[how] = latency
      expect(latency).to be < 1.5
      still_works!
    end

    it "stops on Thread#raise" do
      interrupted("Thread#raise") do |generate|
        worker = Thread.new(&generate)
        worker.report_on_exception = false
        sleep 1
        sent = now
        worker.raise(IOError, "stop")
        expect { worker.join }.to raise_error(IOError, "stop")
        sent
      end
    end

    it "stops on Thread#kill" do
      interrupted("Thread#kill") do |generate|
        worker = Thread.new(&generate)
        sleep 1
        sent = now
        worker.kill.join
        expect(worker.status).to be(false)
        sent
      end
    end

    it "stops on Timeout.timeout" do
      interrupted("Timeout") do |generate|
        started = now
        expect { Timeout.timeout(1) { generate.call } }.to raise_error(Timeout::Error)
        started + 1
      end
    end

    it "carries on through the signals Ruby raises nothing for: a child's exit (SIGCHLD), a trap that returns" do
      trapped = 0
      previous = trap("USR1") { trapped += 1 }
      begin
        # Mid-prompt: a child exits at 0.5 s, another sends SIGUSR1 at about 1 s and exits.
        children = [Process.spawn("sleep", "0.5"),
                    Process.spawn(RbConfig.ruby, "-e", "sleep 0.9; Process.kill(:USR1, #{Process.pid})")]
        started = now
        expect(model.generate(long_prompt, max_tokens: 1).size).to eq(1)
        expect(now - started).to be > 1.5
        children.each { |pid| Process.wait(pid) }
        expect(trapped).to eq(1)
      ensure
        trap("USR1", previous)
      end
      still_works!
    end

    it "stops on Ctrl-C (SIGINT from another process, as a terminal sends it)" do
      previous = trap("INT", "DEFAULT") # Ruby's own handler: Interrupt in the main thread
      begin
        interrupted("SIGINT") do |generate|
          reader, writer = IO.pipe
          # CLOCK_MONOTONIC is the machine's, so the sender's clock is ours.
          script = "sleep 1; $stdout.write(Process.clock_gettime(Process::CLOCK_MONOTONIC)); " \
                   "Process.kill(:INT, #{Process.pid})"
          sender = Process.spawn(RbConfig.ruby, "-e", script, out: writer)
          writer.close
          expect(&generate).to raise_error(Interrupt)
          Process.wait(sender)
          Float(reader.read)
        end
      ensure
        trap("INT", previous)
      end
    end
  end

  it "gives 8 threads sharing it the results of sequential calls" do
    canary = Elelem.open(SpecModels.canary, n_ctx: 64, n_threads: 1)
    jobs = Array.new(16) do |i|
      [[1, 20 + i, 40 + (i * 3), 60], { max_tokens: 6, temperature: i.even? ? 0.0 : 0.9, seed: i, ignore_eos: true }]
    end
    expected = jobs.map { |prompt, options| canary.generate(prompt, **options) }
    text = canary.generate("the canary", max_tokens: 5)
    threads = Array.new(8) do |t|
      Thread.new do
        Array.new(6) do |round|
          i = (t + round) % jobs.size
          streamed = []
          out = canary.generate(jobs[i][0], **jobs[i][1]) { |id| (streamed << id) && Thread.pass }
          [i, [out, streamed, canary.generate("the canary", max_tokens: 5)], canary.tokenize("a b c"), canary.info]
        end
      end
    end
    results = threads.flat_map(&:value)
    expect(results.size).to eq(48)
    results.each do |i, outputs, tokens, info|
      expect(outputs).to eq([expected[i], expected[i], text])
      expect(tokens).to eq(canary.tokenize("a b c"))
      expect(info[:n_vocab]).to eq(512)
    end
  ensure
    canary&.close
  end

  it "runs threads' calls together with parallel:, queues the rest, and sheds what the queue cannot hold" do
    Elelem.open(SpecModels.canary, n_ctx: 512, n_threads: 1, parallel: 4, queue: 1) do |canary|
      alone = canary.generate("the canary", max_tokens: 6, ignore_eos: true)
      results = Array.new(4) { Thread.new { canary.generate("the canary", max_tokens: 6, ignore_eos: true) } }
      expect(results.map(&:value)).to eq([alone] * 4) # four free sequences take four arrivals at once
    end
    Elelem.open(SpecModels.canary, n_ctx: 256, n_threads: 1, parallel: 1, queue: 0) do |canary|
      expect(canary.generate([1, 2], max_tokens: 2).size).to eq(2) # a free sequence needs no queue
      shed = nil
      canary.generate([1, 2], max_tokens: 3, ignore_eos: true) do
        shed ||= Thread.new do
          canary.generate([3], max_tokens: 1)
        rescue Elelem::BusyError => e
          e
        end.value
      end
      expect(shed).to be_a(Elelem::BusyError)
    end
  end

  it "keeps working in a forked child (a preloading server), and in the parent" do
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      outputs = [model.generate(short, max_tokens: 4), model.generate("def add(a, b):", max_tokens: 6)]
      writer.write(Marshal.dump(outputs))
      writer.close
      exit!(0)
    end
    writer.close
    child = Timeout.timeout(120) { Marshal.load(reader.read) } # rubocop:disable Security/MarshalLoad
    _, status = Timeout.timeout(30) { Process.wait2(pid) }
    expect(status).to be_success
    expect(child).to eq([@expected, model.generate("def add(a, b):", max_tokens: 6)])
    still_works!
  ensure
    Process.kill(:KILL, pid) if pid && !status
  end
end
