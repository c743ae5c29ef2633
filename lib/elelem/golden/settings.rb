# frozen_string_literal: true

module Elelem
  class Golden
    # How a golden file's model was opened, as {Model#info} reports it: what its recordings
    # hold for, settled by the first one and checked before every use.
    module Settings
      # The settings and their values when a file leaves them out.
      DEFAULTS = { "n_ctx" => nil, "n_threads" => nil, "parallel" => nil, "flash_attn" => true, "cache_type_k" => "f16",
                   "cache_type_v" => "f16", "rpc_workers" => 0, "n_gpu_layers" => nil, "kv_offload" => true,
                   "main_gpu" => nil, "gpu" => nil }.freeze

      module_function

      # The settings of the model `info` describes. One sequence is no setting (a file with none
      # holds for any); a model without a KV cache (an encoder) reports no cache types: F16's
      # settings do; layers on devices count only with devices (RPC workers', or this machine's
      # GPUs, which `gpu` names, as `"Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)"`: a GPU's bits are its own).
      # @return [Hash{String => Object}]
      def of(info)
        rpc = info.fetch(:rpc, [])
        gpu = gpu(info)
        { "n_ctx" => info[:n_ctx], "n_threads" => info[:n_threads], "parallel" => (if info[:parallel].to_i > 1
                                                                                     info[:parallel]
                                                                                   end),
          "flash_attn" => info.fetch(:flash_attn, true), "cache_type_k" => (info[:cache_type_k] || :f16).to_s,
          "cache_type_v" => (info[:cache_type_v] || :f16).to_s, "rpc_workers" => rpc.size,
          "n_gpu_layers" => (info[:n_gpu_layers] unless rpc.empty? && gpu.nil?),
          "kv_offload" => info.fetch(:kv_offload, true), "main_gpu" => info[:main_gpu], "gpu" => gpu }
      end

      # This machine's GPUs that hold layers of the model `info` describes, as
      # `"Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)"`; nil: none (RPC workers' devices are not).
      # @return [String, nil]
      def gpu(info)
        gpus = info.fetch(:devices, []).reject { |d| d[:name].start_with?("RPC") }
        gpus.map { |d| "#{d[:name]}: #{d[:description]}" }.join(", ") unless gpus.empty?
      end

      # Writes into `doc` the settings of `info` that differ from the defaults.
      def settle(doc, info)
        of(info).each { |key, value| doc[key] = value unless value.nil? || value == DEFAULTS[key] }
      end

      # @raise [Elelem::Error] when `info`'s model was opened otherwise than `doc` says
      def check(doc, info, path)
        actual = of(info)
        DEFAULTS.each do |key, default|
          expected = doc.fetch(key, default)
          # A file recorded without a GPU holds only without one.
          next if (expected.nil? && key != "gpu") || expected == actual[key]

          hint = key == "gpu" ? "see GGML_VK_VISIBLE_DEVICES and n_gpu_layers" : "open it with #{key}: #{expected}"
          raise Error, "#{path} was recorded with #{key} #{expected.inspect}; it has #{actual[key].inspect} (#{hint})"
        end
      end
    end
  end
end
