# frozen_string_literal: true

require "stringio"
require "elelem/cli"

# The `elelem` command run in this process, for specs: its exit status and what it wrote.
module CliRunner
  # @return [Array(Integer, String, String)] the status, standard output and standard error
  def run(*argv, input: "")
    out = StringIO.new
    err = StringIO.new
    status = Elelem::CLI.new(out, err, StringIO.new(input)).run(argv)
    [status, out.string, err.string]
  end
end
