# frozen_string_literal: true

require "json"

module Elelem
  class Golden
    # The recordings of a golden file kept in a cache of this machine's, taken into the file
    # ({Golden#adopt}): llama.cpp's only, made with the file's model, settings and cases, each
    # adding cases to what the file holds and changing none.
    class Adoption
      # @param path [String] the golden file (for messages)
      # @param doc [Hash] its contents, left as they are
      def initialize(path, doc)
        @path = path
        @doc = JSON.parse(JSON.generate(doc))
      end

      # Merges the cached recordings of the file (`<cache>/<profile>/<file name>`).
      # @param cache [String] the cache's directory
      # @param profiles [Regexp, nil] the build profiles to take (nil: all)
      # @yieldparam doc [Hash] the file's new contents, when something was added
      # @return [Hash{String => Array<String>}] by profile, the names of the cases added
      # @raise [Elelem::Error] as {Golden#adopt} says, before anything is yielded
      def run(cache, profiles)
        added = Dir[File.join(cache.to_s, "*", File.basename(@path))].filter_map do |file|
          id = File.basename(File.dirname(file))
          next unless profiles.nil? || profiles.match?(id)

          names = merge(id, file)
          [id, names] unless names.empty?
        end.to_h
        yield @doc unless added.empty?
        added
      end

      private

      # Merges profile `id`'s recording in the cached `file` into the file's.
      # @return [Array<String>] the names of the cases added
      def merge(id, file)
        cached = Document.read(file)
        rec = recording(cached, id, file)
        mine = @doc["recordings"][id]
        rec["outputs"].each do |name, output|
          check_case(cached, name, file)
          check_output(mine, name, output, file)
        end
        names = rec["outputs"].keys - (mine ? mine["outputs"].keys : [])
        return names if names.empty?

        mine ? extend_recording(mine, rec, names, file) : @doc["recordings"][id] = rec
        names
      end

      # The cached recording of profile `id`, if it is llama.cpp's and made with the file's model and settings.
      def recording(cached, id, file)
        rec = cached.dig("recordings", id) || raise(Error, "#{file} holds no recording of its profile #{id}")
        unless rec["recorder"].to_s.start_with?("llama.cpp")
          raise Error, "#{file} was recorded by #{rec["recorder"]}; goldens come only from llama.cpp"
        end

        unfit = (%w[format model] + Settings::DEFAULTS.keys).reject { |key| cached[key] == @doc[key] }
        raise Error, "#{file} was recorded with another #{unfit.join(", ")} than #{@path}" unless unfit.empty?

        rec
      end

      def check_case(cached, name, file)
        theirs, ours = [cached, @doc].map { |doc| doc["cases"].find { |c| c["name"] == name } }
        raise Error, "#{file}: case #{name.inspect} is not #{@path}'s (or not there)" unless ours && ours == theirs
      end

      def check_output(mine, name, output, file)
        known = mine&.dig("outputs", name)
        raise Error, "#{file} records case #{name.inspect} otherwise than #{@path}" unless known.nil? || known == output
      end

      # Adds cases to a recording the file has, from the same recorder on the same CPU (a
      # recording names one CPU).
      def extend_recording(mine, rec, names, file)
        unless mine.values_at("recorder", "cpu") == rec.values_at("recorder", "cpu")
          raise Error, "#{file} would add cases to #{@path}'s recording by #{mine["recorder"]} on #{mine["cpu"]}, " \
                       "but was recorded by #{rec["recorder"]} on #{rec["cpu"]}"
        end

        mine["outputs"].merge!(rec["outputs"].slice(*names))
        mine["recorded_at"] = [mine["recorded_at"], rec["recorded_at"]].compact.max
      end
    end
  end
end
