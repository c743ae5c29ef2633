# frozen_string_literal: true

require_relative "python_venv"

# Python's jsonschema from PyPI, version-pinned, in a virtual environment cached under
# ~/.cache/elelem: the independent JSON Schema validator (formats checked) that the
# structured-output spec validates elelem's constrained generations with
# (spec/support/validate_json.py).
module JsonSchemaReference
  VERSION = "4.23.0"
  # jsonschema checks `date-time` only with this installed.
  RFC3339 = "0.1.4"
  VENV = File.join(Dir.home, ".cache", "elelem", "jsonschema-#{VERSION}")

  module_function

  # The venv's python, with jsonschema installed; creates the venv on first use.
  def python
    PythonVenv.python(VENV, ["jsonschema==#{VERSION}", "rfc3339-validator==#{RFC3339}"])
  end
end
