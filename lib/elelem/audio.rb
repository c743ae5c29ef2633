# frozen_string_literal: true

require "base64"

module Elelem
  # Audio for prompts ({Model#generate}'s `audio:`, a conversation's audio parts): each
  # file's bytes, a WAV (16-bit PCM or 32-bit float, any rate from 1 Hz to 384 kHz) that the
  # native side decodes, resamples to 16 kHz as mtmd-helper's miniaudio does, cuts into 30 s
  # log-mel pieces and encodes with the model's audio projector exactly as llama.cpp's mtmd
  # does (Qwen2-Audio's `qwen2a`). A file that is no such WAV is an {Elelem::AudioError}
  # naming what it is.
  module Audio
    # The content parts of audio elelem reads: OpenAI's `{ type: "input_audio", input_audio:
    # { data: <base64>, format: "wav" } }` and `{ type: "audio", audio: path, bytes or IO }`.
    PARTS = %w[input_audio audio].freeze

    module_function

    # An audio part's audio, as {.read} takes it.
    # @raise [Elelem::AudioError] for an `input_audio` that is not base64 WAV
    def part(part)
      type = (part[:type] || part["type"]).to_s
      return input_audio(part[:input_audio] || part["input_audio"]) if type == "input_audio"

      part[:audio] || part["audio"]
    end

    # An audio file's bytes.
    # @param audio [String, Pathname, IO] a path; a binary String (`Encoding::BINARY`) of
    #   the file's bytes; or an IO (or anything with `read`)
    # @return [String] binary
    # @raise [Elelem::AudioError] when it cannot be read
    def read(audio)
      audio = audio.to_path if audio.respond_to?(:to_path)
      return audio.read.to_s.b if audio.respond_to?(:read)
      raise AudioError, "an audio file is a path, bytes or an IO, got #{audio.class}" unless audio.is_a?(String)
      return audio if audio.encoding == Encoding::BINARY

      File.binread(audio)
    rescue SystemCallError, IOError => e
      raise AudioError, "cannot read the audio file #{audio.inspect[0, 80]}: #{e.message}"
    end

    # The bytes of OpenAI's `input_audio` part value, `{ data: <base64>, format: "wav" }`.
    # @return [String] binary
    # @raise [Elelem::AudioError] for another shape or format, or invalid base64
    def input_audio(value)
      data, format = value.is_a?(Hash) ? [value[:data] || value["data"], value[:format] || value["format"]] : []
      unless data.is_a?(String)
        raise AudioError, "input_audio must be { data: <base64>, format: \"wav\" }, got #{value.inspect[0, 60]}"
      end
      unless format.to_s == "wav"
        raise AudioError, "input_audio's format must be \"wav\" (elelem reads WAV), got #{format.inspect}"
      end

      base64(data)
    end

    # The bytes of base64 `data`.
    # @raise [Elelem::AudioError] for invalid base64
    def base64(data)
      Base64.strict_decode64(data)
    rescue ArgumentError
      raise AudioError, "input_audio's data holds invalid base64"
    end
  end
end
