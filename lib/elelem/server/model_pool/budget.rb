# frozen_string_literal: true

module Elelem
  class Server
    class ModelPool
      # The memory budget of a {ModelPool}: what the open models take, and which idle ones to
      # close (the least recently used first) when a model needs their room. Every method
      # runs under the pool's lock.
      module Budget
        private

        # Under the lock: the idle models to close, least recently used first, so that `entry`
        # fits the budget.
        def room_for(entry)
          return [] unless @budget

          if entry.bytes > @budget
            raise NoRoomError, "model '#{entry.name}' needs about #{mib(entry.bytes)}, more than the whole memory " \
                               "budget of #{mib(@budget)} (elelem serve --memory-budget)"
          end
          shortfall = used + entry.bytes - @budget
          idle = idle_models
          if idle.sum(&:bytes) < shortfall
            raise NoRoomError, "model '#{entry.name}' needs about #{mib(entry.bytes)} and the memory budget of " \
                               "#{mib(@budget)} is held by models in use; retry later"
          end

          evict(idle, shortfall)
        end

        # Under the lock: the bytes the open (and opening) models take.
        def used
          @entries.each_value.sum { |e| e.model || e.loading ? e.bytes : 0 }
        end

        # Under the lock: the models the pool may close now, least recently used first.
        def idle_models
          @entries.each_value.select { |e| e.model && e.owned && e.leases.empty? }.sort_by(&:last_used)
        end

        # Under the lock: the first of `candidates` that free `bytes`, detached.
        def evict(candidates, bytes)
          return [] unless @budget

          candidates.each_with_object([]) do |entry, evicted|
            break evicted unless bytes.positive?

            bytes -= entry.bytes
            evicted << detach(entry)
          end
        end

        def mib(bytes)
          format("%.0f MiB", bytes / 1024.0 / 1024)
        end
      end
    end
  end
end
