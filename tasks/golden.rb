# frozen_string_literal: true

require "tempfile"
require_relative "reference"
require_relative "grammar_golden"
require_relative "embedding_golden"
require_relative "speculative_golden"
require_relative "rpc_golden"
require_relative "vision_golden"

# The golden prompts. Their ids and continuations come only from the reference
# (llama.cpp), never from elelem, and hold for the build profile they were recorded
# under (see Elelem::Golden): `rake golden` records this profile into
# spec/fixtures/goldens, `rake goldens` a profile they lack into a cache.
module Goldens
  NOTES = (1..40).map do |i|
    "Note #{i}: the function parse_#{i}(input) reads #{i * 7} bytes, checks the header, and returns " \
      "a Hash with keys :id, :name and :size; errors raise ArgumentError."
  end.freeze
  LONG_TEXT = NOTES.join("\n")

  QWEN_PROMPTS = {
    "code" => "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "prose" => "The three most important things to know about the Ruby programming language are",
    "chat" => "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" \
              "Write a Ruby method that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "long" => "#{LONG_TEXT}\nSummary of the notes above:"
  }.freeze

  # Gemma 3's sliding layers keep their keys in a ring of 1024 cells (window 512 plus
  # one micro-batch): "long" (1124 tokens) wraps it within the prompt, "wrap" (1011)
  # while decoding.
  GEMMA_PROMPTS = {
    "code" => QWEN_PROMPTS["code"],
    "chat" => "<start_of_turn>user\nWrite a Ruby method that reverses a string.<end_of_turn>\n" \
              "<start_of_turn>model\n",
    "story" => "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "long" => "#{NOTES.first(25).join("\n")}\nSummary of the notes above:",
    "wrap" => "#{NOTES.first(22).join("\n")}\nQuestion: of all the functions above, which one reads the most " \
              "bytes, how many bytes is that, and in which note is it described? Answer:"
  }.freeze

  MODELS = {
    "qwen2.5-coder-0.5b" => QWEN_PROMPTS,
    "qwen2.5-coder-1.5b" => QWEN_PROMPTS.slice("code", "long"),
    "gemma-3-270m" => GEMMA_PROMPTS
  }.freeze

  # The synthetic models' prompts are ids: their vocabulary is made up.
  CANARY_PROMPTS = {
    "short" => [1, 50, 60, 70, 80],
    "long" => [1] + (0...700).map { |i| 3 + ((i * 7919) % 509) }
  }.freeze

  # Prompts beyond CANARY_PROMPTS for some synthetic models: "longer" (1,301 tokens) carries a
  # recurrent state across three micro-batches of a prompt, "long" across two.
  LONGER_PROMPT = ([1] + (0...1300).map { |i| 3 + ((i * 104_729) % 509) }).freeze
  SYNTHETIC_PROMPTS = %w[tiny-qwen35 tiny-qwen35moe tiny-qwen3next].to_h do |name|
    [name, CANARY_PROMPTS.merge("longer" => LONGER_PROMPT)]
  end.freeze

  # Sequences decoded together: one context with a sequence each, started in the same
  # pass (elelem's generate_all, the driver's lockstep). Different prompt lengths make
  # passes that mix decoding sequences with chunks of prompts still being read; the
  # Gemma-shaped model's sliding window gives each sequence its ring.
  LOCKSTEP = {
    "lockstep-tiny-gemma2" => ["tiny-gemma2", [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"],
                                               [1, 90, 91, 92], CANARY_PROMPTS["long"].first(300)]],
    "lockstep-qwen2.5-coder-0.5b" => ["qwen2.5-coder-0.5b", QWEN_PROMPTS.values_at("code", "long", "prose", "chat")],
    # Recurrent layers: llama.cpp splits each pass into micro-batches of as many tokens from
    # each sequence, so the sequences' prompts of different lengths end in different ones.
    "lockstep-tiny-lfm2" => ["tiny-lfm2", [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    "lockstep-tiny-mamba2" => ["tiny-mamba2", [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    "lockstep-tiny-granitehybrid" => ["tiny-granitehybrid",
                                      [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    "lockstep-tiny-qwen35" => ["tiny-qwen35", [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    "lockstep-tiny-qwen35moe" => ["tiny-qwen35moe",
                                  [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    # Latent attention: the sequences' compressed rows share the one K cache.
    "lockstep-tiny-deepseek2" => ["tiny-deepseek2", [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"],
                                                     [1, 90, 91, 92], CANARY_PROMPTS["long"].first(300)]],
    "lockstep-tiny-nemotron_h" => ["tiny-nemotron_h",
                                   [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    "lockstep-tiny-falcon-h1" => ["tiny-falcon-h1",
                                  [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    "lockstep-tiny-qwen3next" => ["tiny-qwen3next",
                                  [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"], [1, 90, 91, 92]]],
    # KV sharing: the sharing layers read each sequence's cells of the sliding and full layers' caches;
    # the last prompt spans two passes.
    "lockstep-tiny-gemma3n" => ["tiny-gemma3n", [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"].first(450),
                                                 [1, 90, 91, 92], CANARY_PROMPTS["long"].last(150)]],
    # Four sequences whose 1,238 cells outgrow the sliding layers' ring (768 cells): the ring
    # reuses what the windows leave behind, so all four start in the first pass, as in the driver.
    "lockstep-tiny-gemma4" => ["tiny-gemma4", [CANARY_PROMPTS["short"], CANARY_PROMPTS["long"],
                                               [1, 90, 91, 92], CANARY_PROMPTS["long"].last(400)]]
  }.freeze

  # Conversations continued from the cache (a continued case: the prompt, then a second turn
  # whose prompt repeats the first's and what it generated, from the cache): a recurrent
  # model reuses its state only when the new prompt continues all of it.
  CONTINUED = {
    "tiny-lfm2" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]],
    "tiny-mamba2" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]],
    "tiny-granitehybrid" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]],
    "tiny-qwen35" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]],
    "tiny-qwen35moe" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]],
    "tiny-nemotron_h" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]],
    "tiny-falcon-h1" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]],
    "tiny-qwen3next" => [CANARY_PROMPTS["short"], [90, 91, 92, 93, 94, 95, 96, 97]]
  }.freeze

  # Goldens of models opened with `flash_attn: false` (llama.cpp's `-fa off`): plain
  # attention over a transposed V cache, their own bits. A Qwen (long prompts, one past
  # 1,600 tokens), Gemma 3 (sliding rings), the Gemma 2-shaped model (soft-capped
  # scores), the Gemma 4-shaped ones (per-layer head sizes; KV sharing), the Gemma 3n-shaped one (KV
  # sharing under AltUp), the Phi-3-shaped one (fused QKV),
  # the gpt-oss-shaped one (attention sinks in the soft-max), the GLM-4.5-shaped one (rope over
  # part of each head), the DeepSeek-V3-shaped one (latent attention: V a view of the K cache,
  # transposed into a copy), and sequences decoded together.
  FLASH_ATTN_OFF_SUFFIX = "-fa-off"
  FLASH_ATTN_OFF = %w[qwen2.5-coder-0.5b gemma-3-270m tiny-gemma2 tiny-gemma4 tiny-gemma4-e tiny-gemma3n tiny-phi3
                      tiny-gpt-oss tiny-glm4moe tiny-deepseek2
                      lockstep-tiny-gemma2].map { |name| name + FLASH_ATTN_OFF_SUFFIX }.freeze

  # Goldens in a context past Llama 4's attention chunk (8,192 positions, which llama.cpp fixes):
  # a prompt that crosses it (the ring of the chunked layers reusing the first chunk's cells), and
  # one whose generation crosses it.
  LONG_CONTEXT_SUFFIX = "-16k"
  LONG_CONTEXT = { "tiny-llama4-16k" => 16_384 }.freeze
  CHUNK_PROMPT = ([1] + (0...9000).map { |i| 3 + ((i * 7919) % 509) }).freeze
  LONG_CONTEXT_PROMPTS = { "past-a-chunk" => CHUNK_PROMPT,
                           "crossing-while-generating" => CHUNK_PROMPT.first(8180) }.freeze

  # Goldens of models opened with a q8_0 KV cache (`cache_type_k: :q8_0, cache_type_v:
  # :q8_0`, llama.cpp's `-ctk q8_0 -ctv q8_0`; flash attention on, which a quantized V
  # cache needs): Hadamard-rotated Q, K and V, their own bits. A Qwen (head dimension 64,
  # long prompts), Gemma 3 (256: a larger K rotation; sliding rings) and the Gemma 3n-shaped
  # model (32: its sharing layers rotate Q alone). The other synthetic models' heads (16) are
  # smaller than a q8_0 block, which llama.cpp refuses too.
  KV_Q8_0_SUFFIX = "-kv-q8_0"
  KV_Q8_0 = %w[qwen2.5-coder-0.5b gemma-3-270m tiny-gemma3n].map { |name| name + KV_Q8_0_SUFFIX }.freeze

  CHAT_MESSAGES = [
    { "role" => "system", "content" => "You are a concise coding assistant." },
    { "role" => "user", "content" => "How do I reverse an Array in Ruby?" },
    { "role" => "assistant", "content" => "Use `array.reverse` (or `reverse!` in place)." },
    { "role" => "user", "content" => "And a String? Answer in one line, with an émoji 🎉." }
  ].freeze

  module_function

  # The prompt llama.cpp renders for CHAT_MESSAGES (llama_chat_apply_template with
  # add_generation_prompt) and its token ids.
  def chat_case(model_path)
    text = Tempfile.create("elelem-chat") do |f|
      CHAT_MESSAGES.each { |m| f.puts("#{m["role"]}\t#{m["content"].unpack1("H*")}") }
      f.flush
      [Reference.run("chat", model_path, f.path).strip].pack("H*").force_encoding(Encoding::UTF_8)
    end
    { "messages" => CHAT_MESSAGES, "prompt_text" => text, "prompt" => Reference.tokenize(model_path, text) }
  end

  # The small random-weight models of elelem_engine::canary::synthetic(), as `rake canary`
  # writes them; their prompts are ids.
  SYNTHETIC_DIR = File.join(Reference::ROOT, "tmp", "synthetic")

  # The embedding models there have goldens of their own (EmbeddingGolden), not greedy ids.
  def synthetic
    Dir[File.join(SYNTHETIC_DIR, "*.gguf")].map { |f| File.basename(f, ".gguf") }.sort - EmbeddingGolden::MODELS.keys
  end

  def fixtures
    [*MODELS.keys, *synthetic, *LOCKSTEP.keys, *FLASH_ATTN_OFF, *KV_Q8_0, *LONG_CONTEXT.keys]
  end

  # The fixture a `-fa-off` (`-kv-q8_0`) golden mirrors: its cases, with flash attention off
  # (a q8_0 KV cache); the model a `-16k` golden runs in a longer context.
  def mirrored(name)
    name.delete_suffix(FLASH_ATTN_OFF_SUFFIX).delete_suffix(KV_Q8_0_SUFFIX).delete_suffix(LONG_CONTEXT_SUFFIX)
  end

  def fixture(name)
    File.join(Reference::GOLDENS, "#{name}.json")
  end

  def model_path(name)
    return model_path(mirrored(name)) if name != mirrored(name)
    return model_path(LOCKSTEP[name].first) if LOCKSTEP.key?(name)
    return Elelem::Models.fetch(name) unless synthetic.include?(name)

    File.join(SYNTHETIC_DIR, "#{name}.gguf")
  end

  # Records llama.cpp's ids for every case of `golden` (or those named in `only`) under this
  # build's profile.
  def record(golden, name, only: nil)
    Reference.check_profile!
    parallel = LOCKSTEP.key?(mirrored(name)) ? LOCKSTEP[mirrored(name)].last.size : 1
    flash_attn = !name.end_with?(FLASH_ATTN_OFF_SUFFIX)
    cache_type = name.end_with?(KV_Q8_0_SUFFIX) ? :q8_0 : :f16
    n_ctx = LONG_CONTEXT.fetch(name, Reference::N_CTX)
    Elelem.open(model_path(name), n_ctx:, n_threads: Reference::N_THREADS, parallel:,
                                  flash_attn:, cache_type_k: cache_type, cache_type_v: cache_type) do |model|
      golden.record(model, reference: Reference.binary, only:)
    end
    puts "recorded #{File.basename(golden.path)} for build profile #{Elelem.build_profile[:id]}"
  end

  # `rake golden`: the cases (text prompts tokenized by the reference) and this build
  # profile's recording, written into the fixtures; other profiles' recordings stay.
  def run
    Reference.build
    MODELS.merge(synthetic.to_h { |name| [name, SYNTHETIC_PROMPTS.fetch(name, CANARY_PROMPTS)] })
          .each { |name, prompts| record_cases(name, prompts) }
    LOCKSTEP.each_key { |name| record_lockstep(name) }
    [*FLASH_ATTN_OFF, *KV_Q8_0].each { |name| record_mirror(name) }
    LONG_CONTEXT.each_key { |name| record_cases(name, LONG_CONTEXT_PROMPTS) }
    RpcGolden.record_all(Reference.binary)
    record_vision
    write_chat
  end

  # A model's fixture: its cases (text prompts tokenized by the reference), recorded.
  def record_cases(name, prompts)
    record(add_cases(Elelem::Golden.new(fixture(name)), name, prompts), name)
  end

  # Adds the cases of `prompts` that `golden` lacks (text prompts tokenized by the reference).
  # @return [Elelem::Golden] golden
  def add_cases(golden, name, prompts)
    prompts.each do |case_name, prompt|
      next if golden.find(case_name)

      text = prompt if prompt.is_a?(String)
      ids = text ? Reference.tokenize(model_path(name), text) : prompt
      golden.add_case(case_name, ids, max_tokens: Reference::N_PREDICT, ignore_eos: text.nil?, prompt_text: text)
    end
    if (turns = CONTINUED[name]) && !golden.find("continued")
      golden.add_continued_case("continued", *turns, max_tokens: Reference::N_PREDICT, ignore_eos: true)
    end
    golden
  end

  # The image and text fixtures (VisionGolden): each language model and projector pair of
  # tmp/synthetic/vision with its cases through libmtmd, into spec/fixtures/goldens/vision.
  def record_vision
    VisionGolden::CASES.each_key { |name| VisionGolden.record(name) }
  end

  # A lockstep fixture: its one case (text prompts tokenized by the reference), recorded.
  def record_lockstep(name)
    model, prompts = LOCKSTEP[name]
    golden = Elelem::Golden.new(fixture(name))
    unless golden.find("lockstep")
      ids = prompts.map { |p| p.is_a?(String) ? Reference.tokenize(model_path(model), p) : p }
      golden.add_lockstep_case("lockstep", ids, max_tokens: Reference::N_PREDICT,
                                                ignore_eos: !prompts.first.is_a?(String))
    end
    record(golden, name)
  end

  # A `-fa-off` or `-kv-q8_0` fixture: the cases of the fixture it mirrors, recorded in its mode.
  def record_mirror(name)
    golden = copy_cases(Elelem::Golden.new(fixture(name)), Elelem::Golden.new(fixture(mirrored(name))).cases)
    record(golden, name)
  end

  # Adds to `golden` the cases of `cases` (another fixture's) that it lacks.
  # @return [Elelem::Golden] golden
  def copy_cases(golden, cases)
    cases.each do |c|
      next if golden.find(c["name"])

      limits = { max_tokens: c["max_tokens"], ignore_eos: c["ignore_eos"] }
      if c["prompts"]
        golden.add_lockstep_case(c["name"], c["prompts"], **limits)
      elsif c["continuation"]
        golden.add_continued_case(c["name"], c["prompt"], c["continuation"], **limits)
      else
        golden.add_case(c["name"], c["prompt"], **limits, prompt_text: c["prompt_text"])
      end
    end
    golden
  end

  # `rake goldens`: for a build profile the fixtures have no recording of, records one
  # from the reference llama.cpp built here into Golden::CACHE_DIR (once per machine).
  def ensure_recorded
    GrammarGolden.ensure_recorded
    EmbeddingGolden.ensure_recorded
    SpeculativeGolden.ensure_recorded
    RpcGolden.record_all(Reference.build, cache: Elelem::Golden::CACHE_DIR)
    VisionGolden.ensure_recorded(Elelem::Golden::CACHE_DIR)
    missing = fixtures.map { |name| [name, cached_golden(name)] }.reject { |_, golden| golden.recorded? }
    profile = Elelem.build_profile
    if missing.empty?
      puts "goldens: every fixture has a recording for build profile #{profile[:id]}"
      return
    end
    puts "goldens: no recording for build profile #{profile[:id]} (#{profile[:isa].join(" ")}) on " \
         "#{profile[:cpu]}: recording from the reference llama.cpp into #{Elelem::Golden::CACHE_DIR}"
    started = Time.now
    Reference.build
    missing.each { |name, golden| record(golden, name) }
    puts format("goldens: recorded in %.0f s", Time.now - started)
  end

  # A fixture with this machine's cache of recordings; a new synthetic model's gets its cases
  # (the fixture then holds them, the cache the recording).
  def cached_golden(name)
    golden = Elelem::Golden.new(fixture(name), cache: Elelem::Golden::CACHE_DIR)
    return golden unless synthetic.include?(name) && golden.cases.empty?

    add_cases(golden, name, SYNTHETIC_PROMPTS.fetch(name, CANARY_PROMPTS))
  end

  # `rake golden:adopt`: llama.cpp's recordings in this machine's cache (`rake goldens`,
  # `rake native:check`) copied into the fixtures whose names match `files`, for the build
  # profiles matching `profiles` (each a regexp; all when nil).
  def adopt(files, profiles)
    fixtures = Dir[File.join(Reference::GOLDENS, "**", "*.json")].select do |path|
      (files.nil? || files.match?(File.basename(path, ".json"))) &&
        JSON.parse(File.read(path))["format"] == Elelem::Golden::FORMAT
    end
    adopted = fixtures.to_h do |path|
      added = Elelem::Golden.new(path).adopt(Elelem::Golden::CACHE_DIR, profiles:)
      added.each { |id, names| puts "#{path}: #{id} (#{names.join(", ")})" }
      [path, added.size]
    end
    puts "golden:adopt: #{adopted.values.sum} recordings from #{Elelem::Golden::CACHE_DIR} into " \
         "#{adopted.values.count(&:positive?)} of #{fixtures.size} golden files"
  end

  def write_chat
    path = File.join(Reference::GOLDENS, "chat-qwen2.5-coder-0.5b.json")
    File.write(path, "#{JSON.pretty_generate(chat_case(Elelem::Models.fetch("qwen2.5-coder-0.5b")))}\n")
    puts "wrote #{path}"
  end
end
