# frozen_string_literal: true

require "json"

module Elelem
  class Server
    # One JSON value as a model writes it, character by character, rewritten as it comes into
    # the text `JSON.generate` makes of the parsed value: no blanks, strings escaped as Ruby's
    # generator escapes them, numbers as Ruby reads and writes them. So the pieces of a tool
    # call's arguments, streamed as they are generated, put together make exactly the
    # arguments of the whole reply (`JSON.generate` of the parsed call: {Reply}).
    #
    # Each token is written once it is whole (a number or `true` once the next character ends
    # it, an escape once its last digit is in), a string's characters as they come. Text that
    # is not JSON (a model's doubled braces, say) makes the value {#broken?}: nothing more is
    # written, and what was written stays a prefix of the value's own text up to that point.
    class CompactJson
      # The escapes of a JSON string, but `\u`.
      ESCAPES = { '"' => '"', "\\" => "\\", "/" => "/", "b" => "\b", "f" => "\f", "n" => "\n", "r" => "\r",
                  "t" => "\t" }.freeze
      # What a number is written with.
      NUMBER = /[-+.eE0-9]/
      # The integers serde_json (which reads the calls out of the reply) keeps as integers; a
      # larger one becomes a float there, and so here.
      INTEGERS = -(2**63)..((2**64) - 1)

      # @return [Boolean] whether the value is whole (its last character read)
      def done?
        @done
      end

      # @return [Boolean] whether the text stopped being JSON
      def broken?
        @broken
      end

      def initialize
        @stack = [] # :object or :array for each container open
        @expect = :value # :value, :key, :colon, :next (a comma or the container's end), :first_key, :first_value
        @token = nil # a number or literal being read
        @string = nil # :key or :value while inside a string; @escape the escape being read
        @escape = nil
        @high = nil # a UTF-16 high surrogate waiting for its low half
        @done = false
        @broken = false
      end

      # Reads `text`, up to the end of the value.
      # @param text [String]
      # @return [Array(String, Integer)] the compact text to send, and how many characters of
      #   `text` the value took (all of them until it ends)
      def feed(text)
        out = +""
        used = 0
        text.each_char do |char|
          break if @done || @broken

          read(char, out)
          used += 1
        end
        [out, @broken ? text.size : used]
      end

      private

      def read(char, out)
        return string_char(char, out) if @string
        return unless token_char(char, out)
        return if char.match?(/\s/)

        structure(char, out)
      end

      # A number or literal goes on until a character that cannot be part of it: false when
      # `char` was taken into it.
      def token_char(char, out)
        return true unless @token

        if char.match?(@token.match?(/\A[tfn]/) ? /[a-z]/ : NUMBER)
          @token << char
          return false
        end

        out << scalar(@token)
        @token = nil
        after_value
        !@done && !@broken
      end

      def structure(char, out)
        case [@expect, char]
        in [:value | :first_value, "{"] then open_container(:object, :first_key, char, out)
        in [:value | :first_value, "["] then open_container(:array, :first_value, char, out)
        in [:value | :first_value, "\""] then start_string(:value, out)
        in [:value | :first_value, /[-0-9tfn]/] then @token = +char
        in [:key | :first_key, "\""] then start_string(:key, out)
        in [:colon, ":"] then punctuation(char, out, :value)
        in [:next, ","] then punctuation(char, out, @stack.last == :object ? :key : :value)
        in [:next | :first_key, "}"] | [:next | :first_value, "]"] if closes?(char) then close(char, out)
        else @broken = true
        end
      end

      def punctuation(char, out, expect)
        out << char
        @expect = expect
      end

      # Whether `char` closes the container open: the last one's, after a value or none.
      def closes?(char)
        (char == "}" ? :object : :array) == @stack.last
      end

      def open_container(kind, expect, char, out)
        @stack << kind
        @expect = expect
        out << char
      end

      def close(char, out)
        @stack.pop
        out << char
        after_value
      end

      def start_string(kind, out)
        @string = kind
        out << '"'
      end

      # After a whole value: the end of the top one, else a comma or its container's end.
      def after_value
        @done = @stack.empty?
        @expect = :next
      end

      # A number or literal, written as `JSON.generate` writes what `JSON.parse` reads of it.
      def scalar(token)
        value = JSON.parse(token)
        value = value.to_f if value.is_a?(Integer) && !INTEGERS.cover?(value)
        JSON.generate(value)
      rescue JSON::ParserError, JSON::GeneratorError
        @broken = true
        ""
      end

      def string_char(char, out)
        return escape_char(char, out) if @escape
        return @escape = +"" if char == "\\"
        return string_end(out) if char == '"' && @high.nil?

        # A raw control character is not JSON; nor is a high surrogate with no low one.
        return @broken = true if char.ord < 0x20 || @high

        out << written(char)
      end

      def string_end(out)
        out << '"'
        key = @string == :key
        @string = nil
        key ? @expect = :colon : after_value
      end

      def escape_char(char, out)
        @escape << char
        return unicode_escape(out) if @escape.start_with?("u")

        decoded = ESCAPES[@escape]
        @escape = nil
        return @broken = true if decoded.nil? || @high

        out << written(decoded)
      end

      # `\uXXXX`, a surrogate pair as one character.
      def unicode_escape(out)
        return @broken = true unless @escape.match?(/\Au\h{0,4}\z/)
        return if @escape.size < 5

        unit = @escape[1..].hex
        @escape = nil
        case unit
        when 0xD800..0xDBFF then @high.nil? ? @high = unit : @broken = true
        when 0xDC00..0xDFFF then low_surrogate(unit, out)
        else @high.nil? ? out << written(unit.chr(Encoding::UTF_8)) : @broken = true
        end
      end

      def low_surrogate(unit, out)
        return @broken = true if @high.nil?

        out << written((0x10000 + ((@high - 0xD800) << 10) + (unit - 0xDC00)).chr(Encoding::UTF_8))
        @high = nil
      end

      # One character of a string as Ruby's generator escapes it.
      def written(char)
        JSON.generate(char)[1...-1]
      end
    end
  end
end
