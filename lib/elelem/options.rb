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
    # Counts and ids the native side holds in 32 bits.
    MAX_U32 = (1 << 32) - 1

    # Sampling and stopping options, with their defaults (greedy: temperature 0).
    GENERATION_DEFAULTS = {
      max_tokens: 32, ignore_eos: false, temperature: 0.0, top_k: 40, top_p: 0.95, min_p: 0.05,
      repeat_penalty: 1.0, repeat_last_n: 64, seed: nil, stop: nil, reuse_prefix: false
    }.freeze

    # What {Model#chat} changes: a reply runs to the end of the turn, bounded so that a
    # model that never ends its turn stops, and earlier turns stay in the KV cache.
    CHAT_DEFAULTS = { max_tokens: 1024, reuse_prefix: true }.freeze

    # The roles a message may have.
    ROLES = %w[system user assistant tool].freeze

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

    # The messages as a template sees them: Hashes with String keys, in their order,
    # after a system message made of `system` when given. A role must be known and a
    # content text (or nil, or absent, as for an assistant's tool calls); the other
    # keys (`tool_calls`, `tool_call_id`, `name`, ...) pass through as they are.
    def messages(list, system = nil)
      raise ArgumentError, "messages must be a non-empty Array of Hashes" unless list.is_a?(Array) && !list.empty?

      messages = list.map { |m| message(m) }
      return messages if system.nil?
      raise ArgumentError, "system: given, and the messages start with a system message" if messages[0]["role"] == "system"

      [{ "role" => "system", "content" => text(:system, system) }, *messages]
    end

    # One message Hash with String keys, its role and content checked.
    def message(msg)
      unless msg.is_a?(Hash)
        raise ArgumentError,
              "each message must be a Hash with :role and :content, got #{msg.inspect}"
      end

      msg.to_h do |key, value|
        key = key.to_s
        case key
        when "role" then [key, role(value)]
        when "content" then [key, value.nil? ? nil : content(value)]
        else [key, value]
        end
      end.tap { |m| raise ArgumentError, "a message has no role: #{msg.inspect[0, 60]}" unless m.key?("role") }
    end

    def role(role)
      role = role.to_s if role.is_a?(Symbol)
      role = text("message role", role)
      return role if ROLES.include?(role)

      raise ArgumentError, "unknown message role #{role.inspect} (known: #{ROLES.join(", ")})"
    end

    # A content String, or an Array of text parts (`{ type: "text", text: "..." }` or
    # Strings, as OpenAI's API and ruby_llm take them) joined by newlines.
    def content(value)
      return text("message content", value) unless value.is_a?(Array)

      value.map { |part| text("message content", part_text(part)) }.join("\n")
    end

    # Template variables from keywords: `tools`, `documents`, `enable_thinking`, ...
    def variables(variables, tools)
      variables = variables.merge(tools: tools(tools)) unless tools.nil?
      if variables.key?(:messages) || variables.key?("messages")
        raise ArgumentError, "messages is the first argument, not a template variable"
      end

      variables
    end

    # OpenAI-style tool definitions (`{ type: "function", function: { name:, ... } }`),
    # handed to the template as they are, as transformers does.
    def tools(tools)
      return tools if tools.is_a?(Array) && tools.all?(Hash)

      raise ArgumentError, "tools must be an Array of Hashes (JSON schemas of functions), got #{tools.inspect[0, 60]}"
    end

    # `strftime_now`'s time as `[seconds, nanoseconds]` since the epoch (nil: the current time).
    def now(time)
      return nil if time.nil?
      raise ArgumentError, "now must be a Time, got #{time.inspect}" unless time.is_a?(Time)
      raise ArgumentError, "now must not be before 1970, got #{time}" if time.to_i.negative?

      [time.to_i, time.nsec]
    end

    def part_text(part)
      return part if part.is_a?(String)

      type = part.is_a?(Hash) && (part[:type] || part["type"]).to_s
      return part[:text] || part["text"] if type == "text"

      raise ArgumentError, "message content parts must be text (a String or { type: \"text\", text: ... }), " \
                           "got #{part.inspect[0, 60]}"
    end
  end
end
