# frozen_string_literal: true

require "fileutils"

# A virtual environment of version-pinned PyPI packages, cached under ~/.cache/elelem:
# the Python references the specs compare elelem with (jinja2, jsonschema, openai).
module PythonVenv
  module_function

  # The python of the venv at `dir` with `packages` (pip requirement strings) installed;
  # creates it on first use. `pip_options` go to `pip install` (e.g. `--no-deps`).
  def python(dir, packages, pip_options: [])
    python = File.join(dir, "bin", "python")
    return python if File.exist?(File.join(dir, "installed"))

    FileUtils.rm_rf(dir)
    system("python3", "-m", "venv", dir, exception: true)
    system(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pip_options, *packages,
           exception: true)
    File.write(File.join(dir, "installed"), "#{packages.join("\n")}\n")
    python
  end

  # The python of a venv in ~/.cache/elelem named `name-version`, holding exactly `packages`
  # (every dependency pinned, so pip resolves nothing).
  def pinned(name, version, packages)
    python(File.join(Dir.home, ".cache", "elelem", "#{name}-#{version}"), packages, pip_options: ["--no-deps"])
  end
end
