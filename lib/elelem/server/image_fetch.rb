# frozen_string_literal: true

require "net/http"
require "uri"
require_relative "http_error"

module Elelem
  class Server
    # `image_url` parts naming an `http(s)` URL, fetched by the server (`elelem serve
    # --allow-fetch`, `Server.new(allow_fetch: true)`) before the conversation is rendered, as
    # llama-server fetches them. Off by default: a server that fetches what its clients name
    # can be made to reach hosts only it can reach. Each fetch is bounded ({TIMEOUT},
    # {MAX_BYTES}, {MAX_REDIRECTS}); one that fails is a 400 naming the URL and why.
    module ImageFetch
      # Seconds a fetch may take in all, connecting and reading (llama-server's own is 10).
      TIMEOUT = 10
      # The largest image fetched: past it the transfer stops and the request is a 400.
      MAX_BYTES = 20 << 20
      # The redirects followed.
      MAX_REDIRECTS = 3

      module_function

      # The messages with each `image_url` part naming an `http(s)` URL replaced by an image
      # part holding the fetched bytes (`{"type" => "image", "image" => bytes}`); other parts,
      # data URIs included, as they are.
      # @param messages [Array<Hash>] a chat's checked messages (string keys, as parsed JSON)
      # @param allowed [Boolean] whether the server fetches URLs (`--allow-fetch`)
      # @return [Array<Hash>]
      # @raise [HTTPError] 400 when a URL cannot be fetched, or is not allowed
      def inline(messages, allowed:)
        messages.map do |message|
          content = message["content"]
          next message unless content.is_a?(Array) && content.any? { |part| url_of(part) }
          raise not_allowed unless allowed

          message.merge("content" => content.map { |part| fetched_part(part) })
        end
      end

      # An `image_url` part's URL when it is an http(s) one.
      def url_of(part)
        return nil unless part.is_a?(Hash) && part["type"] == "image_url"

        image_url = part["image_url"]
        url = image_url.is_a?(Hash) ? image_url["url"] : image_url
        url if url.is_a?(String) && url.match?(%r{\Ahttps?://}i)
      end

      # The part with its URL's image, or the part itself when it names none.
      def fetched_part(part)
        url = url_of(part) or return part

        deadline = now + TIMEOUT
        { "type" => "image", "image" => get(parse(url), deadline, MAX_REDIRECTS) }
      rescue HTTPError
        raise
      rescue StandardError => e # the network's: refused, reset, timed out, bad TLS, a bad redirect
        raise failed(url, "#{e.class.name.split("::").last}: #{e.message}")
      end

      def parse(url)
        uri = URI.parse(url)
        # `http:///x` has no host: nil up to Ruby 3.3, "" from 3.4 (its RFC 3986 parser), where
        # Net::HTTP would then connect to this machine.
        raise failed(url, "it is not an http(s) URL with a host") unless uri.is_a?(URI::HTTP) && !uri.host.to_s.empty?

        uri
      rescue URI::InvalidURIError => e
        raise failed(url, e.message)
      end

      # The body of a GET of `uri`, following redirects.
      def get(uri, deadline, redirects)
        location = nil
        body = request(uri, deadline) do |response|
          location = response["location"] if response.is_a?(Net::HTTPRedirection)
          next if location
          raise failed(uri, "it answered #{response.code} #{response.message}") unless response.is_a?(Net::HTTPOK)

          read(uri, response, deadline)
        end
        return body unless location
        raise failed(uri, "more than #{MAX_REDIRECTS} redirects") if redirects.zero?

        get(parse(uri.merge(location).to_s), deadline, redirects - 1)
      end

      def request(uri, deadline, &)
        timeout = [deadline - now, 0.1].max
        Net::HTTP.start(uri.host, uri.port, use_ssl: uri.scheme == "https", open_timeout: timeout,
                                            read_timeout: timeout, ssl_timeout: timeout) do |http|
          http.request(Net::HTTP::Get.new(uri, "accept" => "image/*")) { |response| return yield(response) }
        end
      end

      # The response's body, at most {MAX_BYTES}, read by {TIMEOUT} (a server that sends a
      # byte at a time is stopped too).
      def read(uri, response, deadline)
        too_large = failed(uri, "it is larger than #{MAX_BYTES >> 20} MiB")
        raise too_large if response["content-length"].to_i > MAX_BYTES

        body = String.new(encoding: Encoding::BINARY)
        response.read_body do |chunk|
          body << chunk
          raise too_large if body.bytesize > MAX_BYTES
          raise failed(uri, "it took more than #{TIMEOUT} s") if now > deadline
        end
        body
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end

      def not_allowed
        HTTPError.new(400, "this server fetches no image URL (start it with elelem serve --allow-fetch); send " \
                           "the image as a data URI (data:image/png;base64,...)",
                      param: "messages", code: "image_fetch_not_allowed")
      end

      def failed(url, why)
        HTTPError.new(400, "cannot fetch the image #{url.to_s[0, 200]}: #{why}", param: "messages",
                                                                                 code: "image_fetch_failed")
      end

      private_class_method :url_of, :fetched_part, :parse, :get, :request, :read, :now, :not_allowed, :failed
    end
  end
end
