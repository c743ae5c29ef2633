# frozen_string_literal: true

module Elelem
  # Measures a model's speed through the public API, as a Ruby program sees it:
  # what `elelem bench` prints and what `rake bench` sets beside llama.cpp.
  # Prompts are random token ids, so that no text or tokenizer is measured.
  #
  #   Elelem.open(path) do |model|
  #     bench = Elelem::Bench.new(model)
  #     bench.prompt_rate(512)             # => tokens/s
  #     bench.decode_rate(32, depth: 1024) # => tokens/s
  #   end
  class Bench
    # @param model [Model] an open model; the bench starts and ends sequences on it
    # @param seed [Integer] for the random token ids
    def initialize(model, seed: 42)
      @model = model
      @random = Random.new(seed)
      @context = []
    end

    # Prompt processing speed: `tokens` random ids as one fresh prompt.
    # @param tokens [Integer]
    # @return [Float] tokens per second
    def prompt_rate(tokens)
      tokens / seconds { @model.generate(random_ids(tokens), max_tokens: 1) }
    end

    # Time to the first token of a fresh prompt of `tokens` random ids.
    # @param tokens [Integer]
    # @return [Float] milliseconds
    def first_token_ms(tokens)
      1000 * seconds { @model.generate(random_ids(tokens), max_tokens: 1) }
    end

    # Decode speed: `tokens` tokens, one step each, after `depth` tokens of
    # context, timed from the first generated token to the last as the stream
    # yields them. The context is kept (`reuse_prefix`) for the next call at the
    # same or a greater depth, so that a series of depths costs one prompt.
    # @param tokens [Integer]
    # @param depth [Integer]
    # @return [Float] tokens per second
    def decode_rate(tokens, depth: 0)
      @context.concat(random_ids(depth - @context.size)) if depth > @context.size
      prompt = depth.zero? ? random_ids(1) : @context.first(depth)
      stamps = []
      @model.generate(prompt, max_tokens: tokens + 1, ignore_eos: true, reuse_prefix: depth.positive?) do
        stamps << now
      end
      tokens / (stamps.last - stamps.first)
    end

    # Aggregate decode speed of `streams` sequences generated together (the model opened
    # with `parallel:` of at least `streams`): each a fresh prompt of 16 random ids and
    # `tokens` generated tokens, all started in the same pass ({Model#generate_all}).
    # @param streams [Integer]
    # @param tokens [Integer]
    # @return [Float] generated tokens per second, all streams together
    def batch_rate(streams, tokens)
      prompts = Array.new(streams) { random_ids(16) }
      streams * tokens / seconds { @model.generate_all(prompts, max_tokens: tokens, ignore_eos: true) }
    end

    # What the Ruby side adds to each decoded token: the time between the first
    # and the last token as the stream yields them, less the engine's own time
    # for the forward passes in between (see {Model#stats}), per token.
    # @param tokens [Integer]
    # @return [Float] microseconds per token
    def ruby_overhead_us(tokens)
      stamps = []
      # Two prompt tokens count as a prompt, so the decode time is exactly the steps between the stamps.
      @model.generate(random_ids(2), max_tokens: tokens + 1, ignore_eos: true) { stamps << now }
      1e6 * (stamps.last - stamps.first - @model.stats[:decode_seconds]) / tokens
    end

    # Time to the first token of a chat's second turn, with the first turn's
    # keys and values kept (`reuse: true`) or evaluated again.
    # @param reuse [Boolean]
    # @return [Float] milliseconds
    def second_turn_ms(reuse:)
      messages = [{ role: "user", content: "Write a Ruby method that reverses a string." }]
      messages += [{ role: "assistant", content: @model.chat(messages, max_tokens: 48) },
                   { role: "user", content: "Now make it handle nil." }]
      prompt = @model.chat_tokens(messages) # what chat evaluates
      1000 * seconds { @model.generate(prompt, max_tokens: 1, reuse_prefix: reuse) }
    end

    # Time to open and close a model.
    # @param path [String]
    # @param options [Hash] for {Elelem.open}
    # @return [Float] milliseconds
    def self.open_ms(path, **options)
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      Elelem.open(path, **options).close
      1000 * (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t)
    end

    private

    def random_ids(count)
      vocab = @model.info[:n_vocab]
      Array.new(count) { @random.rand(vocab) }
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def seconds
      t = now
      yield
      now - t
    end
  end
end
