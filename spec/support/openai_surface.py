"""The chat surface of `elelem serve` through OpenAI's official Python client, as an
application uses it: roles, JSON modes, tools with every tool_choice, a tool round trip,
streamed tool calls, n, logprobs, sampling fields, and the refusal of an unknown field.

Usage: openai_surface.py BASE_URL CONFIG_JSON, CONFIG_JSON holding `bias_token` (a
token id). Prints one JSON object of what the client received, for the spec to check
(spec/support/openai_surface.js does the same with the JavaScript client).
"""

import json
import sys

import openai

base_url, config = sys.argv[1], json.loads(sys.argv[2])
client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=120)
out = {"version": openai.__version__}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def chat(**kwargs):
    return client.chat.completions.create(**{"model": "any", "temperature": 0, "max_tokens": 32, **kwargs})


def reply(completion):
    choice = completion.choices[0]
    calls = [{"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments}
             for c in choice.message.tool_calls or []]
    return {"content": choice.message.content, "finish_reason": choice.finish_reason, "tool_calls": calls}


out["roles"] = reply(chat(messages=[
    {"role": "developer", "content": "You answer in one short sentence."},
    {"role": "user", "content": [{"type": "text", "text": "What is the capital"}, {"type": "text", "text": "of France?"}]},
]))
out["system"] = reply(chat(messages=[{"role": "system", "content": "You are terse."}] + ASK))

out["json_object"] = reply(chat(messages=[{"role": "user", "content": "A cat's name and age, as a JSON object."}],
                                max_tokens=120, response_format={"type": "json_object"}))
out["json_schema"] = reply(chat(messages=[{"role": "user", "content": "Invent a person, as JSON."}], max_tokens=120,
                                response_format={"type": "json_schema", "json_schema": {
                                    "name": "person", "schema": PERSON, "strict": True}}))
out["json_schema_schema"] = PERSON

for choice in ["auto", "none", "required"]:
    out["tools_" + choice] = reply(chat(messages=ASK, tools=[WEATHER, TIME], tool_choice=choice))
out["tools_named"] = reply(chat(messages=ASK, tools=[WEATHER, TIME],
                                tool_choice={"type": "function", "function": {"name": "get_time"}}))

# The round trip: the call the model made, its result, and the answer.
call = out["tools_required"]["tool_calls"][0]
messages = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]},
    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"celsius": 18, "sky": "clear"})},
]
out["round_trip"] = reply(chat(messages=messages, tools=[WEATHER, TIME], tool_choice="none"))

# Streamed calls, put back together as OpenAI's documentation does it, counting the pieces
# of each call's arguments.
calls, finish, first_chunks = {}, None, []
for chunk in chat(messages=ASK, tools=[WEATHER, TIME], tool_choice="required", stream=True):
    for choice in chunk.choices:
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            if delta.index not in calls:
                first_chunks.append({"id": delta.id, "type": delta.type, "name": delta.function.name})
                calls[delta.index] = {"name": delta.function.name, "arguments": "", "pieces": 0}
            else:
                first_chunks.append({"later_id": delta.id, "later_name": delta.function.name})
            calls[delta.index]["arguments"] += delta.function.arguments or ""
            calls[delta.index]["pieces"] += 1 if delta.function.arguments else 0
out["stream_tools"] = {"calls": [calls[i] for i in sorted(calls)], "finish_reason": finish, "chunks": first_chunks}

several = chat(messages=ASK, n=2, temperature=1.0, seed=7, max_tokens=12)
out["n"] = {"indexes": [c.index for c in several.choices], "contents": [c.message.content for c in several.choices],
            "completion_tokens": several.usage.completion_tokens}
texts, usage = {}, None
for chunk in chat(messages=ASK, n=2, temperature=1.0, seed=7, max_tokens=12, stream=True,
                  stream_options={"include_usage": True}):
    if chunk.usage:
        usage = {"completion_tokens": chunk.usage.completion_tokens, "choices": len(chunk.choices)}
    for choice in chunk.choices:
        texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
out["n_stream"] = {"contents": [texts[i] for i in sorted(texts)], "usage": usage}

lp = chat(messages=ASK, max_tokens=6, logprobs=True, top_logprobs=3)
out["logprobs"] = {"tokens": len(lp.choices[0].logprobs.content), "completion_tokens": lp.usage.completion_tokens,
                   "top": [len(t.top_logprobs) for t in lp.choices[0].logprobs.content],
                   "text": "".join(t.token for t in lp.choices[0].logprobs.content),
                   "content": lp.choices[0].message.content}

biased = chat(messages=ASK, max_completion_tokens=3, logit_bias={str(config["bias_token"]): 100},
              presence_penalty=0.5, frequency_penalty=0.5, stop=["\n\n", "###"], seed=1, user="someone")
out["sampling"] = {"content": biased.choices[0].message.content, "finish_reason": biased.choices[0].finish_reason,
                   "completion_tokens": biased.usage.completion_tokens}

# The Responses API: a reply, then the same streamed; a forced function call, then the same streamed.
def response(**kwargs):
    return client.responses.create(**{"model": "any", "temperature": 0, "max_output_tokens": 24, **kwargs})


FUNCTION = {"type": "function", **WEATHER["function"]}
said = response(instructions="You answer in one short sentence.", input="What is the capital of France?")
out["responses"] = {"id": said.id, "status": said.status, "text": said.output_text,
                    "types": [item.type for item in said.output],
                    "usage": [said.usage.input_tokens, said.usage.output_tokens, said.usage.total_tokens]}
events = list(response(instructions="You answer in one short sentence.", input="What is the capital of France?",
                       stream=True))
out["responses_stream"] = {"types": [e.type for e in events], "completed": events[-1].response.output_text,
                           "text": "".join(e.delta for e in events if e.type == "response.output_text.delta")}
called = response(input=ASK, tools=[FUNCTION], tool_choice="required", max_output_tokens=32)
out["responses_call"] = [{"type": c.type, "name": c.name, "arguments": c.arguments, "call_id": c.call_id}
                         for c in called.output if c.type == "function_call"]
events = list(response(input=ASK, tools=[FUNCTION], tool_choice="required", max_output_tokens=32, stream=True))
pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
out["responses_call_stream"] = {"pieces": len(pieces), "arguments": "".join(pieces),
                                "done": [e.item.arguments for e in events if e.type == "response.output_item.done"]}
try:
    response(input="hi", previous_response_id="resp_1")
    out["responses_refused"] = None
except openai.BadRequestError as e:
    out["responses_refused"] = {"status": e.status_code, "param": e.param}

for name, extra in [("unknown_field", {"extra_body": {"audio": {"voice": "alloy"}}}), ("too_many", {"n": 9})]:
    try:
        chat(messages=ASK, **extra)
        out[name] = None
    except openai.BadRequestError as e:
        out[name] = {"status": e.status_code, "param": e.param, "message": e.message}

print(json.dumps(out))
