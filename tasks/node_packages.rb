# frozen_string_literal: true

require "fileutils"

# Version-pinned npm packages, installed with everything they pull in into a folder cached
# under ~/.cache/elelem: the JavaScript clients the server specs talk to `elelem serve` with.
module NodePackages
  module_function

  # The node_modules folder of `dir` with `packages` (`name@version`, every dependency listed
  # and pinned) installed; installs them on first use. Run a script with
  # `NODE_PATH=<this> node script.js`.
  def modules(dir, packages)
    modules = File.join(dir, "node_modules")
    return modules if File.exist?(File.join(dir, "installed"))

    FileUtils.rm_rf(dir)
    FileUtils.mkdir_p(dir)
    File.write(File.join(dir, "package.json"), "{\"private\": true}\n")
    system("npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--save-exact", "--loglevel=error",
           *packages, exception: true)
    File.write(File.join(dir, "installed"), "#{packages.join("\n")}\n")
    modules
  end
end
