# frozen_string_literal: true

require "elelem"

module Elelem
  # RSpec matchers for golden-decode specs: `require "elelem/rspec"` in a spec
  # helper, then
  #
  #   expect(model).to decode("def fib(n):", max_tokens: 16).into("spec/goldens/qwen.json")
  #
  # The prompt (text or ids) is decoded greedily and its ids compared with the ones
  # {Golden} recorded for this build profile. A prompt the file lacks, or a profile
  # with no recording yet, fails with what to do; with `ELELEM_RECORD_GOLDENS=1` it is
  # recorded from elelem instead (commit the file). A mismatch names the step, both
  # ids, the recorder's top-two logit margin there and the CPU it was recorded on.
  module RSpec
    # The matcher behind {RSpec#decode}.
    class DecodeMatcher
      # @param prompt [String, Array<Integer>] text (tokenized with special tokens) or ids
      # @param max_tokens [Integer] how many tokens to decode ({Model#generate}'s default unless given)
      # @param ignore_eos [Boolean] keep going past end-of-generation tokens
      # @param name [String, nil] the case's name in the file (default: the prompt)
      def initialize(prompt, max_tokens: Options::GENERATION_DEFAULTS[:max_tokens], ignore_eos: false, name: nil)
        @prompt = prompt
        @max_tokens = max_tokens
        @ignore_eos = ignore_eos
        @name = name
      end

      # The golden file to compare with.
      # @param golden [String, Golden] a path, or a {Golden}
      # @return [self]
      def into(golden)
        @golden = golden.is_a?(Golden) ? golden : Golden.new(golden)
        self
      end

      # @param model [Model]
      # @return [Boolean]
      def matches?(model)
        raise ArgumentError, "decode(...) needs .into(golden_file)" unless @golden

        kase = find_or_add(model)
        record(model, kase) if Golden.record_missing? && !@golden.recording&.dig("outputs", kase["name"])
        @mismatch = @golden.check(model, kase["name"])
        @mismatch.nil?
      rescue Elelem::Error => e
        @error = e.message
        false
      end

      # @return [String]
      def failure_message
        @error || "expected the model to decode the golden ids of #{@golden.path}\n#{@mismatch.message}"
      end

      # @return [String]
      def failure_message_when_negated
        "expected the model not to decode the golden ids of #{@golden.path}"
      end

      # @return [String]
      def description
        "decode #{@prompt.inspect[0, 40]} into the golden ids of #{File.basename(@golden.path)}"
      end

      private

      def find_or_add(model)
        ids = @prompt.is_a?(String) ? model.tokenize(@prompt) : @prompt
        kase = @golden.find(@name, prompt: ids, max_tokens: @max_tokens, ignore_eos: @ignore_eos)
        return add(ids) unless kase
        return kase if kase["prompt"] == ids

        raise Error, "the prompt of case #{kase["name"].inspect} no longer tokenizes as recorded in #{@golden.path}"
      end

      def add(ids)
        unless Golden.record_missing?
          raise Error, "#{@golden.path} has no case for #{@prompt.inspect[0, 60]} " \
                       "(max_tokens #{@max_tokens}): run with #{Golden::RECORD_ENV}=1 to record it"
        end

        text = @prompt if @prompt.is_a?(String)
        @golden.add_case(@name || text || ids.join(","), ids, max_tokens: @max_tokens, ignore_eos: @ignore_eos,
                                                              prompt_text: text)
      end

      def record(model, kase)
        @golden.record(model, only: [kase["name"]])
      end
    end

    # Greedy decoding of `prompt`, to be compared with a golden file by `.into(path)`.
    # @return [DecodeMatcher]
    def decode(prompt, **options)
      DecodeMatcher.new(prompt, **options)
    end
  end
end

RSpec.configure { |config| config.include Elelem::RSpec } if defined?(RSpec.configure)
