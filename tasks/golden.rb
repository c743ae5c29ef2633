# frozen_string_literal: true

require "tempfile"
require_relative "reference"

# The golden prompts. Their ids and continuations come only from the reference
# (llama.cpp), never from elelem: `rake golden` rewrites spec/fixtures/goldens.
module Goldens
  NOTES = (1..40).map do |i|
    "Note #{i}: the function parse_#{i}(input) reads #{i * 7} bytes, checks the header, and returns " \
      "a Hash with keys :id, :name and :size; errors raise ArgumentError."
  end.freeze
  LONG_TEXT = NOTES.join("\n")

  QWEN_PROMPTS = {
    "code" => "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "prose" => "The three most important things to know about the Ruby programming language are",
    "chat" => "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" \
              "Write a Ruby method that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "long" => "#{LONG_TEXT}\nSummary of the notes above:"
  }.freeze

  # Gemma 3's sliding layers keep their keys in a ring of 1024 cells (window 512 plus
  # one micro-batch): "long" (1124 tokens) wraps it within the prompt, "wrap" (1011)
  # while decoding.
  GEMMA_PROMPTS = {
    "code" => QWEN_PROMPTS["code"],
    "chat" => "<start_of_turn>user\nWrite a Ruby method that reverses a string.<end_of_turn>\n" \
              "<start_of_turn>model\n",
    "story" => "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "long" => "#{NOTES.first(25).join("\n")}\nSummary of the notes above:",
    "wrap" => "#{NOTES.first(22).join("\n")}\nQuestion: of all the functions above, which one reads the most " \
              "bytes, how many bytes is that, and in which note is it described? Answer:"
  }.freeze

  MODELS = {
    "qwen2.5-coder-0.5b" => QWEN_PROMPTS,
    "qwen2.5-coder-1.5b" => QWEN_PROMPTS.slice("code", "long"),
    "gemma-3-270m" => GEMMA_PROMPTS
  }.freeze

  # The canary's prompts are ids: its vocabulary is synthetic.
  CANARY_PROMPTS = {
    "short" => [1, 50, 60, 70, 80],
    "long" => [1] + (0...700).map { |i| 3 + ((i * 7919) % 509) }
  }.freeze

  CHAT_MESSAGES = [
    { "role" => "system", "content" => "You are a concise coding assistant." },
    { "role" => "user", "content" => "How do I reverse an Array in Ruby?" },
    { "role" => "assistant", "content" => "Use `array.reverse` (or `reverse!` in place)." },
    { "role" => "user", "content" => "And a String? Answer in one line, with an émoji 🎉." }
  ].freeze

  module_function

  # The prompt llama.cpp renders for CHAT_MESSAGES (llama_chat_apply_template with
  # add_generation_prompt) and its token ids.
  def chat_case(model_path)
    text = Tempfile.create("elelem-chat") do |f|
      CHAT_MESSAGES.each { |m| f.puts("#{m["role"]}\t#{m["content"].unpack1("H*")}") }
      f.flush
      [Reference.run("chat", model_path, f.path).strip].pack("H*").force_encoding(Encoding::UTF_8)
    end
    { "messages" => CHAT_MESSAGES, "prompt_text" => text, "prompt" => Reference.tokenize(model_path, text) }
  end

  def write(name, model_path, cases)
    FileUtils.mkdir_p(Reference::GOLDENS)
    doc = {
      "model" => File.basename(model_path),
      "reference" => "llama.cpp from llama-cpp-sys-2 0.1.161 (tools/reference), greedy",
      "n_ctx" => Reference::N_CTX,
      "n_threads" => Reference::N_THREADS,
      "cases" => cases
    }
    path = File.join(Reference::GOLDENS, "#{name}.json")
    File.write(path, "#{JSON.pretty_generate(doc)}\n")
    puts "wrote #{path} (#{cases.size} cases)"
  end

  def text_case(model_path, name, text)
    ids = Reference.tokenize(model_path, text)
    output, output_text = Reference.generate(model_path, ids)
    { "name" => name, "prompt_text" => text, "prompt" => ids, "max_tokens" => Reference::N_PREDICT,
      "output" => output, "output_text" => output_text }
  end

  def write_chat
    path = File.join(Reference::GOLDENS, "chat-qwen2.5-coder-0.5b.json")
    File.write(path, "#{JSON.pretty_generate(chat_case(Elelem::Models.fetch("qwen2.5-coder-0.5b")))}\n")
    puts "wrote #{path}"
  end

  def run
    Reference.build
    MODELS.each do |name, prompts|
      path = Elelem::Models.fetch(name)
      write(name, path, prompts.map { |case_name, text| text_case(path, case_name, text) })
    end
    write_chat
    canary = File.join(Reference::ROOT, "tmp", "canary.gguf")
    cases = CANARY_PROMPTS.map do |case_name, ids|
      output, = Reference.generate(canary, ids, ignore_eos: true)
      { "name" => case_name, "prompt" => ids, "max_tokens" => Reference::N_PREDICT, "ignore_eos" => true,
        "output" => output }
    end
    write("tiny-llama-canary", canary, cases)
  end
end
