# frozen_string_literal: true

require_relative "python_venv"

# Python's jinja2 from PyPI, version-pinned, in a virtual environment cached under
# ~/.cache/elelem: the reference renderer the chat-template spec compares elelem's
# rendering with (spec/support/jinja2_reference.py sets it up as transformers does).
module Jinja2Reference
  VERSION = "3.1.6"
  MARKUPSAFE = "3.0.3"
  VENV = File.join(Dir.home, ".cache", "elelem", "jinja2-#{VERSION}")

  module_function

  # The venv's python, with jinja2 installed; creates the venv on first use.
  def python
    PythonVenv.python(VENV, ["jinja2==#{VERSION}", "markupsafe==#{MARKUPSAFE}"])
  end
end
