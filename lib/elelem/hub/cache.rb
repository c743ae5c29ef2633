# frozen_string_literal: true

require "fileutils"
require "pathname"
require "securerandom"

module Elelem
  module Hub
    # The Hugging Face Hub's cache, laid out as huggingface_hub lays it out
    # (https://huggingface.co/docs/huggingface_hub/guides/manage-cache), so that each
    # finds the files the other downloaded:
    #
    #   models--org--repo/
    #     refs/main                      the commit `main` pointed to when last asked
    #     blobs/<etag>                   the file's bytes, named by its sha256 (LFS) or git sha1
    #     blobs/<etag>.incomplete        a download in progress, resumed from where it stopped
    #     snapshots/<commit>/<file>      a relative symlink to the blob
    #   .locks/models--org--repo/<etag>.lock   held while a blob downloads
    class Cache
      # A full commit hash (a revision that is one names itself, with no ref to look up).
      COMMIT = /\A\h{40}\z/

      # @return [String] the cache's folder
      attr_reader :root

      # @param root [String] the cache's folder (see {Hub.cache_dir})
      def initialize(root)
        @root = root
      end

      # @param repo [String] `org/name`
      # @return [String] the repository's folder, `models--org--name`
      def repo_dir(repo)
        File.join(root, folder(repo))
      end

      # The commit a revision stands for, as the cache last recorded it.
      # @return [String, nil] nil when the cache has no such ref
      def commit(repo, revision)
        return revision if revision.match?(COMMIT)

        ref = File.join(repo_dir(repo), "refs", revision)
        commit = File.file?(ref) ? File.read(ref).strip : ""
        commit.match?(COMMIT) ? commit : nil
      end

      # Records that `revision` points to `commit` (atomically; unchanged refs are not rewritten,
      # so that a read-only cache that is current still works).
      # @return [void]
      def save_ref(repo, revision, commit)
        return if revision == commit || commit(repo, revision) == commit

        ref = File.join(repo_dir(repo), "refs", revision)
        FileUtils.mkdir_p(File.dirname(ref))
        temporary = "#{ref}.#{SecureRandom.hex(4)}.tmp"
        File.write(temporary, commit)
        File.rename(temporary, ref)
      end

      # @return [String] where `file` of `commit` is (or will be) in the snapshot
      def snapshot_path(repo, commit, file)
        File.join(repo_dir(repo), "snapshots", commit, file)
      end

      # @return [String] where the blob named `etag` is (or will be)
      def blob_path(repo, etag)
        File.join(repo_dir(repo), "blobs", etag)
      end

      # The files of a snapshot (paths relative to it, symlinks included).
      # @return [Array<String>] sorted; empty when the snapshot is not there
      def files(repo, commit)
        dir = File.join(repo_dir(repo), "snapshots", commit)
        Dir.glob("**/*", base: dir).select { |f| File.file?(File.join(dir, f)) }.sort
      end

      # Runs the block holding the lock huggingface_hub takes for the same blob (an flock on
      # `.locks/models--org--repo/<etag>.lock`), so that two downloads of it never interleave.
      # @return [Object] the block's value
      def lock(repo, etag)
        path = File.join(root, ".locks", folder(repo), "#{etag}.lock")
        FileUtils.mkdir_p(File.dirname(path))
        File.open(path, File::RDWR | File::CREAT, 0o644) do |f|
          f.flock(File::LOCK_EX)
          yield
        end
      end

      # Points the snapshot's `file` at its blob with a relative symlink, as huggingface_hub does.
      # @return [String] the snapshot path
      def link(repo, commit, file, etag)
        pointer = snapshot_path(repo, commit, file)
        FileUtils.mkdir_p(File.dirname(pointer))
        target = Pathname(blob_path(repo, etag)).relative_path_from(Pathname(File.dirname(pointer)))
        FileUtils.rm_f(pointer)
        File.symlink(target.to_s, pointer)
        pointer
      end

      private

      def folder(repo)
        "models--#{repo.gsub("/", "--")}"
      end
    end
  end
end
