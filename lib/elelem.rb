# frozen_string_literal: true

require "etc"
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
if carried_abis.empty?
  begin
    require_relative "elelem/elelem"
  rescue ::LoadError => e
    raise ::LoadError, "elelem's native extension is not built (#{e.message}); run `rake compile`"
  end
elsif carried_abis.include?(ruby_abi)
  require_relative "elelem/#{ruby_abi}/elelem"
else
  raise ::LoadError, "this elelem gem (#{Elelem::VERSION}, precompiled for #{RUBY_PLATFORM}) carries its native " \
                     "extension for Ruby #{carried_abis.join(" and ")}, not for Ruby #{RUBY_VERSION}: run it " \
                     "with one of those, or install the source gem, which builds for any Ruby " \
                     "(`gem install elelem --platform ruby`; it needs cargo)"
end

require_relative "elelem/options"
require_relative "elelem/speculation"
require_relative "elelem/chat_options"
require_relative "elelem/completion"
require_relative "elelem/pieces"
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
  #   What decides the bits of this build's results: ggml's version, the compiler, and the
  #   instruction-set macros ggml's CPU backend was compiled under (`-march=native` picks them
  #   from the build machine's CPU; in the precompiled gem, the CPU variant in use does).
  #   Builds with the same `:id` give the same greedy ids on any CPU; {Golden} keeps one
  #   recording per id.
  #   @return [Hash] `:id`, `:arch`, `:ggml`, `:compiler`, `:isa` (Array), `:cpu_flags`,
  #     `:variant` (the CPU variant in use in the precompiled gem, else nil), and `:cpu`
  #     (this CPU's model name, when the OS says)
  #   @raise [Elelem::CpuError] when `ELELEM_CPU_VARIANT` names a variant this CPU cannot run

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

  class << self
    # Opens a GGUF model.
    #
    #   Elelem.open("qwen2.5-coder-0.5b") { |model| model.generate("def hello") }
    #
    # @param path [String] the .gguf file, or a known model's name ({Models.list}), fetched
    #   on first use (a file of that name wins)
    # @param n_ctx [Integer] the most tokens the context holds: one sequence may use all of
    #   them, and `parallel` sequences share them (llama.cpp's unified KV cache), unless
    #   `batch_invariant` splits them
    # @param n_threads [Integer] CPU threads for the forward pass
    # @param adaptive_threads [Boolean] run a pass on fewer threads while other processes or
    #   threads keep the cores busy (measured from the scheduler's own account of the waits),
    #   and on all `n_threads` again once they are free; never for a pass whose result would
    #   change with the thread count, so the tokens are the same either way. See README,
    #   "Sharing the cores"
    # @param n_gpu_layers [Integer] layers to offload to a GPU; this build is CPU-only and,
    #   like llama.cpp, runs every layer on the CPU (see {Model#info})
    # @param parallel [Integer] how many sequences generate at once (1 to
    #   {Model::MAX_SEQUENCES}): concurrent calls from threads beyond it wait in a queue
    # @param queue [Integer] how many calls may wait; one more raises {BusyError}
    # @param flash_attn [Symbol, Boolean] attention as one flash-attention kernel (`true`;
    #   `:auto`, llama.cpp's default, picks it on the CPU) or as plain matrix products and a
    #   soft-max (`false`, llama.cpp's `-fa off`, faster deep into a long context); each gives
    #   llama.cpp's bits in the same mode
    # @param cache_type_k [Symbol] what the KV cache stores keys as, as llama.cpp's `-ctk`:
    #   `:f16` (the default) or `:q8_0` / `:q4_0` (about half / a quarter of the memory, and
    #   llama.cpp's bits with the same types, which differ from F16's)
    # @param cache_type_v [Symbol] the same for values (`-ctv`); a quantized V cache needs
    #   flash attention (`flash_attn: false` with it raises ArgumentError, as llama.cpp refuses)
    # @param draft [String, Model, Symbol, nil] speculative decoding for every generation
    #   (unless a call says `draft: false`): a draft model of the same vocabulary (a path, a
    #   known model's name, or an open {Model}, whose weights are shared) proposes tokens that
    #   the model verifies several at a time; `:lookup` drafts from n-grams of the prompt and
    #   the text so far, `:copy` copies what followed the last earlier occurrence of the text's
    #   last three tokens (edits, quotes), both with no second model. See README, "Speculative
    #   decoding"
    # @param draft_tokens [Integer, nil] how many tokens a draft holds (1 to
    #   {Model::MAX_DRAFT_TOKENS}); nil (the default) adapts it to how many are accepted
    # @param batch_invariant [Boolean] give every sequence the tokens it gets alone, whatever
    #   else the model generates beside it: other threads' requests, a server's other clients, a
    #   speculative draft (greedy speculation then gives plain greedy text exactly). Passes run
    #   on ggml's reference kernels and each sequence keeps `n_ctx / parallel` tokens of its own;
    #   it needs flash attention, decodes up to about 30 % slower and evaluates prompts 2-2.5x
    #   slower (see README, "Batch-invariant generation"), and the tokens are not llama.cpp's
    # @yieldparam model [Model] closed when the block returns or raises
    # @return [Model, Object] the model, or the block's value
    # @raise [Elelem::LoadError] when the file is missing (the message names the known models),
    #   malformed or unsupported
    # @raise [Elelem::IncompatibleDraftError] when the draft model's vocabulary is not the model's
    def open(path, n_ctx: Model::DEFAULT_N_CTX, n_threads: Etc.nprocessors, adaptive_threads: true, n_gpu_layers: 0,
             parallel: 1, queue: Model::DEFAULT_QUEUE, flash_attn: :auto, cache_type_k: :f16, cache_type_v: :f16,
             draft: nil, draft_tokens: nil, batch_invariant: false)
      model = Model.open(path, n_ctx:, n_threads:, adaptive_threads:, n_gpu_layers:, parallel:, queue:, flash_attn:,
                               cache_type_k:, cache_type_v:, draft:, draft_tokens:, batch_invariant:)
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

    # Frees a model's native memory; the module form of {Model#close}.
    # @return [void]
    def close(model)
      model.close
    end
  end
end
