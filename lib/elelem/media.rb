# frozen_string_literal: true

module Elelem
  # A prompt's images and audio as the model's projector takes them: a vision encoder images
  # ({Images}), an audio encoder audio ({Audio}), a projector with both (Qwen2.5-Omni's) either,
  # mixed in marker order; the kind the projector lacks is refused by name. The native side
  # tells a medium's kind by its bytes, as llama.cpp's mtmd helper does: a WAV, MP3 or FLAC
  # file ({.audio?}) is audio, anything else an image.
  # @api private
  module Media
    module_function

    # The image and audio content parts of the messages, in order, as `[type, part]`.
    # @return [Array<Array(String, Hash)>]
    def parts(messages)
      return [] unless messages.is_a?(Array)

      messages.flat_map { |message| content(message) }.filter_map do |part|
        [ChatOptions.part_type(part), part] if ChatOptions.medium?(part)
      end
    end

    # A message's content parts ([] for a text content).
    def content(message)
      content = message[:content] || message["content"] if message.is_a?(Hash)
      content.is_a?(Array) ? content : []
    end

    # A part's file bytes, checked to be of the part's kind where the model takes both
    # ({.kind!}).
    # @param both [Boolean] whether the model takes images and audio
    # @return [String] binary
    def read(type, part, both: false)
      audio = Audio::PARTS.include?(type)
      bytes = audio ? Audio.read(Audio.part(part)) : Images.read(ChatOptions.image(part))
      both ? kind!(bytes, audio) : bytes
    end

    # Whether `bytes` are audio as mtmd's helper tells audio from images (`is_audio_file`): a WAV
    # file ("RIFF....WAVE"), an MP3 (an ID3v2 tag or an MPEG frame sync) or a FLAC file ("fLaC"),
    # in at least 12 bytes. The engine's own rule (`audio::is_audio`), the one its decoding
    # follows, so that Ruby and the engine never disagree on a file.
    # @param bytes [String] binary
    # @return [Boolean]
    def audio?(bytes) = Elelem._audio?(bytes)

    # `bytes`, refused where they are not of the kind they were given as (`audio`): for a
    # model with both encoders, which tells them apart by their bytes alone.
    # @raise [Elelem::AudioError] for audio that is no WAV, MP3 or FLAC file
    # @raise [Elelem::ImageError] for an image that is one
    def kind!(bytes, audio)
      return bytes if audio?(bytes) == audio
      raise AudioError, "this audio is not a WAV, MP3 or FLAC file: #{Audio::FORMATS}" if audio

      raise ImageError, "this image is an audio file (WAV, MP3 or FLAC): pass audio as audio (audio:, media: or " \
                        "an audio part)"
    end

    # Refuses parts of the kind the projector does not take (audio where it has no audio
    # encoder, images where it has an audio encoder only; a model without a projector refuses
    # images natively).
    # @param parts [Array<Array(String, Hash)>] {.parts}
    # @param vision [Boolean] whether the model takes images ({Model#vision?})
    # @param audio [Boolean] whether the model takes audio ({Model#audio?})
    # @raise [Elelem::AudioError, Elelem::ImageError]
    def check(parts, vision:, audio:)
      type, = parts.find { |t, _| Audio::PARTS.include?(t) ? !audio : audio && !vision }
      return if type.nil?
      raise AudioError, no_audio("audio content parts (#{type})") if Audio::PARTS.include?(type)

      raise ImageError, "image content parts (#{type}) need a vision projector: this model's takes audio"
    end

    # The refusal of audio (`what`) on a model without an audio encoder.
    def no_audio(what)
      "#{what} need a model opened with an audio projector (Elelem.open's mmproj:, Qwen2-Audio's or " \
        "Qwen2.5-Omni's)"
    end

    # {Model#generate}'s `images:`, `audio:` or `media:` as the model takes them: audio read
    # here, so that its errors are {AudioError}s; media read and refused where the model lacks
    # their kind.
    # @param given [Hash] the options `:images`, `:audio` and `:media` given (nil where not)
    # @param vision [Boolean] whether the model takes images ({Model#vision?})
    # @param audio_model [Boolean] whether the model takes audio ({Model#audio?})
    # @return [Array, Object, nil] what {Images.attach} takes
    # @raise [ArgumentError] for more than one of them
    def option(given, vision, audio_model)
      images, audio, media = given.values_at(:images, :audio, :media)
      together!(images, audio, media)
      return media_option(media, vision, audio_model) unless media.nil?
      return images_option(images, vision, audio_model) if audio.nil?
      raise AudioError, no_audio("audio:") unless audio_model

      (audio.is_a?(Array) ? audio : [audio]).map { |a| vision ? kind!(Audio.read(a), true) : Audio.read(a) }
    end

    # Refuses more than one of `images:`, `audio:` and `media:`.
    # @raise [ArgumentError]
    def together!(images, audio, media)
      given = { images:, audio:, media: }.compact.keys
      return if given.size < 2

      raise ArgumentError, "#{given.map { |k| "#{k}:" }.join(" and ")} together: pass the images and audio in " \
                           "media: (in the order of their markers)"
    end

    # `media:`: each an image or an audio file (a path, bytes or an IO), read, and refused where
    # the model lacks its kind.
    # @return [Array<String>] the bytes, in order
    def media_option(media, vision, audio_model)
      (media.is_a?(Array) ? media : [media]).map do |medium|
        bytes = read_medium(medium)
        if audio?(bytes)
          raise AudioError, no_audio("audio files in media:") unless audio_model
        elsif audio_model && !vision
          raise ImageError, "images in media: need a vision projector: this model's takes audio (WAV, MP3, FLAC)"
        end
        bytes
      end
    end

    # A medium's bytes: a path, a binary String, a `data:` URI (an image's) or an IO.
    # @return [String] binary
    # @raise [Elelem::AudioError] for an audio file's path ({Audio::EXTENSIONS}) that cannot be read
    # @raise [Elelem::ImageError] for anything else that cannot be read
    def read_medium(medium)
      path = medium.respond_to?(:to_path) ? medium.to_path : medium
      audio = path.is_a?(String) && path.downcase.end_with?(*Audio::EXTENSIONS)
      audio ? Audio.read(path) : Images.read(medium)
    end

    # {Model#generate_all}'s `images:`, `audio:` or `media:`: an entry per prompt, each as
    # {.option} takes it.
    # @param given [Hash] as {.option}
    # @param count [Integer] the prompts
    # @return [Array, nil] what {Images.attach_all} takes
    # @raise [ArgumentError] for another number of entries than prompts
    def options_all(given, vision, audio_model, count)
      images, audio, media = given.values_at(:images, :audio, :media)
      together!(images, audio, media)
      name, entries = given.compact.first
      return nil if entries.nil?

      per_prompt(name, entries, count).map { |entry| entry && option({ name => entry }, vision, audio_model) }
    end

    # `entries`, checked to hold one per prompt.
    def per_prompt(name, entries, count)
      return entries if entries.is_a?(Array) && entries.size == count

      got = entries.is_a?(Array) ? "#{entries.size} for #{count} prompts" : entries.class
      raise ArgumentError, "#{name}: must hold an entry per prompt (its #{name}, or nil), got #{got}"
    end

    # `images:` where no `audio:` is given: refused for an audio projector, and (for a model
    # with both encoders, which tells them apart by their bytes) an audio file among them; a
    # model without a projector refuses them natively.
    def images_option(images, vision, audio_model)
      return images if [nil, []].include?(images) || !audio_model
      raise ImageError, "this model's projector takes audio (audio:), not images" unless vision

      (images.is_a?(Array) ? images : [images]).map { |image| kind!(Images.read(image), false) }
    end
  end
end
