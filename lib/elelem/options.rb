# frozen_string_literal: true

module Elelem
  # Checks what callers pass before anything reaches native code, so bad input
  # is an ArgumentError naming the option, never a crash.
  # @api private
  module Options
    # The largest context (and so token count) accepted anywhere.
    MAX_N_CTX = Defaults::MAX_N_CTX
    # Seeds are unsigned 64-bit.
    MAX_SEED = (1 << 64) - 1
    # Counts and ids the native side holds in 32 bits.
    MAX_U32 = (1 << 32) - 1

    # Sampling and stopping options, with their defaults: the engine's ({Defaults::GENERATION};
    # greedy: temperature 0), a random seed, no stop strings, no logit bias. `draft: nil` and
    # `draft_tokens: nil` speculate as the model was opened to (see {Speculation}).
    GENERATION_DEFAULTS = Defaults::GENERATION.merge(seed: nil, stop: nil, logit_bias: nil, draft: nil,
                                                     draft_tokens: nil).freeze

    # What {Model#chat} changes: a reply runs to the end of the turn, bounded so that a
    # model that never ends its turn stops, and earlier turns stay in the KV cache.
    CHAT_DEFAULTS = { max_tokens: 1024, reuse_prefix: true }.freeze

    # The keywords that constrain what a generation may write; at most one per call.
    CONSTRAINTS = %i[json_schema grammar lark regex choice].freeze

    module_function

    def integer(name, value, range)
      return value if value.is_a?(Integer) && range.cover?(value)

      raise ArgumentError, "#{name} must be an Integer in #{range}, got #{value.inspect}"
    end

    def float(name, value)
      return value.to_f if value.is_a?(Numeric) && value.real?

      raise ArgumentError, "#{name} must be a real number, got #{value.inspect}"
    end

    # `value` as a UTF-8 String; binary Strings are taken to hold UTF-8 bytes.
    def text(name, value)
      raise ArgumentError, "#{name} must be a String, got #{value.class}" unless value.is_a?(String)

      utf8 = value.encoding == Encoding::BINARY ? value.dup.force_encoding(Encoding::UTF_8) : value.encode("UTF-8")
      return utf8 if utf8.valid_encoding?

      raise ArgumentError, "#{name} is not valid UTF-8: #{value.inspect[0, 40]}"
    rescue EncodingError => e
      raise ArgumentError, "#{name} cannot be converted to UTF-8 (#{e.message})"
    end

    # The full option set the native side expects.
    def generation(options)
      unknown = options.keys - GENERATION_DEFAULTS.keys
      raise ArgumentError, "unknown option#{"s" if unknown.size > 1}: #{unknown.join(", ")}" unless unknown.empty?

      opts = GENERATION_DEFAULTS.merge(options)
      ranges = { max_tokens: 0..MAX_N_CTX, top_k: 0..MAX_U32, repeat_last_n: 0..MAX_N_CTX }
      ranges.each { |k, r| integer(k, opts[k], r) }
      %i[temperature top_p min_p repeat_penalty presence_penalty frequency_penalty].each do |k|
        opts[k] = float(k, opts[k])
      end
      opts.merge(seed: seed(opts[:seed]), stop: stops(opts[:stop]), logit_bias: logit_bias(opts[:logit_bias]),
                 ignore_eos: opts[:ignore_eos] ? true : false,
                 reuse_prefix: opts[:reuse_prefix] ? true : false,
                 **Speculation.call_options(opts[:draft], opts[:draft_tokens]))
    end

    # Splits the constraint keywords ({CONSTRAINTS}) off `options`: `[rest, constraint]`,
    # the constraint nil or `[kind, payload]` as the native side takes it (a JSON Schema
    # and choices as JSON text, grammars and regexes as they are).
    def constraint(options)
      given = options.slice(*CONSTRAINTS).compact
      raise ArgumentError, "give at most one of #{CONSTRAINTS * ", "}; got #{given.keys * " and "}" if given.size > 1

      rest = options.except(*CONSTRAINTS)
      return [rest, nil] if given.empty?

      kind, value = given.first
      [rest, [kind.to_s, constraint_payload(kind, value)]]
    end

    # One constraint's value as the native side takes it.
    def constraint_payload(kind, value)
      case kind
      when :json_schema then json_schema(value)
      when :choice then choices(value)
      else
        value = text(kind, value)
        raise ArgumentError, "#{kind} is empty" if value.strip.empty?

        value
      end
    end

    # A JSON Schema (a Hash, or a JSON String) as JSON text.
    def json_schema(schema)
      case schema
      when Hash, true, false then JSON.generate(schema)
      when String then JSON.generate(JSON.parse(text(:json_schema, schema)))
      else raise ArgumentError, "json_schema must be a Hash or a JSON String, got #{schema.class}"
      end
    rescue JSON::ParserError, JSON::GeneratorError => e
      raise ArgumentError, "json_schema is not valid JSON: #{e.message[0, 80]}"
    end

    # `choice:` as a JSON array of non-empty Strings.
    def choices(list)
      unless list.is_a?(Array) && !list.empty? && list.all? { |c| c.is_a?(String) && !c.empty? }
        raise ArgumentError, "choice must be a non-empty Array of non-empty Strings, got #{list.inspect[0, 60]}"
      end

      JSON.generate(list.map { |c| text(:choice, c) })
    end

    # A random seed unless one is given: the same seed gives the same text.
    def seed(value)
      value.nil? ? Random.new_seed & MAX_SEED : integer(:seed, value, 0..MAX_SEED)
    end

    # `{token_id => bias}` as `[[id, bias], ...]`; a bias of `-Float::INFINITY` bans the token.
    def logit_bias(bias)
      return [] if bias.nil?
      unless bias.is_a?(Hash)
        raise ArgumentError, "logit_bias must be a Hash of token ids to numbers, got #{bias.class}"
      end

      bias.map do |id, value|
        integer("logit_bias token id", id, 0..MAX_U32)
        value = float(:logit_bias, value)
        raise ArgumentError, "logit_bias of token #{id} is #{value}" if value.nan? || value == Float::INFINITY

        [id, value]
      end
    end

    def stops(stop)
      list = Array(stop)
      return list.map { |s| text(:stop, s) } if list.all? { |s| s.is_a?(String) && !s.empty? }

      raise ArgumentError, "stop must be a non-empty String or an Array of them, got #{stop.inspect}"
    end

    # A String prompt in UTF-8, or checked token ids.
    def prompt(prompt)
      return ids(prompt) unless prompt.is_a?(String)
      raise ArgumentError, "prompt is empty" if prompt.empty?

      text(:prompt, prompt)
    end

    def ids(list, allow_empty: false)
      unless list.is_a?(Array)
        raise ArgumentError,
              "prompt must be a String or an Array of token ids, got #{list.class}"
      end
      raise ArgumentError, "prompt is empty" if list.empty? && !allow_empty

      bad = list.grep_v(Integer)
      raise ArgumentError, "token ids must be Integers, got #{bad.first.inspect}" unless bad.empty?

      # The native side knows the vocabulary; this keeps every id within its integer type.
      bad = list.reject { |id| id.between?(0, MAX_U32) }
      raise ArgumentError, "token id #{bad.first} is out of range" unless bad.empty?

      list
    end
  end
end
