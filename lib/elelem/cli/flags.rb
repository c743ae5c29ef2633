# frozen_string_literal: true

module Elelem
  # The `elelem` command's option parsing: each command lists only its own flags,
  # with the defaults it really uses.
  class CLI
    # The options of {Elelem.open} that the commands' flags set.
    OPEN_OPTIONS = %i[n_ctx n_threads adaptive_threads batch_invariant parallel queue rpc n_gpu_layers
                      tensor_split split_mode main_gpu kv_offload mmproj].freeze

    private

    # The options every command that opens a model takes, then the command's own.
    # `ctx` is the context size the command uses unless told, as its help says it; nil: no -c.
    def parser(banner, opts, model:, ctx:)
      OptionParser.new do |o|
        o.banner = "usage: elelem #{banner}"
        model_options(o, opts, ctx, model == true ? Models::DEFAULT : model) if model
        yield o if block_given?
        o.on("-h", "--help", "this help") do
          @out.puts o
          throw :done
        end
      end
    end

    def model_options(parser, opts, ctx, default)
      parser.on("-m", "--model MODEL", "a .gguf path, a known model name or hf:org/repo[:QUANT] " \
                                       "(default #{default})") do |m|
        opts[:model] = m
        (opts[:models] ||= []) << m # `serve` takes several
      end
      parser.on("-c", "--ctx N", "--n-ctx N", Integer, "context size (default #{ctx})") { |n| opts[:n_ctx] = n } if ctx
      parser.on("-t", "--threads N", Integer, "CPU threads (default #{Defaults::OPEN[:n_threads]})") do |n|
        opts[:n_threads] = n
      end
      parser.on("--fixed-threads", "always all N threads, even while other work takes the cores") do
        opts[:adaptive_threads] = false
      end
      parser.on("--batch-invariant", "each sequence's tokens as alone, whatever runs beside it (slower)") do
        opts[:batch_invariant] = true
      end
      parser.on("--mmproj FILE", "the model's projector, for images (default: mmproj-<MODEL> beside it, if any)") do |f|
        opts[:mmproj] = f
      end
      offload_options(parser, opts)
    end

    def offload_options(parser, opts)
      parser.on("--rpc HOST:PORT,...", Array, "RPC workers (elelem rpc-server) that hold the offloaded layers " \
                                              "(trusted networks only: no authentication)") { |l| opts[:rpc] = l }
      parser.on("--ngl N", "--n-gpu-layers N", Integer, "layers on the devices, output counted (default all)") do |n|
        opts[:n_gpu_layers] = n
      end
      parser.on("--tensor-split A,B,...", Array, "each device's share of the offloaded layers " \
                                                 "(default: by free memory)") do |l|
        opts[:tensor_split] = l.map { |x| flag_value { Float(x) } }
      end
      parser.on("--split-mode MODE", %w[layer none], "layer (default) or none (all on --main-gpu)") do |m|
        opts[:split_mode] = m.to_sym
      end
      parser.on("--main-gpu N", Integer, "the device that takes every layer with --split-mode none") do |n|
        opts[:main_gpu] = n
      end
      parser.on("--no-kv-offload", "keep the KV cache in this machine's memory") { opts[:kv_offload] = false }
    end

    # The sampling flags: the flag, its type, the option it sets, what it is.
    SAMPLING_FLAGS = [
      ["-n", "--max-tokens N", Integer, :max_tokens, "tokens to generate"],
      [nil, "--temp T", Float, :temperature, "temperature, 0 is greedy"],
      [nil, "--top-k K", Integer, :top_k, "sample among the K likeliest tokens, 0 is all"],
      [nil, "--top-p P", Float, :top_p, "... whose probabilities add up to P"],
      [nil, "--min-p P", Float, :min_p, "... at least P times the likeliest's probability"],
      [nil, "--repeat-penalty R", Float, :repeat_penalty, "penalty on recent tokens, 1 is off"]
    ].freeze

    def sampling_options(parser, opts, command)
      gen = opts[:gen] = {}
      defaults = SAMPLING.fetch(command)
      SAMPLING_FLAGS.each do |short, long, type, key, what|
        parser.on(*[short, long].compact, type, "#{what} (default #{defaults[key]})") { |v| gen[key] = v }
      end
      parser.on("--seed S", Integer, "random seed (default: a random one)") { |s| gen[:seed] = s }
      parser.on("--stop TEXT", "stop at TEXT (repeatable)") { |s| (gen[:stop] ||= []) << s }
      chat_options(parser, opts)
    end

    def chat_options(parser, opts)
      parser.on("--system TEXT", "a system message (generate: implies --chat)") { |s| opts[:system] = s }
      parser.on("--template FILE", "a Jinja chat template instead of the model's (generate: implies --chat)") do |f|
        opts[:template] = template_file(f)
      end
    end

    def template_file(path)
      File.read(path)
    rescue SystemCallError => e
      raise ArgumentError, "--template #{path}: cannot read it (#{e.message.sub(/ @ .*/, "")})"
    end

    # The command's own options, if any, come from the block (given the parser and the options hash).
    # `model`: true for the model flags with the default model, a name for another
    # default, false for none.
    def parse(argv, banner, model: true, ctx: Model::DEFAULT_N_CTX, defaults: {})
      opts = defaults.dup
      options = parser(banner, opts, model:, ctx:) { |o| yield o, opts if block_given? }
      catch(:done) { return [opts, options.parse(argv)] }
      nil
    end
  end
end
