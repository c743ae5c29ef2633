# frozen_string_literal: true

require "set"
require_relative "model_pool/setup"
require_relative "model_pool/budget"
require_relative "model_pool/expiry"
require_relative "model_pool/lease"

module Elelem
  class Server
    # The models one server serves, by name. Each is opened on first use and closed again
    # when it has been idle past its keep-alive (the `keep_alive` of the last request that
    # used it, else the pool's `ttl`), or sooner when another model needs its share of the
    # memory budget (the least recently used first). A request holds a {Lease} on its model
    # from its first use to the end of its reply (a stream's last event): a leased model is
    # never closed.
    #
    # A model's share of the budget is an estimate until it has been opened: its file's size
    # (the weights, which are most of it). Once open, it is what the model takes, measured
    # when it opens and again whenever its last request ends: its weights, KV cache and
    # compute buffer as {Model#stats} reports them (what Ollama's `/api/ps` shows as `size`).
    # Whenever a measure leaves the budget overdrawn, idle models are closed; a first load
    # beside models in use may overdraw it by its KV cache and compute buffer until they
    # are idle.
    #
    # Opening and closing run outside the pool's lock, so one model's load holds up no
    # request to another; requests for a model being opened wait for that one load.
    # Thread-safe; `clock` gives the time (for the specs: expiry without waiting).
    #
    #   pool = Elelem::Server::ModelPool.new({ "coder" => "coder.gguf", "chat" => "chat.gguf" },
    #                                        budget: 8 << 30, open_options: { parallel: 4 })
    #   Elelem::Server.new(pool)
    class ModelPool
      extend Setup
      include Budget
      include Expiry

      # How long an idle model stays loaded unless a request says otherwise: Ollama's default
      # `keep_alive`, five minutes.
      DEFAULT_TTL = 300
      # The share of the memory available at start (Linux's MemAvailable) that the default
      # budget takes: the rest is left to the server itself and to the system.
      BUDGET_SHARE = 0.75
      # The longest model name a request may give.
      MAX_NAME_BYTES = 256
      # A keep-alive that never ends (Ollama's negative `keep_alive`).
      FOREVER = Float::INFINITY

      # A name no model of the pool has.
      class UnknownModelError < Elelem::Error; end
      # A model that does not fit the memory budget: larger than all of it, or larger than
      # what the models in use leave.
      class NoRoomError < Elelem::Error; end

      # What the pool knows of one model. `leases`: the leases out; `bytes`: its share of the
      # budget; `owned`: opened by the pool (a model given opened is never closed by it).
      Entry = Struct.new(:name, :path, :owned, :model, :info, :bytes, :loading, :leases, :last_used, :expires_at,
                         :unloading)

      # @return [Integer, nil] the bytes the loaded models may take together (nil: no limit)
      attr_reader :budget
      # @return [Numeric] seconds an idle model stays loaded unless its last request said otherwise
      attr_reader :ttl

      # @param models [Hash{String => String, Model}] each model's name and its GGUF file, or
      #   the model opened (served as it is, never closed by the pool); the first is the default
      # @param budget [Integer, nil] the bytes the loaded models may take together (nil: no limit)
      # @param ttl [Numeric] seconds an idle model stays loaded ({FOREVER}: until the budget needs it)
      # @param open_options [Hash] {Elelem.open}'s options, for every model the pool opens
      # @param clock [#call] the time now, as a Time
      # @raise [ArgumentError] for no models, a name that is not a non-empty String, a file that is not there
      def initialize(models, budget: ModelPool.default_budget, ttl: DEFAULT_TTL, open_options: {},
                     clock: -> { Time.now })
        raise ArgumentError, "a model pool needs at least one model" if models.empty?

        @budget = budget.nil? ? nil : Options.integer(:budget, budget, 1..)
        @ttl = ModelPool.seconds(ttl)
        @open_options = open_options.dup.freeze
        @clock = clock
        @lock = Mutex.new
        @changed = ConditionVariable.new # a load ended, or an idle model's expiry came nearer
        @entries = models.to_h { |name, model| [name, entry(name, model)] }
      end

      # @return [Array<String>] the models' names, the default first
      def names
        @entries.keys
      end

      # The name of the model `name` asks for.
      # @param name [String, nil] a model's name (nil or empty: the default one; with one model, any name)
      # @return [String]
      # @raise [ArgumentError] for a name that is not a String, or longer than {MAX_NAME_BYTES}
      # @raise [UnknownModelError] for a name no model has
      def resolve(name)
        entry_for(name).name
      end

      # A lease on the model `name` asks for, opened first if it is not open (after closing
      # idle models, least recently used first, when the budget needs their room).
      # @param name [String, nil] as {#resolve} takes it
      # @param keep_alive [Numeric, nil] seconds the model stays loaded once idle after this
      #   lease (nil: the pool's `ttl`; 0: closed as soon as no request uses it)
      # @return [Lease]
      # @raise [ArgumentError, UnknownModelError] as {#resolve}
      # @raise [NoRoomError] when the model does not fit the budget beside the models in use
      # @raise [Elelem::LoadError] when the model's file does not open
      def acquire(name, keep_alive: nil)
        entry = entry_for(name)
        evicted = @lock.synchronize do
          @changed.wait(@lock) while entry.loading
          return lease(entry, keep_alive) if entry.model

          room_for(entry).tap { entry.loading = true }
        end
        load(entry, keep_alive, evicted)
      end

      # Ends a lease (see {Lease#release}): once a model's last lease ends, its keep-alive
      # starts, and a keep-alive of 0 closes it at once. The model's memory is measured again
      # (its compute buffer grows to the largest pass it has run), and idle models are closed
      # if the budget is overdrawn.
      # @param lease [Lease]
      # @return [void]
      def release(lease)
        entry = @entries.fetch(lease.name)
        bytes = ModelPool.footprint(lease.model) unless lease.model.closed?
        closing = @lock.synchronize do
          next [] unless entry.leases.delete?(lease)

          entry.last_used = now
          entry.bytes = bytes if bytes && entry.model
          ended(entry, lease) + evict(idle_models, used - @budget.to_i)
        end
        close_all(closing)
      end

      # The models and their state.
      # @return [Array<Hash>] for each: `name`, `path`, `status` (`:loaded`, `:loading` or
      #   `:unloaded`), `bytes` (its share of the budget), `expires_at` (a Time; nil while in
      #   use, kept for ever, or not loaded), `info` ({Model#info} as last opened; nil before)
      def models
        @lock.synchronize do
          @entries.each_value.map do |e|
            status = if e.model then :loaded
                     elsif e.loading then :loading
                     else
                       :unloaded
                     end
            { name: e.name, path: e.path, status:, bytes: e.bytes, info: e.info,
              expires_at: e.model && e.leases.empty? ? e.expires_at : nil }
          end
        end
      end

      # The model named `name` if it is loaded now, for a look that must not load it (the
      # metrics): it holds no lease, so the model may close at any time.
      # @param name [String] a model's name
      # @return [Model, nil]
      def loaded(name)
        @lock.synchronize { @entries.fetch(name).model }
      end

      # @param name [String] a model's name
      # @return [Boolean] whether the pool never closes the model (it was given opened)
      def kept?(name)
        !@entries.fetch(name).owned
      end

      # @param name [String] a model's name
      # @return [Integer] how many sequences the model generates at once (as opened, or as it
      #   will be)
      def parallel(name)
        info = @entries.fetch(name).info
        info ? info[:parallel] : @open_options.fetch(:parallel, Defaults::OPEN.fetch(:parallel))
      end

      # Closes every model the pool opened, in use or not (for a server that has stopped).
      # @return [void]
      def close
        @reaper&.kill
        close_all(@lock.synchronize { @entries.each_value.select { |e| e.model && e.owned }.map { |e| detach(e) } })
      end

      private

      def entry(name, model)
        Options.text(:name, name)
        raise ArgumentError, "a model's name must not be empty" if name.empty?

        if model.is_a?(Model)
          return Entry.new(name, model.info[:path], false, model, model.info, ModelPool.footprint(model), false,
                           Set.new, now, nil, false)
        end

        path = Options.text(:path, model)
        raise ArgumentError, "#{path}: no such file (model #{name})" unless File.file?(path)

        Entry.new(name, path, true, nil, nil, File.size(path), false, Set.new, now, nil, false)
      end

      def entry_for(name)
        name = checked_name(name)
        return @entries.each_value.first if name.nil? || @entries.size == 1

        # Ollama's clients name a model's default tag `:latest`.
        @entries[name] || @entries[name.delete_suffix(":latest")] ||
          raise(UnknownModelError, "model '#{name}' not found")
      end

      # A request's name, nil for none; never used but as a key.
      def checked_name(name)
        return nil if name.nil? || name == ""
        raise ArgumentError, "model must be a string, got #{name.class}" unless name.is_a?(String)
        raise ArgumentError, "the model name is longer than #{MAX_NAME_BYTES} bytes" if name.bytesize > MAX_NAME_BYTES

        name
      end

      def now
        @clock.call
      end

      # Under the lock: a new lease on an open model, which is in use again.
      def lease(entry, keep_alive)
        lease = Lease.new(self, entry.name, entry.model, keep_alive)
        entry.leases << lease
        entry.last_used = now
        entry.expires_at = nil
        lease
      end

      # Closes the models evicted to make room, then opens `entry`'s model (its room in the
      # budget taken), leased to the caller; measures what it took, and closes idle models if
      # that overdraws the budget. However it ends, the load is over for those waiting on it.
      def load(entry, keep_alive, evicted)
        close_all(evicted)
        model = open_model(entry)
        held, surplus = @lock.synchronize do
          entry.model = model
          entry.info = model.info
          entry.bytes = ModelPool.footprint(model)
          entry.loading = false
          @changed.broadcast
          [lease(entry, keep_alive), evict(idle_models, used - @budget.to_i)]
        end
        close_all(surplus)
        held
      ensure
        unless held
          @lock.synchronize do
            entry.loading = false
            @changed.broadcast
          end
        end
      end

      # `entry`'s model opened; open options the model refuses are the pool's fault, not the request's.
      def open_model(entry)
        Model.open(entry.path, **@open_options)
      rescue ArgumentError => e
        raise Elelem::LoadError, "#{entry.name}: #{e.message}"
      end

      # Under the lock: once the last lease on `entry` has ended, its keep-alive starts; a
      # model to close at once when it is 0 (or an unload was asked).
      def ended(entry, lease)
        return [] unless entry.leases.empty?

        expire(entry, entry.unloading ? 0 : lease.keep_alive || @ttl)
      end

      # Under the lock: the entry forgets its model; `[name, model]`, for the caller to close
      # outside the lock.
      def detach(entry)
        model = entry.model
        entry.model = entry.expires_at = nil
        entry.unloading = false
        [entry.name, model]
      end

      def close_all(detached)
        detached.each { |_name, model| model.close }
      end
    end
  end
end
