# frozen_string_literal: true

require "digest"
require "json"
require "open3"
require "time"
require_relative "golden/adoption"
require_relative "golden/document"
require_relative "golden/driver"
require_relative "golden/mismatch"
require_relative "golden/settings"

module Elelem
  # A golden file: prompts, how they are decoded (greedy), and the token ids
  # recorded for them per build profile.
  #
  # Greedy ids are exact only between builds that compile the same kernels: the
  # same ggml, compiler and instruction-set macros, running with a C math library
  # that answers the same ({Elelem.build_profile}).
  # `-march=native` compiles other kernels on other CPUs (AVX512-FP16 makes flash
  # attention accumulate in half precision, for one), and where the top two logits
  # are close another rounding picks another token. So a golden file keeps one
  # recording per profile, and a check uses the recording of the running build's
  # profile, never another's. A profile without a recording is recorded (from
  # elelem, or from llama.cpp through the reference driver) or the check fails
  # saying so.
  #
  #   golden = Elelem::Golden.new("spec/goldens/qwen.json")
  #   golden.add_case("fib", model.tokenize("def fib(n):"), max_tokens: 16, prompt_text: "def fib(n):")
  #   golden.record(model)                 # this profile's ids, from elelem
  #   golden.check(model, "fib")           # => nil, or a Golden::Mismatch
  class Golden
    # The `format` field of the files this class reads and writes.
    FORMAT = "elelem-golden/1"
    # Set to 1 to record what is missing instead of failing ({Elelem::RSpec}).
    RECORD_ENV = "ELELEM_RECORD_GOLDENS"
    # Where recordings made on this machine are kept when a {Golden} is given `cache:`
    # (`$ELELEM_GOLDEN_CACHE`, or `~/.cache/elelem/goldens`).
    CACHE_DIR = ENV.fetch("ELELEM_GOLDEN_CACHE") { File.join(Dir.home, ".cache", "elelem", "goldens") }

    class << self
      # Whether {RECORD_ENV} asks for missing recordings to be made.
      # @return [Boolean]
      def record_missing?
        ENV.fetch(RECORD_ENV, "") == "1"
      end

      # The SHA-256 of a model file (memoized by path, size and modification time).
      # @return [String] hex
      def sha256(path)
        stat = File.stat(path)
        (@sha256 ||= {})[[File.expand_path(path), stat.size, stat.mtime]] ||= Digest::SHA256.file(path).hexdigest
      end
    end

    # @return [String] the golden file
    attr_reader :path

    # Opens `path` (which need not exist yet).
    # @param cache [String, nil] a directory of recordings made on this machine, kept outside the
    #   file (e.g. `~/.cache/...` in CI); {#record} writes there when given
    # @raise [Elelem::Error] when the file is not a golden file
    def initialize(path, cache: nil)
      @path = path.to_s
      @cache = cache && File.join(cache.to_s, Elelem.build_profile[:id], File.basename(@path))
      @doc = File.exist?(@path) ? Document.read(@path) : Document.empty
      @cached = @cache && File.exist?(@cache) ? Document.read(@cache)["recordings"] : {}
      @saved = saved_part
    end

    # @return [Integer, nil] the context size the ids were recorded with
    def n_ctx = @doc["n_ctx"]

    # @return [Integer, nil] the thread count the ids were recorded with (llama.cpp's bits depend on it)
    def n_threads = @doc["n_threads"]

    # @return [Integer] the sequences the model was opened with (`parallel:`), for lockstep cases
    def parallel = @doc.fetch("parallel", 1)

    # @return [Boolean] whether the model was opened with flash attention (`flash_attn:`; the
    #   reference ran with llama.cpp's `-fa` in the same mode)
    def flash_attn = @doc.fetch("flash_attn", true)

    # @!method cache_type_k
    #   @return [Symbol] what the model's KV cache stored keys as (`cache_type_k:`; the reference
    #     ran with llama.cpp's `-ctk` of the same type)
    # @!method cache_type_v
    #   @return [Symbol] what the model's KV cache stored values as (`cache_type_v:`, `-ctv`)
    %w[cache_type_k cache_type_v].each { |key| define_method(key) { @doc.fetch(key, "f16").to_sym } }

    # @return [Integer] how many RPC workers (`elelem rpc-server`) the model was spread over
    #   (`rpc:`; the reference ran with `--rpc` over the same ones); 0: none
    def rpc_workers = @doc.fetch("rpc_workers", 0)

    # @return [Integer, nil] with RPC workers, the layers on their devices (`n_gpu_layers:`, `-ngl`)
    def n_gpu_layers = @doc["n_gpu_layers"]

    # @return [Boolean] whether each layer's KV cache was beside its weights (`kv_offload:`;
    #   the reference ran with `-nkvo` when not)
    def kv_offload = @doc.fetch("kv_offload", true)

    # @return [Integer, nil] the one device every offloaded layer was on (`split_mode: :none,
    #   main_gpu:`; the reference ran with `-sm none -mg`), nil when they were split
    def main_gpu = @doc["main_gpu"]

    # @return [String, nil] the GPU of this machine the offloaded layers were on, as
    #   `"Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)"` (see {Settings.of}); nil: none
    def gpu = @doc["gpu"]

    # @return [Array<Hash>] the cases: `"name"`, `"prompt"` (ids), `"max_tokens"`, `"ignore_eos"`,
    #   and `"prompt_text"` where the prompt was text; a lockstep case has `"prompts"` (an Array
    #   of ids each) instead of `"prompt"`, decoded together in the same passes; a continued case
    #   has a `"continuation"` (ids) too: a second turn from the cache, its prompt the first's,
    #   what it generated, and the continuation
    def cases
      @doc["cases"]
    end

    # The case named `name`, or the one with these prompt ids and settings.
    # @return [Hash, nil]
    def find(name = nil, prompt: nil, max_tokens: nil, ignore_eos: false)
      return cases.find { |c| c["name"] == name } if name

      cases.find { |c| c.values_at("prompt", "max_tokens", "ignore_eos") == [prompt, max_tokens, ignore_eos] }
    end

    # Adds a case (its recordings are made by {#record}).
    # @return [Hash] the case
    # @raise [ArgumentError] when a case of that name exists
    def add_case(name, prompt, max_tokens:, ignore_eos: false, prompt_text: nil)
      raise ArgumentError, "#{@path} already has a case named #{name.inspect}" if find(name)

      c = { "name" => name, "prompt_text" => prompt_text, "prompt" => prompt, "max_tokens" => max_tokens,
            "ignore_eos" => ignore_eos }.compact
      cases << c
      c
    end

    # Adds a lockstep case: `prompts` decoded as sequences of one context, started together
    # ({Model#generate_all}; llama.cpp's driver lays out the same passes).
    # @return [Hash] the case
    # @raise [ArgumentError] when a case of that name exists
    def add_lockstep_case(name, prompts, max_tokens:, ignore_eos: false)
      raise ArgumentError, "#{@path} already has a case named #{name.inspect}" if find(name)

      (cases << { "name" => name, "prompts" => prompts, "max_tokens" => max_tokens, "ignore_eos" => ignore_eos }).last
    end

    # Adds a continued case: `prompt` decoded afresh, then the conversation continued from the
    # cache (`reuse_prefix: true`) with the prompt, what it generated and `continuation`, as
    # llama.cpp's prompt cache continues it.
    # @return [Hash] the case
    # @raise [ArgumentError] when a case of that name exists
    def add_continued_case(name, prompt, continuation, max_tokens:, ignore_eos: false)
      raise ArgumentError, "#{@path} already has a case named #{name.inspect}" if find(name)

      (cases << { "name" => name, "prompt" => prompt, "continuation" => continuation, "max_tokens" => max_tokens,
                  "ignore_eos" => ignore_eos }).last
    end

    # The recording for the running build's profile (from the file or the cache).
    # @return [Hash, nil] with `"outputs"` by case name, `"recorder"`, `"cpu"`, `"build"`
    def recording
      id = Elelem.build_profile[:id]
      @doc["recordings"][id] || @cached[id]
    end

    # Whether the running build's profile has a recording of every case.
    # @return [Boolean]
    def recorded? = unrecorded.empty?

    # The cases the running build's profile has no recording of.
    # @return [Array<String>] their names
    def unrecorded = cases.map { |c| c["name"] } - (recording&.fetch("outputs")&.keys || [])

    # The profiles something was recorded for, with the CPU each was recorded on.
    # @return [Hash{String => String}]
    def recorded_profiles
      @doc["recordings"].merge(@cached).transform_values { |r| r["cpu"].to_s }
    end

    # What was recorded for a case under the running build's profile.
    # @return [Hash] `"ids"`, `"text"` and, when recorded from llama.cpp, `"margins"`
    # @raise [Elelem::Error] when this profile has no recording of the case
    def output(name)
      recorded_output(named(name))
    end

    # Checks one case against this profile's recording.
    # @param model [Model] opened with the file's `n_ctx` and `n_threads`
    # @return [Mismatch, nil]
    # @raise [Elelem::Error] when the model, its settings or the recording do not fit the file
    def check(model, name)
      kase = named(name)
      expected = recorded_output(kase)
      check_model(model.info)
      actual = decode(model, kase)
      return if actual == expected["ids"]
      return mismatch(name, expected["ids"], actual, expected["margins"]) unless nested?(kase)

      seq = actual.each_index.find { |s| actual[s] != expected["ids"][s] }
      part = kase["prompts"] ? "sequence" : "turn"
      mismatch("#{name} (#{part} #{seq})", expected["ids"][seq], actual[seq], nil)
    end

    # Records every case (or those named) for the running build's profile, saving each as it
    # is done: a recording stopped midway (hours of it under emulation) keeps the cases it has.
    # @param model [Model] the model to record from (its file, with `reference:`)
    # @param reference [String, nil] an `elelem-reference` driver (tools/reference) to record
    #   llama.cpp's ids instead of elelem's; it must be built natively like this build
    # @param only [Array<String>, nil] the names of the cases to record
    # @return [self]
    def record(model, reference: nil, only: nil)
      info = model.info
      settle_model(info)
      rec = (recording || new_recording(reference)).merge("recorded_at" => Time.now.utc.iso8601)
      cases.each do |c|
        next if only && !only.include?(c["name"])

        rec["outputs"][c["name"]] = reference ? Driver.new(reference).output(info, c) : elelem_output(model, c)
        save(rec)
      end
      self
    end

    # Copies into this file llama.cpp's recordings of it that a cache of this machine's holds
    # (`<cache>/<profile>/<file name>`, where {#record} leaves them when given `cache:`), for
    # every build profile found there, this build's or not (a native gem's check records each
    # CPU variant's there, some of them under emulation): what took hours to record is then
    # committed with the file. A profile the file has a recording of gains only the cases it
    # lacks, from the same recorder on the same CPU; what the file holds stays as it is.
    # @param cache [String] the cache's directory (as `cache:` of {#initialize}: {CACHE_DIR})
    # @param profiles [Regexp, nil] the build profiles to take (nil: all)
    # @return [Hash{String => Array<String>}] by profile, the names of the cases added
    # @raise [Elelem::Error] when a cached recording is elelem's, holds for another model,
    #   settings or cases, or records a case otherwise than the file does; nothing is written then
    def adopt(cache, profiles: nil)
      Adoption.new(@path, @doc).run(cache, profiles) { |doc| Document.write(@path, @doc = doc) }
    end

    private

    def named(name) = find(name) || raise(Error, "#{@path} has no case named #{name.inspect}")

    def mismatch(name, expected, actual, margins)
      step = (0...[actual.size, expected.size].max).find { |i| actual[i] != expected[i] }
      Mismatch.new(case_name: name, step:, expected:, actual:, reference_margin: margins&.at(step), recording:,
                   profile: Elelem.build_profile)
    end

    # Whether the case's ids are a list per sequence (lockstep) or per turn (continued).
    def nested?(kase) = kase.key?("prompts") || kase.key?("continuation")

    def decode(model, kase)
      options = { max_tokens: kase["max_tokens"], ignore_eos: kase["ignore_eos"] }
      return model.generate_all(kase["prompts"], **options) if kase["prompts"]
      return model.generate(kase["prompt"], **options) unless kase["continuation"]

      first = model.generate(kase["prompt"], **options, reuse_prefix: false)
      [first, model.generate(kase["prompt"] + first + kase["continuation"], **options, reuse_prefix: true)]
    end

    def recorded_output(kase)
      rec = recording
      output = rec && rec["outputs"][kase["name"]]
      return output if output

      others = recorded_profiles.map { |id, cpu| "#{id} (#{cpu})" }.join(", ")
      raise Error, "#{@path}: no recording of case #{kase["name"].inspect} for this build profile " \
                   "#{Elelem.build_profile[:id]} (#{Elelem.build_profile[:isa].join(" ")}; " \
                   "recorded: #{others.empty? ? "none" : others}). Greedy ids hold only within a profile: " \
                   "record this one (#{RECORD_ENV}=1, or Golden#record with reference: for llama.cpp's)"
    end

    def check_model(info)
      sha = @doc.dig("model", "sha256")
      raise Error, "#{@path} was recorded with another model file (sha256 #{sha}), not #{info[:path]}" \
        if sha && Golden.sha256(info[:path]) != sha

      Settings.check(@doc, info, @path)
    end

    # The first recording settles the model and its settings; later ones must match them.
    def settle_model(info)
      return check_model(info) if @doc["model"]

      @doc["model"] = { "file" => File.basename(info[:path]), "sha256" => Golden.sha256(info[:path]) }
      Settings.settle(@doc, info)
    end

    def new_recording(reference)
      profile = Elelem.build_profile
      recorder = reference ? "llama.cpp (#{File.basename(reference)}, greedy)" : "elelem #{VERSION} (greedy)"
      { "build" => profile.except(:id, :cpu).transform_keys(&:to_s), "cpu" => profile[:cpu],
        "recorder" => recorder, "outputs" => {} }
    end

    def elelem_output(model, kase)
      ids = decode(model, kase)
      return { "ids" => ids } if nested?(kase)

      { "ids" => ids, "text" => model.detokenize(ids, special: false) }
    end

    def save(rec)
      id = Elelem.build_profile[:id]
      if @cache
        @cached[id] = rec
        Document.write(@cache, @doc.merge("recordings" => { id => rec }))
        save_cases
      else
        @doc["recordings"][id] = rec
        Document.write(@path, @doc)
      end
      self
    end

    # With a cache the file changes only for new cases or a first model; it is written with
    # the recordings it holds now, so a long check leaves what was committed to it meanwhile.
    def save_cases
      return if saved_part == @saved

      @doc["recordings"] = Document.read(@path)["recordings"] if File.exist?(@path)
      Document.write(@path, @doc)
      @saved = saved_part
    end

    # What of the file a recording into a cache may change: its model, settings and cases.
    def saved_part = JSON.generate(@doc.except("recordings"))
  end
end
