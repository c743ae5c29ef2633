# frozen_string_literal: true

module Elelem
  class Server
    # Runs a {Server} on Puma (5.6 to 8, through its Ruby API: `Puma::Launcher`), in
    # one process, or with `workers:` in Puma's cluster mode: the model is opened before
    # the workers fork, so they share its weights' pages. Puma is required here only, so
    # the gem itself needs no gem.
    class Runner
      # Puma threads beyond `parallel + queue`: they answer `/health`, errors and refusals
      # while every generation thread is taken.
      SPARE_THREADS = 4
      # Seconds a stop waits for replies in flight before interrupting them.
      SHUTDOWN_GRACE = 3

      # Loads Puma, which the gem does not depend on (installing it must need no gem).
      # @return [void]
      # @raise [Elelem::Error] when this Ruby cannot load Puma, saying how to get it
      def self.load_puma
        require "puma"
        require "puma/configuration"
        require "puma/launcher"
      rescue ::LoadError => e
        raise Elelem::Error, "serving runs on Puma, which this Ruby cannot load (#{e.message}): " \
                             "`gem install puma`, or Debian's `apt install puma`"
      end

      # @param server [Server] the application
      # @param host [String] the address to listen on
      # @param port [Integer] the TCP port
      # @param threads [Integer] Puma threads per process (one per request in flight)
      # @param workers [Integer] forked worker processes (0: one process, no fork)
      # @param out [IO] where Puma and the listening line go
      # @param err [IO] where errors go
      def initialize(server, host:, port:, threads:, workers: 0, out: $stdout, err: $stderr)
        @server = server
        @host = host
        @port = port
        @threads = threads
        @workers = workers
        @out = out
        @err = err
      end

      # @return [String] where the server listens, e.g. `http://127.0.0.1:8080`
      def url
        "http://#{@host.include?(":") ? "[#{@host}]" : @host}:#{@port}"
      end

      # Serves until SIGINT (Ctrl-C) or SIGTERM, after which the replies in flight get
      # {SHUTDOWN_GRACE} seconds to finish before they are interrupted (Puma interrupts
      # the requests in the application; the server ends its streams).
      # @yield once listening (in cluster mode: once every worker has booted)
      # @return [void]
      def run(&on_listening)
        self.class.load_puma
        events, logging = puma_events
        # Newer Pumas name on_booted after_booted (Puma 8 still takes on_booted, with a deprecation warning).
        booted = events.respond_to?(:after_booted) ? :after_booted : :on_booted
        events.public_send(booted, &on_listening) if on_listening
        events.register(:state) { |state| end_streams_later if state == :stop }
        ::Puma::Launcher.new(configuration, events:, **logging).run
      end

      private

      # Puma 6 moved the log's IOs from its Events into a LogWriter of their own.
      def puma_events
        return [::Puma::Events.new(@out, @err), {}] unless defined?(::Puma::LogWriter)

        [::Puma::Events.new, { log_writer: ::Puma::LogWriter.new(@out, @err) }]
      end

      # Puma waits for a stream's thread to end, and interrupts only threads in the
      # application's `call`: the streams are ended once the grace period is over.
      def end_streams_later
        Thread.new do
          sleep SHUTDOWN_GRACE
          @server.close_streams
        end
      end

      def configuration
        # config_files "-": no config/puma.rb of the current directory is read.
        ::Puma::Configuration.new({ config_files: ["-"] }) do |config|
          config.bind url.sub("http", "tcp")
          config.app @server
          config.threads @threads, @threads
          config.environment "production"
          config.force_shutdown_after SHUTDOWN_GRACE
          next unless @workers.positive?

          config.workers @workers
          config.preload_app!
        end
      end
    end
  end
end
