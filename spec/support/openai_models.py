"""Talks to `elelem serve` with two models through OpenAI's official Python client.

Usage: openai_models.py BASE_URL MODEL_A MODEL_B. Prints one JSON object: the models the
client lists (with the `status` the server adds), the model each chat and completion
reply names, the list again, and the error an unknown model gets.
"""

import json
import sys

import openai

base_url, names = sys.argv[1], sys.argv[2:]
client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=60)
out = {"version": openai.__version__}


def listed():
    return [[m.id, m.model_extra["status"]["value"]] for m in client.models.list()]


out["listed"] = listed()
messages = [{"role": "user", "content": "Say hello."}]
out["chat"] = [client.chat.completions.create(model=name, messages=messages, max_tokens=2).model for name in names]
out["completion"] = [client.completions.create(model=name, prompt="Hi", max_tokens=2).model for name in names]
out["listed_after"] = listed()

try:
    client.completions.create(model="mistral", prompt="Hi", max_tokens=2)
    out["unknown"] = None
except openai.NotFoundError as e:
    out["unknown"] = {"status": e.status_code, "code": e.code}

print(json.dumps(out))
