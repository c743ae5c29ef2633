# frozen_string_literal: true

module Elelem
  # `elelem rpc-server`: ggml's RPC server on this machine's CPU ({Elelem.serve_rpc}),
  # with llama.cpp's rpc-server's flags, so a worker needs only the gem.
  class CLI
    # Where `elelem rpc-server --cache` keeps tensors, unless LLAMA_CACHE says (as llama.cpp's).
    def self.rpc_cache_dir
      xdg = ENV.fetch("XDG_CACHE_HOME", File.join(Dir.home, ".cache"))
      base = ENV.fetch("LLAMA_CACHE", nil) || File.join(xdg, "llama.cpp")
      File.join(base, "rpc")
    end

    private

    def cmd_rpc_server(argv)
      opts, rest = parse(argv, "rpc-server [options]", model: false, ctx: nil,
                                                       defaults: { host: "127.0.0.1", port: 50_052 }) do |o, op|
        rpc_server_options(o, op)
      end
      return if opts.nil?

      no_arguments(rest)
      unless opts[:host] == "127.0.0.1"
        @err.puts "elelem: warning: the RPC protocol has no authentication; anyone who reaches " \
                  "#{opts[:host]}:#{opts[:port]} can run graphs and read memory here. Trusted networks only."
      end
      Elelem.serve_rpc(**opts.slice(:host, :port, :threads, :cache))
    end

    def rpc_server_options(parser, opts)
      parser.on("-H", "--host HOST", "IPv4 address to listen on (default 127.0.0.1: this machine only)") do |h|
        opts[:host] = h
      end
      parser.on("-p", "--port PORT", Integer, "TCP port (default 50052)") { |p| opts[:port] = p }
      parser.on("-t", "--threads N", Integer, "CPU threads per graph (default #{Defaults::OPEN[:n_threads]})") do |n|
        opts[:threads] = n
      end
      parser.on("-c", "--cache", "keep large tensors in #{CLI.rpc_cache_dir}, so clients need not send them again") do
        opts[:cache] = CLI.rpc_cache_dir
      end
    end
  end
end
