# frozen_string_literal: true

require "socket"

# A TCP port on 127.0.0.1 that nothing listens on right now, for a server a spec starts.
module LoopbackPort
  module_function

  def free
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end
end
