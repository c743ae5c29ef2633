# frozen_string_literal: true

module Elelem
  # A prompt's images and audio as the model's projector takes them: a vision projector
  # images ({Images}), an audio projector audio ({Audio}); the other kind is refused by name.
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

    # A part's file bytes.
    # @return [String] binary
    def read(type, part)
      Audio::PARTS.include?(type) ? Audio.read(Audio.part(part)) : Images.read(ChatOptions.image(part))
    end

    # Refuses parts of the kind the projector does not take (audio where there is no audio
    # projector, images where it is one).
    # @param parts [Array<Array(String, Hash)>] {.parts}
    # @param audio [Boolean] whether the model takes audio ({Model#audio?})
    # @raise [Elelem::AudioError, Elelem::ImageError]
    def check(parts, audio:)
      type, = parts.find { |t, _| Audio::PARTS.include?(t) != audio }
      return if type.nil?
      raise ImageError, "image content parts (#{type}) need a vision projector: this model's takes audio" if audio

      raise AudioError, "audio content parts (#{type}) need a model opened with an audio projector " \
                        "(Elelem.open's mmproj:, Qwen2-Audio's)"
    end

    # {Model#generate}'s `images:` or `audio:` as the model takes them: audio read here, so
    # that its errors are {AudioError}s.
    # @param audio_model [Boolean] whether the model takes audio ({Model#audio?})
    # @return [Array, Object, nil] what {Images.attach} takes
    def option(images, audio, audio_model)
      return images_option(images, audio_model) if audio.nil?
      raise ArgumentError, "images: and audio: together: a projector takes one or the other" unless images.nil?
      unless audio_model
        raise AudioError, "audio: needs a model opened with an audio projector (Elelem.open's mmproj:, Qwen2-Audio's)"
      end

      (audio.is_a?(Array) ? audio : [audio]).map { |a| Audio.read(a) }
    end

    # {Model#generate_all}'s `images:` or `audio:`: an entry per prompt, each as {.option}
    # takes it.
    # @param count [Integer] the prompts
    # @return [Array, nil] what {Images.attach_all} takes
    # @raise [ArgumentError] for another number of entries than prompts
    def options_all(images, audio, audio_model, count)
      raise ArgumentError, "images: and audio: together: a projector takes one or the other" if images && audio
      return images_all(images, audio_model, count) if audio.nil?

      per_prompt(:audio, audio, count).map { |entry| entry && option(nil, entry, audio_model) }
    end

    # {.options_all} without audio.
    def images_all(images, audio_model, count)
      images && per_prompt(:images, images, count).map { |entry| images_option(entry, audio_model) }
    end

    # `entries`, checked to hold one per prompt.
    def per_prompt(name, entries, count)
      return entries if entries.is_a?(Array) && entries.size == count

      got = entries.is_a?(Array) ? "#{entries.size} for #{count} prompts" : entries.class
      raise ArgumentError, "#{name}: must hold an entry per prompt (its #{name}, or nil), got #{got}"
    end

    # `images:` where no `audio:` is given: refused for an audio projector.
    def images_option(images, audio_model)
      if audio_model && ![nil, []].include?(images)
        raise ImageError, "this model's projector takes audio (audio:), not images"
      end

      images
    end
  end
end
