# frozen_string_literal: true

module Elelem
  # `elelem convert`: a Hugging Face BERT directory to GGUF.
  class CLI
    private

    def cmd_convert(argv)
      banner = "convert DIR [-o OUT.gguf] [options]"
      opts, rest = parse(argv, banner, model: false, defaults: { type: :f16 }) { |o, op| convert_options(o, op) }
      return if opts.nil?
      raise OptionParser::MissingArgument, "DIR (a Hugging Face BERT model directory)" if rest.empty?

      dir = rest.shift
      no_arguments(rest)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      report = Elelem.convert(dir, opts[:out], type: opts[:type], pre_tokenizer: opts[:pre])
      report[:notes].each { |note| @err.puts "elelem: note: #{note}" }
      @err.puts format("elelem: %<tensors>d tensors, %<params>d parameters, %<mib>.1f MiB in %<s>.2f s",
                       tensors: report[:tensors], params: report[:parameters], mib: report[:bytes] / 1_048_576.0,
                       s: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
      @out.puts report[:path]
    end

    def convert_options(parser, opts)
      parser.separator "  Converts config.json + model.safetensors + tokenizer.json (and a sentence-transformers"
      parser.separator "  pooling module) as llama.cpp's convert_hf_to_gguf.py does, byte for byte. BERT only."
      parser.on("-o", "--outfile OUT", "the GGUF to write (default: in DIR, named as the script names it)") do |o|
        opts[:out] = o
      end
      parser.on("--outtype TYPE", Elelem::CONVERT_TYPES.map(&:to_s),
                "f16 (default: matrices F16, the rest F32) or f32") { |t| opts[:type] = t.to_sym }
      parser.on("--pre NAME", "tokenizer.ggml.pre to write for a tokenizer llama.cpp's converter does not know") do |n|
        opts[:pre] = n
      end
    end
  end
end
