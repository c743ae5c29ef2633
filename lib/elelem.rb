# frozen_string_literal: true

require "etc"
require "fileutils"
require "json"
require "rbconfig"
require_relative "elelem/version"
require_relative "elelem/errors"

# The native extension. A platform gem carries one build per Ruby ABI (the C API changes
# between minor versions), in lib/elelem/<major>.<minor>/ as rb-sys's cross gems lay them
# out, beside the ggml libraries they share in lib/elelem/; a source build has one, in
# lib/elelem/.
ruby_abi = RUBY_VERSION[/\A\d+\.\d+/]
carried_abis = Dir[File.join(__dir__, "elelem", "*", "elelem.#{RbConfig::CONFIG["DLEXT"]}")]
               .map { |f| File.basename(File.dirname(f)) }.sort_by { |v| v.split(".").map(&:to_i) }
# What a Ruby the platform gem has no build for should do. Installing the source gem beside it is not
# enough: RubyGems activates a platform gem before the source gem of the same version.
not_carried = lambda do |running|
  platform = (Gem.loaded_specs["elelem"]&.platform if defined?(Gem.loaded_specs)).to_s
  platform = RUBY_PLATFORM.sub(/-gnu\z/, "") if ["", "ruby"].include?(platform)
  "this elelem gem (#{Elelem::VERSION}, precompiled for #{platform}) carries its native extension for CRuby " \
    "#{carried_abis.join(" and ")}, not for #{running}: run it with one of those, or replace it with the source " \
    "gem, which compiles the extension when installed and needs cargo (a Rust toolchain): `gem uninstall " \
    "elelem --platform #{platform} && gem install elelem --platform ruby`, or with Bundler, " \
    "`gem \"elelem\", force_ruby_platform: true` in the Gemfile"
end
if carried_abis.empty?
  begin
    require_relative "elelem/elelem"
  rescue ::LoadError => e
    raise ::LoadError, "elelem's native extension is not built (#{e.message}); run `rake compile`"
  end
elsif RUBY_ENGINE != "ruby"
  raise ::LoadError, not_carried.call("#{RUBY_ENGINE} #{RUBY_ENGINE_VERSION}")
elsif carried_abis.include?(ruby_abi)
  require_relative "elelem/#{ruby_abi}/elelem"
else
  raise ::LoadError, not_carried.call("Ruby #{RUBY_VERSION}")
end

require_relative "elelem/options"
require_relative "elelem/speculation"
require_relative "elelem/chat_options"
require_relative "elelem/completion"
require_relative "elelem/pieces"
require_relative "elelem/images"
require_relative "elelem/audio"
require_relative "elelem/media"
require_relative "elelem/tokenizer"
require_relative "elelem/replies"
require_relative "elelem/embeddings"
require_relative "elelem/model"
require_relative "elelem/models"
require_relative "elelem/convert"
require_relative "elelem/bench"
require_relative "elelem/golden"
require_relative "elelem/server"

# Run GGUF language models on ggml from Ruby.
#
#   Elelem.open("qwen2.5-coder-0.5b") do |model|
#     model.generate([785, 6722, 315], max_tokens: 16)  # => Array of token ids
#   end
module Elelem
  # @!method self.build_profile
  #   What decides the bits of this build's results: ggml's version, the compiler, the
  #   instruction-set macros ggml's CPU backend was compiled under (`-march=native` picks them
  #   from the build machine's CPU; in the precompiled gem, the CPU variant in use does), and
  #   the C math library the process runs with (glibc 2.41 rounds `tanhf` otherwise than 2.36).
  #   Builds with the same `:id` give the same greedy ids on any CPU; {Golden} keeps one
  #   recording per id.
  #   @return [Hash] `:id`, `:arch`, `:ggml`, `:compiler`, `:isa` (Array), `:cpu_flags`,
  #     `:variant` (the CPU variant in use in the precompiled gem, else nil), `:libm` (a
  #     fingerprint of the C math library's answers), and `:cpu` (this CPU's model name, when
  #     the OS says)
  #   @raise [Elelem::CpuError] when `ELELEM_CPU_VARIANT` names a variant this CPU cannot run

  # @!method self.supported_architectures
  #   The architectures elelem runs (a GGUF's `general.architecture`), from the engine's
  #   registry. A file of another one raises {UnsupportedModel} when opened.
  #     Elelem.supported_architectures.key?("qwen3moe")  # => true
  #   @return [Hash{String => Hash}] by name: `:kind` (`:decoder` or `:encoder`), `:experts`
  #     (whether its feed-forwards may be a mixture of experts), `:models` (the families it holds)

  # @!method self.ggml_version
  #   @return [String] the vendored ggml's version

  # @!method self.system_info
  #   @return [String] the CPU features ggml's CPU backend was compiled for, llama.cpp's way,
  #     after `CPU_VARIANT=<name>` in the precompiled gem (e.g. `"CPU_VARIANT=zen4 SSE3 SSSE3 AVX ..."`)
  #   @raise [Elelem::CpuError] when `ELELEM_CPU_VARIANT` names a variant this CPU cannot run

  # @!method self.cpu_variants
  #   The CPU variants of the precompiled gem: ggml's CPU backend compiled for each ISA level
  #   of llama.cpp's list, the best one this CPU runs loaded at run time, or the one
  #   `ELELEM_CPU_VARIANT` names. Empty in a gem built from source.
  #   @return [Array<Hash>] `:name`, `:features` (Array of String), `:runnable` (this CPU runs
  #     it), `:in_use`

  # @!parse
  #   # The defaults and limits the engine owns, defined by the extension at load (hence
  #   # `native` here) so that
  #   # each is written once and Ruby and Rust read the same value (spec/defaults_spec.rb
  #   # fails on a second home).
  #   module Defaults
  #     # {Elelem.open}'s options when left out: `:n_ctx`, `:n_threads` (the CPUs this process
  #     # may run on), `:adaptive_threads`, `:parallel`, `:queue`, `:flash_attn`,
  #     # `:cache_type_k`, `:cache_type_v`, `:batch_invariant`, `:own_kernels`
  #     OPEN = native
  #     # {Model#generate}'s sampling and stopping options when left out: `:max_tokens`,
  #     # `:ignore_eos`, `:temperature`, `:top_k`, `:top_p`, `:min_p`, `:repeat_penalty`,
  #     # `:repeat_last_n`, `:reuse_prefix`
  #     GENERATION = native
  #     # The largest `n_ctx`, and so the most tokens any count may ask for.
  #     MAX_N_CTX = native
  #     # The most threads a pass may run on.
  #     MAX_THREADS = native
  #   end

  class << self
    # Opens a GGUF model. An option left out takes its default from {Defaults::OPEN}; an
    # unknown key, or a value of the wrong type or out of range, is an ArgumentError naming it.
    #
    #   Elelem.open("qwen2.5-coder-0.5b") { |model| model.generate("def hello") }
    #
    # @param path [String] the .gguf file, a known model's name ({Models.list}), or a Hugging
    #   Face reference ({Hub}: `hf:org/repo:Q4_K_M`, `hf:org/repo/file.gguf`), fetched on first
    #   use (a file of that name wins)
    # @param options [Hash] how to open it:
    # @option options [Integer] :n_ctx the most tokens the context holds (1 to
    #   {Defaults::MAX_N_CTX}): one sequence may use all of them, and `parallel` sequences share
    #   them (llama.cpp's unified KV cache), unless `batch_invariant` splits them
    # @option options [Integer] :n_threads CPU threads for the forward pass (the CPUs this process
    #   may run on, as `Etc.nprocessors` counts them; 1 to {Defaults::MAX_THREADS})
    # @option options [Boolean] :adaptive_threads run a pass on fewer threads while other
    #   processes or threads keep the cores busy (measured from the scheduler's own account of the
    #   waits), and on all `n_threads` again once they are free; never for a pass whose
    #   result would change with the thread count, so the tokens are the same either way. See
    #   README, "Sharing the cores"
    # @option options [Integer, nil] :n_gpu_layers how many layers go to the devices (the
    #   RPC workers' of `rpc:`, then, in a build with Vulkan, this machine's Vulkan
    #   GPUs: README, "GPUs through Vulkan"), the last ones, the output layer counted, as llama.cpp's `-ngl`;
    #   nil, the default, is all of them. Without a device every layer runs on the CPU
    # @option options [Array<String>, String] :rpc RPC workers (`"host:port"`, each running
    #   `elelem rpc-server` or llama.cpp's `rpc-server`) whose devices hold the offloaded layers,
    #   their weights and their KV cache, as llama.cpp's `--rpc`. The protocol has no
    #   authentication: trusted networks only. See README, "A model over several machines"
    # @option options [Array<Numeric>] :tensor_split each device's share of the offloaded
    #   layers (llama.cpp's `--tensor-split`); left out: in proportion to each one's free memory
    # @option options [Numeric] :rpc_timeout the longest any wait on an RPC worker lasts, in
    #   seconds (default 60): a worker that answers nothing for that long has failed
    # @option options [Symbol] :split_mode `:layer` (whole layers to each device, the default)
    #   or `:none` (every offloaded layer on the device `main_gpu:` names, 0 by default), as
    #   llama.cpp's `--split-mode`
    # @option options [Integer] :main_gpu with `split_mode: :none`, the device (of the
    #   workers' devices, in order) that takes every offloaded layer
    # @option options [Boolean] :kv_offload each layer's KV cache beside its weights on its
    #   device (true, the default) or in this machine's memory (llama.cpp's `--no-kv-offload`)
    # @option options [Integer] :parallel how many sequences generate at once (up to
    #   {Model::MAX_SEQUENCES}): concurrent calls from threads beyond it wait in a queue
    # @option options [Integer] :queue how many calls may wait; one more raises {BusyError}
    # @option options [Symbol, Boolean] :flash_attn attention as one flash-attention kernel
    #   (`true`; `:auto`, the default as in llama.cpp, picks it on the CPU) or as plain matrix
    #   products and a soft-max (`false`, llama.cpp's `-fa off`, faster deep into a long context);
    #   each gives llama.cpp's bits in the same mode
    # @option options [Symbol] :cache_type_k what the KV cache stores keys as, as llama.cpp's
    #   `-ctk`: `:f16` or `:q8_0` / `:q4_0` (about half / a quarter of the memory,
    #   and llama.cpp's bits with the same types, which differ from F16's)
    # @option options [Symbol] :cache_type_v the same for values (`-ctv`); a quantized V cache
    #   needs flash attention (`flash_attn: false` with it raises ArgumentError, as llama.cpp refuses)
    # @option options [String, Model, Symbol, nil] :draft speculative decoding for every
    #   generation (unless a call says `draft: false`): a draft model
    #   of the same vocabulary (a path, a known model's name, or an open {Model}, whose weights are
    #   shared) proposes tokens that the model verifies several at a time; `:lookup` drafts from
    #   n-grams of the prompt and the text so far, `:copy` copies what followed the last earlier
    #   occurrence of the text's last three tokens, both with no second model. See README,
    #   "Speculative decoding"
    # @option options [Integer, nil] :draft_tokens how many tokens a draft holds (1 to
    #   {Model::MAX_DRAFT_TOKENS}); nil adapts it to how many are accepted
    # @option options [Boolean] :batch_invariant give every sequence the tokens it gets alone,
    #   whatever else the model generates beside it: other threads' requests, a server's
    #   other clients, a speculative draft (greedy speculation then gives plain greedy text
    #   exactly). Passes run on ggml's reference kernels and each sequence keeps
    #   `n_ctx / parallel` tokens of its own; it needs flash attention, decodes up to about 30 %
    #   slower and evaluates prompts 2-2.5x slower (see README, "Batch-invariant generation"),
    #   and the tokens are not llama.cpp's
    # @option options [String, nil] :mmproj a projector GGUF (llama.cpp's `--mmproj`) whose
    #   images prompts may then hold ({Model#generate}'s `images:`); by default the one beside
    #   the model's file ({Images.projector_beside}), if any; `nil`: none
    # @option options [Boolean] :own_kernels let passes of a few rows multiply with elelem's own
    #   matrix-product kernels where one fits the weights and the CPU: the bits of the
    #   ggml kernel that would run for the same pass, in less time; `false` runs ggml's products
    #   only
    # @yieldparam model [Model] closed when the block returns or raises
    # @return [Model, Object] the model, or the block's value
    # @raise [ArgumentError] for an unknown option, or a value of the wrong type or out of range
    # @raise [Elelem::LoadError] when the file is missing (the message names the known models),
    #   malformed or unsupported
    # @raise [Elelem::HubError] when a Hugging Face reference cannot be resolved or downloaded
    # @raise [Elelem::IncompatibleDraftError] when the draft model's vocabulary is not the model's
    def open(path, **options)
      model = Model.open(path, **options)
      return model unless block_given?

      begin
        yield model
      ensure
        model.close
      end
    end

    # The module form of {Model#generate}.
    # @return [String, Array<Integer>]
    def generate(model, prompt, **options, &)
      model.generate(prompt, **options, &)
    end

    # Serves this machine's CPU to RPC clients ({Elelem.open}'s `rpc:`, llama.cpp's `--rpc`)
    # until the process ends; Ctrl-C (SIGINT) or SIGTERM ends it. This is ggml's RPC server
    # from elelem's own build: `elelem rpc-server` runs it. It has no authentication: bind
    # it to loopback (the default) or to a trusted network only.
    #
    # @param host [String] the IPv4 address to listen on
    # @param port [Integer] the TCP port
    # @param threads [Integer] CPU threads per graph
    # @param cache [String, nil] a directory where large tensors are kept by hash, so that a
    #   client that loads the same model again need not send them (llama.cpp's `-c`)
    # @return [void] never, unless the server cannot start
    # @raise [Elelem::BackendError] when it cannot listen there
    def serve_rpc(host: "127.0.0.1", port: 50_052, threads: Defaults::OPEN[:n_threads], cache: nil)
      raise ArgumentError, "port must be an Integer in 1..65535, got #{port.inspect}" unless (1..65_535).cover?(port)
      unless threads.is_a?(Integer) && threads.between?(1, Defaults::MAX_THREADS)
        raise ArgumentError, "threads must be an Integer in 1..#{Defaults::MAX_THREADS}, got #{threads.inspect}"
      end

      FileUtils.mkdir_p(cache) if cache
      _serve_rpc(host.to_s, port, threads, cache&.to_s)
    end

    # Frees a model's native memory; the module form of {Model#close}.
    # @return [void]
    def close(model)
      model.close
    end
  end
end
