# frozen_string_literal: true

require "spec_helper"
require "tmpdir"

# Whatever a caller passes, a public method answers with ArgumentError or an
# Elelem::Error (NoMemoryError for what cannot be allocated), never a crash, and
# the model keeps working.
RSpec.describe "hostile calls" do
  let(:model) { Elelem.open(SpecModels.canary, n_ctx: 64, n_threads: 1) }
  let(:prompt) { [1, 50, 60, 70] }
  let(:invalid_utf8) { (+"caf\xC3").force_encoding(Encoding::UTF_8) }
  let(:alien) { Object.new }

  after { model.close }

  # Every value must be refused; returns the errors for a closer look.
  def refuses(values)
    values.map do |value|
      yield value
      raise "accepted #{value.inspect}"
    rescue ArgumentError, Elelem::Error => e
      e
    end
  end

  def healthy!
    expect(model.generate(prompt, max_tokens: 2).size).to eq(2)
  end

  it "refuses bad paths and sizes when opening" do
    Dir.mktmpdir do |dir|
      fifo = File.join(dir, "fifo.gguf")
      File.mkfifo(fifo)
      loads = ["/nonexistent.gguf", dir, fifo, "/dev/zero", "#{SpecModels.canary}\0x", "\xFF\xFE.gguf".b, ""]
      refuses(loads) { |path| Elelem.open(path) }.each { |e| expect(e).to be_a(Elelem::LoadError) }
    end
    refuses([nil, 1, :canary, [], alien]) { |path| Elelem.open(path) }
    refuses([0, -1, (1 << 20) + 1, 2**64, 1.5, "64", nil, Float::NAN]) { |n| Elelem.open(SpecModels.canary, n_ctx: n) }
    refuses([0, -1, 513, 2**64, 1.5, nil]) { |n| Elelem.open(SpecModels.canary, n_threads: n) }
    refuses([-1, 2**40, 1.5, "0"]) { |n| Elelem.open(SpecModels.canary, n_gpu_layers: n) }
    healthy!
  end

  it "refuses bad prompts" do
    bad = [nil, 1, :ids, {}, [], "", [1.5], [nil], ["a"], [-1], [512], [2**40], [2**70], [1, -(2**70)],
           invalid_utf8, alien]
    refuses(bad) { |p| model.generate(p, max_tokens: 1) }
    refuses(bad) { |p| model.complete(p, max_tokens: 1) }
    refuses(bad) { |p| model.each_token(p, max_tokens: 1) { nil } }
    healthy!
  end

  it "refuses bad generation options" do
    {
      max_tokens: [-1, (1 << 20) + 1, 2**64, 1.5, nil, "1"],
      top_k: [-1, 2**32, 2**64, 1.5, nil],
      repeat_last_n: [-1, (1 << 20) + 1, 2**64],
      seed: [-1, 2**64, 1.5, "42"],
      temperature: [-1, Float::NAN, Float::INFINITY, 2**2000, Complex(1, 1), "hot", nil],
      top_p: [-0.1, 1.1, Float::NAN, Complex(0, 1), "all"],
      min_p: [-0.1, 1.1, Float::NAN, Float::INFINITY],
      repeat_penalty: [0, -1, Float::NAN, Float::INFINITY],
      stop: [5, [""], "", [nil], [:x], [invalid_utf8], alien]
    }.each do |option, values|
      refuses(values) { |v| model.generate(prompt, max_tokens: 1, option => v) }
    end
    refuses([{ temprature: 1 }, { "max_tokens" => 1 }]) { |o| model.generate(prompt, **o) }
    healthy!
  end

  it "refuses bad ids and texts in the tokenizer's methods, and takes binary UTF-8" do
    refuses([nil, 1, :text, invalid_utf8, alien]) { |t| model.tokenize(t) }
    refuses([nil, "x", [1.5], [-1], [512], [2**64], alien]) { |ids| model.detokenize(ids) }
    refuses([nil, "x", -1, 512, 2**64, 1.5]) { |id| model.token_to_piece(id) }
    expect(model.tokenize("caf\u00e9".b)).to eq(model.tokenize("caf\u00e9"))
    expect(model.detokenize([])).to eq("")
    healthy!
  end

  it "refuses bad conversations, template variables and templates" do
    loop = [].tap { |a| a << a }
    bad = [nil, [], [1], [{}], [{ role: 1, content: "x" }], [{ role: "user", content: 5 }],
           [{ role: "user", content: invalid_utf8 }], [{ role: "user", content: "x", extra: alien }],
           [{ role: "user", content: "x", tool_calls: loop }],
           [{ role: "user", content: "x", tool_calls: [{ 1.5 => "key" }] }],
           [{ role: "user", content: "x", tool_calls: [{ 2**200 => "key" }] }], :hi]
    refuses(bad) { |m| model.chat_prompt(m, template: "{{ messages[0].content }}") }
    # Integer keys, as values, up to the template engine's 128 bits.
    big_key = [{ role: "user", content: "x", extra: { 2**70 => 1 } }]
    expect(model.chat_prompt(big_key, template: "{{ messages[0].extra }}")).to eq("{1180591620717411303424: 1}")
    refuses(bad) { |m| model.chat(m, template: "{{ messages[0].content }}", max_tokens: 1) }
    messages = [{ role: "user", content: "hi" }]
    variables = [{ tools: "all" }, { tools: [1] }, { messages: [] }, { documents: alien }, { deep: loop },
                 { big: 2**200 }, { text: invalid_utf8 }, { now: "today" }, { now: Time.at(-1) }]
    refuses(variables) { |v| model.chat_prompt(messages, template: "{{ tools }}{{ deep }}{{ big }}{{ text }}", **v) }
    refuses([1, invalid_utf8, "{% for %}", "{{ raise_exception('no') }}", "{% for t in tools %}{% endfor %}",
             "{{ strftime_now('%Y\0') }}", "{{ (messages|map(attribute='role'))|tojson }}", alien]) do |t|
      model.chat_prompt(messages, template: t)
    end
    refuses([nil]) { model.chat(messages) } # the canary has no template
    healthy!
  end

  it "refuses every call after close" do
    model.close
    calls = {
      generate: -> { model.generate(prompt) }, complete: -> { model.complete("x") },
      each_token: -> { model.each_token("x").first }, chat: -> { model.chat([{ role: "user", content: "x" }]) },
      chat_prompt: -> { model.chat_prompt([{ role: "user", content: "x" }], template: "x") },
      chat_template: -> { model.chat_template }, tokenize: -> { model.tokenize("x") },
      detokenize: -> { model.detokenize([1]) }, token_to_piece: -> { model.token_to_piece(1) },
      info: -> { model.info }, stats: -> { model.stats }
    }
    calls.each_value { |call| expect(&call).to raise_error(Elelem::ClosedError) }
    expect(model.close).to be_nil
    expect(model.inspect).to eq("#<Elelem::Model closed>")
  end

  it "takes calls on the model from its own streaming block: nothing waits for the block" do
    nested = []
    outer = model.generate(prompt, max_tokens: 3, ignore_eos: true) { nested << model.generate([1], max_tokens: 2) }
    expect(nested).to eq([model.generate([1], max_tokens: 2)] * 3)
    expect(outer).to eq(model.generate(prompt, max_tokens: 3, ignore_eos: true))
    model.generate(prompt, max_tokens: 1) { expect(model.info[:n_vocab]).to eq(512) }
    healthy!
  end

  it "closes from its own streaming block, and the generation then raises ClosedError" do
    expect { model.generate(prompt, max_tokens: 5, ignore_eos: true) { model.close } }
      .to raise_error(Elelem::ClosedError)
    expect(model).to be_closed
  end

  it "tokenizes from its own streaming block: the tokenizer takes no turn on the model" do
    model.tokenizer
    seen = []
    model.generate(prompt, max_tokens: 3) { |id| seen << model.detokenize([id]) << model.tokenize("x") }
    expect(seen.size).to eq(6)
    healthy!
  end

  it "keeps its natives private and cannot be built or copied behind Elelem.open's back" do
    expect { model._run(prompt, {}, false) }.to raise_error(NoMethodError)
    expect { model._close }.to raise_error(NoMethodError)
    expect { Elelem::Model._open(SpecModels.canary, 0, 0, 0) }.to raise_error(NoMethodError)
    expect { Elelem::Tokenizer._open(SpecModels.canary) }.to raise_error(NoMethodError)
    expect { model.tokenizer.send(:_detokenize, [2**40], true) }.to raise_error(RangeError)
    [-> { Elelem::Tokenizer.new }, -> { model.tokenizer.dup }].each do |call|
      expect(&call).to raise_error(TypeError, /allocator undefined/)
    end
    [-> { Elelem::Model.new }, -> { Elelem::Model.allocate }, -> { model.dup }, -> { model.clone }].each do |call|
      expect(&call).to raise_error(TypeError, /allocator undefined/)
    end
    expect { Marshal.dump(model) }.to raise_error(TypeError)
    healthy!
  end

  it "raises NoMemoryError for a context that cannot be allocated, and goes on" do
    # Address space capped in a child, so the allocation fails there as it would on a full machine.
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      vm = File.read("/proc/self/status")[/VmSize:\s+(\d+)/, 1].to_i * 1024
      Process.setrlimit(:AS, vm + (256 << 20))
      begin
        Elelem.open(SpecModels.canary, n_ctx: 1 << 20, n_threads: 1)
        writer.write("opened")
      rescue NoMemoryError, Elelem::Error => e
        ok = Elelem.open(SpecModels.canary, n_ctx: 64, n_threads: 1) { |m| m.generate([1, 2], max_tokens: 2).size }
        writer.write("#{e.class}: #{e.message}; then generated #{ok}")
      end
      writer.close
      exit!(0)
    end
    writer.close
    report = reader.read
    _, status = Process.wait2(pid)
    expect(status).to be_success
    expect(report).to match(/\ANoMemoryError: out of memory allocating KV cache \(\d+ bytes, [\d.]+ MiB, for n_ctx/)
    expect(report).to end_with("for n_ctx 1048576; a smaller n_ctx needs less); then generated 2")
    healthy!
  end
end
