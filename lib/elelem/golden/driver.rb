# frozen_string_literal: true

module Elelem
  class Golden
    # The reference driver (tools/reference, llama.cpp built like this build) answering
    # a golden case: llama.cpp's greedy ids.
    class Driver
      # @param path [String] the `elelem-reference` executable
      def initialize(path)
        @path = path
      end

      # What llama.cpp decodes for `kase` on the model `info` describes.
      # @param info [Hash] {Model#info} of the model opened as the golden file says
      # @param kase [Hash] a case of a golden file
      # @return [Hash] `"ids"`, and for one sequence `"text"` (when it is UTF-8) and each
      #   step's top-two logit `"margins"`; for a lockstep case, `"ids"` per sequence; for a
      #   continued case, per turn
      def output(info, kase)
        @flash_attn = info.fetch(:flash_attn, true)
        @cache_types = info.values_at(:cache_type_k, :cache_type_v).map { |t| (t || :f16).to_s }
        @offload = offload(info)
        ignore_eos = kase["ignore_eos"] ? 1 : 0
        if kase["prompts"]
          return lockstep(info[:path], kase["prompts"], kase["max_tokens"], info.values_at(:n_ctx, :n_threads),
                          ignore_eos)
        end
        return continued(info[:path], kase, info.values_at(:n_ctx, :n_threads), ignore_eos) if kase["continuation"]

        generate(info[:path], kase["prompt"].join(","), kase["max_tokens"], *info.values_at(:n_ctx, :n_threads),
                 ignore_eos)
      end

      private

      # The driver prints the ids, the hex of their text, and each step's top-two margin.
      def generate(*args)
        out = run("generate", *args)
        ids, hex, margins = out.lines.map(&:strip)
        { "ids" => ids.split.map(&:to_i), "text" => utf8([hex].pack("H*")), "margins" => margins.split.map(&:to_f) }
          .compact
      end

      # A line of ids per sequence.
      def lockstep(model, prompts, max_tokens, (n_ctx, n_threads), ignore_eos)
        out = run("lockstep", model, max_tokens, n_ctx, n_threads, ignore_eos, *prompts.map { |ids| ids.join(",") })
        { "ids" => out.lines.map { |line| line.split.map(&:to_i) } }
      end

      # A line of ids per turn.
      def continued(model, kase, (n_ctx, n_threads), ignore_eos)
        out = run("continue", model, kase["max_tokens"], n_ctx, n_threads, ignore_eos, kase["prompt"].join(","),
                  kase["continuation"].join(","))
        { "ids" => out.lines.map { |line| line.split.map(&:to_i) } }
      end

      # llama.cpp's `-fa` in the model's mode (its default, auto, is on for the CPU), its
      # `-ctk` / `-ctv` with the model's KV cache types (its default f16), and `--rpc` / `-ngl`
      # over the model's RPC workers with its offloaded layers. In a build with CPU
      # variants the driver (then llama.cpp's release-style build) loads the variant elelem runs.
      def run(*args)
        args += ["-fa", "off"] unless @flash_attn
        args += ["-ctk", @cache_types[0], "-ctv", @cache_types[1]] unless @cache_types == %w[f16 f16]
        args += @offload
        variant = Elelem.build_profile[:variant]
        env = variant ? { "ELELEM_CPU_VARIANT" => variant } : {}
        out, err, status = Open3.capture3(env, @path, *args.map(&:to_s))
        raise Error, "the reference driver failed (#{status}): #{err.lines.last(3).join}" unless status.success?

        out
      end

      # llama.cpp's `--rpc` and `-ngl` for a model over RPC workers (`-ngl` alone for one on
      # this machine's GPUs), `-nkvo` for its caches on
      # the CPU, `-sm none -mg` for every layer on one device.
      def offload(info)
        rpc = info.fetch(:rpc, [])
        return [] if rpc.empty? && Settings.gpu(info).nil?

        # Without --rpc, llama.cpp's default devices: this machine's GPUs (the Vulkan build's).
        flags = [*(["--rpc", rpc.join(",")] unless rpc.empty?), "-ngl", info[:n_gpu_layers]]
        flags << "-nkvo" unless info.fetch(:kv_offload, true)
        flags += ["-sm", "none", "-mg", info[:main_gpu]] if info[:main_gpu]
        flags
      end

      # A synthetic vocabulary's pieces need not be UTF-8: such text is left out.
      def utf8(bytes)
        text = bytes.force_encoding(Encoding::UTF_8)
        text if text.valid_encoding?
      end
    end
  end
end
