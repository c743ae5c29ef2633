# frozen_string_literal: true

require "spec_helper"
require "json"
require "open3"

# Tiny models offloaded through ggml's Vulkan backend to Mesa's lavapipe (a Vulkan device
# that runs on the CPU): greedy ids identical to llama.cpp built with GGML_VULKAN and run on
# the same device (tasks/vulkan_golden.rb records them), one sequence or several in one pass;
# and llama.cpp's ids under a grammar, its embeddings' bits, and its speculative decoding's ids
# and rounds there (files with a "mode", tasks/vulkan_modes.rb). Only in a build with Vulkan,
# on a machine with lavapipe (script/setup installs both, unless ELELEM_VULKAN=0); a build profile
# the files lack a recording of has it in Elelem::Golden::CACHE_DIR (`rake goldens` records it).
RSpec.describe "models on a Vulkan device (lavapipe)" do
  files = Dir[File.join(ROOT, "spec", "fixtures", "goldens", "vulkan", "*.json")]
  setup = /\Alavapipe(-half|-kv-host|-lockstep)?-/
  modes, goldens = files.partition { |f| JSON.parse(File.read(f)).key?("mode") }
  vulkan = Elelem.system_info[/VULKAN=\S+/]

  it "names in system_info whether the Vulkan backend is built, and why not" do
    expect(Elelem.system_info).to match(/VULKAN=(on \(|off \(not built; )/)
  end

  # A build without Vulkan (the default) has nothing more to check than the line above.
  next if vulkan != "VULKAN=on"

  lavapipe = begin
    IO.popen(["vulkaninfo", "--summary"], err: File::NULL, &:read)[/deviceName\s*=\s*(llvmpipe[^\n]*)/, 1]
  rescue SystemCallError
    nil
  end
  unless lavapipe
    it("finds Mesa's lavapipe, which script/setup installs") { expect(lavapipe).not_to be_nil }
    next
  end

  before(:context) do
    goldens.each { |f| SpecModels.synthetic(File.basename(f, ".json").sub(setup, "")) }
    modes.each { |f| JSON.parse(File.read(f)).values_at("model", "draft").compact.each { SpecModels.synthetic(_1) } }
    out, err, status = Open3.capture3({ "GGML_VK_VISIBLE_DEVICES" => "0" }, RbConfig.ruby, "-I",
                                      File.join(ROOT, "lib"), File.join(ROOT, "spec", "support", "vulkan_check.rb"),
                                      *files)
    raise "the Vulkan check failed (#{status}): #{err.lines.last(5).join}" unless status.success?

    @results = out.lines.map { |line| JSON.parse(line) }
  end

  checked = lambda do |file, name, n_gpu_layers|
    result = @results.find { |r| r["file"] == File.basename(file) && r["case"] == name }
    expect(result).not_to be_nil
    expect(result["mismatch"]).to be_nil, result["mismatch"]
    expect(result["gpu"]).to include("llvmpipe")
    expect(result["n_gpu_layers"]).to eq(n_gpu_layers)
  end

  goldens.each do |file|
    golden = Elelem::Golden.new(file)
    golden.cases.each do |c|
      it "#{File.basename(file, ".json")}: the #{c["name"]} case gives llama.cpp's ids on lavapipe" do
        instance_exec(file, c["name"], golden.n_gpu_layers, &checked)
      end
    end
  end

  modes.each do |file|
    doc = JSON.parse(File.read(file))
    doc["cases"].each do |c|
      it "#{File.basename(file, ".json")}: the #{c["name"]} case gives llama.cpp's #{doc["mode"]} output on lavapipe" do
        instance_exec(file, c["name"], doc["n_gpu_layers"], &checked)
      end
    end
  end

  it "keeps lavapipe out of a process that does not name it (ggml-vulkan skips CPU devices)" do
    code = "puts Elelem.open(ARGV[0], n_ctx: 64) { |m| m.info[:backend] }"
    out, err, status = Open3.capture3({ "GGML_VK_VISIBLE_DEVICES" => nil }, RbConfig.ruby, "-I", File.join(ROOT, "lib"),
                                      "-relelem", "-e", code, SpecModels.synthetic("tiny-qwen3"))
    expect(status).to be_success, err
    expect(out.strip).to eq("CPU")
  end
end
