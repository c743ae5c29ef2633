# frozen_string_literal: true

require "optparse"
require_relative "../elelem"
require_relative "cli/chat"

module Elelem
  # The `elelem` command: generate, chat, tokenize, info, fetch.
  class CLI
    # The subcommands and what each does.
    COMMANDS = {
      "generate" => "stream a continuation of PROMPT",
      "chat" => "chat with the model (Ctrl-D ends, Ctrl-C stops the current reply)",
      "tokenize" => "print the token ids of TEXT",
      "info" => "describe a model",
      "bench" => "measure prompt and decode speed (medians; `rake bench` adds llama.cpp beside it)",
      "fetch" => "download a known model (#{Models.names.join(", ")})"
    }.freeze

    # @param out [IO] where answers go
    # @param err [IO] where progress and errors go
    # @param input [IO] where chat reads the user's lines
    def initialize(out, err, input)
      @out = out
      @err = err
      @in = input
    end

    # @param argv [Array<String>]
    # @return [Integer] the exit status
    def run(argv)
      command = argv.shift
      return usage(command.nil? ? 1 : 0) if command.nil? || %w[-h --help help].include?(command)
      raise OptionParser::InvalidArgument, "unknown command #{command}" unless COMMANDS.key?(command)

      send(:"cmd_#{command}", argv)
      0
    rescue OptionParser::ParseError, Elelem::Error, ArgumentError, Errno::ENOENT => e
      @err.puts "elelem: #{e.message}"
      1
    rescue Interrupt
      @err.puts
      130
    end

    private

    def usage(status)
      io = status.zero? ? @out : @err
      io.puts "usage: elelem COMMAND [options] (elelem COMMAND --help)"
      COMMANDS.each { |name, what| io.puts format("  %-9<name>s %<what>s", name:, what:) }
      status
    end

    def parser(banner, opts, sampling: false)
      OptionParser.new do |o|
        o.banner = "usage: elelem #{banner}"
        o.on("-m", "--model MODEL", "a .gguf path or a known model name (default #{Models::DEFAULT})") do |m|
          opts[:model] = m
        end
        o.on("-c", "--ctx N", Integer, "context size (default 4096)") { |n| opts[:n_ctx] = n }
        o.on("-t", "--threads N", Integer, "CPU threads") { |n| opts[:n_threads] = n }
        sampling_options(o, opts) if sampling
        o.on("-h", "--help", "this help") do
          @out.puts o
          throw :done
        end
      end
    end

    def sampling_options(parser, opts)
      gen = opts[:gen] = {}
      parser.on("-n", "--max-tokens N", Integer, "tokens to generate (default 256)") { |n| gen[:max_tokens] = n }
      parser.on("--temp T", Float, "temperature (default 0: greedy)") { |t| gen[:temperature] = t }
      parser.on("--top-k K", Integer) { |k| gen[:top_k] = k }
      parser.on("--top-p P", Float) { |p| gen[:top_p] = p }
      parser.on("--min-p P", Float) { |p| gen[:min_p] = p }
      parser.on("--repeat-penalty R", Float) { |r| gen[:repeat_penalty] = r }
      parser.on("--seed S", Integer) { |s| gen[:seed] = s }
      parser.on("--stop TEXT", "stop at TEXT (repeatable)") { |s| (gen[:stop] ||= []) << s }
      parser.on("--chat", "send PROMPT as a user message through the chat template") { opts[:chat] = true }
    end

    def open_model(opts, &)
      path = Models.resolve(opts[:model] || Models::DEFAULT)
      Elelem.open(path, **opts.slice(:n_ctx, :n_threads), &)
    end

    # The command's own options, if any, come from the block (given the parser and the options hash).
    def parse(argv, banner, sampling: false, defaults: {})
      opts = defaults.dup
      options = parser(banner, opts, sampling:)
      yield options, opts if block_given?
      catch(:done) { return [opts, options.parse(argv)] }
      nil
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

    def cmd_generate(argv)
      opts, rest = parse(argv, "generate [-m MODEL] [options] [PROMPT | -]", sampling: true)
      return if opts.nil?

      prompt = text_argument(rest, "PROMPT")
      open_model(opts) do |model|
        prompt = model.chat_prompt([{ role: "user", content: prompt }]) if opts[:chat]
        model.generate(prompt, max_tokens: 256, **opts[:gen]) { |piece| @out.print(piece) && @out.flush }
        @out.puts
      end
    end

    def cmd_chat(argv)
      opts, rest = parse(argv, "chat [-m MODEL] [options]", sampling: true)
      return if opts.nil?

      no_arguments(rest)

      open_model(opts) { |model| Chat.new(model, @out, @err, @in, max_tokens: 512, **opts[:gen]).run }
    end

    def cmd_tokenize(argv)
      opts, rest = parse(argv, "tokenize [-m MODEL] [TEXT | -]")
      return if opts.nil?

      text = text_argument(rest, "TEXT")
      open_model(opts.merge(n_ctx: 16)) { |model| @out.puts model.tokenize(text).join(" ") }
    end

    def cmd_info(argv)
      opts, rest = parse(argv, "info [-m MODEL | MODEL]")
      return if opts.nil?

      opts[:model] ||= rest.shift
      no_arguments(rest)
      open_model(opts.merge(n_ctx: opts.fetch(:n_ctx, 256))) do |model|
        @out.puts model.inspect
        model.info.each { |k, v| @out.puts format("  %-15<k>s %<v>s", k:, v:) }
      end
    end

    def cmd_bench(argv)
      defaults = { pp: 512, tg: 128, depths: [], reps: 3 }
      opts, rest = parse(argv, "bench [-m MODEL] [options]", defaults:) do |o, op|
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
      opts, rest = parse(argv, "fetch NAME")
      return if opts.nil?
      raise OptionParser::MissingArgument, "NAME (one of #{Models.names.join(", ")})" if rest.empty?

      rest.each { |name| @out.puts Models.fetch(name, out: @err) }
    end
  end
end
