# frozen_string_literal: true

module Elelem
  # Checks what callers pass before anything reaches native code, so bad input
  # is an ArgumentError naming the option, never a crash.
  # @api private
  module Options
    # The largest context (and so token count) accepted anywhere.
    MAX_N_CTX = 1 << 20
    # Seeds are unsigned 64-bit.
    MAX_SEED = (1 << 64) - 1

    # Sampling and stopping options, with their defaults (greedy: temperature 0).
    GENERATION_DEFAULTS = {
      max_tokens: 32, ignore_eos: false, temperature: 0.0, top_k: 40, top_p: 0.95, min_p: 0.05,
      repeat_penalty: 1.0, repeat_last_n: 64, seed: nil, stop: nil, reuse_prefix: false
    }.freeze

    module_function

    def integer(name, value, range)
      return value if value.is_a?(Integer) && range.cover?(value)

      raise ArgumentError, "#{name} must be an Integer in #{range}, got #{value.inspect}"
    end

    def float(name, value)
      raise ArgumentError, "#{name} must be a number, got #{value.inspect}" unless value.is_a?(Numeric)

      value.to_f
    end

    # The full option set the native side expects.
    def generation(options)
      unknown = options.keys - GENERATION_DEFAULTS.keys
      raise ArgumentError, "unknown option#{"s" if unknown.size > 1}: #{unknown.join(", ")}" unless unknown.empty?

      opts = GENERATION_DEFAULTS.merge(options)
      { max_tokens: 0..MAX_N_CTX, top_k: 0.., repeat_last_n: 0..MAX_N_CTX }.each { |k, r| integer(k, opts[k], r) }
      %i[temperature top_p min_p repeat_penalty].each { |k| opts[k] = float(k, opts[k]) }
      opts.merge(seed: seed(opts[:seed]), stop: stops(opts[:stop]), ignore_eos: opts[:ignore_eos] ? true : false,
                 reuse_prefix: opts[:reuse_prefix] ? true : false)
    end

    # A random seed unless one is given: the same seed gives the same text.
    def seed(value)
      value.nil? ? Random.new_seed & MAX_SEED : integer(:seed, value, 0..MAX_SEED)
    end

    def stops(stop)
      list = Array(stop)
      return list if list.all? { |s| s.is_a?(String) && !s.empty? }

      raise ArgumentError, "stop must be a non-empty String or an Array of them, got #{stop.inspect}"
    end

    # A String prompt in UTF-8, or checked token ids.
    def prompt(prompt)
      return ids(prompt) unless prompt.is_a?(String)
      raise ArgumentError, "prompt is empty" if prompt.empty?

      prompt.encode(Encoding::UTF_8)
    end

    def ids(list, allow_empty: false)
      unless list.is_a?(Array)
        raise ArgumentError,
              "prompt must be a String or an Array of token ids, got #{list.class}"
      end
      raise ArgumentError, "prompt is empty" if list.empty? && !allow_empty

      bad = list.find { |id| !id.is_a?(Integer) }
      raise ArgumentError, "token ids must be Integers, got #{bad.inspect}" unless bad.nil?

      list
    end

    # `[[role, content], ...]` from message Hashes with Symbol or String keys.
    def messages(list)
      raise ArgumentError, "messages must be a non-empty Array of Hashes" unless list.is_a?(Array) && !list.empty?

      list.map { |m| message(m) }
    end

    def message(msg)
      unless msg.is_a?(Hash)
        raise ArgumentError,
              "each message must be a Hash with :role and :content, got #{msg.inspect}"
      end

      role = msg[:role] || msg["role"]
      content = msg[:content] || msg["content"]
      unless role.is_a?(String) || role.is_a?(Symbol)
        raise ArgumentError,
              "message role must be a String, got #{role.inspect}"
      end
      raise ArgumentError, "message content must be a String, got #{content.inspect}" unless content.is_a?(String)

      [role.to_s, content]
    end
  end
end
