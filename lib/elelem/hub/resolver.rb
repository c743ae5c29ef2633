# frozen_string_literal: true

module Elelem
  module Hub
    # Turns a {Reference} into files in the cache: asks the Hub which commit `main` is and
    # which files it holds, picks the GGUF (by {Choice}), and downloads its parts that are not
    # cached yet. Offline (`HF_HUB_OFFLINE`), or when the Hub cannot be reached, it picks from
    # the snapshot the cache's `refs/main` names instead, as huggingface_hub and llama.cpp do.
    class Resolver
      # @param out [IO, nil] where notes and progress go
      def initialize(out)
        @out = out
        @cache = Cache.new(Hub.cache_dir)
        @client = Client.new(Hub.endpoint, Hub.token)
      end

      # Every part of the model the reference names, downloaded where missing.
      # @param ref [Reference]
      # @return [Array<String>] the snapshot paths, in part order
      def pull(ref)
        fetch(ref, *plan(ref))
      end

      # The one file to load; a multi-part GGUF is refused before anything downloads, since
      # elelem's loader reads one-file GGUFs only.
      # @param ref [Reference]
      # @return [String] the snapshot path
      # @raise [Elelem::HubError] a multi-part GGUF
      def path(ref)
        commit, files, online = plan(ref)
        if files.size > 1
          raise HubError, "#{ref}: #{files.first} is a GGUF in #{files.size} parts, and elelem loads one-file " \
                          "GGUFs only; `elelem pull #{ref}` downloads the parts, llama.cpp's `llama-gguf-split " \
                          "--merge #{File.basename(files.first)} merged.gguf` joins them into one that opens"
        end
        fetch(ref, commit, files, online).first
      end

      private

      # The commit, the files to fetch, and whether the Hub answered.
      def plan(ref)
        return cached_plan(ref, "HF_HUB_OFFLINE is set") if Hub.offline?

        info = @client.revision_info(ref.repo, REVISION)
        commit = info["sha"].to_s
        unless commit.match?(Cache::COMMIT)
          raise HubError, "#{ref.repo}: the Hub's commit #{commit.inspect} is not a hash"
        end

        names = Array(info["siblings"]).map { |s| s["rfilename"] }
        [commit, Choice.parts(choose(ref, names, HubNotFoundError)), true]
      rescue Client::Unreachable => e
        plan = cached_plan(ref, e.message)
        @out&.puts "elelem: #{e.message}; using the cached #{plan.first[0, 12]}"
        plan
      end

      def cached_plan(ref, reason)
        commit = @cache.commit(ref.repo, REVISION)
        raise HubOfflineError, "#{ref}: #{reason}, and #{ref.repo} is not in the cache (#{@cache.root})" unless commit

        [commit, Choice.parts(choose(ref, @cache.files(ref.repo, commit), HubOfflineError, reason)), false]
      end

      def choose(ref, names, error, reason = nil)
        where = reason ? "#{reason}, and the cached #{ref.repo}" : ref.repo
        if ref.file
          return ref.file if names.include?(ref.file)

          raise error, "#{where} has no file #{ref.file}#{listing(names)}"
        end
        Choice.best(names, ref.tag) ||
          raise(error, "#{where} has no GGUF model#{" tagged #{ref.tag}" if ref.tag}#{listing(names)}")
      end

      def listing(names)
        ggufs = names.select { |n| Choice.model?(n) }
        ggufs.empty? ? "" : " (its GGUF files: #{ggufs.join(", ")})"
      end

      def fetch(ref, commit, files, online)
        unless online
          missing = files.reject { |f| File.exist?(@cache.snapshot_path(ref.repo, commit, f)) }
          raise HubOfflineError, "#{ref}: not in the cache (#{@cache.root}): #{missing.join(", ")}" if missing.any?

          return files.map { |f| @cache.snapshot_path(ref.repo, commit, f) }
        end
        download = Download.new(@client, @cache, @out)
        files.map { |f| download.call(ref.repo, commit, f) }.tap { @cache.save_ref(ref.repo, REVISION, commit) }
      end
    end
  end
end
