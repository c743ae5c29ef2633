# frozen_string_literal: true

# Prompts of our own for speculative decoding's measurements (tasks/speculative_agreement.rb,
# the bench rows): code to complete, and edits whose answer repeats most of the prompt.
module SpeculativePrompts
  COMPLETIONS = [
    "def quicksort(arr):\n", "def is_palindrome(s: str) -> bool:\n",
    "class LRUCache:\n    def __init__(self, capacity):\n",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists.\"\"\"\n", "import json\n\ndef load_config(path):\n",
    "def word_count(text):\n", "def binary_search(items, target):\n", "def flatten(nested):\n",
    "class Stack\n  def initialize\n", "def fizzbuzz(n)\n", "module Slug\n  def self.slugify(title)\n",
    "function debounce(fn, ms) {\n", "function deepClone(obj) {\n", "const sum = (xs) =>",
    "async function fetchJSON(url) {\n", "fn gcd(a: u64, b: u64) -> u64 {\n", "fn reverse_words(s: &str) -> String {\n",
    "func Max(xs []int) int {\n", "int factorial(int n) {\n", "#include <stdio.h>\n\nint main(void) {\n",
    "SELECT name, COUNT(*) AS orders\nFROM customers\n", "public static boolean isPrime(int n) {\n",
    "def parse_csv_line(line):\n", "def transpose(matrix):\n", "def celsius_to_fahrenheit(c):\n"
  ].freeze

  FUNCTIONS = [
    "def add_all(values):\n    total = 0\n    for v in values:\n        total += v\n    return total\n",
    "def find_max(items):\n    best = items[0]\n    for item in items:\n        if item > best:\n            " \
    "best = item\n    return best\n",
    "def count_vowels(text):\n    count = 0\n    for ch in text:\n        if ch in \"aeiou\":\n            " \
    "count += 1\n    return count\n",
    "def squares(n):\n    result = []\n    for i in range(n):\n        result.append(i * i)\n    return result\n",
    "def average(numbers):\n    if len(numbers) == 0:\n        return 0\n    return sum(numbers) / len(numbers)\n"
  ].freeze

  EDITS = [
    "Rename the function to %<name>s", "Add type hints to every parameter and the return value",
    "Add a docstring that explains what it does",
    "Rewrite it with a descriptive variable name instead of the short one",
    "Translate it to Ruby"
  ].freeze

  NAMES = %w[compute process run apply evaluate].freeze

  module_function

  # An edit: the instruction, the function, and the start of the answer.
  def edit(instruction, function)
    "#{instruction}. Reply with the whole function only.\n\n```python\n#{function}```\n\nThe edited function:\n\n```"
  end

  # 25 completions and 25 edits.
  def all
    edits = EDITS.each_with_index.flat_map do |instruction, i|
      FUNCTIONS.map { |f| edit(format(instruction, name: NAMES[i]), f) }
    end
    COMPLETIONS + edits
  end
end
