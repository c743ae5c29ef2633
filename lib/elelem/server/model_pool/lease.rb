# frozen_string_literal: true

module Elelem
  class Server
    class ModelPool
      # A request's hold on a model: the model stays open until the lease is released.
      class Lease
        # @return [String] the model's name in the pool
        attr_reader :name
        # @return [Model] the open model
        attr_reader :model
        # @return [Numeric, nil] seconds the model stays loaded once idle after this lease
        #   (nil: the pool's `ttl`)
        attr_reader :keep_alive

        # @param pool [ModelPool] the pool that lent it
        # @param name [String] the model's name
        # @param model [Model] the open model
        # @param keep_alive [Numeric, nil] seconds it stays loaded once idle (nil: the pool's)
        def initialize(pool, name, model, keep_alive)
          @pool = pool
          @name = name
          @model = model
          @keep_alive = keep_alive
        end

        # Lets go of the model. Idempotent.
        # @return [void]
        def release
          @pool.release(self)
        end
      end
    end
  end
end
