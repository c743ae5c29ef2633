// The chat surface of `elelem serve` through OpenAI's official JavaScript client (npm
// `openai`), the same checks as spec/support/openai_surface.py.
//
// Usage: NODE_PATH=<node_modules> node openai_surface.js BASE_URL CONFIG_JSON. Prints one
// JSON object of what the client received, for the spec to check.
"use strict";

const OpenAI = require("openai");

const [baseURL, configJSON] = process.argv.slice(2);
const config = JSON.parse(configJSON);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 120000 });
const tool = (name, description) => ({
  type: "function",
  function: {
    name, description,
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
});
const WEATHER = tool("get_weather", "The current weather in a city");
const TIME = tool("get_time", "The local time in a city");
const ASK = [{ role: "user", content: "What is the weather in Paris?" }];
const PERSON = {
  type: "object", properties: { name: { type: "string" }, age: { type: "integer" } },
  required: ["name", "age"], additionalProperties: false,
};

const chat = (body) => client.chat.completions.create({ model: "any", temperature: 0, max_tokens: 32, ...body });

function reply(completion) {
  const choice = completion.choices[0];
  const calls = (choice.message.tool_calls || []).map((c) => (
    { id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments }));
  return { content: choice.message.content, finish_reason: choice.finish_reason, tool_calls: calls };
}

async function main() {
  const out = { version: OpenAI.VERSION || require("openai/version").VERSION };
  out.roles = reply(await chat({
    messages: [
      { role: "developer", content: "You answer in one short sentence." },
      { role: "user", content: [{ type: "text", text: "What is the capital" }, { type: "text", text: "of France?" }] },
    ],
  }));
  out.system = reply(await chat({ messages: [{ role: "system", content: "You are terse." }, ...ASK] }));
  out.json_object = reply(await chat({
    messages: [{ role: "user", content: "A cat's name and age, as a JSON object." }],
    max_tokens: 120, response_format: { type: "json_object" },
  }));
  out.json_schema = reply(await chat({
    messages: [{ role: "user", content: "Invent a person, as JSON." }], max_tokens: 120,
    response_format: { type: "json_schema", json_schema: { name: "person", schema: PERSON, strict: true } },
  }));
  out.json_schema_schema = PERSON;
  for (const choice of ["auto", "none", "required"]) {
    out[`tools_${choice}`] = reply(await chat({ messages: ASK, tools: [WEATHER, TIME], tool_choice: choice }));
  }
  out.tools_named = reply(await chat({
    messages: ASK, tools: [WEATHER, TIME], tool_choice: { type: "function", function: { name: "get_time" } },
  }));

  const call = out.tools_required.tool_calls[0];
  out.round_trip = reply(await chat({
    messages: [
      ...ASK,
      {
        role: "assistant", content: null,
        tool_calls: [{ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } }],
      },
      { role: "tool", tool_call_id: call.id, content: JSON.stringify({ celsius: 18, sky: "clear" }) },
    ],
    tools: [WEATHER, TIME], tool_choice: "none",
  }));

  const calls = {};
  const chunks = [];
  let finish = null;
  const stream = await chat({ messages: ASK, tools: [WEATHER, TIME], tool_choice: "required", stream: true });
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      finish = choice.finish_reason || finish;
      for (const delta of choice.delta.tool_calls || []) {
        if (!(delta.index in calls)) {
          chunks.push({ id: delta.id, type: delta.type, name: delta.function.name });
          calls[delta.index] = { name: delta.function.name, arguments: "", pieces: 0 };
        } else {
          chunks.push({ later_id: delta.id ?? null, later_name: delta.function.name ?? null });
        }
        calls[delta.index].arguments += delta.function.arguments || "";
        if (delta.function.arguments) calls[delta.index].pieces += 1;
      }
    }
  }
  out.stream_tools = { calls: Object.keys(calls).sort().map((i) => calls[i]), finish_reason: finish, chunks };

  const several = await chat({ messages: ASK, n: 2, temperature: 1.0, seed: 7, max_tokens: 12 });
  out.n = {
    indexes: several.choices.map((c) => c.index), contents: several.choices.map((c) => c.message.content),
    completion_tokens: several.usage.completion_tokens,
  };
  const texts = {};
  let usage = null;
  const nStream = await chat({
    messages: ASK, n: 2, temperature: 1.0, seed: 7, max_tokens: 12, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of nStream) {
    if (chunk.usage) usage = { completion_tokens: chunk.usage.completion_tokens, choices: chunk.choices.length };
    for (const choice of chunk.choices) texts[choice.index] = (texts[choice.index] || "") + (choice.delta.content || "");
  }
  out.n_stream = { contents: Object.keys(texts).sort().map((i) => texts[i]), usage };

  const lp = await chat({ messages: ASK, max_tokens: 6, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs.content;
  out.logprobs = {
    tokens: content.length, completion_tokens: lp.usage.completion_tokens, top: content.map((t) => t.top_logprobs.length),
    text: content.map((t) => t.token).join(""), content: lp.choices[0].message.content,
  };

  const biased = await chat({
    messages: ASK, max_completion_tokens: 3, logit_bias: { [String(config.bias_token)]: 100 },
    presence_penalty: 0.5, frequency_penalty: 0.5, stop: ["\n\n", "###"], seed: 1, user: "someone",
  });
  out.sampling = {
    content: biased.choices[0].message.content, finish_reason: biased.choices[0].finish_reason,
    completion_tokens: biased.usage.completion_tokens,
  };

  for (const [name, extra] of [["unknown_field", { audio: { voice: "alloy" } }], ["too_many", { n: 9 }]]) {
    try {
      await chat({ messages: ASK, ...extra });
      out[name] = null;
    } catch (e) {
      if (!(e instanceof OpenAI.BadRequestError)) throw e;
      out[name] = { status: e.status, param: e.param, message: e.error?.message ?? e.message };
    }
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
