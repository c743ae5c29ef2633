# frozen_string_literal: true

module Elelem
  class Server
    class ModelPool
      # When a {ModelPool} closes models: when asked ({#unload}), and idle ones once the
      # keep-alive of each has passed, on a thread of the pool's that sleeps until the next
      # expiry and ends when none is left waiting (the next release starts another).
      module Expiry
        # Closes a model now, or once the requests using it end.
        # @param name [String] as {ModelPool#resolve} takes it
        # @return [Boolean] false when it is not loaded, or was given to the pool opened
        def unload(name)
          entry = entry_for(name)
          closing = @lock.synchronize do
            return false unless entry.model && entry.owned

            entry.unloading = true
            entry.leases.empty? ? [detach(entry)] : []
          end
          close_all(closing)
          true
        end

        # Closes the idle models whose keep-alive has passed (a thread of the pool's calls it
        # as they expire).
        # @return [Array<String>] their names
        def reap
          expired = @lock.synchronize { detach_expired }
          close_all(expired)
          expired.map(&:first)
        end

        private

        # Under the lock: `entry`, idle now, expires `ttl` seconds from now; a model to close
        # at once when that is now.
        def expire(entry, ttl)
          return [] unless entry.owned && entry.model && ttl != FOREVER

          entry.expires_at = now + ttl
          return [detach(entry)] unless ttl.positive?

          @reaper = Thread.new { reap_expired } unless @reaper&.alive?
          @changed.broadcast
          []
        end

        # Under the lock: the idle models past their expiry, detached.
        def detach_expired
          time = now
          @entries.each_value.select { |e| e.leases.empty? && e.expires_at && e.expires_at <= time }
                  .map { |e| detach(e) }
        end

        # The reaper thread: closes each idle model as it expires, and ends when none is waiting
        # to (the next expiry starts another).
        def reap_expired
          while (expired = next_expired)
            close_all(expired)
          end
        end

        def next_expired
          @lock.synchronize do
            loop do
              expired = detach_expired
              return expired unless expired.empty?

              soonest = @entries.each_value.filter_map { |e| e.expires_at if e.model && e.leases.empty? }.min
              # Under the lock, so that a release from now on starts another reaper.
              return @reaper = nil unless soonest

              @changed.wait(@lock, soonest - now)
            end
          end
        end
      end
    end
  end
end
