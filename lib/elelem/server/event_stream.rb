# frozen_string_literal: true

require "json"
require "socket"

module Elelem
  class Server
    # The body of a streaming reply: server-sent events in OpenAI's chunk format, ending
    # with `data: [DONE]`.
    #
    # The generation runs on a thread of its own from the moment the request is taken,
    # handing its pieces over through a queue, so that the status is known before the
    # headers go out: a request refused by the model (every sequence busy and the queue
    # full, a prompt longer than the context) is a 503 or a 400 and not an error event
    # after a 200. {#start} waits for the first event.
    #
    # When the client goes away, the server's write raises from the block of {#each} (or
    # the server calls {#close}); either way the generating thread is killed, which frees
    # its sequence in the model at once.
    class EventStream
      # How long {#close} waits for a killed generation to let go of its sequence.
      STOP_WAIT = 5

      # @param reply [Reply] the objects to send (their chunks for each event of the generation)
      # @param socket [Object, nil] the client's socket where the server gives it (Puma's
      #   `puma.socket`), to send each event at once
      # @param logger [#call] takes an unexpected error raised mid-stream
      # @param on_close [#call] called with the stream once it is closed
      # @yield a block that generates, passing each event (a piece of a choice, a finished
      #   choice) to the block it is given
      # @yieldreturn [Array<Completion>]
      def initialize(reply, socket: nil, logger: nil, on_close: nil, &generation)
        @reply = reply
        @socket = socket
        @logger = logger
        @on_close = on_close
        @events = Thread::Queue.new
        @worker = Thread.new { generate(generation) }
        @worker.report_on_exception = false
      end

      # Waits for the generation's first event: a piece, its end, or its failure, which is
      # raised here (the server answers it with a status of its own).
      # @return [self]
      # @raise [Exception] what the generation raised before its first piece
      def start
        @first = @events.pop
        return self unless @first.nil? || @first[0] == :error

        close
        raise @first ? @first[1] : stopped
      end

      # Yields each event, the pieces as they come. An exception raised by the block (the
      # client is gone) stops the generation.
      # @yieldparam event [String] `data: {...}\n\n`
      # @return [void]
      def each(&)
        @reply.opening.each { |chunk| yield event(chunk) }
        uncork
        events(@first, &)
      ensure
        close
      end

      # Stops the generation if it still runs, and waits (a few seconds at most) until it
      # has let go of its sequence. A stream still being sent then ends with an error event
      # (a server shutting down closes its streams so). Idempotent.
      # @return [void]
      def close
        if @worker.alive?
          @worker.kill
          @worker.join(STOP_WAIT)
        end
        @on_close&.call(self)
      end

      private

      # A generation killed ({#close}) closes the queue: the stream's reader gets nil.
      def generate(generation)
        @events << [:done, generation.call { |piece| @events << [:piece, piece] }]
      rescue StandardError, NoMemoryError => e
        @events << [:error, e]
      ensure
        @events.close
      end

      def stopped
        HTTPError.new(503, "the server is shutting down", code: "shutting_down")
      end

      def events(event, &)
        loop do
          case event
          in [:piece, piece] then @reply.piece(piece).each { |chunk| yield event(chunk) }
          in [:done, completions] then return finish(completions, &)
          in [:error, error] then return failure(error, &)
          in nil then return failure(stopped, &)
          end
          event = @events.pop
        end
      end

      def finish(completions, &)
        @reply.closing(completions).each { |chunk| yield event(chunk) }
        ending.each(&)
      end

      # What follows the last chunk: OpenAI's `[DONE]`.
      def ending
        ["data: [DONE]\n\n"]
      end

      # An error after the 200 went out: an error event, as the API's clients read it, and
      # no {#ending}. Unexpected errors are logged.
      def failure(error)
        unless error.is_a?(HTTPError)
          @logger&.call(error)
          error = HTTPError.new(500, "the generation failed: #{error.message}")
        end
        yield event(error_body(error))
      end

      # An error in the API's shape: OpenAI's.
      def error_body(error)
        error.to_h
      end

      def event(object)
        "data: #{JSON.generate(object)}\n\n"
      end

      # Puma corks the socket for a whole response (Linux's TCP_CORK holds partial frames
      # for up to 200 ms), which would deliver a stream in bursts; uncorked, each event
      # leaves as soon as it is written.
      def uncork
        return unless @socket.is_a?(BasicSocket) && defined?(Socket::TCP_CORK)

        @socket.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_CORK, 0)
      rescue IOError, SystemCallError
        nil
      end
    end
  end
end
