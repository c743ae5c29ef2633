# frozen_string_literal: true

module Elelem
  # `elelem serve`: OpenAI's HTTP API on Puma.
  class CLI
    # What `elelem serve` uses unless told otherwise.
    SERVE_DEFAULTS = { host: "127.0.0.1", port: 8080, parallel: 4, queue: 32, workers: 0 }.freeze
    # How many models' requests `elelem serve` gives Puma threads for: as many as
    # llama-server's router keeps loaded by default (its `--models-max`).
    ROUTER_MODELS = 4

    private

    def cmd_serve(argv)
      opts, rest = parse(argv, "serve [-m MODEL]... [--models-dir DIR] [options]",
                         defaults: SERVE_DEFAULTS.dup) do |o, op|
        serve_options(o, op)
        pool_options(o, op)
      end
      return if opts.nil?

      no_arguments(rest)
      Server::Runner.load_puma # before a model takes its time to open
      # One model is opened at once and kept, as before; several are a pool's, opened on first use.
      served = several_models?(opts) ? model_pool(opts) : open_model(opts)
      begin
        serve(served, opts)
      ensure
        served.close
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
      parser.on("--allow-fetch", "fetch the http(s) URLs of image_url parts (default: data URIs only)") do
        opts[:allow_fetch] = true
      end
    end

    def pool_options(parser, opts)
      parser.on("--models-dir DIR", "serve every .gguf in DIR, named by its file's name without .gguf") do |dir|
        opts[:models_dir] = dir
      end
      parser.on("--memory-budget SIZE", "with several models: what the loaded ones may take together, e.g. 8G " \
                                        "(default #{(Server::ModelPool::BUDGET_SHARE * 100).round}% of the " \
                                        "memory available at start)") do |size|
        opts[:memory_budget] = flag_value { Server::ModelPool.bytes(size) }
      end
      parser.on("--ttl DURATION", "with several models: unload one idle this long, e.g. 30s, 5m, -1 for never " \
                                  "(default #{Server::ModelPool::DEFAULT_TTL / 60}m)") do |ttl|
        opts[:ttl] = flag_value { Server::ModelPool.seconds(ttl) }
      end
    end

    # The block's value; its ArgumentError as the flag's (OptionParser names the flag).
    def flag_value
      yield
    rescue ArgumentError => e
      raise OptionParser::InvalidArgument, e.message
    end

    def several_models?(opts)
      opts[:models_dir] || opts.fetch(:models, []).size > 1
    end

    # The models of `-m` and of `--models-dir`, opened on first use.
    def model_pool(opts)
      if opts[:workers].positive?
        raise ArgumentError, "--workers shares one model's weights between processes; several models are served " \
                             "by one process"
      end

      budget = opts.fetch(:memory_budget) { Server::ModelPool.default_budget }
      Server::ModelPool.new(pool_models(opts), budget:, open_options: opts.slice(*OPEN_OPTIONS), **opts.slice(:ttl))
    end

    # The models of `-m` (each resolved: a known model fetched, a reference downloaded) and of
    # `--models-dir`, by name.
    def pool_models(opts)
      models = opts.fetch(:models, []).map { |m| [served_name(m), Models.resolve(m)] }
      models += Server::ModelPool.directory(opts[:models_dir]).to_a if opts[:models_dir]
      twice = models.map(&:first).tally.select { |_, n| n > 1 }.keys
      raise ArgumentError, "two models are named #{twice.first} (each model needs a name of its own)" if twice.any?

      models.to_h
    end

    # A known model or a Hugging Face reference is served under the name given; a file under its own.
    def served_name(model)
      Models.names.include?(model) || Hub.reference?(model) ? model : File.basename(model, ".gguf")
    end

    def serve(served, opts)
      name = { model_name: served_name(opts[:model] || Models::DEFAULT) } if served.is_a?(Model)
      server = Server.new(served, api_key: opts.fetch(:api_key, ENV.fetch("ELELEM_API_KEY", nil)), **name.to_h,
                                  **opts.slice(:max_tokens, :template, :allow_fetch))
      Options.integer(:workers, opts[:workers], 0..256)
      runner = Server::Runner.new(server, **opts.slice(:host, :port, :workers), threads: puma_threads(served, opts),
                                                                                out: @out, err: @err)
      runner.run do
        @out.puts "elelem: serving #{serving(served, server)} at #{runner.url}/v1 (parallel #{opts[:parallel]}, " \
                  "queue #{opts[:queue]}#{", #{opts[:workers]} workers" if opts[:workers].positive?}); Ctrl-C stops"
        @out.flush
      end
    end

    # A Puma thread for every request a model may hold (generating or queued), for as many
    # models as llama-server's router keeps loaded by default, and a few spare.
    def puma_threads(served, opts)
      models = served.is_a?(Model) ? 1 : served.names.size.clamp(1, ROUTER_MODELS)
      ((opts[:parallel] + opts[:queue]) * models) + Server::Runner::SPARE_THREADS
    end

    def serving(served, server)
      return server.model_name if served.is_a?(Model)

      budget = served.budget ? format("%.1f GiB", served.budget / (1024.0**3)) : "no"
      "#{served.names.join(", ")} (each loaded on first use; #{budget} memory budget; idle ones unloaded after " \
        "#{served.ttl == Server::ModelPool::FOREVER ? "never" : "#{served.ttl}s"})"
    end
  end
end
