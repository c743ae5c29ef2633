"""Talks to `elelem serve` with OpenAI's official Python client, as an application would.

Usage: openai_client.py BASE_URL API_KEY. Prints one JSON object: for chat and
completions, streaming and not, the text, the finish reason, the usage and what the
client parsed; then the models listed, and the error a wrong key gets.
"""

import json
import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
messages = [{"role": "user", "content": "Write a Ruby method that adds two numbers."}]
prompt = "def fibonacci(n):"
out = {"version": openai.__version__}

chat = client.chat.completions.create(model="any", messages=messages, max_tokens=16, temperature=0,
                                      logprobs=True, top_logprobs=2)
out["chat"] = {
    "id": chat.id, "object": chat.object, "text": chat.choices[0].message.content,
    "role": chat.choices[0].message.role, "finish_reason": chat.choices[0].finish_reason,
    "usage": chat.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}),
    "logprob_tokens": "".join(t.token for t in chat.choices[0].logprobs.content),
    "top_logprobs": [len(t.top_logprobs) for t in chat.choices[0].logprobs.content],
}

stream = client.chat.completions.create(model="any", messages=messages, max_tokens=16, temperature=0, stream=True,
                                        stream_options={"include_usage": True})
pieces, finish, usage, chunks = [], None, None, 0
for chunk in stream:
    chunks += 1
    if chunk.usage:
        usage = chunk.usage.completion_tokens
    for choice in chunk.choices:
        pieces.append(choice.delta.content or "")
        finish = choice.finish_reason or finish
out["chat_stream"] = {"text": "".join(pieces), "finish_reason": finish, "completion_tokens": usage, "chunks": chunks}

completion = client.completions.create(model="any", prompt=prompt, max_tokens=16, temperature=0, logprobs=2)
out["completion"] = {
    "id": completion.id, "object": completion.object, "text": completion.choices[0].text,
    "finish_reason": completion.choices[0].finish_reason, "usage": completion.usage.total_tokens,
    "logprob_tokens": "".join(completion.choices[0].logprobs.tokens),
}

pieces, finish = [], None
for chunk in client.completions.create(model="any", prompt=prompt, max_tokens=16, temperature=0, stream=True):
    pieces.append(chunk.choices[0].text)
    finish = chunk.choices[0].finish_reason or finish
out["completion_stream"] = {"text": "".join(pieces), "finish_reason": finish}

out["models"] = [m.id for m in client.models.list()]

try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    out["wrong_key"] = None
except openai.AuthenticationError as e:
    out["wrong_key"] = {"status": e.status_code, "code": e.code}

try:
    client.chat.completions.create(model="any", messages=messages, temperature=5)
    out["bad_request"] = None
except openai.BadRequestError as e:
    out["bad_request"] = {"status": e.status_code, "param": e.param}

print(json.dumps(out))
