# frozen_string_literal: true

module Elelem
  class Golden
    # A check that found other ids than the recording's.
    Mismatch = Struct.new(:case_name, :step, :expected, :actual, :reference_margin, :recording, :profile,
                          keyword_init: true) do
      # @return [String] what differs, where, and how close the reference's choice was there
      def message
        exp = expected[step].inspect
        got = actual[step].inspect
        margin = reference_margin ? format("%.4g", reference_margin) : "not recorded"
        [
          "case #{case_name.inspect}: the ids differ first at step #{step} (0-based): " \
          "expected #{exp}, got #{got}",
          "  the recorder's top-two logit margin there: #{margin} " \
          "(a small margin means a rounding difference flipped a near tie)",
          "  recorded by #{recording["recorder"]} on #{recording["cpu"] || "an unknown CPU"} " \
          "(this CPU: #{profile[:cpu] || "unknown"}), build profile #{profile[:id]} (this build's)",
          "  expected: #{expected.inspect}", "  actual:   #{actual.inspect}"
        ].join("\n")
      end
    end
  end
end
