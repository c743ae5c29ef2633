# frozen_string_literal: true

# Loaded by `rake stress` (rspec -r): every example runs with a garbage collection at every
# allocation (GC.stress) while another thread compacts the heap every few milliseconds, and
# between two full compactions. An object the extension holds where the GC cannot see it is
# freed or moved under it, and the example fails or crashes instead of passing by luck.
#
# A collection at every allocation is a minor one (GC.stress's flag 1): the objects the glue
# makes are young, so a minor collection frees them if nothing marks them; a full one at every
# allocation would take hours over this heap. The compacting thread takes the GVL whenever the
# example's thread gives it up: during native calls, which is when an object held where the GC
# cannot update it would be moved.
module GCStress
  # GC.stress's flag: minor collections only.
  MINOR = 0x01
  # Seconds between two compactions.
  INTERVAL = Float(ENV.fetch("STRESS_COMPACT_INTERVAL", "0.02"))

  @compactions = 0

  class << self
    # How many compactions ran during examples.
    attr_reader :compactions
  end

  module_function

  # Runs +example+ under the stress.
  def around(example)
    GC.compact
    compactor = Thread.new do
      loop do
        sleep INTERVAL
        GC.compact
        @compactions += 1
      end
    end
    GC.stress = MINOR
    example.run
  ensure
    GC.stress = false
    compactor&.kill&.join
    GC.compact
  end
end

RSpec.configure do |config|
  config.around { |example| GCStress.around(example) }
  config.after(:suite) { puts "\nGC stress: #{GCStress.compactions} compactions during the examples" }
end
