# frozen_string_literal: true

module Elelem
  # `elelem embed`: embeddings as JSON, one line per text.
  class CLI
    # The model `elelem embed` uses when none is named.
    EMBED_MODEL = "all-minilm-l6-v2"

    private

    def cmd_embed(argv)
      banner = "embed [-m MODEL] [options] [TEXT... | -]"
      opts, rest = parse(argv, banner, model: EMBED_MODEL, defaults: { normalize: :l2 }) do |o, op|
        embed_options(o, op)
      end
      return if opts.nil?

      texts = rest.empty? || rest == ["-"] ? embed_lines : rest
      open_model({ model: EMBED_MODEL }.merge(opts)) do |model|
        no_pooling(model) unless opts[:pooling] || model.info[:pooling]
        model.embed(texts, **opts.slice(:normalize, :pooling)).each { |vector| @out.puts JSON.generate(vector) }
      end
    end

    # A model without a pooling of its own (a decoder) needs one named, as in Ruby and over HTTP.
    def no_pooling(model)
      raise OptionParser::MissingArgument, "--pooling (#{model.info[:name] || model.info[:architecture]} has no " \
                                           "pooling of its own: mean, last or cls give one vector per text, " \
                                           "none one per token)"
    end

    # One text per line of standard input.
    def embed_lines
      raise OptionParser::MissingArgument, "TEXT (or pipe texts in, one a line)" if @in.tty?

      @in.each_line.map(&:chomp).reject(&:empty?)
    end

    def embed_options(parser, opts)
      parser.separator "  Prints each text's embedding as a JSON array, one a line; each argument is a text,"
      parser.separator "  or standard input holds one text a line."
      parser.on("--normalize NORM", "l2 (default), none, max_abs, taxicab, or an integer p-norm") do |n|
        opts[:normalize] = n.match?(/\A\d+\z/) ? Integer(n) : n.to_sym
      end
      poolings = Embeddings::POOLINGS.map(&:to_s)
      parser.on("--pooling POOLING", poolings, "none, mean, cls, last (default: the model's)") do |p|
        opts[:pooling] = p.to_sym
      end
    end
  end
end
