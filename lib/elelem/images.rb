# frozen_string_literal: true

module Elelem
  # Images for prompts ({Model#generate}'s `images:`): each one's file bytes, which the
  # native side decodes (PNG, JPEG, WebP, or a GIF's first frame), preprocesses and
  # encodes with the model's projector exactly as llama.cpp's mtmd does.
  module Images
    # Where a prompt's text places an image (llama.cpp's `mtmd_default_marker`). A prompt
    # with images but no marker gets one per image at its start, as `llama-mtmd-cli` does.
    MARKER = "<__media__>"

    # A text prompt with its images' bytes and the byte ranges of the text read as plain
    # text (a conversation's contents), as {Model#chat} renders one.
    Prompt = Struct.new(:text, :plain, :images, keyword_init: true)

    module_function

    # An image's file bytes.
    # @param image [String, Pathname, IO] a path; a binary String (`Encoding::BINARY`) of
    #   the file's bytes; a `data:image/...;base64,` URI; or an IO (or anything with `read`)
    # @return [String] binary
    # @raise [Elelem::ImageError] when it cannot be read
    def read(image)
      image = image.to_path if image.respond_to?(:to_path)
      return image.read.to_s.b if image.respond_to?(:read)
      raise ImageError, "an image is a path, bytes, a data URI or an IO, got #{image.class}" unless image.is_a?(String)
      return image if image.encoding == Encoding::BINARY
      return data_uri(image) if image.start_with?("data:")

      File.binread(image)
    rescue SystemCallError, IOError => e
      raise ImageError, "cannot read the image #{image.inspect[0, 80]}: #{e.message}"
    end

    # The bytes of a base64 `data:` URI.
    # @return [String] binary
    # @raise [Elelem::ImageError] when it is not one
    def data_uri(uri)
      match = uri.match(%r{\Adata:([\w.+-]+/[\w.+-]+)?(;[^,]*)?;base64,})
      raise ImageError, "an image's data URI must be base64 (data:image/png;base64,...)" unless match

      match.post_match.unpack1("m0") # strict, as Base64.strict_decode64 (a bundled gem from Ruby 3.4)
    rescue ArgumentError
      raise ImageError, "an image's data URI holds invalid base64"
    end

    # The projector file beside a model's, which {Elelem.open} opens unless told `mmproj:`:
    # `mmproj-<the model's file name>`, as ggml-org's repositories name them, or
    # `<the model's file name without .gguf>.mmproj.gguf`.
    # @return [String, nil]
    def projector_beside(model_path)
      return nil if model_path.include?("\0") # not a path: the loader says so

      dir = File.dirname(model_path)
      base = File.basename(model_path)
      [File.join(dir, "mmproj-#{base}"), File.join(dir, "#{base.delete_suffix(".gguf")}.mmproj.gguf")]
        .find { |candidate| File.file?(candidate) }
    end

    # {Elelem.open}'s options with the projector beside the model ({.projector_beside}) unless
    # they name one (or `mmproj: nil`).
    # @return [Hash]
    def with_projector(model_path, options)
      return options if options.key?(:mmproj)

      options.merge(mmproj: projector_beside(model_path))
    end

    # The prompt as the native side takes it: checked ({Options.prompt}), its images read into
    # `opts[:images]` (and a chat's plain ranges into `opts[:plain]`), a {MARKER} per image at
    # its start when it holds none.
    # @return [String, Array<Integer>]
    def attach(prompt, images, opts)
      if prompt.is_a?(Prompt)
        opts.merge!(images: prompt.images, plain: prompt.plain)
        return prompt.text
      end
      prompt = Options.prompt(prompt)
      # Not Array(): an IO is Enumerable (its lines).
      images = (images.is_a?(Array) ? images : [images].compact).map { |image| read(image) }
      return prompt if images.empty?
      raise ArgumentError, "a prompt with images is text, not token ids" unless prompt.is_a?(String)

      opts[:images] = images
      prompt.include?(MARKER) ? prompt : (MARKER * images.size) + prompt
    end

    # {.attach} for each prompt of {Model#generate_all}, with its entry of `images`.
    # @param prompts [Array]
    # @param images [Array, nil] an entry per prompt (its images, or nil), as
    #   {Media.options_all} checked them
    # @return [Array(Array<String, Array<Integer>>, Array<Hash>)] the prompts as the native side
    #   takes them, and each one's images (and plain ranges)
    def attach_all(prompts, images)
      attachments = Array.new(prompts.size) { {} }
      [prompts.each_with_index.map { |prompt, i| attach(prompt, images&.[](i), attachments[i]) }, attachments]
    end
  end
end
