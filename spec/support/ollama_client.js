// Talks to `elelem serve` with Ollama's official JavaScript client (the `ollama` npm package).
//
// Usage: NODE_PATH=... node ollama_client.js CHAT_HOST EMBED_HOST. Prints one JSON object: what
// the client parsed from list, show, version, chat and generate (streamed and not), a reply in
// a JSON Schema's shape, embeddings, and the error of a refused request.
const { Ollama } = require("ollama");

async function main() {
  const [chatHost, embedHost] = process.argv.slice(2);
  const client = new Ollama({ host: chatHost });
  const embedder = new Ollama({ host: embedHost });
  const options = { temperature: 0, num_predict: 16 };
  const messages = [{ role: "user", content: "Write a Ruby method that adds two numbers." }];
  const out = { version: require("ollama/package.json").version };

  const listed = await client.list();
  const name = listed.models[0].model;
  out.list = listed.models.map((m) => ({ model: m.model, family: m.details.family }));
  const show = await client.show({ model: name });
  out.show = { family: show.details.family, capabilities: show.capabilities };
  out.server_version = (await client.version()).version;

  const chat = await client.chat({ model: name, messages, options });
  out.chat = { content: chat.message.content, done: chat.done, done_reason: chat.done_reason,
               eval_count: chat.eval_count };
  let content = "";
  let last = null;
  for await (const part of await client.chat({ model: name, messages, options, stream: true })) {
    content += part.message.content;
    last = part;
  }
  out.chat_stream = { content, done: last.done, done_reason: last.done_reason, eval_count: last.eval_count };

  const generated = await client.generate({ model: name, prompt: "Say hello.", options });
  out.generate = { response: generated.response, done_reason: generated.done_reason };

  const schema = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } },
                   required: ["name", "age"] };
  const person = await client.chat({ model: name, format: schema, options: { temperature: 0, num_predict: 64 },
    messages: [{ role: "user", content: "Ada Lovelace died at 36. Describe her as JSON." }] });
  out.structured = JSON.parse(person.message.content);

  const embedded = await embedder.embed({ model: "any", input: ["Why is the sky blue?", "Why is the grass green?"] });
  out.embed = embedded.embeddings;

  try {
    await client.chat({ model: name, messages: [{ role: "user", content: "What is it?", images: ["aGVsbG8="] }] });
    out.images = null;
  } catch (e) {
    out.images = { status: e.status_code, error: e.error };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
