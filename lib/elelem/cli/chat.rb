# frozen_string_literal: true

module Elelem
  class CLI
    # The interactive loop of `elelem chat`: the history grows with each turn.
    class Chat
      def initialize(model, out, err, input, **generation)
        @model = model
        @out = out
        @err = err
        @in = input
        @generation = generation
        @messages = []
      end

      # Reads lines until end of input, answering each with the whole history as context.
      # @return [void]
      def run
        @err.puts "#{@model.inspect} — Ctrl-D to quit, Ctrl-C to stop a reply"
        while (line = prompt_line)
          next if line.strip.empty?

          @messages << { role: "user", content: line.chomp }
          @messages << { role: "assistant", content: reply }
        end
        @out.puts
      end

      private

      def prompt_line
        @out.print "> "
        @out.flush
        @in.gets
      end

      def reply
        text = +""
        begin
          @model.chat(@messages, **@generation) do |piece|
            text << piece
            @out.print(piece)
            @out.flush
          end
        rescue Interrupt
          @out.print " [stopped]"
        end
        @out.puts
        text
      end
    end
  end
end
