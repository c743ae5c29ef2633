# frozen_string_literal: true

module Elelem
  # A language model opened from a GGUF file, with one context (KV cache and
  # compute buffer) of its own. Calls are serialized: a model may be shared
  # by threads, which then take turns.
  #
  # Native memory is freed by {#close}, by the block form of {Elelem.open},
  # or by the garbage collector.
  class Model
    DEFAULT_N_CTX = 4096
    MAX_N_CTX = 1 << 20
    MAX_THREADS = 512

    class << self
      # Opens a model; see {Elelem.open}.
      # @return [Model]
      def open(path, n_ctx: DEFAULT_N_CTX, n_threads: Etc.nprocessors, n_gpu_layers: 0)
        path = path.to_path if path.respond_to?(:to_path)
        raise ArgumentError, "path must be a String, got #{path.class}" unless path.is_a?(String)

        check_integer(:n_ctx, n_ctx, 1..MAX_N_CTX)
        check_integer(:n_threads, n_threads, 1..MAX_THREADS)
        check_integer(:n_gpu_layers, n_gpu_layers, 0..)
        model = _open(path, n_ctx, n_threads, n_gpu_layers)
        model.send(:after_open)
        model
      end

      # @api private
      def check_integer(name, value, range)
        return if value.is_a?(Integer) && range.cover?(value)

        raise ArgumentError, "#{name} must be an Integer in #{range}, got #{value.inspect}"
      end
    end

    # Generates tokens greedily after `prompt`, starting a fresh sequence.
    #
    # @param prompt [Array<Integer>] token ids
    # @param max_tokens [Integer] the most tokens to generate
    # @param ignore_eos [Boolean] keep going after an end-of-generation token
    # @yieldparam token [Integer] each token as it is generated
    # @return [Array<Integer>] the generated ids (an end-of-generation token included)
    # @raise [ArgumentError] for ids that are not Integers in the vocabulary
    # @raise [Elelem::ContextFullError] when the prompt does not fit `n_ctx`
    # @raise [Elelem::ClosedError] after {#close}
    def generate(prompt, max_tokens: 32, ignore_eos: false, &block)
      ids = check_ids(prompt)
      self.class.check_integer(:max_tokens, max_tokens, 0..MAX_N_CTX)
      synchronize do
        tokens, reason = _generate(ids, max_tokens, ignore_eos ? true : false, &block)
        @last_stop_reason = reason
        tokens
      end
    end

    # Why the last generation stopped: `:eos`, `:length` or `:context_full`.
    # @return [Symbol, nil]
    attr_reader :last_stop_reason

    # Frees the model's native memory now. Idempotent.
    # @return [nil]
    def close
      synchronize { _close }
      nil
    end

    # @return [Boolean] whether {#close} has been called
    def closed?
      synchronize { _closed? }
    end

    # The model's hyper-parameters and how it runs.
    # @return [Hash{Symbol => Object}]
    def info
      synchronize { _info }
    end

    # Memory use and the speed of the last generation.
    # @return [Hash{Symbol => Numeric}]
    def stats
      synchronize { _stats }
    end

    # @return [String] e.g. `#<Elelem::Model qwen2 0.5B Q4_K_M n_ctx=4096>`
    def inspect
      return "#<#{self.class.name} closed>" if closed?

      i = info
      label = [i[:architecture], i[:size_label], i[:file_type]].compact.join(" ")
      "#<#{self.class.name} #{label} n_ctx=#{i[:n_ctx]}>"
    end
    alias to_s inspect

    private

    def after_open
      @lock = Thread::Mutex.new
    end

    def synchronize(&block)
      @lock.owned? ? block.call : @lock.synchronize(&block)
    end

    def check_ids(prompt)
      raise ArgumentError, "prompt must be an Array of token ids, got #{prompt.class}" unless prompt.is_a?(Array)
      raise ArgumentError, "prompt is empty" if prompt.empty?

      bad = prompt.find { |id| !id.is_a?(Integer) }
      raise ArgumentError, "token ids must be Integers, got #{bad.inspect}" unless bad.nil?

      prompt
    end
  end
end
