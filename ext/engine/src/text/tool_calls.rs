//! Tool calls and reasoning in a model's reply: which format a chat template
//! teaches, how to read calls back out of the generated text, and the lazy
//! constraint that keeps a call's arguments to the tool's JSON schema.
//!
//! The formats are the ones llama.cpp's `common/chat.cpp` recognizes from the
//! template's source:
//! - Hermes (Qwen 2.5/3, Hermes 2/3, QwQ, …): `<tool_call>\n{"name": …,
//!   "arguments": {…}}\n</tool_call>`, one block per call; Qwen2.5-Coder
//!   often writes the bare object instead, so a reply that is one is a call too;
//! - Llama 3.x: a bare JSON object `{"name": …, "parameters": {…}}`, maybe after
//!   `<|python_tag|>`;
//! - Mistral: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}`
//!   (Nemo), or `[TOOL_CALLS]name[ARGS]{…}` per call (Small 3.2, Devstral:
//!   [`ToolCallFormat::MistralArgs`]).
//!
//! Reasoning is the text inside `<think>…</think>`; a reply that only closes
//! the block (the template opened it in the prompt) has its reasoning before
//! `</think>`.

use serde_json::{json, Map, Value};

use crate::text::constraint::{ConstraintSpec, Trigger};
use crate::{Error, Result};

/// How a chat template writes the assistant's tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCallFormat {
    Hermes,
    Llama3Json,
    Mistral,
    MistralArgs,
    /// A template with no tool-call format we read: replies are plain text.
    Unsupported,
}

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

/// A reply split into what the user reads, what the model thought, and the
/// calls it made.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedReply {
    pub content: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

impl ToolCallFormat {
    /// The format a chat template's source teaches, by the markers llama.cpp's
    /// `common/chat.cpp` looks for.
    pub fn detect(template: &str) -> ToolCallFormat {
        if template.contains("[TOOL_CALLS]") && template.contains("[ARGS]") {
            ToolCallFormat::MistralArgs
        } else if template.contains("[TOOL_CALLS]") {
            ToolCallFormat::Mistral
        } else if template.contains("<tool_call>") && !template.contains("<function=") {
            // Qwen3-Coder's `<tool_call><function=…><parameter=…>` is XML, not JSON.
            ToolCallFormat::Hermes
        } else if template.contains("<|start_header_id|>")
            && (template.contains("<|python_tag|>") || template.contains("ipython"))
        {
            ToolCallFormat::Llama3Json
        } else {
            ToolCallFormat::Unsupported
        }
    }

    /// Splits a complete reply. A call that does not parse stays in the
    /// content, as the model wrote it.
    pub fn parse(self, text: &str) -> ParsedReply {
        let (reasoning, text) = split_reasoning(text);
        let (content, tool_calls) = match self {
            ToolCallFormat::Hermes => parse_hermes(text),
            ToolCallFormat::Llama3Json => parse_llama3(text),
            ToolCallFormat::Mistral | ToolCallFormat::MistralArgs => parse_mistral(text),
            ToolCallFormat::Unsupported => (text.to_string(), Vec::new()),
        };
        ParsedReply {
            content: content.trim().to_string(),
            reasoning,
            tool_calls,
        }
    }

    /// The triggers of the lazy constraint ([`crate::Constraint::lazy`]) that
    /// keeps calls to `tools` well-formed: OpenAI's `{"type": "function",
    /// "function": {"name", "parameters"}}`, or the inner object alone. Empty
    /// for a format without calls.
    pub fn triggers(self, tools: &[Value]) -> Result<Vec<Trigger>> {
        if self == ToolCallFormat::Unsupported {
            return Ok(Vec::new());
        }
        if tools.is_empty() {
            return Err(Error::InvalidArgument("tools: needs at least one tool".into()));
        }
        let arguments_key = if self == ToolCallFormat::Llama3Json {
            "parameters"
        } else {
            "arguments"
        };
        let calls = tools
            .iter()
            .map(|tool| call_schema(tool, arguments_key))
            .collect::<Result<Vec<Value>>>()?;
        let call = json!({ "anyOf": calls });
        // A reply that opens with the call object itself: the rest of the object.
        let bare = Trigger {
            text: "{\"name\":".into(),
            spec: ConstraintSpec::Lark(object_rest(tools, arguments_key)?),
            at_start: true,
        };
        Ok(match self {
            ToolCallFormat::Hermes => vec![
                Trigger {
                    text: "<tool_call>".into(),
                    spec: ConstraintSpec::Lark(format!("start: /[ \\n]*/ %json {call} /[ \\n]*/ \"</tool_call>\"")),
                    at_start: false,
                },
                bare,
            ],
            ToolCallFormat::Llama3Json => vec![
                Trigger {
                    text: "<|python_tag|>".into(),
                    spec: ConstraintSpec::JsonSchema(call),
                    at_start: false,
                },
                bare,
            ],
            ToolCallFormat::Mistral => vec![Trigger {
                text: "[TOOL_CALLS]".into(),
                spec: ConstraintSpec::JsonSchema(json!({ "type": "array", "items": call, "minItems": 1 })),
                at_start: false,
            }],
            ToolCallFormat::MistralArgs => {
                let alternatives = tools
                    .iter()
                    .map(|tool| {
                        let (name, parameters) = tool_parts(tool)?;
                        Ok(format!("{} \"[ARGS]\" %json {parameters}", lark_string(name)))
                    })
                    .collect::<Result<Vec<_>>>()?;
                vec![Trigger {
                    text: "[TOOL_CALLS]".into(),
                    spec: ConstraintSpec::Lark(format!("start: {}", alternatives.join(" | "))),
                    at_start: false,
                }]
            }
            ToolCallFormat::Unsupported => Vec::new(),
        })
    }
}

/// A Lark literal matching `text` exactly.
fn lark_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string always serializes")
}

/// `(name, parameters schema)` of an OpenAI-style tool or a bare function.
fn tool_parts(tool: &Value) -> Result<(&str, Value)> {
    let function = tool.get("function").unwrap_or(tool);
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::InvalidArgument(format!("tool without a name: {tool}")))?;
    let parameters = function
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({ "type": "object" }));
    Ok((name, parameters))
}

/// The JSON schema of one call object to `tool`.
fn call_schema(tool: &Value, arguments_key: &str) -> Result<Value> {
    let (name, parameters) = tool_parts(tool)?;
    let mut properties = Map::new();
    properties.insert("name".into(), json!({ "const": name }));
    properties.insert(arguments_key.into(), parameters);
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": ["name", arguments_key],
        "additionalProperties": false,
    }))
}

/// What may follow `{"name":` in a call object: one of the tools' names, its
/// arguments under `arguments_key`, the closing brace.
fn object_rest(tools: &[Value], arguments_key: &str) -> Result<String> {
    let mut alternatives = Vec::new();
    for tool in tools {
        let (name, parameters) = tool_parts(tool)?;
        alternatives.push(format!(
            "{} WS \",\" WS {} WS \":\" WS %json {parameters}",
            lark_string(&lark_string(name)),
            lark_string(&lark_string(arguments_key))
        ));
    }
    Ok(format!(
        "start: WS call WS \"}}\"\ncall: {}\nWS: /[ \\n]*/\n",
        alternatives.join(" | ")
    ))
}

/// `(reasoning, rest)`: the text inside `<think>…</think>`, or before a lone
/// `</think>`.
pub fn split_reasoning(text: &str) -> (Option<String>, &str) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let Some(close) = text.find(CLOSE) else {
        // Still thinking when the text ended.
        return match text.trim_start().strip_prefix(OPEN) {
            Some(thought) => (Some(thought.trim().to_string()), ""),
            None => (None, text),
        };
    };
    let before = &text[..close];
    let thought = match before.find(OPEN) {
        Some(open) => &before[open + OPEN.len()..],
        None => before,
    };
    (Some(thought.trim().to_string()), &text[close + CLOSE.len()..])
}

/// A call object: `{"name": …, "arguments" | "parameters": …}`; arguments
/// given as a JSON string (some models do) are parsed.
fn read_call(value: &Value) -> Option<ToolCall> {
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = value
        .get("arguments")
        .or_else(|| value.get("parameters"))
        .cloned()
        .unwrap_or(json!({}));
    let arguments = match arguments {
        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        other => other,
    };
    Some(ToolCall { name, arguments })
}

fn parse_hermes(text: &str) -> (String, Vec<ToolCall>) {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(OPEN) {
        let body_start = open + OPEN.len();
        let (body, after) = match rest[body_start..].find(CLOSE) {
            Some(close) => (
                &rest[body_start..body_start + close],
                &rest[body_start + close + CLOSE.len()..],
            ),
            // Cut short (max_tokens): what there is may still parse.
            None => (&rest[body_start..], ""),
        };
        match serde_json::from_str::<Value>(body.trim())
            .ok()
            .as_ref()
            .and_then(read_call)
        {
            Some(call) => {
                content.push_str(&rest[..open]);
                calls.push(call);
            }
            None => content.push_str(&rest[..rest.len() - after.len()]),
        }
        rest = after;
    }
    content.push_str(rest);
    if calls.is_empty() {
        // Qwen2.5-Coder's habit: the reply is the bare call object.
        let (bare, calls) = parse_bare_calls(text);
        if !calls.is_empty() {
            return (bare, calls);
        }
    }
    (content, calls)
}

fn parse_llama3(text: &str) -> (String, Vec<ToolCall>) {
    let body = text.trim_start();
    parse_bare_calls(body.strip_prefix("<|python_tag|>").unwrap_or(body))
}

/// A reply that is nothing but call objects (in a code fence, or separated by
/// `;` as Llama 3.x sometimes writes them); otherwise the text and no call.
fn parse_bare_calls(text: &str) -> (String, Vec<ToolCall>) {
    let mut rest = text.trim();
    if let Some(fenced) = rest.strip_prefix("```") {
        let fenced = fenced.strip_prefix("json").unwrap_or(fenced);
        rest = fenced.strip_suffix("```").unwrap_or(fenced).trim();
    }
    let mut calls = Vec::new();
    while !rest.is_empty() {
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let Some(call) = stream.next().and_then(|value| value.ok()).as_ref().and_then(read_call) else {
            return (text.to_string(), Vec::new());
        };
        calls.push(call);
        rest = rest[stream.byte_offset()..].trim_start();
        rest = rest.strip_prefix(';').unwrap_or(rest).trim_start();
    }
    (String::new(), calls)
}

fn parse_mistral(text: &str) -> (String, Vec<ToolCall>) {
    const TAG: &str = "[TOOL_CALLS]";
    const ARGS: &str = "[ARGS]";
    let Some(at) = text.find(TAG) else {
        return (text.to_string(), Vec::new());
    };
    let content = text[..at].to_string();
    let body = text[at + TAG.len()..].trim();
    if body.starts_with('[') {
        // Nemo: one JSON array of calls.
        let mut stream = serde_json::Deserializer::from_str(body).into_iter::<Value>();
        if let Some(Ok(Value::Array(items))) = stream.next() {
            if let Some(calls) = items.iter().map(read_call).collect::<Option<Vec<_>>>() {
                return (content + body[stream.byte_offset()..].trim(), calls);
            }
        }
        return (text.to_string(), Vec::new());
    }
    // Small 3.2 / Devstral: name[ARGS]{…}, repeated after another tag.
    let mut calls = Vec::new();
    for part in text[at..].split(TAG).skip(1) {
        let Some((name, arguments)) = part.split_once(ARGS) else {
            return (text.to_string(), Vec::new());
        };
        let mut stream = serde_json::Deserializer::from_str(arguments.trim()).into_iter::<Value>();
        match stream.next() {
            Some(Ok(arguments)) => calls.push(ToolCall {
                name: name.trim().to_string(),
                arguments,
            }),
            _ => return (text.to_string(), Vec::new()),
        }
    }
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn detects_formats_from_real_templates() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../vendor/llama.cpp/models/templates/");
        let Ok(entries) = std::fs::read_dir(dir) else {
            eprintln!("skipped: no {dir} (rake peer_suite fetches it)");
            return;
        };
        let mut seen = std::collections::BTreeMap::new();
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            seen.insert(name, ToolCallFormat::detect(&std::fs::read_to_string(&path).unwrap()));
        }
        for (template, format) in [
            ("Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::Hermes),
            ("Qwen-Qwen3-0.6B.jinja", ToolCallFormat::Hermes),
            (
                "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                ToolCallFormat::Hermes,
            ),
            ("meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::Llama3Json),
            ("meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::Llama3Json),
            ("meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::Llama3Json),
            ("mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::Mistral),
            ("Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::MistralArgs),
            ("Qwen3-Coder.jinja", ToolCallFormat::Unsupported),
            ("google-gemma-2-2b-it.jinja", ToolCallFormat::Unsupported),
        ] {
            assert_eq!(seen.get(template), Some(&format), "{template}");
        }
    }

    #[test]
    fn reads_hermes_calls_and_keeps_the_text_around_them() {
        // Qwen2.5-Coder-1.5B-Instruct's reply to "weather in Paris and Rome?".
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
        let reply = ToolCallFormat::Hermes.parse(text);
        assert_eq!(reply.content, "Let me check.");
        assert_eq!(
            reply.tool_calls,
            vec![
                call("get_weather", json!({"city": "Paris"})),
                call("get_weather", json!({"city": "Rome"}))
            ]
        );
        // Qwen2.5-Coder-0.5B-Instruct, asked the weather in Paris with the tool.
        let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}";
        let reply = ToolCallFormat::Hermes.parse(bare);
        assert_eq!(
            reply.tool_calls,
            vec![call("get_weather", json!({"city": "Paris", "unit": "celsius"}))]
        );
        assert_eq!(reply.content, "");
        let fenced = ToolCallFormat::Hermes.parse("```json\n{\"name\": \"w\", \"arguments\": {}}\n```");
        assert_eq!(fenced.tool_calls, vec![call("w", json!({}))]);
        let broken = "<tool_call>\n{\"name\": \"get_weather\", \"argu</tool_call> ok";
        let reply = ToolCallFormat::Hermes.parse(broken);
        assert_eq!(reply.content, broken);
        assert!(reply.tool_calls.is_empty());
    }

    #[test]
    fn splits_reasoning() {
        let reply = ToolCallFormat::Hermes.parse(
            "<think>\nThe user wants Paris.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
        );
        assert_eq!(reply.reasoning.as_deref(), Some("The user wants Paris."));
        assert_eq!(reply.content, "");
        assert_eq!(reply.tool_calls, vec![call("w", json!({}))]);
        // Qwen3 with the block opened by the template.
        assert_eq!(split_reasoning("hmm</think>\n\nHi"), (Some("hmm".into()), "\n\nHi"));
        assert_eq!(split_reasoning("<think>cut sh"), (Some("cut sh".into()), ""));
        assert_eq!(split_reasoning("Hi"), (None, "Hi"));
    }

    #[test]
    fn reads_llama3_calls() {
        let reply =
            ToolCallFormat::Llama3Json.parse("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
        assert_eq!(reply.tool_calls, vec![call("get_weather", json!({"city": "Paris"}))]);
        let reply = ToolCallFormat::Llama3Json.parse(
            "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}",
        );
        assert_eq!(reply.tool_calls, vec![call("a", json!({})), call("b", json!({"x": 1}))]);
        let reply = ToolCallFormat::Llama3Json.parse("The answer is {\"name\": 1}");
        assert_eq!(
            (reply.content.as_str(), reply.tool_calls.len()),
            ("The answer is {\"name\": 1}", 0)
        );
    }

    #[test]
    fn reads_mistral_calls() {
        let reply = ToolCallFormat::Mistral.parse(
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123def\"}]",
        );
        assert_eq!(reply.tool_calls, vec![call("get_weather", json!({"city": "Paris"}))]);
        let reply = ToolCallFormat::Mistral
            .parse("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}");
        assert_eq!(
            reply.tool_calls,
            vec![
                call("get_weather", json!({"city": "Paris"})),
                call("get_time", json!({}))
            ]
        );
    }

    #[test]
    fn builds_call_constraints() {
        let tools = [json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})];
        let hermes = ToolCallFormat::Hermes.triggers(&tools).unwrap();
        let texts: Vec<&str> = hermes.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(texts, ["<tool_call>", "{\"name\":"]);
        assert!(ToolCallFormat::Unsupported.triggers(&tools).unwrap().is_empty());
        assert!(ToolCallFormat::Hermes.triggers(&[json!({"parameters": {}})]).is_err());
    }
}
