# frozen_string_literal: true

# Checks Vulkan golden files in a process of its own (spec/vulkan_spec.rb runs it), because
# ggml-vulkan decides once per process, when ggml starts, whether lavapipe is visible
# (GGML_VK_VISIBLE_DEVICES=0, which the spec sets for this process only: in the spec's own
# process every model would go to lavapipe). Prints a JSON line per case:
# `{"file", "case", "mismatch", "n_gpu_layers", "gpu"}`, `mismatch` nil when the ids are identical.
#
#   ruby spec/support/vulkan_check.rb GOLDEN_FILE...
require "json"
require "elelem"

SYNTHETIC = File.expand_path("../../tmp/synthetic", __dir__)

ARGV.each do |file|
  name = File.basename(file, ".json")
  model = File.join(SYNTHETIC, "#{name.sub(/\Alavapipe(-half|-kv-host)?-/, "")}.gguf")
  golden = Elelem::Golden.new(file, cache: Elelem::Golden::CACHE_DIR)
  options = { n_ctx: golden.n_ctx, n_threads: golden.n_threads, parallel: golden.parallel,
              n_gpu_layers: golden.n_gpu_layers, kv_offload: golden.kv_offload }
  Elelem.open(model, **options) do |opened|
    gpu = Elelem::Golden::Settings.gpu(opened.info)
    golden.cases.each do |c|
      mismatch = begin
        golden.check(opened, c["name"])&.to_s
      rescue Elelem::Error => e
        e.message
      end
      puts JSON.generate("file" => File.basename(file), "case" => c["name"], "mismatch" => mismatch,
                         "n_gpu_layers" => opened.info[:n_gpu_layers], "gpu" => gpu)
      $stdout.flush
    end
  end
end
