# frozen_string_literal: true

module Elelem
  # Checks a conversation and its template variables before they reach native code,
  # so bad input is an ArgumentError naming what is wrong, never a crash.
  # @api private
  module ChatOptions
    # The roles a message may have.
    ROLES = %w[system user assistant tool].freeze
    # Audio content parts elelem does not read (it fetches no URL): refused by name. Those it
    # reads are {Audio::PARTS}.
    AUDIO_PARTS = %w[audio_url].freeze

    module_function

    # The messages as a template sees them: Hashes with String keys, in their order,
    # after a system message made of `system` when given. A String alone is one user
    # message. A role must be known and a content text (or nil, or absent, as for an
    # assistant's tool calls); the other keys (`tool_calls`, `tool_call_id`, `name`, ...)
    # pass through as they are.
    def messages(list, system = nil)
      list = [{ "role" => "user", "content" => list }] if list.is_a?(String)
      unless list.is_a?(Array) && !list.empty?
        raise ArgumentError, "messages must be a String or a non-empty Array of Hashes, got #{list.class}"
      end

      messages = list.map { |m| message(m) }
      return messages if system.nil?
      if messages[0]["role"] == "system"
        raise ArgumentError, "system: given, and the messages start with a system message"
      end

      [{ "role" => "system", "content" => Options.text(:system, system) }, *messages]
    end

    # One message Hash with String keys, its role and content checked.
    def message(msg)
      unless msg.is_a?(Hash)
        raise ArgumentError,
              "each message must be a Hash with :role and :content, got #{msg.inspect}"
      end

      message = msg.to_h do |key, value|
        key = key.to_s
        case key
        when "role" then [key, role(value)]
        when "content" then [key, value.nil? ? nil : content(value)]
        else [key, value]
        end
      end
      raise ArgumentError, "a message has no role: #{msg.inspect[0, 60]}" unless message.key?("role")

      message
    end

    # The index of the first message (String keys) without a content that is not an
    # assistant's tool calls, or nil: what a template that fails on a conversation most
    # likely failed on.
    def missing_content(messages)
      messages.index do |m|
        m["content"].nil? && !(m["role"] == "assistant" && m["tool_calls"].is_a?(Array))
      end
    end

    def role(role)
      role = role.to_s if role.is_a?(Symbol)
      role = Options.text("message role", role)
      return role if ROLES.include?(role)

      raise ArgumentError, "unknown message role #{role.inspect} (known: #{ROLES.join(", ")})"
    end

    # A content String, or an Array of parts as `{ "type" => "text", "text" => ... }`: text
    # parts (`{ type: "text", text: "..." }` or Strings, as OpenAI's API and ruby_llm take
    # them), and image parts (see {.image}) as {Images::MARKER}, where the projector lays
    # out the image (llama.cpp's server does the same before templating).
    def content(value)
      return Options.text("message content", value) unless value.is_a?(Array)

      value.map { |part| { "type" => "text", "text" => Options.text("message content", part_text(part)) } }
    end

    # Template variables from keywords: `tools`, `documents`, `enable_thinking`, ...
    def variables(variables)
      tools(variables[:tools]) unless variables[:tools].nil?
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

    # The images of the messages' content parts, in order, as {Images.read} takes them.
    # @return [Array]
    def images(list)
      return [] unless list.is_a?(Array)

      list.flat_map do |message|
        parts = message.is_a?(Hash) && (message[:content] || message["content"])
        parts.is_a?(Array) ? parts.filter_map { |part| image(part) } : []
      end
    end

    # An image part's image, nil for another part: `{ type: "image", image: path, bytes or IO }`,
    # or OpenAI's `{ type: "image_url", image_url: { url: "data:image/png;base64,..." } }` (a
    # data URI only: elelem fetches nothing).
    def image(part)
      return nil unless part.is_a?(Hash)

      case (part[:type] || part["type"]).to_s
      when "image" then part[:image] || part["image"]
      when "image_url" then data_uri(part[:image_url] || part["image_url"])
      end
    end

    def data_uri(image_url)
      url = image_url.is_a?(Hash) ? image_url[:url] || image_url["url"] : image_url
      return url if url.is_a?(String) && url.start_with?("data:")

      raise ImageError, "an image_url must be a data URI (data:image/png;base64,...): elelem fetches no URL, " \
                        "got #{url.inspect[0, 60]}"
    end

    # A content part's text: its own, or the media marker where it is an image or audio.
    # @param part [String, Hash] a content part
    # @return [String]
    # @raise [ArgumentError] for a part that is neither text nor an image nor audio
    def part_text(part)
      return part if part.is_a?(String)
      return Images::MARKER if medium?(part)

      type = part.is_a?(Hash) && (part[:type] || part["type"]).to_s
      return part[:text] || part["text"] if type == "text"

      raise unsupported_part(type, part)
    end

    # Whether a part is an image or audio ({Audio::PARTS}).
    def medium?(part) = !image(part).nil? || Audio::PARTS.include?(part_type(part))

    # A part's type, a String ("" for a part that is no Hash).
    def part_type(part) = part.is_a?(Hash) ? (part[:type] || part["type"]).to_s : ""

    # The error for a content part elelem does not read: audio by name, others by what it reads.
    # @param type [String] the part's type
    # @param part [Object] the part
    # @return [ArgumentError]
    def unsupported_part(type, part)
      if AUDIO_PARTS.include?(type)
        return AudioError.new("audio content parts (#{type}) are not supported: elelem fetches no URL " \
                              "(send input_audio, base64 WAV or MP3)")
      end

      ArgumentError.new("message content parts must be text (a String or { type: \"text\", text: ... }), " \
                        "images ({ type: \"image\", image: ... } or { type: \"image_url\", ... }) or audio " \
                        "(input_audio, audio), got #{part.inspect[0, 60]}")
    end
  end
end
