# frozen_string_literal: true

require "digest"
require "json"
require "socket"
require "uri"

# A local stand-in for the Hugging Face Hub (the real one is not reachable from the test
# machines), written from its documented behaviour and huggingface_hub's client code
# (file_download.py, utils/_http.py, hf_api.py of huggingface_hub 2.4.0), on plain TCPServers:
#
# - `GET /api/models/{repo}` and `/api/models/{repo}/revision/{rev}`: `id`, `sha` (the commit),
#   `gated`, `siblings` (`rfilename`; with `?blobs=true` also `size`, `blobId`, and `lfs`
#   with `sha256`, `size`, `pointerSize`);
# - `HEAD` and `GET /{repo}/resolve/{rev}/{file}`: an LFS file (a .gguf, unless told) answers
#   `302 Found` to the CDN with `X-Repo-Commit`, `X-Linked-Etag` (its sha256, quoted),
#   `X-Linked-Size`, the LFS pointer's `ETag` and `Location`; another file (README.md) answers
#   `200` with its git blob sha1 as `ETag`, and its bytes;
# - the CDN, a second listener (another origin, so the token must not follow the redirect):
#   `GET /cdn/{sha256}` with `Range: bytes=N-` (`206`, `Content-Range`), `416` past the end;
# - errors as the Hub gives them, with `X-Error-Code` / `X-Error-Message`: a missing repository
#   is `401 RepoNotFound` (`404` with a token), a missing revision `404 RevisionNotFound`, a
#   missing file `404 EntryNotFound` (with `X-Repo-Commit`), a gated repository's files `401
#   GatedRepo` without a token, and an unknown token `401 Invalid credentials in Authorization header`.
#
# Not covered: Xet storage (no `X-Xet-Hash`, so clients download over plain HTTP, as they do
# from any file the Hub serves without Xet), `/tree` listings, tags and other branches than
# `main`, private repositories, renamed-repository redirects, and rate limits.
#
# Tests can cut a CDN body after some bytes ({#cut}), serve other bytes than announced
# ({#corrupt}), and read every request received ({#requests}).
class FakeHub
  # The one token the hub accepts (huggingface_hub checks a token's shape: `hf_` and 34+ letters).
  TOKEN = "hf_elelemFakeHubToken0123456789abcdefgh"

  # One request as received: method, path, which listener (:hub or :cdn), and the headers named.
  Request = Struct.new(:verb, :path, :listener, :authorization, :range, keyword_init: true)

  attr_reader :endpoint

  # @param repos [Hash{String => Hash}] repository id => `files:` (name => a path, or
  #   `{ text: "..." }`, or `{ source: path, lfs: false }`) and `gated:` (true)
  def initialize(repos)
    @repos = repos.to_h do |id, spec|
      entries = spec.fetch(:files).map { |name, src| Entry.new(name, **(src.is_a?(Hash) ? src : { source: src })) }
      commit = Digest::SHA1.hexdigest(entries.map { |e| "#{e.name} #{e.sha256}" }.join("\n"))
      [id, { entries: entries.to_h { |e| [e.name, e] }, gated: spec.fetch(:gated, false), commit: }]
    end
    @requests = []
    @cuts = {}
    @corrupt = {}
    @lock = Mutex.new
    @hub = TCPServer.new("127.0.0.1", 0)
    @cdn = TCPServer.new("127.0.0.1", 0)
    @endpoint = "http://127.0.0.1:#{@hub.addr[1]}"
    @threads = [listen(@hub, :hub), listen(@cdn, :cdn)]
  end

  # @return [Array<Request>] what was received so far
  def requests
    @lock.synchronize { @requests.dup }
  end

  # Forgets the requests received so far.
  def clear
    @lock.synchronize { @requests.clear }
  end

  # @return [String] the commit `main` of a repository is at
  def commit(repo)
    @repos.fetch(repo)[:commit]
  end

  # @return [Entry]
  def entry(repo, file)
    @repos.fetch(repo)[:entries].fetch(file)
  end

  # The next `times` CDN bodies of this file stop after `after` bytes: the connection closes.
  def cut(repo, file, after:, times: 1)
    @lock.synchronize { @cuts[entry(repo, file).sha256] = [after, times] }
  end

  # The CDN serves this file with one byte changed (the Hub still announces the real sha256).
  def corrupt(repo, file)
    @lock.synchronize { @corrupt[entry(repo, file).sha256] = true }
  end

  # Serves every file as it is again.
  def stop_corrupting
    @lock.synchronize { @corrupt.clear }
  end

  def stop
    [@hub, @cdn].each(&:close)
    @threads.each(&:kill)
  end

  private

  def listen(server, listener)
    Thread.new do
      loop do
        socket = server.accept
        Thread.new(socket) { |s| serve(Exchange.new(s), listener) }
      rescue IOError, Errno::EBADF
        break
      end
    end
  end

  def serve(exchange, listener)
    return unless exchange.read

    record(Request.new(verb: exchange.verb, path: exchange.path, listener:, authorization: exchange["authorization"],
                       range: exchange["range"]))
    listener == :cdn ? cdn(exchange) : hub(exchange)
  rescue Errno::EPIPE, Errno::ECONNRESET, IOError
    nil
  ensure
    exchange.close
  end

  def record(request)
    @lock.synchronize { @requests << request }
  end

  def hub(exchange)
    case URI.decode_www_form_component(exchange.path)
    when %r{\A/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?\z}
      api(exchange, Regexp.last_match(1), Regexp.last_match(2) || "main")
    when %r{\A/([^/]+/[^/]+)/resolve/([^/]+)/(.+)\z}
      resolve(exchange, Regexp.last_match(1), Regexp.last_match(2), Regexp.last_match(3))
    else
      exchange.respond(404, { "Content-Type" => "application/json" }, JSON.generate(error: "Not Found"))
    end
  end

  # The repository, or an error answer (nil) for a bad token, a missing repository or revision.
  def find(exchange, id, revision)
    token = exchange["authorization"]&.delete_prefix("Bearer ")
    return exchange.error(401, nil, "Invalid credentials in Authorization header") if token && token != TOKEN

    repo = @repos[id]
    return exchange.error(token ? 404 : 401, "RepoNotFound", "Repository not found") unless repo
    return repo if ["main", repo[:commit]].include?(revision)

    exchange.error(404, "RevisionNotFound", "Invalid rev id: #{revision}")
  end

  def api(exchange, id, revision)
    repo = find(exchange, id, revision) or return
    blobs = exchange.query.include?("blobs=true")
    body = { _id: repo[:commit][0, 24], id:, modelId: id, author: id.split("/").first, sha: repo[:commit],
             lastModified: "2026-01-01T00:00:00.000Z", private: false, gated: repo[:gated] ? "auto" : false,
             disabled: false, tags: ["gguf"], siblings: repo[:entries].values.map { |e| e.sibling(blobs) } }
    exchange.respond(200, { "Content-Type" => "application/json; charset=utf-8" }, JSON.generate(body))
  end

  def resolve(exchange, id, revision, file)
    repo = find(exchange, id, revision) or return
    common = { "X-Repo-Commit" => repo[:commit], "Accept-Ranges" => "bytes" }
    if repo[:gated] && exchange["authorization"].nil?
      return exchange.error(401, "GatedRepo", "Access to model #{id} is restricted. You must have access to it and " \
                                              "be authenticated to access it. Please log in.")
    end
    entry = repo[:entries][file] or return exchange.error(404, "EntryNotFound", "Entry not found", common)
    return lfs_redirect(exchange, entry, common) if entry.lfs?

    exchange.respond(200, common.merge("ETag" => %("#{entry.git_sha1}"), "Content-Type" => "text/plain; charset=utf-8"),
                     entry)
  end

  def lfs_redirect(exchange, entry, common)
    location = "http://127.0.0.1:#{@cdn.addr[1]}/cdn/#{entry.sha256}?" \
               "filename=#{URI.encode_www_form_component(entry.name)}"
    exchange.respond(302, common.merge("Location" => location, "X-Linked-Size" => entry.size.to_s,
                                       "X-Linked-Etag" => %("#{entry.sha256}"), "ETag" => %("#{entry.git_sha1}"),
                                       "Content-Type" => "text/plain; charset=utf-8"),
                     "Found. Redirecting to #{location}")
  end

  def cdn(exchange)
    entry = @repos.values.flat_map { |r| r[:entries].values }.find { |e| exchange.path == "/cdn/#{e.sha256}" }
    entry ? object(exchange, entry) : exchange.respond(404, {}, "no such object")
  end

  # The bytes of a file from the start, or from where `Range: bytes=N-` says.
  def object(exchange, entry)
    from = exchange["range"].to_s[/\Abytes=(\d+)-\z/, 1].to_i
    return exchange.respond(416, { "Content-Range" => "bytes */#{entry.size}" }, "") if from >= entry.size

    partial = exchange["range"] ? { "Content-Range" => "bytes #{from}-#{entry.size - 1}/#{entry.size}" } : {}
    headers = { "Content-Length" => (entry.size - from).to_s, "Accept-Ranges" => "bytes",
                "ETag" => %("#{entry.sha256}"), "Content-Type" => "application/octet-stream" }
    exchange.head(partial.empty? ? 200 : 206, partial.merge(headers))
    send_body(exchange.socket, entry, from, entry.size - from) unless exchange.verb == "HEAD"
  end

  def send_body(socket, entry, from, length)
    after = take_cut(entry.sha256)
    if @corrupt[entry.sha256]
      middle = length / 2
      entry.copy(socket, from, middle)
      socket.write("\xFF".b)
      entry.copy(socket, from + middle + 1, length - middle - 1)
    else
      entry.copy(socket, from, after ? [after, length].min : length)
    end
  end

  def take_cut(sha)
    @lock.synchronize do
      after, times = @cuts[sha]
      return nil unless after&.positive? && times.positive?

      @cuts[sha] = [after, times - 1]
      after
    end
  end
end

# One HTTP/1.1 request on a connection of the fake hub, and its answer (the connection closes after it).
class FakeHub
  class Exchange
    REASONS = { 200 => "OK", 206 => "Partial Content", 302 => "Found", 401 => "Unauthorized", 404 => "Not Found",
                416 => "Range Not Satisfiable" }.freeze

    attr_reader :socket, :verb, :path, :query

    def initialize(socket)
      @socket = socket
      @headers = {}
    end

    # Reads the request line and headers; false when the client sent none.
    def read
      @verb, target, = @socket.gets&.split
      return false unless @verb

      @path, @query = target.split("?", 2)
      @query ||= ""
      while (line = @socket.gets) && line != "\r\n"
        name, value = line.split(":", 2)
        @headers[name.strip.downcase] = value.strip
      end
      true
    end

    def [](name)
      @headers[name]
    end

    # Status, headers and a body (a String or an Entry); a HEAD gets the same headers and no body.
    def respond(status, headers, body)
      length = body.is_a?(Entry) ? body.size : body.bytesize
      head(status, { "Content-Length" => length.to_s }.merge(headers))
      return if @verb == "HEAD"

      body.is_a?(Entry) ? body.copy(@socket, 0, body.size) : @socket.write(body)
    end

    # An error as the Hub sends it, with X-Error-Code and X-Error-Message; nil.
    def error(status, code, message, extra = {})
      headers = extra.merge("Content-Type" => "application/json; charset=utf-8", "X-Error-Message" => message)
      headers["X-Error-Code"] = code if code
      respond(status, headers, JSON.generate(error: message))
      nil
    end

    def head(status, headers)
      lines = headers.merge("Connection" => "close").map { |k, v| "#{k}: #{v}\r\n" }
      @socket.write("HTTP/1.1 #{status} #{REASONS.fetch(status)}\r\n#{lines.join}\r\n")
    end

    def close
      @socket.close unless @socket.closed?
    end
  end
end

class FakeHub
  # A file of a repository: its bytes come from `source` (a path) or `text`; stored with LFS unless `lfs: false`
  # (the default for text).
  class Entry
    attr_reader :name, :size, :sha256, :git_sha1, :pointer

    def initialize(name, source: nil, text: nil, lfs: text.nil?)
      @name = name
      @source = source
      @text = text
      @lfs = lfs
      bytes = text || File.binread(source)
      @size = bytes.bytesize
      @sha256 = Digest::SHA256.hexdigest(bytes)
      @pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:#{@sha256}\nsize #{@size}\n" if lfs?
      @git_sha1 = Digest::SHA1.hexdigest("blob #{(@pointer || bytes).bytesize}\0#{@pointer || bytes}")
    end

    def lfs?
      @lfs
    end

    # Writes `length` bytes from `offset` to `io`.
    def copy(io, offset, length)
      return io.write(@text.byteslice(offset, length)) if @text

      File.open(@source, "rb") { |f| IO.copy_stream(f, io, length, offset) }
    end

    def sibling(blobs)
      return { rfilename: name } unless blobs

      lfs = lfs? ? { lfs: { sha256:, size:, pointerSize: pointer.bytesize } } : {}
      { rfilename: name, size:, blobId: git_sha1, **lfs }
    end
  end
end
