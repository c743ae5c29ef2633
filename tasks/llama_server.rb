# frozen_string_literal: true

require "etc"
require "fileutils"
require "net/http"
require_relative "reference"
require_relative "vendor"

# llama.cpp's `llama-server`, the peer of `elelem serve` in `rake bench`'s server rows.
#
# The pinned llama-cpp-sys-2 package (the reference's llama.cpp) ships tools/server without
# its sources, so they come from the llama-cpp-python sdist (PyPI, version-pinned: a
# llama.cpp a little older than the package's), fetched into tmp/sdist, copied into
# tmp/llama-server-src with the few changes PATCHES lists, and built by
# tools/reference/CMakeLists.txt (`-DELELEM_SERVER_DIR`) against the pinned package's
# libllama, common, mtmd and cpp-httplib into tmp/llama-server: the model code and kernels
# are the reference's own. The web UI is left out (an empty asset table).
module LlamaServer
  ROOT = Reference::ROOT
  SDIST_VERSION = "0.3.36"
  SDIST_DIR = File.join(ROOT, "tmp", "sdist")
  SOURCE = File.join(ROOT, "tmp", "llama-server-src")
  BUILD = File.join(ROOT, "tmp", "llama-server")
  BINARY = File.join(BUILD, "llama-server")
  # What the sdist's server sources need to compile against the pinned package's common/
  # and mtmd (file under tools/server, text, replacement); each must match exactly once.
  PATCHES = [
    # The pinned common/ has no fs_open_ifstream (a UTF-8 path helper for Windows).
    ["server-mcp.cpp", "fs_open_ifstream(params.mcp_servers_config, std::ios::in)",
     "std::ifstream(params.mcp_servers_config, std::ios::in)"],
    # The pinned mtmd_get_memory_usage returns a struct holding the map it returned.
    ["server-context.cpp", "mtmd_get_memory_usage(mmproj_path.c_str(), mparams);",
     "mtmd_get_memory_usage(mmproj_path.c_str(), mparams).backend_mem_usage;"]
  ].freeze

  module_function

  # The unpacked sdist's llama.cpp, fetched with pip on first use.
  def llama_dir
    dir = File.join(SDIST_DIR, "llama_cpp_python-#{SDIST_VERSION}", "vendor", "llama.cpp")
    return dir if File.directory?(File.join(dir, "tools", "server"))

    FileUtils.mkdir_p(SDIST_DIR)
    system("python3", "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-python",
           "--dest", SDIST_DIR, "llama-cpp-python==#{SDIST_VERSION}", exception: true)
    system("tar", "-xzf", File.join(SDIST_DIR, "llama_cpp_python-#{SDIST_VERSION}.tar.gz"), "-C", SDIST_DIR,
           exception: true)
    dir
  end

  # tools/server and the UI's templates, copied out of the sdist and patched.
  def prepare_source
    from = llama_dir
    FileUtils.rm_rf(SOURCE)
    FileUtils.mkdir_p([File.join(SOURCE, "server"), File.join(SOURCE, "ui")])
    FileUtils.cp(Dir[File.join(from, "tools", "server", "*.{cpp,h}")], File.join(SOURCE, "server"))
    FileUtils.cp(Dir[File.join(from, "tools", "ui", "ui.*.in")], File.join(SOURCE, "ui"))
    PATCHES.each do |file, text, replacement|
      path = File.join(SOURCE, "server", file)
      source = File.read(path)
      raise "llama-server patch: #{text.inspect} is not in #{file} once" unless source.scan(text).size == 1

      File.write(path, source.sub(text) { replacement })
    end
  end

  # Builds once (llama.cpp and its server take many minutes on two cores); later calls reuse it.
  def build
    return BINARY if File.executable?(BINARY)

    prepare_source
    llama = File.join(VendorGgml.package_dir, "llama.cpp")
    system("cmake", "-S", File.join(ROOT, "tools", "reference"), "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release",
           "-DLLAMA_CPP_DIR=#{llama}", "-DELELEM_SERVER_DIR=#{File.join(SOURCE, "server")}", exception: true)
    system("cmake", "--build", BUILD, "--target", "llama-server", "-j", Etc.nprocessors.to_s, exception: true)
    BINARY
  end

  # Runs llama-server on `port` with `parallel` slots sharing one unified KV cache of
  # `n_ctx` tokens (-kvu, as elelem's `parallel:` sequences share its n_ctx), `threads`
  # threads, continuous batching (its default), and no web UI; yields once /health
  # answers 200, and stops it after. Its log goes to tmp/llama-server.log.
  def serve(model, parallel:, n_ctx:, threads:, port:, &block)
    run(["-m", model], parallel:, n_ctx:, threads:, port:, log: "llama-server.log", &block)
  end

  # llama-server's router mode over `dir`'s models (`--models-dir`: each a child llama-server
  # started on the first request naming it, with the router's other flags, as `serve` gives
  # them). Its log goes to tmp/llama-server-router.log.
  def serve_router(dir, parallel:, n_ctx:, threads:, port:, &block)
    run(["--models-dir", dir], parallel:, n_ctx:, threads:, port:, log: "llama-server-router.log", &block)
  end

  # llama-server with its model flags `models` and `serve`'s others, logging to tmp/`log`.
  def run(models, parallel:, n_ctx:, threads:, port:, log:)
    log = File.join(ROOT, "tmp", log)
    pid = Process.spawn(build, *models, "-np", parallel.to_s, "-c", n_ctx.to_s, "-kvu",
                        "-t", threads.to_s, "-tb", threads.to_s, "--host", "127.0.0.1", "--port", port.to_s,
                        "--no-ui", %i[out err] => [log, "w"])
    wait_healthy(port, pid, log)
    yield
  ensure
    stop(pid) if pid
  end

  # Waits until GET /health on `port` answers 200 (a loading server answers 503).
  def wait_healthy(port, pid, log, timeout: 300)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      raise "server on port #{port} exited (#{log})" if Process.waitpid(pid, Process::WNOHANG)

      begin
        return if Net::HTTP.get_response("127.0.0.1", "/health", port).code == "200"
      rescue SystemCallError, EOFError, Net::ReadTimeout
        nil
      end
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        raise "server on port #{port} not healthy after #{timeout}s (#{log})"
      end

      sleep 0.2
    end
  end

  def stop(pid)
    Process.kill(:TERM, pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end
end
