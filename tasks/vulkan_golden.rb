# frozen_string_literal: true

require_relative "reference"
require_relative "vulkan"
require_relative "vulkan_modes"

# Goldens of tiny synthetic models offloaded to a Vulkan device, Mesa's lavapipe (a Vulkan
# device that runs on the CPU, so they are recorded and checked on machines without a GPU):
# llama.cpp built with GGML_VULKAN (Reference.build_vulkan), run with `-ngl` on the same
# device, records the ids; elelem built with ELELEM_VULKAN=1 and opened with `n_gpu_layers:`
# must give them. ggml-vulkan uses lavapipe only when GGML_VK_VISIBLE_DEVICES names it, for
# both. Each setup has its files in spec/fixtures/goldens/vulkan/, `<setup>-<fixture>.json`,
# with the cases of the CPU fixture they mirror; each file names the device (its `gpu`), and
# holds only there. The other modes' files (lockstep, grammar, embeddings, speculative) are
# VulkanModes' (tasks/vulkan_modes.rb).
module VulkanGolden
  DIR = File.join(Reference::GOLDENS, "vulkan")

  # Setup name => which share of the layers (the output one counted) goes to the device (all,
  # or half, the rest on the CPU), and what else Elelem.open is told: the KV caches kept on
  # the host (llama.cpp's `-nkvo`).
  SETUPS = {
    "lavapipe" => { layers: :all },
    "lavapipe-half" => { layers: :half },
    "lavapipe-kv-host" => { layers: :all, open: { kv_offload: false } }
  }.freeze

  # Dense; sliding-window and soft-capped; mixture of experts.
  FIXTURES = %w[tiny-qwen3 tiny-gemma2 tiny-qwen3moe].freeze
  # The cases mirrored where not all: the experts model's 701-token prompt crashes Mesa 22.3.6's
  # lavapipe (SIGSEGV in libvulkan_lvp.so, under llama.cpp and elelem alike, every layer on it).
  ONLY_CASES = { "tiny-qwen3moe" => %w[short] }.freeze

  # What Golden#record asks of a model it records the reference's ids for: its info.
  Opened = Struct.new(:info)

  module_function

  def fixture(setup, name) = File.join(DIR, "#{setup}-#{name}.json")

  # Makes lavapipe visible to ggml-vulkan in this process (before ggml starts) and its children.
  def use_lavapipe!
    ENV["GGML_VK_VISIBLE_DEVICES"] = "0"
    raise "Mesa's lavapipe is not installed: run ELELEM_VULKAN=1 script/setup" unless VulkanBuild.lavapipe
    return if Elelem.system_info.include?("VULKAN=on (Vulkan0=llvmpipe")

    raise "this elelem does not see lavapipe (#{Elelem.system_info[/VULKAN=.*/]}): build it with ELELEM_VULKAN=1 " \
          "and run this in a fresh process"
  end

  # Records every setup's files that lack this build profile's recording.
  def record_all(binary)
    use_lavapipe!
    SETUPS.each do |setup, spec|
      FIXTURES.each do |name|
        cases = Elelem::Golden.new(Goldens.fixture(name)).cases
        cases = cases.select { |c| ONLY_CASES[name].include?(c["name"]) } if ONLY_CASES.key?(name)
        golden = Goldens.copy_cases(Elelem::Golden.new(fixture(setup, name)), cases)
        record(golden, name, spec, binary) unless golden.recorded?
      end
    end
    VulkanModes.record_all(binary)
  end

  def record(golden, name, setup, binary)
    path = Goldens.model_path(name)
    n_gpu_layers = setup[:layers] == :half ? (block_count(path) + 1) / 2 : nil
    info = Elelem.open(path, n_ctx: Reference::N_CTX, n_threads: Reference::N_THREADS, n_gpu_layers:,
                             **setup.fetch(:open, {}), &:info)
    raise "#{name}: nothing went to lavapipe (#{info[:devices].inspect})" if info[:devices].empty?

    golden.record(Opened.new(info), reference: binary)
    puts "recorded #{File.basename(golden.path)} for build profile #{Elelem.build_profile[:id]} " \
         "on #{info[:devices].first[:description]}"
  end

  def block_count(path)
    Elelem.open(path, n_ctx: 64, n_gpu_layers: 0) { |model| model.info.fetch(:n_layer) }
  end
end
