# frozen_string_literal: true

module Elelem
  module Hub
    # A download's progress bar, redrawn in place on a terminal (at most every {INTERVAL}
    # seconds); elsewhere (a log, a pipe) one line when it starts and one when it ends.
    class Progress
      # Seconds between redraws.
      INTERVAL = 0.2
      # The bar's width in characters.
      WIDTH = 30

      # @param out [IO, nil] where it is drawn (nothing when nil)
      # @param label [String] what is downloading
      # @param total [Integer, nil] the file's size in bytes
      # @param done [Integer] bytes already held (a resumed download)
      def initialize(out, label, total, done)
        @out = out
        @label = label
        @total = total
        @done = done
        @started = now
        @drawn = 0.0
        note("downloading #{label} (#{mib(total)}#{", resuming at #{mib(done)}" if done.positive?})")
      end

      # Counts `bytes` more and redraws when it is time.
      # @return [void]
      def advance(bytes)
        @done += bytes
        draw if tty? && now - @drawn >= INTERVAL
      end

      # Starts over from nothing (the server sent the whole file instead of the rest).
      # @return [void]
      def restart
        @done = 0
      end

      # Draws the final state and ends the line.
      # @return [void]
      def finish
        return note("#{@label}: #{mib(@done)} in #{format("%.1f", now - @started)} s") unless tty?

        draw
        @out.print("\n")
      end

      private

      def tty?
        @out.respond_to?(:tty?) && @out.tty?
      end

      def note(line)
        @out&.puts("elelem: #{line}")
      end

      def draw
        @drawn = now
        fraction = @total&.positive? ? (@done.to_f / @total).clamp(0.0, 1.0) : 0.0
        filled = (fraction * WIDTH).round
        rate = @done / [now - @started, 1e-3].max
        @out.print(format("\r%<label>s %<pct>3d%% [%<bar>s] %<done>s / %<total>s %<rate>s/s ",
                          label: File.basename(@label), pct: (fraction * 100).floor,
                          bar: ("#" * filled).ljust(WIDTH), done: mib(@done), total: mib(@total), rate: mib(rate)))
        @out.flush
      end

      def mib(bytes)
        bytes ? format("%.1f MiB", bytes / 1024.0 / 1024) : "? MiB"
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end
  end
end
