# frozen_string_literal: true

require "json"
require "open3"
require_relative "reference"
require_relative "vulkan"
require_relative "bench_architectures"

# `rake bench`'s lavapipe rows: a model of LFM2-350M's shape (BenchArchitectures' random Q4_K
# weights), every layer on Mesa's lavapipe through ggml-vulkan (llama.cpp's default, elelem's
# `n_gpu_layers: nil`), elelem beside llama.cpp's Vulkan build (Reference.build_vulkan) on the
# same device. lavapipe is Mesa's CPU rasterizer, a Vulkan device whose shaders run on this
# machine's cores: these figures compare the two engines' use of ggml-vulkan (the graphs, the
# buffers, the copies between host and device), and say nothing of a GPU's speed. Only in a
# build with Vulkan, on a machine with lavapipe; measured in a process of its own, the only one
# that makes lavapipe visible (GGML_VK_VISIBLE_DEVICES=0), so that the other rows stay on the CPU.
module BenchVulkan
  MODEL = "bench-lfm2-350m"
  PP = 64
  TG = 16
  N_CTX = 2048
  LABEL = "every layer on lavapipe (Mesa's CPU rasterizer, not a GPU)"

  module_function

  def enabled?
    ENV.fetch("BENCH_VULKAN", "1") == "1" && Elelem.system_info.include?("VULKAN=on") && !VulkanBuild.lavapipe.nil?
  end

  def rows(threads)
    BenchArchitectures.write_models
    binary = Reference.build_vulkan
    code = "require 'elelem'; require './tasks/bench'; puts JSON.generate(BenchVulkan.measure(#{threads}))"
    out, err, status = Open3.capture3({ "GGML_VK_VISIBLE_DEVICES" => "0", "ELELEM_REFERENCE" => binary },
                                      RbConfig.ruby, "-I", File.join(Reference::ROOT, "lib"), "-e", code,
                                      chdir: Reference::ROOT)
    raise "the lavapipe rows failed (#{status}): #{err.lines.last(5).join}" unless status.success?

    JSON.parse(out.lines.last)
  end

  # In the process that sees lavapipe (Reference.binary is the Vulkan build there).
  def measure(threads)
    path = File.join(BenchArchitectures::DIR, "#{MODEL}.gguf")
    turns = Elelem.open(path, n_ctx: N_CTX, n_threads: threads) do |model|
      raise "#{MODEL}: not all on lavapipe (#{model.info[:devices].inspect})" unless on_lavapipe?(model.info)

      Bench::Peer.open(path, threads, N_CTX) do |peer|
        ours = Elelem::Bench.new(model)
        [ours, peer].each { |side| side.prompt_rate(16) && side.decode_rate(4) } # warm-up: pipelines compiled
        Array.new(Bench.reps) { [speed(ours), speed(peer)] }
      end
    end
    BenchRpc.setup_rows(LABEL, turns, [ours_memory(path), peer_memory(path)], tokens: { "pp" => PP, "tg" => TG })
            .map { |r| r.merge("model" => MODEL, "threads" => threads) }
  end

  def on_lavapipe?(info)
    info[:devices].any? { |d| d[:description].to_s.include?("llvmpipe") } &&
      info[:n_gpu_layers] == info[:n_layer] + 1
  end

  def speed(side) = { "pp" => side.prompt_rate(PP), "tg" => side.decode_rate(TG) }

  # Host and device memory, MiB, after a pass: ours from Model#stats.
  def ours_memory(path)
    mib = Elelem.open(path, n_ctx: N_CTX) do |model|
      model.generate([1, 2, 3], max_tokens: 2)
      model.stats[:backends].partition { |b| b[:name] == "CPU" }.map do |rows|
        rows.sum { |b| b[:weights_bytes] + b[:cache_bytes] + b[:compute_buffer_bytes] } / 1_048_576.0
      end
    end
    %w[host devices].zip(mib).to_h
  end

  # llama.cpp's, from its log (its `Vulkan_Host` buffers are host memory).
  def peer_memory(path)
    log, status = Open3.capture2e({ "ELELEM_REFERENCE_VERBOSE" => "1" }, Reference.binary, "generate", path, "1,2,3",
                                  "2", N_CTX.to_s, "2")
    raise "reference generate failed: #{log[-500..]}" unless status.success?

    sizes = log.scan(/(\S+)\s+(?:model|KV|RS|compute|output) buffer size =\s*([\d.]+) MiB/)
    devices, host = sizes.partition { |buffer, _| buffer.match?(/\AVulkan\d/) }
    { "host" => host.sum { |_, mib| mib.to_f }, "devices" => devices.sum { |_, mib| mib.to_f } }
  end
end
