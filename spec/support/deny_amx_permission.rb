# frozen_string_literal: true

require "fileutils"

# The seccomp launcher of deny_amx_permission.c (Linux refuses AMX's tile-data permission
# to the command it runs), compiled into tmp/ when missing or older than its source. The
# AMX spec and `rake bench`'s AMX rows run their children under it.
module DenyAmxPermission
  SOURCE = File.join(__dir__, "deny_amx_permission.c")

  module_function

  def executable(root)
    exe = File.join(root, "tmp", "deny_amx_permission")
    unless File.exist?(exe) && File.mtime(exe) >= File.mtime(SOURCE)
      FileUtils.mkdir_p(File.dirname(exe))
      system("cc", "-O2", "-Wall", "-o", exe, SOURCE, exception: true)
    end
    exe
  end
end
