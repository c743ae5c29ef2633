# frozen_string_literal: true

require "fiddle"
require "spec_helper"

# A long-lived server opens and closes models for ever: nothing may accumulate.
RSpec.describe "memory" do
  # glibc's malloc_trim: hands the free memory malloc keeps in its arenas back to the system.
  malloc_trim = Fiddle::Function.new(Fiddle.dlopen(nil)["malloc_trim"], [Fiddle::TYPE_SIZE_T], Fiddle::TYPE_INT)

  # The resident memory of what is still allocated. Without the trim it also counts the free
  # memory malloc keeps, which depends on the order threads and the collector free in: 300
  # models dropped unclosed gave -5 to 78 MiB of growth over runs on a loaded machine, 0.1 to
  # 0.2 MiB once trimmed.
  define_method(:rss_mib) do
    malloc_trim.call(0)
    File.read("/proc/self/status")[/VmRSS:\s+(\d+)/, 1].to_i / 1024.0
  end

  def cycle(close: true)
    model = Elelem.open(SpecModels.canary, n_ctx: 64, n_threads: 1)
    model.generate([1, 50, 60], max_tokens: 3)
    model.generate("the canary", max_tokens: 2, temperature: 0.5, stop: ["x"]) { |piece| piece }
    model.chat_prompt([{ role: "user", content: "hi" }], template: "{{ messages[0].content }}")
    model.close if close
    model
  end

  it "grows RSS by less than 10 MiB over 2,000 open/generate/close cycles" do
    100.times { cycle } # the allocator's and ggml's one-time state
    GC.start
    before = rss_mib
    2000.times { cycle }
    GC.start
    growth = rss_mib - before
    puts "\n    RSS #{before.round(1)} MiB before 2,000 cycles, #{(before + growth).round(1)} MiB after " \
         "(#{growth.round(2)} MiB growth)"
    expect(growth).to be < 10
  end

  it "frees a model dropped without close when the GC collects it" do
    # The allocator keeps what 25 models at once once needed; measured from there on,
    # anything the collector failed to free would add up.
    batch = proc do
      25.times { cycle(close: false) }
      GC.start
    end
    4.times(&batch)
    before = rss_mib
    # Each model holds a few MiB (mapped weights, KV cache, compute buffer): 300 kept would be ~1 GiB.
    12.times(&batch)
    growth = rss_mib - before
    live = ObjectSpace.each_object(Elelem::Model).count
    puts "\n    300 models dropped unclosed: #{live} still live after GC, RSS growth #{growth.round(2)} MiB"
    expect(live).to be < 5
    expect(growth).to be < 10
  end

  it "runs under GC.stress" do
    GC.stress = true
    pieces = []
    result = Elelem.open(SpecModels.canary, n_ctx: 32, n_threads: 1) do |model|
      model.generate("the canary", max_tokens: 3) { |piece| pieces << piece }
      [model.generate([1, 50], max_tokens: 2), model.tokenize("a b"), model.detokenize([60, 61]),
       model.chat_prompt([{ role: "user", content: "x" }], template: "{{ messages[0].content }}"),
       model.info[:n_vocab], model.stats[:n_past]]
    ensure
      GC.stress = false
    end
    expect(result.last(2)).to eq([512, 3])
    expect(pieces.join).to eq(Elelem.open(SpecModels.canary) { |m| m.generate("the canary", max_tokens: 3) })
  end
end
