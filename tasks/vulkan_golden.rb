# frozen_string_literal: true

require_relative "reference"
require_relative "vulkan"
require_relative "vulkan_modes"

# Goldens of tiny synthetic models offloaded to a Vulkan device, Mesa's lavapipe (a Vulkan
# device that runs on the CPU, so they are recorded and checked on machines without a GPU):
# llama.cpp built with GGML_VULKAN (Reference.build_vulkan), run with `-ngl` on the same
# device, records the ids; elelem built with Vulkan and opened with `n_gpu_layers:`
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
    raise "Mesa's lavapipe is not installed: run script/setup" unless VulkanBuild.lavapipe
    return if Elelem.system_info.include?("VULKAN=on (Vulkan0=llvmpipe")

    raise "this elelem does not see lavapipe (#{Elelem.system_info[/VULKAN=.*/]}): build it with Vulkan " \
          "(script/setup installs what it needs) and run this in a fresh process"
  end

  # Each setup's golden files, with the recordings of `cache` (a directory of this machine's,
  # Golden::CACHE_DIR) where given: `[golden, fixture, setup]`.
  def goldens(cache = nil)
    SETUPS.flat_map do |setup, spec|
      FIXTURES.map do |name|
        cases = Elelem::Golden.new(Goldens.fixture(name)).cases
        cases = cases.select { |c| ONLY_CASES[name].include?(c["name"]) } if ONLY_CASES.key?(name)
        [Goldens.copy_cases(Elelem::Golden.new(fixture(setup, name), cache:), cases), name, spec]
      end
    end
  end

  # Records every file that lacks this build profile's recording (into `cache`, where given).
  def record_all(binary, cache: nil)
    use_lavapipe!
    goldens(cache).each { |golden, name, spec| record(golden, name, spec, binary) unless golden.recorded? }
    VulkanModes.record_all(binary, cache:)
  end

  # `rake goldens`: in a build with Vulkan on a machine with lavapipe, records what this build
  # profile lacks from llama.cpp's Vulkan build (Reference.build_vulkan, built only then) into
  # `cache`, in a process of its own that sees lavapipe (ggml decides that once per process, and
  # in this one every model would go there).
  def ensure_recorded(cache)
    vulkan = Elelem.system_info[/VULKAN=.*/]
    return puts("goldens: no Vulkan goldens to check: #{vulkan}") unless vulkan.start_with?("VULKAN=on")
    return puts("goldens: no Vulkan goldens to check: Mesa's lavapipe is not installed") unless VulkanBuild.lavapipe

    code = "require 'elelem'; require './tasks/golden'; require './tasks/vulkan_golden'; " \
           "VulkanGolden.record_missing(ARGV[0])"
    system({ "GGML_VK_VISIBLE_DEVICES" => "0" }, RbConfig.ruby, "-I", File.join(Reference::ROOT, "lib"), "-e", code,
           cache, chdir: Reference::ROOT, exception: true)
  end

  # In a process that sees lavapipe: records into `cache` the files this build profile lacks.
  def record_missing(cache)
    use_lavapipe!
    profile = Elelem.build_profile[:id]
    if goldens(cache).all? { |golden, _, _| golden.recorded? } && !VulkanModes.missing?(cache)
      return puts("goldens: every Vulkan golden has a recording for build profile #{profile}")
    end

    puts "goldens: Vulkan goldens lack build profile #{profile}: recording on lavapipe from llama.cpp's Vulkan " \
         "build into #{cache}"
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    record_all(Reference.build_vulkan, cache:)
    puts format("goldens: Vulkan goldens recorded in %.0f s", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
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
