# frozen_string_literal: true

module Elelem
  # `elelem serve`: OpenAI's HTTP API on Puma.
  class CLI
    # What `elelem serve` uses unless told otherwise.
    SERVE_DEFAULTS = { host: "127.0.0.1", port: 8080, parallel: 4, queue: 32, workers: 0 }.freeze

    private

    def cmd_serve(argv)
      opts, rest = parse(argv, "serve [-m MODEL] [options]", defaults: SERVE_DEFAULTS.dup) do |o, op|
        serve_options(o, op)
      end
      return if opts.nil?

      no_arguments(rest)
      model = open_model(opts)
      begin
        serve(model, opts)
      ensure
        model.close
      end
    end

    def serve_options(parser, opts)
      parser.on("--host HOST", "address to listen on (default #{SERVE_DEFAULTS[:host]})") { |h| opts[:host] = h }
      parser.on("--port PORT", Integer, "TCP port (default #{SERVE_DEFAULTS[:port]})") { |p| opts[:port] = p }
      parser.on("--parallel N", Integer, "sequences generating at once (default #{SERVE_DEFAULTS[:parallel]})") do |n|
        opts[:parallel] = n
      end
      parser.on("--queue N", Integer, "requests waiting for a sequence before 503s " \
                                      "(default #{SERVE_DEFAULTS[:queue]})") { |n| opts[:queue] = n }
      parser.on("--workers N", Integer, "Puma worker processes sharing the weights (default 0: one process)") do |n|
        opts[:workers] = n
      end
      parser.on("--api-key KEY", "require Authorization: Bearer KEY (default $ELELEM_API_KEY)") do |key|
        opts[:api_key] = key
      end
      parser.on("--max-tokens N", Integer, "the most tokens one request generates " \
                                           "(default #{Server::DEFAULT_MAX_TOKENS})") { |n| opts[:max_tokens] = n }
      parser.on("--template FILE", "a Jinja chat template instead of the model's") do |f|
        opts[:template] = File.read(f)
      end
    end

    def serve(model, opts)
      # A known model or a Hugging Face reference is served under the name given; a file under its own.
      name = opts[:model] || Models::DEFAULT
      server = Server.new(model, api_key: opts.fetch(:api_key, ENV.fetch("ELELEM_API_KEY", nil)),
                                 model_name: Models.names.include?(name) || Hub.reference?(name) ? name : nil,
                                 **opts.slice(:max_tokens, :template))
      Options.integer(:workers, opts[:workers], 0..256)
      runner = Server::Runner.new(server, **opts.slice(:host, :port, :workers),
                                          threads: opts[:parallel] + opts[:queue] + Server::Runner::SPARE_THREADS,
                                          out: @out, err: @err)
      runner.run do
        @out.puts "elelem: serving #{server.model_name} at #{runner.url}/v1 (parallel #{opts[:parallel]}, " \
                  "queue #{opts[:queue]}#{", #{opts[:workers]} workers" if opts[:workers].positive?}); Ctrl-C stops"
        @out.flush
      end
    end
  end
end
