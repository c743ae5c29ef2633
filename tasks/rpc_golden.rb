# frozen_string_literal: true

require_relative "reference"
require_relative "../spec/support/rpc_workers"

# Goldens of models spread over RPC workers on loopback (`elelem rpc-server` processes of
# this build): llama.cpp's driver with `--rpc` and `-ngl` over the same workers records the
# ids, elelem with `rpc:` and `n_gpu_layers:` must give them. Each setup has its own files in
# spec/fixtures/goldens/rpc/, `<setup>-<fixture>.json`, with the cases of the CPU fixture
# they mirror (its first case, for the real models, whose passes over loopback take longest).
module RpcGolden
  DIR = File.join(Reference::GOLDENS, "rpc")

  # Setup name => how many workers, which share of the layers (the output one counted) goes
  # to them (all, llama.cpp's default, or half, the rest on the CPU), and how Elelem.open is
  # told more: the KV caches kept on the client (`-nkvo`), every layer on the second
  # worker (`-sm none -mg 1`).
  SETUPS = {
    "rpc2" => { workers: 2, layers: :all },
    "rpc3" => { workers: 3, layers: :all },
    "rpc2-half" => { workers: 2, layers: :half },
    "rpc2-kv-host" => { workers: 2, layers: :all, open: { kv_offload: false } },
    "rpc2-main1" => { workers: 2, layers: :all, open: { split_mode: :none, main_gpu: 1 } }
  }.freeze

  # The CPU fixtures mirrored: dense, sliding-window and soft-capped, mixture of experts,
  # hybrid recurrent, and several sequences decoded together.
  FIXTURES = %w[qwen2.5-coder-0.5b gemma-3-270m tiny-qwen3 tiny-gemma2 tiny-qwen3moe tiny-lfm2
                lockstep-tiny-gemma2].freeze
  REAL = %w[qwen2.5-coder-0.5b gemma-3-270m].freeze

  # What Golden#record asks of a model it records the reference's ids for: its info.
  Opened = Struct.new(:info)

  module_function

  def fixture(setup, name) = File.join(DIR, "#{setup}-#{name}.json")

  def names = SETUPS.keys.product(FIXTURES)

  # Records every setup's files for this build profile (or, with `only_missing`, those that
  # lack a recording for it, into `cache`).
  def record_all(binary, cache: nil)
    SETUPS.each do |setup, spec|
      pending = FIXTURES.map { |name| [name, golden(setup, name, cache)] }
      pending.reject! { |_, g| g.recorded? } if cache
      next if pending.empty?

      RpcWorkers.with(spec[:workers]) do |endpoints|
        pending.each { |name, g| record(g, name, endpoints, spec, binary) }
      end
    end
  end

  def golden(setup, name, cache = nil)
    cases = Elelem::Golden.new(Goldens.fixture(name)).cases
    Goldens.copy_cases(Elelem::Golden.new(fixture(setup, name), cache:), REAL.include?(name) ? cases.first(1) : cases)
  end

  def record(golden, name, endpoints, setup, binary)
    path = Goldens.model_path(name)
    parallel = Goldens::LOCKSTEP.key?(name) ? Goldens::LOCKSTEP[name].last.size : 1
    n_gpu_layers = setup[:layers] == :half ? (block_count(path) + 1) / 2 : nil
    info = Elelem.open(path, n_ctx: Reference::N_CTX, n_threads: Reference::N_THREADS, parallel:, rpc: endpoints,
                             n_gpu_layers:, **setup.fetch(:open, {}), &:info)
    # Recorded once the model is closed: a worker serves one client at a time, so the
    # reference's connections wait until ours are gone.
    golden.record(Opened.new(info), reference: binary)
    puts "recorded #{File.basename(golden.path)} for build profile #{Elelem.build_profile[:id]}"
  end

  def block_count(path)
    Elelem.open(path, n_ctx: 64) { |model| model.info.fetch(:n_layer) }
  end
end
