# frozen_string_literal: true

module Elelem
  class Server
    # The server's counters, for `GET /metrics` (Prometheus text, llama-server's metric names)
    # and `GET /slots`: every choice a route generates ({Generation}) is counted here.
    # Thread-safe.
    #
    # A model generates `parallel` sequences at once and queues the rest, so of the
    # generations in flight, the first `parallel` are processing and the others deferred.
    # The slots are the server's own table of those `parallel` places (which request holds
    # one, and what the last request in each asked); the model's sequence numbers are its own.
    class Metrics
      # llama-server's counters (`llamacpp:NAME`) this server keeps, with their help text.
      COUNTERS = {
        prompt_tokens_total: "Number of prompt tokens processed, excluding cached tokens",
        prompt_tokens_cached_total: "Number of prompt tokens reused from the cache",
        prompt_seconds_total: "Total time spent processing prompts",
        tokens_predicted_total: "Number of generation tokens processed",
        tokens_predicted_seconds_total: "Total time spent generating tokens",
        n_tokens_max: "Largest observed sequence length (prompt + generation)"
      }.freeze
      # ... and its gauges: throughputs averaged since the previous scrape, the KV cache now
      # (the gauges llama-server had until its KV cache API changed; the pinned one has none),
      # and the requests now.
      GAUGES = {
        prompt_tokens_seconds: "Average prompt throughput in tokens/s",
        predicted_tokens_seconds: "Average generation throughput in tokens/s",
        kv_cache_usage_ratio: "KV-cache usage. 1 = 100 percent usage.",
        kv_cache_tokens: "KV-cache tokens.",
        requests_processing: "Number of requests processing",
        requests_deferred: "Number of requests deferred"
      }.freeze

      # One of the model's `parallel` places: the generation in it, and the last one's number,
      # settings and figures.
      Slot = Struct.new(:id, :task, :id_task, :params, :prompt_tokens, :decoded)
      # A generation in flight: its number, what it asked, and its slot once it has one.
      Task = Struct.new(:id, :params, :slot)

      # @param parallel [Integer] how many sequences the model generates at once
      def initialize(parallel)
        @lock = Mutex.new
        @counts = COUNTERS.keys.to_h { |name| [name, 0] }
        @window = { prompt: [0, 0.0], predicted: [0, 0.0] }
        @slots = Array.new(parallel) { |id| Slot.new(id, nil, nil, nil, 0, 0) }
        @queue = []
        @tasks = 0
        @started = Time.now.to_i
      end

      # Counts one generation around the block: in flight while it runs, and its tokens and
      # seconds once it returns a {Completion}. What it asked is kept for `/slots`, as
      # llama-server's settings ({NativeRequest.settings}).
      # @param options [Hash] its options of {Model#complete}
      # @param stream [Boolean] whether its reply streams
      # @param n_probs [Integer] how many alternatives each token's probabilities list
      # @yieldreturn [Completion]
      # @return [Completion] what the block returned
      def track(options, stream:, n_probs:)
        task = enter(NativeRequest.settings(options, stream:, n_probs:))
        completion = yield
        record(task, completion)
        completion
      ensure
        leave(task)
      end

      # @return [Integer] when the server started (Unix time), for `Process-Start-Time-Unix`
      attr_reader :started

      # The slots as llama-server's `GET /slots` lists them.
      # @param n_ctx [Integer] the context a sequence may fill
      # @param speculative [Boolean] whether generations decode speculatively
      # @return [Array<Hash>]
      def slots(n_ctx:, speculative:)
        @lock.synchronize do
          @slots.map do |slot|
            busy = !slot.task.nil?
            entry = { id: slot.id, n_ctx:, speculative:, is_processing: busy }
            next entry unless slot.params

            entry.merge(id_task: slot.id_task, n_prompt_tokens: slot.prompt_tokens, params: slot.params,
                        next_token: [{ has_next_token: busy, n_decoded: slot.decoded }])
          end
        end
      end

      # The Prometheus text of `GET /metrics`; the throughput gauges then start a new window.
      # @param kv_usage [Hash, nil] the model's KV cache now ({Model#stats}' `kv_cells_used`,
      #   `kv_cells` and `kv_tokens`); nil for a model not loaded, whose cache is empty
      # @return [String]
      def prometheus(kv_usage)
        counts, gauges = @lock.synchronize do
          [@counts.dup, gauges!]
        end
        kv_usage ||= {}
        cells = kv_usage.fetch(:kv_cells, 0)
        gauges.merge!(kv_cache_usage_ratio: cells.positive? ? kv_usage[:kv_cells_used].fdiv(cells) : 0.0,
                      kv_cache_tokens: kv_usage.fetch(:kv_tokens, 0))
        items(:counter, COUNTERS, counts) + items(:gauge, GAUGES, gauges)
      end

      private

      # A new generation takes a free slot, else waits (as the model queues it) for the first
      # slot freed.
      def enter(params)
        @lock.synchronize do
          task = Task.new(@tasks += 1, params)
          slot = @slots.find { |s| s.task.nil? }
          slot ? occupy(slot, task) : @queue << task
          task
        end
      end

      def occupy(slot, task)
        slot.task = task
        slot.id_task = task.id
        slot.params = task.params
        slot.prompt_tokens = slot.decoded = 0
        task.slot = slot
      end

      def leave(task)
        @lock.synchronize do
          next @queue.delete(task) unless task.slot

          task.slot.task = nil
          waiting = @queue.shift
          occupy(task.slot, waiting) if waiting
        end
      end

      def record(task, completion)
        t = completion.timings
        generated = completion.tokens.size
        @lock.synchronize do
          add(prompt_tokens_total: t[:prompt_tokens], prompt_seconds_total: t[:prompt_seconds],
              prompt_tokens_cached_total: completion.prompt_tokens - t[:prompt_tokens],
              tokens_predicted_total: generated, tokens_predicted_seconds_total: t[:decode_seconds])
          @counts[:n_tokens_max] = [@counts[:n_tokens_max], completion.prompt_tokens + generated].max
          window(:prompt, t[:prompt_tokens], t[:prompt_seconds])
          window(:predicted, generated, t[:decode_seconds])
          task.slot&.prompt_tokens = completion.prompt_tokens
          task.slot&.decoded = generated
        end
      end

      def add(amounts)
        amounts.each { |name, amount| @counts[name] += amount }
      end

      def window(name, tokens, seconds)
        count, time = @window[name]
        @window[name] = [count + tokens, time + seconds]
      end

      # The gauges now; the throughput window restarts (as llama-server's buckets do at a scrape).
      def gauges!
        rate = ->((tokens, seconds)) { seconds.positive? ? tokens / seconds : 0.0 }
        gauges = { prompt_tokens_seconds: rate.call(@window[:prompt]),
                   predicted_tokens_seconds: rate.call(@window[:predicted]),
                   requests_processing: @slots.count(&:task), requests_deferred: @queue.size }
        @window.transform_values! { [0, 0.0] }
        gauges
      end

      def items(type, help, values)
        help.map do |name, text|
          "# HELP llamacpp:#{name} #{text}\n# TYPE llamacpp:#{name} #{type}\nllamacpp:#{name} #{values[name]}\n"
        end.join
      end
    end
  end
end
