# frozen_string_literal: true

require "net/http"
require "socket"
require "timeout"
require_relative "loopback_port"

# `elelem serve` in a process of its own on a free loopback port, and the HTTP the
# specs speak to it.
class ServeProcess
  EXE = File.join(ROOT, "exe", "elelem")

  attr_reader :port, :pid

  # Starts `elelem serve ARGS` and waits until it listens; {#stop} ends it.
  def initialize(*args)
    @port = LoopbackPort.free
    @log = File.join(ROOT, "tmp", "serve-#{@port}.log")
    @pid = Process.spawn(RbConfig.ruby, "-I", File.join(ROOT, "lib"), EXE, "serve", "--port", @port.to_s, *args,
                         out: @log, err: %i[child out])
    wait_until_listening
  end

  # @return [String] what the server printed
  def log
    File.read(@log)
  end

  # Ctrl-C, as a terminal sends it; the exit status.
  def stop
    Process.kill(:INT, @pid)
    _, status = Timeout.timeout(30) { Process.wait2(@pid) }
    @pid = nil
    status
  ensure
    Process.kill(:KILL, @pid) if @pid
  end

  def base_url
    "http://127.0.0.1:#{@port}/v1"
  end

  def http(&)
    Net::HTTP.start("127.0.0.1", @port, read_timeout: 60, open_timeout: 10, &)
  end

  # A request's response, its body read whole.
  def request(method, path, body = nil, headers = {})
    http do |h|
      data = body.is_a?(String) || body.nil? ? body : JSON.generate(body)
      h.send_request(method, path, data, { "content-type" => "application/json" }.merge(headers))
    end
  end

  # A streaming request: the status, the headers and the events (JSON objects, then "[DONE]").
  def stream(path, body)
    http do |h|
      request = Net::HTTP::Post.new(path, "content-type" => "application/json")
      request.body = JSON.generate(body)
      h.request(request) do |response|
        data = +""
        response.read_body { |chunk| data << chunk }
        return [response.code.to_i, response.to_hash, self.class.events(data)]
      end
    end
  end

  # The events of a server-sent stream; raises when one is not well-formed.
  def self.events(data)
    raise "the stream does not end with a blank line: #{data[-80..].inspect}" unless data.end_with?("\n\n")

    data.split("\n\n").map do |event|
      raise "not a data event: #{event[0, 80].inspect}" unless event.start_with?("data: ")

      payload = event.delete_prefix("data: ")
      payload == "[DONE]" ? payload : JSON.parse(payload)
    end
  end

  # The resident and proportional set sizes of a process and its children, in MiB.
  def memory
    [@pid, *children].to_h do |pid|
      rollup = File.read("/proc/#{pid}/smaps_rollup").scan(/^(\w+):\s+(\d+) kB/).to_h
                   .transform_values { |kb| kb.to_i / 1024.0 }
      [pid, rollup.slice("Rss", "Pss", "Pss_Anon", "Pss_File", "Shared_Clean", "Shared_Dirty", "Private_Dirty")]
    end
  end

  def children
    File.read("/proc/#{@pid}/task/#{@pid}/children").split.map(&:to_i)
  end

  private

  def wait_until_listening
    Timeout.timeout(120) do
      until File.exist?(@log) && log.include?("elelem: serving")
        raise "elelem serve exited: #{log}" if Process.wait(@pid, Process::WNOHANG)

        sleep 0.1
      end
    end
  end
end
