# frozen_string_literal: true

require "socket"
require_relative "loopback_port"

# RPC workers on loopback for the RPC goldens, specs and bench rows: each an
# `elelem rpc-server` process of this checkout (this build's ggml), on a free port, with
# N_THREADS threads. A worker's thread count is part of its bits, so it is fixed here.
module RpcWorkers
  ROOT = File.expand_path("../..", __dir__)
  N_THREADS = 2

  # A running worker: its endpoint and process.
  Worker = Struct.new(:endpoint, :pid, :log) do
    # Ends it at once, as a machine that dies does.
    def kill
      Process.kill(:KILL, pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end

  module_function

  # Starts `count` workers, yields their endpoints (and the workers), and ends them after.
  # `limit_bytes`: the address space each may take (prlimit), to make one with too little memory.
  def with(count, limit_bytes: nil)
    workers = Array.new(count) { start(limit_bytes:) }
    yield workers.map(&:endpoint), workers
  ensure
    workers&.each(&:kill)
  end

  # Starts `count` workers; the caller ends them ({Worker#kill}).
  def start_all(count) = Array.new(count) { start }

  def start(limit_bytes: nil)
    port = LoopbackPort.free
    log = File.join(ROOT, "tmp", "rpc-worker-#{port}.log")
    command = [RbConfig.ruby, "-I", File.join(ROOT, "lib"), File.join(ROOT, "exe", "elelem"), "rpc-server",
               "--port", port.to_s, "--threads", N_THREADS.to_s]
    command = ["prlimit", "--as=#{limit_bytes}", *command] if limit_bytes
    pid = spawn(*command, out: log, err: log, pgroup: true)
    worker = Worker.new("127.0.0.1:#{port}", pid, log)
    wait_until_listening(worker, port)
    worker
  end

  # Polls for the port (a connection the worker then sees close, and serves the next one).
  def wait_until_listening(worker, port)
    deadline = Time.now + 30
    loop do
      return TCPSocket.new("127.0.0.1", port).close
    rescue Errno::ECONNREFUSED
      raise "the RPC worker on port #{port} did not start: #{File.read(worker.log)}" if Time.now > deadline

      sleep 0.05
    end
  end
end
