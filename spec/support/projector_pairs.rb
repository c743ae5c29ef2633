# frozen_string_literal: true

require "json"

# The synthetic language model and projector pairs of tmp/synthetic/vision (written by
# `rake canary`) and their goldens (spec/fixtures/goldens/vision), for the image and audio
# specs.
module ProjectorPairs
  module_function

  # A pair's fixture, and the reference's recording of it for this build profile: in the
  # fixture, or in the goldens cache where `rake goldens` recorded a profile it lacks.
  # @return [Array(Hash, Hash)]
  def recording(name)
    fixture = JSON.parse(File.read(File.join(ROOT, "spec", "fixtures", "goldens", "vision", "#{name}.json")))
    id = Elelem.build_profile[:id]
    cached = File.join(Elelem::Golden::CACHE_DIR, id, "#{name}.json")
    recording = fixture["recordings"][id] || (File.exist?(cached) && JSON.parse(File.read(cached))["recordings"][id])
    raise "vision/#{name}.json has no recording for build profile #{id}: run `rake goldens`" unless recording

    [fixture, recording]
  end

  # The pair `name` of `dir` opened (`<name>.gguf` with `<name>.mmproj.gguf`), on 2 threads.
  # @return [Elelem::Model]
  def open_pair(dir, name, **options)
    Elelem.open(File.join(dir, "#{name}.gguf"), mmproj: File.join(dir, "#{name}.mmproj.gguf"), n_threads: 2, **options)
  end

  # `elelem generate`'s arguments for the pair `name` of `dir` (as {open_pair} opens it), up
  # to `tokens` tokens, answered as JSON.
  # @return [Array<String>]
  def cli_args(dir, name, tokens)
    ["generate", "-m", File.join(dir, "#{name}.gguf"), "--mmproj", File.join(dir, "#{name}.mmproj.gguf"),
     "-t", "2", "-n", tokens.to_s, "--json"]
  end
end
