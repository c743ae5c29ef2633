# frozen_string_literal: true

module Elelem
  # The gem's version.
  VERSION = "0.1.0"
end
