# frozen_string_literal: true

require "json"
require "net/http"
require "openssl"
require "uri"

module Elelem
  module Hub
    # The Hub's HTTP routes that a download needs, as huggingface_hub calls them: a revision's
    # commit and files (`GET /api/models/{repo}/revision/{rev}`), a file's metadata
    # (`HEAD /{repo}/resolve/{rev}/{file}`: `X-Repo-Commit`, `X-Linked-Etag` / `ETag`,
    # `X-Linked-Size`, and a redirect to the CDN for LFS files), and its bytes (a `GET`, from
    # an offset with `Range`). The token goes to the Hub's own host only, never to the CDN.
    class Client
      # What a file's `HEAD` says: the commit, the etag (sha256 of an LFS file, git sha1 of
      # another, unquoted), the size in bytes, and the URL its bytes come from.
      Metadata = Struct.new(:commit, :etag, :bytes, :url, keyword_init: true)

      # The network failures that leave the cache as the only source (huggingface_hub's list:
      # no connection, a timeout, a broken TLS handshake).
      UNREACHABLE = [SocketError, SystemCallError, IOError, Timeout::Error, Net::OpenTimeout, Net::ReadTimeout,
                     Net::HTTPBadResponse, OpenSSL::SSL::SSLError].freeze
      # Seconds to wait for a connection and then for each read.
      TIMEOUTS = { open_timeout: 10, read_timeout: 60 }.freeze
      # How many same-host redirects a request follows (a renamed repository redirects once).
      MAX_REDIRECTS = 5

      # Raised when the Hub cannot be reached; the caller falls back to the cache.
      class Unreachable < HubOfflineError; end

      # @param endpoint [String] the Hub's base URL (`HF_ENDPOINT`)
      # @param token [String, nil] a token sent as `Authorization: Bearer` to the Hub's host
      def initialize(endpoint, token)
        @endpoint = URI(endpoint.chomp("/"))
        @token = token
      end

      # @param repo [String]
      # @param revision [String] a branch, tag or commit
      # @return [Hash] the Hub's JSON: `sha` (the commit) and `siblings` (`rfilename` of each file)
      # @raise [Elelem::HubError] the repository or revision does not exist, or cannot be read
      def revision_info(repo, revision)
        url = hub_url("api/models/#{repo}/revision/#{escape(revision)}")
        response = request(Net::HTTP::Get, url, repo:)
        JSON.parse(response.body)
      rescue JSON::ParserError => e
        raise HubError, "#{url}: not the Hub's JSON (#{e.message[0, 80]}); is HF_ENDPOINT a Hugging Face Hub?"
      end

      # The metadata of one file, from `HEAD`: a redirect to another host is not followed (the
      # headers are on the redirect itself), one to the same host is.
      # @return [Metadata]
      # @raise [Elelem::HubError] no such file, or a gated repository without access
      def metadata(repo, revision, file)
        url = hub_url("#{repo}/resolve/#{escape(revision)}/#{file.split("/").map { |p| escape(p) }.join("/")}")
        response = request(Net::HTTP::Head, url, repo:, file:, "Accept-Encoding" => "identity")
        etag = etag(response)
        unless response["x-repo-commit"] && etag
          raise HubError, "#{url}: no X-Repo-Commit or ETag header; is HF_ENDPOINT a Hugging Face Hub?"
        end

        Metadata.new(commit: response["x-repo-commit"], etag:, bytes: size(response),
                     url: response["location"] ? url + response["location"] : url)
      end

      # Streams the bytes of `url` from byte `offset` on, yielding each chunk.
      # @param url [URI::HTTP]
      # @param offset [Integer] bytes already held (sent as `Range: bytes=offset-`)
      # @yieldparam chunk [String, nil] nil first when the server ignored the range and sends
      #   the whole file: what is held must then be dropped
      # @return [void]
      # @raise [Elelem::HubError] an HTTP error
      # @raise [Unreachable] the connection failed or broke off (the caller resumes)
      def download(url, offset, &)
        headers = { "Accept-Encoding" => "identity" }
        headers["Range"] = "bytes=#{offset}-" if offset.positive?
        connect(url) do |http|
          http.request(Net::HTTP::Get.new(url, auth(url).merge(headers))) do |response|
            unless response.code.start_with?("2")
              raise HubError, "GET #{url.path}: #{response.code} #{response.message}"
            end

            yield nil if offset.positive? && response.code == "200"
            body(response, &)
          end
        end
      end

      private

      # The file's etag, unquoted: `X-Linked-Etag` (an LFS file's sha256), else `ETag`.
      def etag(response)
        (response["x-linked-etag"] || response["etag"])&.delete_prefix("W/")&.delete('"')
      end

      # The file's size: `X-Linked-Size` (an LFS file's), else the length of a body that is the file.
      def size(response)
        bytes = response["x-linked-size"] || (response["content-length"] unless response.code.start_with?("3"))
        bytes&.to_i
      end

      # Yields the body's chunks; one shorter than its Content-Length is a broken connection
      # (Net::HTTP itself lets such a body end quietly).
      def body(response)
        received = 0
        response.read_body do |chunk|
          received += chunk.bytesize
          yield chunk
        end
        expected = response["content-length"]&.to_i
        return unless expected && received < expected

        raise Unreachable, "the connection broke off after #{received} of #{expected} bytes"
      end

      def hub_url(path)
        URI("#{@endpoint}/#{path}")
      end

      def escape(part)
        URI.encode_www_form_component(part).gsub("+", "%20")
      end

      # The Authorization header for a URL on the Hub's own host (scheme, host and port).
      def auth(url)
        same = [url.scheme, url.host, url.port] == [@endpoint.scheme, @endpoint.host, @endpoint.port]
        @token && same ? { "Authorization" => "Bearer #{@token}" } : {}
      end

      def connect(url, &)
        Net::HTTP.start(url.host, url.port, use_ssl: url.scheme == "https", **TIMEOUTS, &)
      rescue *UNREACHABLE => e
        raise Unreachable, "could not reach #{url.scheme}://#{url.host}:#{url.port} (#{e.class}: #{e.message})"
      end

      # A request to the Hub's host, following same-host redirects; an error status raises.
      def request(type, url, repo:, file: nil, **headers)
        MAX_REDIRECTS.times do
          response = connect(url) { |http| http.request(type.new(url, auth(url).merge(headers))) }
          Status.raise_for(response, url, repo:, file:, token: !@token.nil?) unless %w[2 3].include?(response.code[0])
          target = response["location"] && (url + response["location"])
          return response unless target && [target.host, target.port] == [url.host, url.port]

          url = target
        end
        raise HubError, "#{url}: more than #{MAX_REDIRECTS} redirects"
      end
    end
  end
end
