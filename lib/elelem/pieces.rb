# frozen_string_literal: true

module Elelem
  # The Enumerator {Model#each_token} returns without a block.
  #
  # Internal iteration (`each`, `map`, `first(3)`, `lazy`) streams: the block runs as
  # each piece comes, on the caller's Fiber. External iteration (`next`, `peek`) would
  # run the generation on a Fiber of its own and pause it, holding the model, between
  # two pieces; instead, the first such call generates everything and the pieces are
  # then handed out from memory, so the model is free for other calls meanwhile.
  #
  #   pieces = model.each_token("1, 2,", max_tokens: 5)
  #   pieces.next      # => " "  (the whole continuation is generated here)
  #   model.generate("def hello")  # the model is free
  #   pieces.next      # => "3"
  class Pieces < Enumerator
    # @return [String] the next piece
    # @raise [StopIteration] after the last
    def next
      buffered.next
    end

    # @return [String] the next piece, without moving past it
    # @raise [StopIteration] after the last
    def peek
      buffered.peek
    end

    # @return [Array<String>] the next piece, as `Enumerator#next_values` gives it
    def next_values
      buffered.next_values
    end

    # @return [Array<String>] the next piece, without moving past it
    def peek_values
      buffered.peek_values
    end

    # Forgets the pieces: the next call to {#next} generates again.
    # @return [self]
    def rewind
      @buffered = nil
      self
    end

    private

    def buffered
      @buffered ||= to_a.each
    end
  end
end
