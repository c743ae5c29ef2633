# frozen_string_literal: true

module Elelem
  class Server
    class ModelPool
      # What `elelem serve` reads to make a pool, as {ModelPool}'s own class methods: sizes
      # (`--memory-budget`), durations (`--ttl`, Ollama's `keep_alive`), the models of a
      # directory (`--models-dir`), and the default budget.
      module Setup
        # The units of a duration, as Go's `time.ParseDuration` (Ollama's `keep_alive`) reads them, in seconds.
        DURATION_UNITS = { "ns" => 1e-9, "us" => 1e-6, "µs" => 1e-6, "ms" => 1e-3, "s" => 1, "m" => 60,
                           "h" => 3600 }.freeze
        # One number and its unit of a duration.
        DURATION_PART = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/
        # A size: a number and an optional binary unit (`8G`, `512MiB`, `1.5g`, `1000000`).
        SIZE = /\A(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?\z/i

        # The memory budget unless told: {ModelPool::BUDGET_SHARE} of what Linux says is available now.
        # @return [Integer, nil] bytes; nil (no limit) where `/proc/meminfo` does not say
        def default_budget
          kib = File.read("/proc/meminfo")[/^MemAvailable:\s+(\d+) kB/, 1]
          kib && (kib.to_i * 1024 * ModelPool::BUDGET_SHARE).to_i
        rescue SystemCallError
          nil
        end

        # The memory an open model takes: its weights, KV cache, recurrent state and compute buffer.
        # @param model [Model]
        # @return [Integer] bytes
        def footprint(model)
          model.stats.values_at(:weights_bytes, :kv_cache_bytes, :recurrent_state_bytes, :compute_buffer_bytes)
               .compact.sum
        end

        # A size as people write it, in bytes: `8G`, `512M`, `1.5GiB`, `1000000` (binary units).
        # @param text [String]
        # @return [Integer]
        # @raise [ArgumentError] for anything else, or zero
        def bytes(text)
          match = SIZE.match(text.to_s.strip)
          bytes = match && (match[1].to_f * (1024**(" kmgt".index(match[2].to_s.downcase) || 0))).round
          return bytes if bytes&.positive?

          raise ArgumentError, "#{text.inspect[0, 40]} is not a size (a number of bytes, or with a unit: 512M, 8G)"
        end

        # A duration as Ollama's `keep_alive` takes it, in seconds: a number of seconds, or a Go
        # duration (`30s`, `5m`, `1h30m`); a negative one is {ModelPool::FOREVER}.
        # @param value [Numeric, String]
        # @return [Numeric]
        # @raise [ArgumentError] for anything else
        def seconds(value)
          seconds = value.is_a?(String) ? Float(value, exception: false) || go_duration(value) : value
          unless seconds.is_a?(Numeric) && seconds.real? && !seconds.to_f.nan?
            raise ArgumentError, "#{value.inspect[0, 40]} is not a duration (seconds, or with a unit: 30s, 5m, 1h; " \
                                 "negative: for ever)"
          end

          seconds.negative? ? ModelPool::FOREVER : seconds
        end

        # Every model in `dir`, named by its file's name without `.gguf`, as llama-server's
        # `--models-dir` names them; the parts of a multi-part GGUF (which elelem does not
        # load) and `mmproj` projectors are left out.
        # @param dir [String]
        # @return [Hash{String => String}] name => path
        # @raise [ArgumentError] when `dir` is not a directory or holds no model
        def directory(dir)
          raise ArgumentError, "#{dir}: not a directory" unless File.directory?(dir)

          models = Dir.children(dir).sort.filter_map do |file|
            path = File.join(dir, file)
            next unless file.end_with?(".gguf") && File.file?(path) && !companion?(file)

            [File.basename(file, ".gguf"), path]
          end
          raise ArgumentError, "#{dir}: no .gguf model in it" if models.empty?

          models.to_h
        end

        private

        # A part of a multi-part GGUF (which elelem does not load), or a projector (`mmproj`).
        def companion?(file)
          file.start_with?("mmproj") || file.match?(Hub::Choice::SPLIT)
        end

        # Go's `time.ParseDuration` (`-1.5h`, `1h30m`, `300ms`); nil for anything else.
        def go_duration(text)
          sign, parts = text.match(/\A([+-]?)((?:#{DURATION_PART})+)\z/o)&.captures
          return nil unless parts

          seconds = parts.scan(DURATION_PART).sum { |number, unit| number.to_f * DURATION_UNITS.fetch(unit) }
          sign == "-" ? -seconds : seconds
        end
      end
    end
  end
end
