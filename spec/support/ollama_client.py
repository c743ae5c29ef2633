"""Talks to `elelem serve` with Ollama's official Python client, as an application would.

Usage: ollama_client.py CHAT_HOST EMBED_HOST. Prints one JSON object: what the client
parsed from list, show, ps, chat and generate (streamed and not), a reply in a JSON
Schema's shape (validated by pydantic), a tool call, embeddings, and the errors of refused requests.
"""

import json
import sys
from importlib.metadata import version

import ollama
from pydantic import BaseModel

chat_host, embed_host = sys.argv[1], sys.argv[2]
client = ollama.Client(host=chat_host, timeout=120)
embedder = ollama.Client(host=embed_host, timeout=120)
options = {"temperature": 0, "num_predict": 16}
messages = [{"role": "user", "content": "Write a Ruby method that adds two numbers."}]
out = {"version": version("ollama")}

name = client.list().models[0].model
out["list"] = [{"model": m.model, "size": m.size, "digest": m.digest, "family": m.details.family,
                "quantization": m.details.quantization_level} for m in client.list().models]
show = client.show(name)
out["show"] = {"family": show.details.family, "capabilities": show.capabilities, "template": show.template,
               "context_length": show.modelinfo["qwen2.context_length"]}
out["ps"] = [{"model": m.model, "context_length": m.context_length, "size": m.size} for m in client.ps().models]

chat = client.chat(model=name, messages=messages, options=options)
out["chat"] = {"content": chat.message.content, "role": chat.message.role, "done": chat.done,
               "done_reason": chat.done_reason, "eval_count": chat.eval_count,
               "prompt_eval_count": chat.prompt_eval_count, "total_duration": chat.total_duration}

parts = list(client.chat(model=name, messages=messages, options=options, stream=True))
out["chat_stream"] = {"content": "".join(p.message.content for p in parts), "chunks": len(parts),
                      "done": [p.done for p in parts], "done_reason": parts[-1].done_reason,
                      "eval_count": parts[-1].eval_count}

generated = client.generate(model=name, prompt="Say hello.", options=options)
out["generate"] = {"response": generated.response, "context": list(generated.context),
                   "done_reason": generated.done_reason, "eval_count": generated.eval_count}
raw = "".join(p.response for p in client.generate(model=name, prompt="def fibonacci(n):", raw=True,
                                                  options=options, stream=True))
out["generate_raw_stream"] = raw


class Person(BaseModel):
    name: str
    age: int


person = client.chat(model=name, messages=[{"role": "user", "content": "Ada Lovelace died at 36. Describe her as JSON."}],
                     format=Person.model_json_schema(), options={"temperature": 0, "num_predict": 64})
out["structured"] = {"content": person.message.content, "done_reason": person.done_reason,
                     "validated": Person.model_validate_json(person.message.content).model_dump()}
mode = client.generate(model=name, prompt="Reply with the JSON object {\"answer\": 42} and nothing else.",
                       format="json", options={"temperature": 0, "num_predict": 32})
out["json_mode"] = {"response": mode.response, "done_reason": mode.done_reason}

weather = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}}
called = client.chat(model=name, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                     tools=[weather], options={"temperature": 0, "num_predict": 48})
out["tools"] = {"content": called.message.content, "done_reason": called.done_reason,
                "calls": [{"name": c.function.name, "arguments": dict(c.function.arguments)}
                          for c in called.message.tool_calls or []]}

embedded = embedder.embed(model="any", input=["Why is the sky blue?", "Why is the grass green?"])
out["embed"] = {"embeddings": [list(e) for e in embedded.embeddings], "prompt_eval_count": embedded.prompt_eval_count}
out["embeddings"] = list(embedder.embeddings(model="any", prompt="Why is the sky blue?").embedding)

errors = {}
for label, call in {
    "images": lambda: client.chat(model=name, messages=[{"role": "user", "content": "What is it?",
                                                         "images": ["aGVsbG8="]}]),
    "num_ctx": lambda: client.chat(model=name, messages=messages, options={"num_ctx": 1 << 20}),
    "schema": lambda: client.chat(model=name, messages=messages, format={"type": "string", "pattern": "(?=x)"}),
    "chat_on_embedder": lambda: embedder.chat(model="any", messages=messages),
    "embed_on_decoder": lambda: client.embed(model=name, input="hi"),
}.items():
    try:
        call()
        errors[label] = None
    except ollama.ResponseError as e:
        errors[label] = {"status": e.status_code, "error": e.error}
out["errors"] = errors

print(json.dumps(out))
