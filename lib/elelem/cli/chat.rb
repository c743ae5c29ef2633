# frozen_string_literal: true

module Elelem
  # `elelem chat`, and the note on why output stopped that generate prints too.
  class CLI
    # Says on `io` why output stopped short, when it did.
    # @param reason [Symbol] a finish reason
    # @param max_tokens [Integer] the limit that applied
    # @return [void]
    def self.stop_note(io, reason, max_tokens)
      case reason
      when :length then io.puts "elelem: stopped at #{max_tokens} tokens (-n sets more)"
      when :context_full then io.puts "elelem: stopped: the context is full (-c sets a larger one)"
      end
    end

    # The interactive loop of `elelem chat`: the history grows with each turn, and lines
    # that start with `/` are commands. A terminal gets line editing and history
    # (Reline); prompts go to stderr when stdout is not a terminal, so that a pipe
    # receives only the replies.
    class Chat
      # The commands a line may be.
      COMMANDS = {
        "/reset" => "forget the conversation (the system message stays)",
        "/system TEXT" => "set the system message and start afresh (/system alone removes it)",
        "/quit" => "end the chat (Ctrl-D too)",
        "/help" => "this list"
      }.freeze

      # @param model [Model]
      # @param io [Array<IO>] where replies go; where the banner, notes (and prompts, if
      #   the first is not a terminal) go; where lines come from
      # @param generation [Hash] options for {Model#chat}
      # @param system [String, nil] the system message
      # @param template [String, nil] a chat template instead of the model's
      def initialize(model, io, generation:, system: nil, template: nil)
        @model = model
        @out, @err, @in = io
        @generation = generation
        @system = system
        @template = template
        @messages = []
        @prompts = @out.tty? ? @out : @err
      end

      # Reads lines until end of input or /quit, answering each with the whole history as context.
      # @return [void]
      def run
        g = @generation
        @err.puts "#{@model.inspect}, temperature #{g[:temperature]}, seed #{g[:seed]}, repeat penalty " \
                  "#{g[:repeat_penalty]}: /help lists commands; Ctrl-D quits, Ctrl-C stops a reply"
        while (line = read_line)
          line = line.chomp
          next if line.strip.empty?
          break if line.start_with?("/") && !command(line.strip)
          next if line.start_with?("/")

          turn(line)
        end
        @out.puts
      end

      private

      def read_line
        return plain_line unless @in.tty? && @out.tty? && line_editor?

        Reline.input = @in
        Reline.output = @out
        Reline.readline("> ", true)
      rescue Interrupt
        @out.puts "^C"
        ""
      end

      # Reline is a bundled gem from Ruby 4.0, which a Gemfile without it hides: plain lines then.
      def line_editor?
        return @line_editor unless @line_editor.nil?

        @line_editor = begin
          require "reline"
          true
        rescue ::LoadError
          false
        end
      end

      def plain_line
        @prompts.print "> "
        @prompts.flush
        @in.gets
      end

      # Runs a command; false ends the chat.
      def command(line)
        name, text = line.split(" ", 2)
        return false if %w[/quit /exit].include?(name)
        return help unless %w[/reset /system].include?(name)

        @system = text if name == "/system"
        @messages.clear
        @err.puts "(conversation reset#{"; system message: #{@system.inspect}" if name == "/system"})"
        true
      end

      def help
        COMMANDS.each { |c, what| @err.puts format("  %-13<c>s %<what>s", c:, what:) }
        true
      end

      def turn(line)
        @messages << { role: "user", content: line }
        @messages << { role: "assistant", content: reply }
      rescue ContextFullError => e
        @messages.pop
        @err.puts "elelem: #{e.message}; /reset starts afresh"
      end

      def reply
        text = +""
        begin
          @model.chat(@messages, system: @system, template: @template, **@generation) do |piece|
            text << piece
            @out.print(piece)
            @out.flush
          end
        rescue Interrupt
          @out.print " [stopped]"
        end
        @out.puts
        CLI.stop_note(@err, @model.last_stop_reason, @generation[:max_tokens])
        text
      end
    end
  end
end
