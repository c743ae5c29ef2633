# frozen_string_literal: true

require "digest"
require "fileutils"

module Elelem
  module Hub
    # Brings one file of a commit into the cache: its blob downloaded (resumed from a
    # `.incomplete` left behind, and across broken connections), checked against the etag
    # the Hub announced, then linked from the snapshot.
    class Download
      # Broken connections in a row, with no byte received between them, before giving up.
      MAX_FAILURES = 3
      # The etags the cache names blobs by: a sha256 (LFS) or a git sha1.
      ETAG = /\A\h{40}(?:\h{24})?\z/
      # Bytes read at a time while checking a file.
      CHUNK = 1 << 20

      # @param client [Client]
      # @param cache [Cache]
      # @param out [IO, nil] where progress goes
      def initialize(client, cache, out)
        @client = client
        @cache = cache
        @out = out
      end

      # @param repo [String]
      # @param commit [String] a full commit hash
      # @param file [String] a path in the repository
      # @return [String] the snapshot path, which is not fetched again when it exists
      # @raise [Elelem::HubError] an HTTP error, or the Hub unreachable
      # @raise [Elelem::HubIntegrityError] the bytes are not those announced
      def call(repo, commit, file)
        pointer = @cache.snapshot_path(repo, commit, file)
        return pointer if File.exist?(pointer)

        meta = @client.metadata(repo, commit, file)
        unless meta.etag.match?(ETAG)
          raise HubError, "#{repo}/#{file}: the Hub's etag #{meta.etag.inspect} is not a hash"
        end

        blob = @cache.blob_path(repo, meta.etag)
        @cache.lock(repo, meta.etag) do
          fetch(meta, blob, "#{repo}/#{file}") unless File.exist?(blob)
          @cache.link(repo, commit, file, meta.etag)
        end
      end

      private

      def fetch(meta, blob, label)
        partial = "#{blob}.incomplete"
        FileUtils.mkdir_p(File.dirname(blob))
        File.open(partial, "ab") do |f|
          f.truncate(0) if meta.bytes && f.size > meta.bytes
          progress = Progress.new(@out, label, meta.bytes, f.size)
          receive(meta, f, progress) unless meta.bytes == f.size
          progress.finish
        end
        verify(partial, meta, label)
        File.rename(partial, blob)
      end

      # Appends the rest of the file to `f`, resuming after each broken connection that brought
      # at least one byte (huggingface_hub's retry), up to {MAX_FAILURES} that brought none.
      def receive(meta, file, progress)
        failures = 0
        begin
          held = file.size
          @client.download(meta.url, held) { |chunk| append(file, chunk, progress) }
        rescue Client::Unreachable => e
          failures = file.size > held ? 0 : failures + 1
          if failures >= MAX_FAILURES
            raise HubOfflineError, "#{e.message}: the download stopped at #{file.size} of #{meta.bytes || "?"} " \
                                   "bytes; run again to resume it"
          end
          sleep(failures)
          retry
        end
      end

      # A chunk goes at the end; nil (the whole file is coming again) empties the file first.
      def append(file, chunk, progress)
        if chunk
          file.write(chunk)
          progress.advance(chunk.bytesize)
        else
          file.truncate(0)
          progress.restart
        end
      end

      # The file must have the announced size and hash to the etag: an LFS file's sha256, or
      # the git blob sha1 of any other.
      def verify(partial, meta, label)
        size = File.size(partial)
        lfs = meta.etag.size == 64
        digest = lfs ? Digest::SHA256.new : Digest::SHA1.new.update("blob #{size}\0")
        File.open(partial, "rb") { |f| digest.update(f.read(CHUNK)) until f.eof? }
        return if (meta.bytes.nil? || size == meta.bytes) && digest.hexdigest == meta.etag

        File.delete(partial)
        kind = lfs ? "sha256" : "git sha1"
        raise HubIntegrityError, "#{label}: the download (#{size} bytes, #{kind} #{digest.hexdigest}) is not the " \
                                 "file the Hub announced (#{meta.bytes} bytes, #{meta.etag}); deleted it"
      end
    end
  end
end
