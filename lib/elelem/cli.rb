# frozen_string_literal: true

require "json"
require "optparse"
require_relative "../elelem"
require_relative "cli/chat"
require_relative "cli/convert"
require_relative "cli/embed"
require_relative "cli/flags"
require_relative "cli/generate"
require_relative "cli/rpc_server"
require_relative "cli/serve"

module Elelem
  # The `elelem` command: generate, chat, serve, tokenize, embed, info, bench, fetch, pull, convert.
  class CLI
    # The subcommands and what each does.
    COMMANDS = {
      "generate" => "stream a continuation of PROMPT (or of standard input)",
      "chat" => "chat with the model (Ctrl-D or /quit ends, Ctrl-C stops the current reply)",
      "serve" => "serve OpenAI's HTTP API (chat and completions, streaming) on Puma",
      "tokenize" => "print the token ids of TEXT",
      "embed" => "print each TEXT's embedding as a JSON array (default model all-minilm-l6-v2)",
      "info" => "describe a model",
      "bench" => "measure prompt and decode speed (medians; `rake bench` adds llama.cpp beside it)",
      "fetch" => "download a known model (#{Models.names.join(", ")})",
      "pull" => "download a model from Hugging Face (hf:org/repo[:QUANT], hf:org/repo/file.gguf), or a known one",
      "convert" => "convert a Hugging Face BERT directory (safetensors) to GGUF, as convert_hf_to_gguf.py does",
      "rpc-server" => "serve this machine's CPU to RPC clients (--rpc), as llama.cpp's rpc-server"
    }.freeze

    # The sampling each command uses unless told otherwise, where it deliberately differs from
    # {Model#generate}'s: `generate` is greedy as the library is, but writes up to 256 tokens (a
    # screenful) where 32 suit a test; `chat` samples at temperature 0.7 (with a seed it shows)
    # and penalizes repeats, since greedy small models loop on long answers.
    SAMPLING = {
      "generate" => Options::GENERATION_DEFAULTS.merge(max_tokens: 256),
      "chat" => Options::GENERATION_DEFAULTS.merge(Options::CHAT_DEFAULTS, temperature: 0.7, repeat_penalty: 1.1)
    }.freeze

    # @param out [IO] where answers go
    # @param err [IO] where progress, notes and errors go
    # @param input [IO] where chat reads the user's lines, and generate a prompt not given
    def initialize(out, err, input)
      @out = out
      @err = err
      @in = input
    end

    # @param argv [Array<String>]
    # @return [Integer] the exit status
    def run(argv)
      command = argv.shift
      status = not_a_command(command)
      return status if status

      send(:"cmd_#{command.tr("-", "_")}", argv)
      0
    rescue OptionParser::ParseError, Elelem::Error, ArgumentError, Errno::ENOENT => e
      @err.puts "elelem: #{e.message}"
      1
    rescue Interrupt
      @err.puts
      130
    end

    private

    # Help and version (a status), nothing for a command, or an error for an unknown one.
    def not_a_command(command)
      return usage(command.nil? ? 1 : 0) if command.nil? || %w[-h --help help].include?(command)
      return @out.puts("elelem #{VERSION} (ggml #{Elelem.ggml_version})") || 0 if %w[-v --version].include?(command)
      raise OptionParser::InvalidArgument, "unknown command #{command}" unless COMMANDS.key?(command)
    end

    def usage(status)
      io = status.zero? ? @out : @err
      io.puts "usage: elelem COMMAND [options] (elelem COMMAND --help), elelem --version"
      COMMANDS.each { |name, what| io.puts format("  %-10<name>s %<what>s", name:, what:) }
      status
    end

    def open_model(opts, &)
      path = Models.resolve(opts[:model] || Models::DEFAULT)
      Elelem.open(path, **opts.slice(*OPEN_OPTIONS), &)
    end

    # The words of `rest` as one text, or standard input when there are none or just `-`.
    def text_argument(rest, name)
      return rest.join(" ") unless rest.empty? || rest == ["-"]
      raise OptionParser::MissingArgument, "#{name} (or pipe it in)" if rest.empty? && @in.tty?

      @in.read.chomp
    end

    def no_arguments(rest)
      raise OptionParser::NeedlessArgument, rest.join(" ") unless rest.empty?
    end

    def cmd_chat(argv)
      opts, rest = parse(argv, "chat [-m MODEL] [options]") { |o, op| sampling_options(o, op, "chat") }
      return if opts.nil?

      no_arguments(rest)
      gen = SAMPLING["chat"].slice(:max_tokens, :temperature, :repeat_penalty).merge(opts[:gen])
      gen[:seed] = Options.seed(gen[:seed])
      open_model(opts) do |model|
        Chat.new(model, [@out, @err, @in], **opts.slice(:system, :template), generation: gen).run
      end
    end

    def cmd_tokenize(argv)
      opts, rest = parse(argv, "tokenize [-m MODEL] [TEXT | -]", ctx: nil)
      return if opts.nil?

      text = text_argument(rest, "TEXT")
      open_model(opts.merge(n_ctx: 16)) { |model| @out.puts model.tokenize(text).join(" ") }
    end

    def cmd_info(argv)
      opts, rest = parse(argv, "info [-m MODEL | MODEL]", ctx: 256, defaults: { n_ctx: 256 })
      return if opts.nil?

      opts[:model] ||= rest.shift
      no_arguments(rest)
      open_model(opts) do |model|
        @out.puts model.inspect
        model.info.each { |k, v| @out.puts format("  %-15<k>s %<v>s", k:, v:) }
      end
    end

    def cmd_bench(argv)
      defaults = { pp: 512, tg: 128, depths: [], reps: 3 }
      ctx = "#{Model::DEFAULT_N_CTX}, or the deepest --depth + 64"
      opts, rest = parse(argv, "bench [-m MODEL] [options]", ctx:, defaults:) do |o, op|
        o.on("--pp N", Integer, "prompt tokens (default 512)") { |n| op[:pp] = n }
        o.on("--tg N", Integer, "decoded tokens (default 128)") { |n| op[:tg] = n }
        o.on("--depth LIST", Array, "also decode 32 tokens after this many of context, e.g. 1024,4096") do |list|
          op[:depths] = list.map { |d| Integer(d) }
        end
        o.on("-r", "--reps N", Integer, "repetitions (default 3)") { |n| op[:reps] = n }
      end
      return if opts.nil?

      no_arguments(rest)
      run_bench(opts)
    end

    def run_bench(opts)
      opts[:n_ctx] ||= [Model::DEFAULT_N_CTX, opts[:depths].max.to_i + 64].max
      open_model(opts) do |model|
        bench = Bench.new(model)
        bench.prompt_rate(16) && bench.decode_rate(4) # warm-up
        @out.puts "#{model.inspect}, #{model.info[:n_threads]} thread(s), medians of #{opts[:reps]}"
        bench_line("pp#{opts[:pp]}", "t/s", opts) { bench.prompt_rate(opts[:pp]) }
        bench_line("tg#{opts[:tg]}", "t/s", opts) { bench.decode_rate(opts[:tg]) }
        bench_line("ttft16", "ms", opts) { bench.first_token_ms(16) }
        opts[:depths].each { |depth| bench_line("tg32@#{depth}", "t/s", opts) { bench.decode_rate(32, depth:) } }
      end
    end

    def bench_line(label, unit, opts, &)
      values = Array.new(opts[:reps], &).sort
      @out.puts format("  %-12<label>s %10.1<value>f %<unit>s", label:, value: values[values.size / 2], unit:)
    end

    def cmd_fetch(argv)
      opts, rest = parse(argv, "fetch NAME...", model: false)
      return if opts.nil?
      raise OptionParser::MissingArgument, "NAME (one of #{Models.names.join(", ")})" if rest.empty?

      rest.each { |name| @out.puts Models.fetch(name, out: @err) }
    end

    def cmd_pull(argv)
      opts, rest = parse(argv, "pull REF... (hf:org/repo[:QUANT] or hf:org/repo/file.gguf)", model: false)
      return if opts.nil?
      raise OptionParser::MissingArgument, "REF (hf:org/repo[:QUANT] or hf:org/repo/file.gguf)" if rest.empty?

      rest.each { |ref| @out.puts Models.names.include?(ref) ? Models.fetch(ref, out: @err) : Hub.pull(ref, out: @err) }
    end
  end
end
