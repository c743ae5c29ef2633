# frozen_string_literal: true

module Elelem
  # Audio for prompts ({Model#generate}'s `audio:`, a conversation's audio parts): each
  # file's bytes, a WAV (16-bit PCM or 32-bit float), MP3 or FLAC file of any rate from 1 Hz
  # to 384 kHz, told apart by its bytes, that the native side decodes as mtmd-helper does
  # (MP3 and FLAC by the pinned llama.cpp's own miniaudio), resamples to 16 kHz as its
  # miniaudio does, cuts into 30 s log-mel pieces and encodes with the model's audio
  # projector exactly as llama.cpp's mtmd does (Qwen2-Audio's `qwen2a`). A file that is none
  # of them is an {Elelem::AudioError} naming what it is, and what elelem reads.
  module Audio
    # The content parts of audio elelem reads: OpenAI's `{ type: "input_audio", input_audio:
    # { data: <base64>, format: "wav" } }` (or `"mp3"`, `"flac"`) and `{ type: "audio", audio:
    # path, bytes or IO }`.
    PARTS = %w[input_audio audio].freeze

    # The `input_audio` formats elelem reads (OpenAI documents "wav" and "mp3").
    INPUT_FORMATS = %w[wav mp3 flac].freeze

    # The ends of paths in `media:` read as audio files (their bytes tell their format).
    EXTENSIONS = %w[.wav .mp3 .flac].freeze

    # What elelem reads, as refusals say it.
    FORMATS = "elelem reads WAV, MP3 and FLAC"

    module_function

    # An audio part's audio, as {.read} takes it.
    # @param part [Hash] an `input_audio` or `audio` content part
    # @return [String, Pathname, IO] the bytes of an `input_audio`, the `audio` part's value
    # @raise [Elelem::AudioError] for an `input_audio` that is not base64 WAV, MP3 or FLAC
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

    # The bytes of OpenAI's `input_audio` part value, `{ data: <base64>, format: "wav" }` (or
    # `"mp3"`, `"flac"`: the bytes tell the native side their format, as mtmd's helper tells it).
    # @param value [Hash] the part's `input_audio`
    # @return [String] binary
    # @raise [Elelem::AudioError] for another shape or format, or invalid base64
    def input_audio(value)
      data, format = value.is_a?(Hash) ? [value[:data] || value["data"], value[:format] || value["format"]] : []
      unless data.is_a?(String)
        raise AudioError, "input_audio must be { data: <base64>, format: \"wav\" or \"mp3\" }, got " \
                          "#{value.inspect[0, 60]}"
      end
      unless INPUT_FORMATS.include?(format.to_s)
        raise AudioError, "input_audio's format must be one of #{INPUT_FORMATS.join(", ")} (#{FORMATS}), got " \
                          "#{format.inspect}"
      end

      base64(data)
    end

    # The bytes of base64 `data`.
    # @param data [String] base64
    # @return [String] binary
    # @raise [Elelem::AudioError] for invalid base64
    def base64(data)
      data.unpack1("m0")
    rescue ArgumentError
      raise AudioError, "input_audio's data holds invalid base64"
    end
  end
end
