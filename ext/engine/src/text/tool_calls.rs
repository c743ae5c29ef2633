//! Tool calls and reasoning in a model's reply: which format a chat template
//! teaches, how to read calls back out of the generated text, and the lazy
//! constraint that keeps a call's arguments to the tool's JSON schema.
//!
//! The formats are the ones llama.cpp's `common/chat.cpp` recognizes from the
//! template's source:
//! - Hermes (Qwen 2.5/3, Hermes 2/3, QwQ, …): `<tool_call>\n{"name": …,
//!   "arguments": {…}}\n</tool_call>`, one block per call; Qwen2.5-Coder
//!   often writes the bare object instead, in a code fence or not, and the
//!   1.5B copies its template's doubled braces (`{{"name": …}}`). Everything
//!   llama.cpp's Hermes 2 Pro parser reads is read: the other tags around the
//!   object (`<function_call>`, `<tools>`, `<json>`, …), code fences, and
//!   `<function=name>{…}</function>` or `<function name="name">`;
//! - Llama 3.x: a bare JSON object `{"name": …, "parameters": {…}}` (maybe with
//!   `"type": "function"`), maybe after `<|python_tag|>`, several separated by `;`;
//! - Mistral: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments", "id"}`
//!   (Nemo), or `[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}` per call, the id
//!   optional (Small 3.2, Devstral: [`ToolCallFormat::MistralArgs`]);
//! - Functionary v3.1: `<function=name>{…}</function>`; v3.2: `>>>name\n{…}`
//!   blocks, `>>>all\n` before text for the user;
//! - FireFunction v2: ` functools[{"name", "arguments"}, …]`.
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
    FunctionaryV31,
    FunctionaryV32,
    FireFunction,
    /// A template with no tool-call format we read: replies are plain text.
    Unsupported,
}

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
    /// The call's id where the model writes one (Mistral's).
    pub id: Option<String>,
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
        } else if template.contains(">>>all") {
            ToolCallFormat::FunctionaryV32
        } else if template.contains("functools[") {
            ToolCallFormat::FireFunction
        } else if template.contains("<function=") && !template.contains("<parameter=") {
            ToolCallFormat::FunctionaryV31
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
            ToolCallFormat::Hermes | ToolCallFormat::FunctionaryV31 => parse_hermes(text),
            ToolCallFormat::Llama3Json => parse_llama3(text),
            ToolCallFormat::FunctionaryV32 => parse_functionary_v3_2(text),
            ToolCallFormat::FireFunction => parse_firefunction(text),
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
            ToolCallFormat::Mistral | ToolCallFormat::FireFunction => vec![Trigger {
                text: if self == ToolCallFormat::Mistral {
                    "[TOOL_CALLS]"
                } else {
                    "functools"
                }
                .into(),
                spec: ConstraintSpec::JsonSchema(json!({ "type": "array", "items": call, "minItems": 1 })),
                at_start: false,
            }],
            ToolCallFormat::MistralArgs => vec![named_arguments_trigger(tools, "[TOOL_CALLS]", "\"[ARGS]\"", "", &[])?],
            ToolCallFormat::FunctionaryV31 => {
                vec![named_arguments_trigger(
                    tools,
                    "<function=",
                    "\">\"",
                    " \"</function>\"",
                    &[],
                )?]
            }
            // The first block follows the prompt's own `>>>`: only the later ones are held.
            ToolCallFormat::FunctionaryV32 => {
                vec![named_arguments_trigger(tools, ">>>", "\"\\n\"", "", &["\"all\\n\""])?]
            }
            ToolCallFormat::Unsupported => Vec::new(),
        })
    }
}

/// A trigger on `text` after which the model writes one of the tools' names,
/// `separator`, its arguments and `end` (Lark), or one of `others`.
fn named_arguments_trigger(
    tools: &[Value],
    text: &str,
    separator: &str,
    end: &str,
    others: &[&str],
) -> Result<Trigger> {
    let mut alternatives = tools
        .iter()
        .map(|tool| {
            let (name, parameters) = tool_parts(tool)?;
            Ok(format!("{} {separator} %json {parameters}{end}", lark_string(name)))
        })
        .collect::<Result<Vec<_>>>()?;
    alternatives.extend(others.iter().map(|other| other.to_string()));
    Ok(Trigger {
        text: text.into(),
        spec: ConstraintSpec::Lark(format!("start: {}", alternatives.join(" | "))),
        at_start: false,
    })
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

/// A call object: `{"name": …, "arguments" | "parameters": …}`, or OpenAI's
/// `{"type": "function", "function": {…}}` around one; arguments given as a JSON string
/// (some models do) are parsed, and an `id` is kept. A tool's definition (a model echoing
/// the tools it was shown: `parameters` a JSON schema of an object) is not a call, as
/// llama.cpp does not read one.
fn read_call(value: &Value) -> Option<ToolCall> {
    if let Some(function) = value.get("function").filter(|f| f.is_object()) {
        return read_call(function).map(|call| ToolCall {
            id: call.id.or_else(|| id_of(value)),
            ..call
        });
    }
    let name = value.get("name")?.as_str()?.to_string();
    let definition = value.get("arguments").is_none()
        && value
            .get("parameters")
            .is_some_and(|p| p.get("type") == Some(&json!("object")) && p["properties"].is_object());
    if definition {
        return None;
    }
    let arguments = value
        .get("arguments")
        .or_else(|| value.get("parameters"))
        .cloned()
        .unwrap_or(json!({}));
    Some(ToolCall {
        name,
        arguments: arguments_value(arguments),
        id: id_of(value),
    })
}

fn id_of(value: &Value) -> Option<String> {
    value.get("id").and_then(Value::as_str).map(str::to_string)
}

/// Arguments written as a JSON string, parsed; anything else as it is.
fn arguments_value(arguments: Value) -> Value {
    match arguments {
        Value::String(s) => lenient_json(&s).unwrap_or(Value::String(s)),
        other => other,
    }
}

/// The length of the JSON object or array that `text` opens, by its brackets
/// (strings and their escapes skipped); `None` when it is not closed.
fn bracketed_len(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// JSON as models write it: as it is, or with the doubled braces of a template
/// that shows its example call inside a Jinja or Python format string
/// (Qwen2.5-Coder-1.5B writes `{{"name": …, "arguments": {…}}}` after
/// reading its own template's `{{`): one pair around the object, or every
/// brace doubled.
fn lenient_json(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Ok(value) = serde_json::from_str(text) {
        return Some(value);
    }
    if !text.starts_with("{{") {
        return None;
    }
    let inner = text.strip_prefix('{').and_then(|t| t.strip_suffix('}'))?;
    serde_json::from_str(inner)
        .ok()
        .or_else(|| serde_json::from_str(&undoubled_braces(text)).ok())
}

/// `text` with each `{{` and `}}` outside strings written once.
fn undoubled_braces(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if (c == '{' || c == '}') && chars.peek() == Some(&c) {
            chars.next();
        }
    }
    out
}

/// The call object that `text` opens (after blanks, maybe with its braces
/// doubled) and the bytes it takes.
fn object_call(text: &str) -> Option<(ToolCall, usize)> {
    let start = text.len() - text.trim_start().len();
    let len = bracketed_len(&text[start..])?;
    let call = read_call(&lenient_json(&text[start..start + len])?)?;
    Some((call, start + len))
}

/// A call object written bare in prose: it must name its arguments too, so
/// that an example object in an answer stays text.
fn bare_object_call(text: &str) -> Option<(ToolCall, usize)> {
    let (call, len) = object_call(text)?;
    let body = lenient_json(&text[..len])?;
    let body = body.get("function").filter(|f| f.is_object()).unwrap_or(&body);
    (body.get("arguments").is_some() || body.get("parameters").is_some()).then_some((call, len))
}

/// The tags that older Hermes-style models and llama.cpp's Hermes 2 Pro parser
/// put around a call object, besides `<tool_call>`.
const CALL_TAGS: [&str; 8] = [
    "tool_call",
    "function_call",
    "tool",
    "tools",
    "response",
    "json",
    "xml",
    "JSON",
];

/// `text` with `prefix` taken off its start, after blanks.
fn after<'t>(text: &'t str, prefix: &str) -> Option<&'t str> {
    text.trim_start().strip_prefix(prefix)
}

/// The call that starts exactly at `text` in one of the shapes Hermes-style
/// and Llama 3.x models write, and the bytes it takes:
/// - `<tool_call>{…}</tool_call>` (or another of [`CALL_TAGS`]), maybe in a
///   code fence, the closing tag optional at the end of the reply;
/// - a code fence around a bare call object;
/// - `<function=name>{…}</function>` and `<function name="name">{…}</function>`;
/// - a bare call object naming its arguments.
fn call_at(text: &str) -> Option<(ToolCall, usize)> {
    if let Some(fenced) = text.strip_prefix("```") {
        let lang_len = fenced
            .find('\n')
            .filter(|&n| fenced[..n].chars().all(|c| c.is_ascii_alphanumeric()))?;
        let body = &fenced[lang_len + 1..];
        let (call, len) = call_at(body.trim_start())
            .map(|(call, len)| (call, len + body.len() - body.trim_start().len()))
            .or_else(|| object_call(body))?;
        let rest = &body[len..];
        let close = after(rest, "```").map_or(0, |r| rest.len() - r.len());
        return Some((call, 3 + lang_len + 1 + len + close));
    }
    if let Some(tagged) = text.strip_prefix('<') {
        if let Some(named) = tagged
            .strip_prefix("function=")
            .or_else(|| tagged.strip_prefix("function name=\""))
        {
            let name_end = named.find(['>', '"'])?;
            let name = &named[..name_end];
            let args_at = &named[name_end..];
            let args_at = args_at.strip_prefix("\">").or_else(|| args_at.strip_prefix('>'))?;
            let start = args_at.len() - args_at.trim_start().len();
            let len = bracketed_len(&args_at[start..])?;
            let arguments = lenient_json(&args_at[start..start + len])?;
            let rest = &args_at[start + len..];
            let close = after(rest, "</function>").map_or(0, |r| rest.len() - r.len());
            let used = text.len() - rest.len() + close;
            let call = ToolCall {
                name: name.trim().to_string(),
                arguments: arguments_value(arguments),
                id: None,
            };
            return Some((call, used));
        }
        let tag = CALL_TAGS
            .iter()
            .find(|tag| tagged.strip_prefix(**tag).is_some_and(|r| r.starts_with('>')))?;
        let body = &tagged[tag.len() + 1..];
        let (call, len) = object_call(body)?;
        let rest = &body[len..];
        let close = after(rest, &format!("</{tag}>")).map_or(0, |r| rest.len() - r.len());
        return Some((call, 1 + tag.len() + 1 + len + close));
    }
    if let Some(inner) = text.strip_prefix('{') {
        return bare_object_call(text).or_else(|| {
            // `{{"name": …}}` whose closing braces the lazy constraint cut to the
            // inner object's: the outer `{` and a lone `}` after it go with the call.
            let (call, len) = bare_object_call(inner.trim_start()).filter(|_| inner.trim_start().starts_with('{'))?;
            let rest = &inner[inner.len() - inner.trim_start().len() + len..];
            let close = after(rest, "}").map_or(0, |r| rest.len() - r.len());
            Some((call, text.len() - rest.len() + close))
        });
    }
    None
}

/// Every call in `text` in the shapes of [`call_at`], wherever it starts;
/// the text around them is the content. A call cut short or malformed stays
/// in the content, as the model wrote it.
fn parse_tagged_and_bare(text: &str) -> (String, Vec<ToolCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    let mut from = 0;
    while let Some(offset) = rest[from..].find(['<', '`', '{']) {
        let at = from + offset;
        match call_at(&rest[at..]) {
            Some((call, len)) => {
                content.push_str(&rest[..at]);
                calls.push(call);
                rest = &rest[at + len..];
                // Llama 3.x separates calls with `;`.
                let trimmed = rest.trim_start();
                if let Some(after_semicolon) = trimmed.strip_prefix(';') {
                    rest = after_semicolon;
                }
                from = 0;
            }
            None => from = at + 1,
        }
    }
    content.push_str(rest);
    (content, calls)
}

fn parse_hermes(text: &str) -> (String, Vec<ToolCall>) {
    parse_tagged_and_bare(text)
}

fn parse_llama3(text: &str) -> (String, Vec<ToolCall>) {
    let body = text.trim_start();
    parse_tagged_and_bare(body.strip_prefix("<|python_tag|>").unwrap_or(body))
}

fn parse_mistral(text: &str) -> (String, Vec<ToolCall>) {
    const TAG: &str = "[TOOL_CALLS]";
    const ARGS: &str = "[ARGS]";
    const CALL_ID: &str = "[CALL_ID]";
    let Some(at) = text.find(TAG) else {
        return (text.to_string(), Vec::new());
    };
    let content = text[..at].to_string();
    let body = text[at + TAG.len()..].trim();
    if body.starts_with('[') {
        // Nemo: one JSON array of calls.
        if let Some(len) = bracketed_len(body) {
            if let Some(Value::Array(items)) = lenient_json(&body[..len]) {
                if let Some(calls) = items.iter().map(read_call).collect::<Option<Vec<_>>>() {
                    return (content + body[len..].trim(), calls);
                }
            }
        }
        return (text.to_string(), Vec::new());
    }
    // Small 3.2 / Devstral: name[CALL_ID]id[ARGS]{…} (the id optional),
    // repeated after another tag.
    let mut calls = Vec::new();
    for part in text[at..].split(TAG).skip(1) {
        let Some((head, arguments)) = part.split_once(ARGS) else {
            return (text.to_string(), Vec::new());
        };
        let (name, id) = match head.split_once(CALL_ID) {
            Some((name, id)) => (name, Some(id.trim().to_string())),
            None => (head, None),
        };
        let arguments = arguments.trim();
        match bracketed_len(arguments).and_then(|len| lenient_json(&arguments[..len])) {
            Some(arguments) => calls.push(ToolCall {
                name: name.trim().to_string(),
                arguments,
                id,
            }),
            None => return (text.to_string(), Vec::new()),
        }
    }
    (content, calls)
}

/// Functionary v3.2: `recipient\ncontent` blocks after `>>>` (the prompt ends
/// with the first `>>>`); `all` is the user, any other recipient a tool whose
/// content is the call's JSON arguments.
fn parse_functionary_v3_2(text: &str) -> (String, Vec<ToolCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    for (index, block) in text.split(">>>").enumerate() {
        let (recipient, body) = block.split_once('\n').unwrap_or((block, ""));
        let recipient = recipient.trim();
        if recipient == "all" {
            content.push_str(body);
            continue;
        }
        let is_name = !recipient.is_empty() && !recipient.contains(char::is_whitespace);
        match lenient_json(body).filter(|_| is_name) {
            Some(arguments) => calls.push(ToolCall {
                name: recipient.to_string(),
                arguments: arguments_value(arguments),
                id: None,
            }),
            None => {
                if index > 0 {
                    content.push_str(">>>");
                }
                content.push_str(block);
            }
        }
    }
    (content, calls)
}

/// FireFunction v2: ` functools[{"name": …, "arguments": {…}}, …]`.
fn parse_firefunction(text: &str) -> (String, Vec<ToolCall>) {
    const TAG: &str = "functools";
    let Some(at) = text.find(TAG) else {
        return (text.to_string(), Vec::new());
    };
    let body = &text[at + TAG.len()..];
    let calls = bracketed_len(body)
        .and_then(|len| lenient_json(&body[..len]))
        .and_then(|value| value.as_array()?.iter().map(read_call).collect::<Option<Vec<_>>>());
    match calls {
        Some(calls) => (text[..at].to_string(), calls),
        None => (text.to_string(), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments,
            id: None,
        }
    }

    fn call_with_id(name: &str, arguments: Value, id: &str) -> ToolCall {
        ToolCall {
            id: Some(id.into()),
            ..call(name, arguments)
        }
    }

    /// `(content, calls)` of a reply in `format`.
    fn parsed(format: ToolCallFormat, text: &str) -> (String, Vec<ToolCall>) {
        let reply = format.parse(text);
        (reply.content, reply.tool_calls)
    }

    /// The replies of llama.cpp's tests/test-chat.cpp (the tree vendored in
    /// llama-cpp-python 0.3.36's sdist, which `rake peer_suite` fetches), at the
    /// line given, for the template that teaches each format; `special_function`
    /// is its tool, `{"arg1": 1}` its call's arguments.
    #[test]
    fn reads_what_llama_cpp_reads() {
        let args = || json!({"arg1": 1});
        let special = || call("special_function", args());
        let hello = "Hello, world!\nWhat's up?";
        let cases: Vec<(u32, ToolCallFormat, &str, &str, Vec<ToolCall>)> = vec![
            // Hermes 2 Pro, Hermes 3, Qwen2.5.
            (3332, ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>", "", vec![special()]),
            (3340, ToolCallFormat::Hermes, "Hello, world!\nWhat's up?<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>", hello, vec![special()]),
            (6107, ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>", "", vec![special()]),
            (6150, ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"special_function_with_opt\", \"arguments\": {\"arg1\": 1, \"arg2\": 2}}\n</tool_call>", "", vec![special(), call("special_function_with_opt", json!({"arg1": 1, "arg2": 2}))]),
            (6106, ToolCallFormat::Hermes, hello, hello, vec![]),
            // Mistral Nemo, with the call's id.
            (5917, ToolCallFormat::Mistral, "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}, \"id\": \"123456789\"}]", "", vec![call_with_id("special_function", args(), "123456789")]),
            // Functionary v3.1 and v3.2.
            (5934, ToolCallFormat::FunctionaryV31, "<function=special_function>{\"arg1\": 1}</function>", "", vec![special()]),
            (5951, ToolCallFormat::FunctionaryV32, "all\nHello, world!\nWhat's up?", hello, vec![]),
            (5952, ToolCallFormat::FunctionaryV32, "special_function\n{\"arg1\": 1}", "", vec![special()]),
            // FireFunction v2.
            (5971, ToolCallFormat::FireFunction, " functools[{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}]", "", vec![special()]),
            // Mistral Small 3.2 (with ids) and Devstral (without).
            (6254, ToolCallFormat::MistralArgs, "[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{\"arg1\": 1}", "", vec![call_with_id("special_function", args(), "123456789")]),
            (6260, ToolCallFormat::MistralArgs, "[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{\"arg1\": 1}[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{\"arg1\": 1, \"arg2\": 2}", "", vec![call_with_id("special_function", args(), "000000001"), call_with_id("special_function_with_opt", json!({"arg1": 1, "arg2": 2}), "000000002")]),
            (6285, ToolCallFormat::MistralArgs, "[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}", "", vec![special()]),
            (6290, ToolCallFormat::MistralArgs, "Hello, world!\nWhat's up?[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}", hello, vec![special()]),
            // Llama 3.x's plain reply with tools offered.
            (6300, ToolCallFormat::Llama3Json, hello, hello, vec![]),
        ];
        for (line, format, text, content, calls) in cases {
            assert_eq!(
                parsed(format, text),
                (content.to_string(), calls),
                "test-chat.cpp:{line}"
            );
        }
    }

    /// The shapes the Hermes 2 Pro parser of llama.cpp's common/chat.cpp read
    /// before its PEG rewrite (`common_chat_parse_hermes_2_pro`: other tags around
    /// the object, code fences, `<function=…>`), and the Llama 3.x variants.
    #[test]
    fn reads_the_other_shapes_hermes_and_llama3_models_write() {
        let special = || call("special_function", json!({"arg1": 1}));
        let object = "{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}";
        for text in [
            format!("<function_call>{object}</function_call>"),
            format!("<tool>\n  {object}\n</tool>"),
            format!("<tools>\n  {object}\n</tools>"),
            format!("<response>\n  {object}\n</response>"),
            format!("<json>\n  {object}\n</json>"),
            format!("<xml>\n  {object}\n</xml>"),
            format!("<JSON>\n  {object}\n</JSON>"),
            format!("```xml\n<response>\n    {object}\n</response>\n```"),
            format!("```json\n  {object}\n```"),
            format!("```\n  {object} \n```"),
            object.to_string(),
            "{\n  \"name\": \"special_function\", \"arguments\": {\"arg1\": 1}\n}".to_string(),
            "<function=special_function>{\"arg1\": 1}</function>".to_string(),
            "<function name=\"special_function\">\n{\"arg1\": 1}\n</function>".to_string(),
            // Cut short by max_tokens after the object: the closing tag is missing.
            format!("<tool_call>\n{object}"),
            // OpenAI's shape, arguments as a JSON string.
            "{\"type\": \"function\", \"function\": {\"name\": \"special_function\", \"arguments\": \"{\\\"arg1\\\": 1}\"}}".to_string(),
        ] {
            assert_eq!(parsed(ToolCallFormat::Hermes, &text), (String::new(), vec![special()]), "{text}");
        }
        for text in [
            "{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
            "{\"type\": \"function\", \"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
            "<|python_tag|>{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
        ] {
            assert_eq!(
                parsed(ToolCallFormat::Llama3Json, text),
                (String::new(), vec![special()]),
                "{text}"
            );
        }
    }

    /// Qwen2.5-Coder-0.5B at temperature 1 sometimes echoes the tool it was shown: a
    /// definition, not a call (before, its schema was read as the call's arguments).
    #[test]
    fn an_echoed_tool_definition_is_text() {
        let definition = "{\"type\": \"function\", \"function\": {\"name\": \"weather\", \"description\": \"The \
                          current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": \
                          {\"type\": \"string\"}}}}}";
        for text in [format!("<tools>\n{definition}\n</tools>"), definition.to_string()] {
            let (content, calls) = parsed(ToolCallFormat::Hermes, &text);
            assert!(calls.is_empty(), "{text}: {calls:?}");
            assert!(content.contains("\"parameters\""), "{text}: {content}");
        }
    }

    /// Qwen2.5-Coder-1.5B-Instruct's second turn of the README's round trip: its
    /// GGUF template shows the call inside doubled braces, and it copies them.
    #[test]
    fn reads_calls_written_with_doubled_braces() {
        let paris = || call("get_weather", json!({"city": "Paris", "unit": "celsius"}));
        for text in [
            "{{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}}",
            "<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}}\n</tool_call>",
            "{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\", \"unit\": \"celsius\"}}}}",
        ] {
            assert_eq!(parsed(ToolCallFormat::Hermes, text), (String::new(), vec![paris()]), "{text}");
        }
        // The 1.5B's answer turn, the tool still offered: the lazy constraint holds the
        // call from its inner `{"name":` and ends it with that object.
        let cut = "{{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}";
        assert_eq!(parsed(ToolCallFormat::Hermes, cut), (String::new(), vec![paris()]));
        // A brace inside a string is the string's.
        let text = "{{\"name\": \"say\", \"arguments\": {\"text\": \"}}{{\"}}}";
        assert_eq!(
            parsed(ToolCallFormat::Hermes, text).1,
            vec![call("say", json!({"text": "}}{{"}))]
        );
    }

    #[test]
    fn leaves_prose_and_examples_as_text() {
        for text in [
            "Use {\"name\": \"x\"} to name it.",
            "The set {1, 2} has two elements.",
            "Call it like `get_weather` with {\"city\": \"Paris\"}.",
            "<b>bold</b> and ```code``` and {{ jinja }}",
            "```\nnot json\n```",
            "<function=broken>{\"a\": </function>",
            "unclosed {\"name\": \"x\", \"arguments\": {",
        ] {
            assert_eq!(
                parsed(ToolCallFormat::Hermes, text),
                (text.to_string(), vec![]),
                "{text}"
            );
        }
        assert_eq!(
            parsed(ToolCallFormat::FunctionaryV32, "a b\n{}").0,
            "a b\n{}",
            "a recipient is one word"
        );
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
            ("meetkai-functionary-medium-v3.1.jinja", ToolCallFormat::FunctionaryV31),
            ("meetkai-functionary-medium-v3.2.jinja", ToolCallFormat::FunctionaryV32),
            (
                "fireworks-ai-llama-3-firefunction-v2.jinja",
                ToolCallFormat::FireFunction,
            ),
            ("unsloth-mistral-Devstral-Small-2507.jinja", ToolCallFormat::MistralArgs),
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
        assert_eq!(
            reply.tool_calls,
            vec![call_with_id("get_weather", json!({"city": "Paris"}), "abc123def")]
        );
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
