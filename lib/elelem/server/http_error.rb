# frozen_string_literal: true

module Elelem
  class Server
    # A request the server answers with an error: its HTTP status and the fields of
    # OpenAI's error object (`{"error": {"message", "type", "param", "code"}}`).
    class HTTPError < Elelem::Error
      # OpenAI's error type for each status the server gives.
      TYPES = {
        400 => "invalid_request_error", 401 => "authentication_error", 404 => "not_found_error",
        405 => "invalid_request_error", 413 => "invalid_request_error", 500 => "server_error",
        501 => "not_supported_error", 503 => "server_error"
      }.freeze

      # @return [Integer] the HTTP status
      attr_reader :status
      # @return [String, nil] the request field at fault
      attr_reader :param
      # @return [String, nil] a machine-readable code (`context_length_exceeded`, ...)
      attr_reader :code
      # @return [Hash{String => String}] extra response headers (`allow`, `retry-after`, ...)
      attr_reader :headers

      # @param status [Integer] the HTTP status
      # @param message [String] what is wrong, for the client to read
      # @param param [String, nil] the request field at fault
      # @param code [String, nil] a machine-readable code
      # @param headers [Hash{String => String}] extra response headers
      def initialize(status, message, param: nil, code: nil, headers: {})
        super(message)
        @status = status
        @param = param
        @code = code
        @headers = headers
      end

      # @return [String] OpenAI's error type for the status
      def type
        TYPES.fetch(status, "invalid_request_error")
      end

      # @return [Hash] the error object, as the response body holds it (the message's
      #   bytes that are not UTF-8, a client's among them, replaced)
      def to_h
        { error: { message: message.dup.force_encoding(Encoding::UTF_8).scrub, type:, param:, code: } }
      end
    end
  end
end
