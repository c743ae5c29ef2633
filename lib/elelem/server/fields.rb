# frozen_string_literal: true

module Elelem
  class Server
    # Checks of a JSON request body's fields, for the request classes of every API (OpenAI's,
    # llama-server's, Ollama's): a field of the wrong type or out of range is an {HTTPError}
    # 400 naming it. The including class keeps the body in `@body`.
    module Fields
      # The most stop strings a request may give.
      MAX_STOPS = 16

      private

      # Keeps `body`, whose fields the checks read: a 400 unless it is a JSON object.
      def take_body(body)
        raise invalid("the request body must be a JSON object, got #{json_type(body)}") unless body.is_a?(Hash)

        @body = body
      end

      # A string or token ids; OpenAI's list of one prompt too. Several prompts would be
      # several choices, which one request does not give.
      def completion_prompt
        prompt = required("prompt", String, Array)
        prompt = prompt.first if prompt.is_a?(Array) && prompt.size == 1 && !prompt.first.is_a?(Integer)
        return prompt if prompt.is_a?(String) || token_ids?(prompt)

        raise invalid("prompt must be a string, an array of token ids, or an array holding one of them", "prompt")
      end

      def token_ids?(prompt)
        prompt.is_a?(Array) && !prompt.empty? && prompt.all?(Integer)
      end

      def required(name, *types)
        raise invalid("#{name} is required", name) if @body[name].nil?

        optional(name, *types)
      end

      # The field's value, nil when absent or null; a 400 when it is of another type.
      def optional(name, *types)
        typed(@body[name], name, *types)
      end

      # `value` when nil or of one of `types` (classes, or `true`/`false` for a boolean);
      # else a 400 naming `path` (`tools[0].function.name`) and the field at the top.
      def typed(value, path, *types)
        return value if value.nil? || types.any? { |t| t.is_a?(Module) ? value.is_a?(t) : value == t }

        raise invalid("#{path} must be #{types.map { |t| type_name(t) }.uniq.join(" or ")}, got #{json_type(value)}",
                      path[/\A\w+/])
      end

      def integer(name, range)
        value = optional(name, Integer)
        return value if value.nil? || range.cover?(value)

        raise invalid("#{name} must be an integer from #{range.min} to #{range.max}, got #{value}", name)
      end

      def number(name, range)
        value = optional(name, Numeric)&.to_f
        return value if value.nil? || range.cover?(value)

        raise invalid("#{name} must be a number from #{range.min} to #{range.max}, got #{value}", name)
      end

      # `stop`: a string or up to {MAX_STOPS} of them; nil for none.
      def stops
        stop = optional("stop", String, Array)
        list = Array(stop)
        unless list.size <= MAX_STOPS && list.all? { |s| s.is_a?(String) && !s.empty? }
          raise invalid("stop must be a non-empty string or an array of at most #{MAX_STOPS} of them", "stop")
        end

        list.empty? ? nil : list
      end

      def type_name(type)
        { String => "a string", Array => "an array", Hash => "an object", Integer => "an integer",
          Numeric => "a number", true => "a boolean", false => "a boolean" }.fetch(type)
      end

      def json_type(value)
        case value
        when Hash then "an object"
        when Array then "an array"
        when String then "a string"
        when Numeric then "a number"
        when true, false then "a boolean"
        else "null"
        end
      end

      def invalid(message, param = nil)
        HTTPError.new(400, message, param:)
      end
    end
  end
end
