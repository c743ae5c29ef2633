//! Chat templates: the GGUF's own Jinja template (`tokenizer.chat_template`)
//! rendered with minijinja as Hugging Face transformers renders it with Python's
//! jinja2 (`trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`,
//! `strftime_now`, `{% generation %}`, its `tojson`, Python's methods and its way
//! of printing values). A template is untrusted code from the file, so
//! rendering runs in minijinja's sandbox with a fuel budget, which bounds both
//! the instructions run and the bytes allocated, and a cap on the output's size,
//! on a thread of its own whose stack holds the deepest value the fuel can build.
//!
//! The rendered prompt also says which of its bytes are message contents, so that
//! a caller can tokenize those as plain text and the template's own markup as
//! special tokens: the template is run a second time with each content between
//! two marks. Where the marks change what the template does (it compares or
//! slices a content), the contents are looked for in the first rendering instead.

mod markup;
mod python;

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use indexmap::IndexMap;
use minijinja::machinery::{self, CompiledTemplate, Instruction, TemplateConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::ValueKind;
use minijinja::{AutoEscape, Environment, ErrorKind, State};

use crate::{Error, Result};

pub use minijinja::Value;
pub use python::none;

/// Fuel pays for one instruction or 64 bytes produced. Qwen's template spends about
/// 250,000 on a 4 MB conversation (a million tokens, the largest context).
const FUEL: u64 = 1_000_000;
/// The longest prompt a template may produce.
const MAX_OUTPUT: usize = 16 << 20;
/// Values nest one level per few instructions, and printing, comparing or dropping
/// them recurses once per level, up to 640 bytes of stack each: the fuel allows
/// about 125,000 levels, 80 MB.
const STACK: usize = 256 << 20;

/// Noncharacters (never meant for interchange) that open and close a content
/// in the marked rendering; contents lose their own there.
const OPEN: char = '\u{FDD0}';
const CLOSE: char = '\u{FDD1}';

/// llama.cpp's built-in Gemma format (`llm_chat_apply_template`, "gemma"): system
/// messages are merged into the next user turn, "assistant" is "model", contents
/// are trimmed, and the BOS comes from tokenizing, not from the template.
const GEMMA: &str = "{%- set ns = namespace(system='') -%}\
{%- for message in messages -%}\
{%- if message['role'] == 'system' -%}{%- set ns.system = ns.system ~ (message['content'] | trim) -%}\
{%- else -%}\
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\
{{- '<start_of_turn>' ~ role ~ '\\n' -}}\
{%- if ns.system and role != 'model' -%}{{- ns.system ~ '\\n\\n' -}}{%- set ns.system = '' -%}{%- endif -%}\
{{- (message['content'] | trim) ~ '<end_of_turn>\\n' -}}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}";

/// The template to use for an architecture whose GGUF carries none, where
/// llama.cpp has a built-in format for it.
pub fn builtin_template(arch: &str) -> Option<&'static str> {
    match arch {
        "gemma3" => Some(GEMMA),
        _ => None,
    }
}

/// What a template renders: the conversation and the variables around it, as
/// transformers' `apply_chat_template` passes them.
#[derive(Debug, Clone, Default)]
pub struct ChatInput {
    /// One map per message: `role`, `content` (a string, or a list of parts with
    /// a `text`, which a template that takes only strings gets joined by newlines)
    /// and whatever else the caller gives (`tool_calls`, `tool_call_id`, ...).
    pub messages: Vec<Value>,
    pub add_generation_prompt: bool,
    pub bos_token: String,
    pub eos_token: String,
    /// Other template variables (`tools`, `documents`, `enable_thinking`, ...);
    /// they may replace `bos_token` and `eos_token`. `tools` and `documents` are
    /// [`none`] unless given. Each must be one the template reads, or one every
    /// template gets ([`EVERY_TEMPLATE`]): rendering fails with `InvalidArgument` otherwise.
    pub variables: Vec<(String, Value)>,
    /// The time `strftime_now` formats, in local time; the current time if `None`.
    pub now: Option<SystemTime>,
}

/// A map that keeps its keys in the order given, as a Python dict does.
pub fn map<K: Into<Value>>(entries: impl IntoIterator<Item = (K, Value)>) -> Value {
    Value::from(
        entries
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect::<IndexMap<Value, Value>>(),
    )
}

/// A message of only a role and a text content.
pub fn message(role: &str, content: &str) -> Value {
    map([("role", Value::from(role)), ("content", Value::from(content))])
}

/// A rendered prompt and where the messages' contents lie in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    /// Byte ranges of `text` that came from message contents, in order.
    pub contents: Vec<Range<usize>>,
}

/// Renders `input` with `template`, as Hugging Face's `apply_chat_template` does.
pub fn render(template: &str, input: &ChatInput) -> Result<Rendered> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("elelem-chat-template".into())
            .stack_size(STACK)
            .spawn_scoped(scope, || render_here(template, input))
            .map_err(|e| Error::OutOfMemory(format!("a thread to render the chat template: {e}")))?
            .join()
            .map_err(|_| Error::Internal("rendering the chat template panicked".into()))?
    })
}

fn render_here(template: &str, input: &ChatInput) -> Result<Rendered> {
    let env = environment(input.now.unwrap_or_else(SystemTime::now));
    let source = generation_blocks_as_with(template);
    let tmpl = &Compiled::new(&env, &source)?;
    tmpl.check_variables(&input.variables)?;
    let messages = if input.messages.iter().any(has_parts) && !takes_parts(tmpl, input) {
        input.messages.iter().map(parts_joined).collect()
    } else {
        input.messages.clone()
    };
    let text = run(tmpl, input, messages.clone())?;
    let mut contents = Vec::new();
    let marked: Vec<Value> = messages.iter().map(|m| marked_message(m, &mut contents)).collect();
    if contents.is_empty() {
        return Ok(Rendered {
            text,
            contents: Vec::new(),
        });
    }
    // The marked rendering may fail where the plain one did not (a template that
    // measures a content): the contents are then looked for in the text.
    match run(tmpl, input, marked).map(|marked| unmark(&marked)) {
        Ok(rendered) if rendered.text == text => Ok(rendered),
        _ => Ok(Rendered {
            contents: locate(&text, &contents),
            text,
        }),
    }
}

/// Text that a template printing a content part's `text` shows as it is.
const PROBE: &str = "elelem-probe-7f3a";

/// Whether the template renders a content given as a list of text parts (as
/// Qwen3.5's and Gemma's do): it shows a probe part's text, not the list itself.
fn takes_parts(tmpl: &Compiled, input: &ChatInput) -> bool {
    let part = map([("type", Value::from("text")), ("text", Value::from(PROBE))]);
    let probe = vec![map([
        ("role", Value::from("user")),
        ("content", Value::from(vec![part])),
    ])];
    run(tmpl, input, probe).is_ok_and(|text| text.contains(PROBE) && !text.contains("'text'"))
}

fn has_parts(message: &Value) -> bool {
    message
        .get_attr("content")
        .is_ok_and(|content| content.kind() == ValueKind::Seq)
}

/// The message with a list of text parts as one string, the texts joined by
/// newlines, for a template that takes only strings (as llama.cpp does).
fn parts_joined(message: &Value) -> Value {
    if !has_parts(message) {
        return message.clone();
    }
    map(message.try_iter().into_iter().flatten().map(|key| {
        let value = message.get_item(&key).unwrap_or_default();
        if key.as_str() != Some("content") {
            return (key, value);
        }
        let texts: Vec<String> = value
            .try_iter()
            .into_iter()
            .flatten()
            .map(|part| match part.as_str() {
                Some(text) => text.to_string(),
                None => part.get_attr("text").map(|t| python::str(&t)).unwrap_or_default(),
            })
            .collect();
        (key, Value::from(texts.join("\n")))
    }))
}

/// The variables every template gets, whether it reads them or not: what
/// transformers' `apply_chat_template` always passes (`tools` and `documents`
/// None unless given), `tool_choice`, which elelem's server hands over from an
/// OpenAI request beside `tools`, and `enable_thinking`, the reasoning switch that
/// apps pass to whatever model they talk to (llama-server's `chat_template_kwargs`
/// carries it to every template alike).
const EVERY_TEMPLATE: [&str; 8] = [
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
    "tool_choice",
    "enable_thinking",
];

/// A template compiled for the environment, its `+` and `~` jinja2's.
struct Compiled<'s> {
    env: &'s Environment<'s>,
    code: CompiledTemplate<'s>,
}

impl<'s> Compiled<'s> {
    fn new(env: &'s Environment<'s>, source: &'s str) -> Result<Self> {
        let config = TemplateConfig {
            syntax_config: syntax(),
            default_auto_escape: Arc::new(|_: &str| AutoEscape::None),
        };
        let mut code = CompiledTemplate::new("<string>", source, &config).map_err(template_error)?;
        markup::jinja2_operators(&mut code.instructions);
        code.blocks.values_mut().for_each(markup::jinja2_operators);
        Ok(Compiled { env, code })
    }

    /// The names the template may look up (every variable it reads or function it
    /// calls anywhere, macros included, even where it has set it first), and of
    /// those the ones it looks up before any assignment to them in the order of
    /// its code, not its macros: its own variables, for an error message.
    fn reads(&self) -> (BTreeSet<&'s str>, BTreeSet<&'s str>) {
        let (mut reads, mut own, mut stored, mut macros) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for code in std::iter::once(&self.code.instructions).chain(self.code.blocks.values()) {
            let mut idx = 0;
            while let Some(instruction) = code.get(idx) {
                match *instruction {
                    Instruction::Lookup(name) | Instruction::Enclose(name) | Instruction::CallFunction(name, _)
                        if name != markup::ADD && name != markup::CONCAT =>
                    {
                        reads.insert(name);
                        if !stored.contains(name) && !["loop", "caller"].contains(&name) {
                            own.insert(name);
                        }
                    }
                    Instruction::StoreLocal(name) => {
                        stored.insert(name);
                    }
                    // A macro's body, and so a call of itself, comes before it.
                    Instruction::BuildMacro(name, ..) => {
                        macros.insert(name);
                    }
                    _ => {}
                }
                idx += 1;
            }
        }
        own.retain(|name| !macros.contains(name));
        (reads, own)
    }

    /// A variable given is one the template reads or one every template gets (a
    /// Ruby keyword that it does not read is most likely a typo, or meant for
    /// another template): else `InvalidArgument`, naming it and those it reads.
    /// A template calling minijinja's `debug()`, which shows them all, reads any.
    fn check_variables(&self, variables: &[(String, Value)]) -> Result<()> {
        let (reads, own) = self.reads();
        let unread: Vec<&str> = variables
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| !EVERY_TEMPLATE.contains(name) && !reads.contains(name))
            .collect();
        if unread.is_empty() || reads.contains("debug") {
            return Ok(());
        }
        let own: Vec<&str> = own
            .into_iter()
            .filter(|name| !EVERY_TEMPLATE.contains(name) && self.env.globals().all(|(global, _)| global != *name))
            .collect();
        let names = unread.iter().map(|n| format!(":{n}")).collect::<Vec<_>>().join(", ");
        Err(Error::InvalidArgument(format!(
            "unknown keyword{}: {names} (the chat template reads no such variable; its own: {})",
            if unread.len() > 1 { "s" } else { "" },
            if own.is_empty() {
                "none".to_string()
            } else {
                own.join(", ")
            }
        )))
    }

    /// What the template renders for `context`, as `Template::render` does.
    fn render(&self, context: Value) -> std::result::Result<String, minijinja::Error> {
        let mut out = String::with_capacity(self.code.buffer_size_hint);
        machinery::eval(
            self.env,
            &self.code.instructions,
            context,
            &self.code.blocks,
            &mut machinery::make_string_output(&mut out),
            self.code.initial_auto_escape.clone(),
        )?;
        Ok(out)
    }
}

fn run(tmpl: &Compiled, input: &ChatInput, messages: Vec<Value>) -> Result<String> {
    let mut context: IndexMap<Value, Value> = IndexMap::new();
    context.insert("messages".into(), Value::from(messages));
    context.insert("tools".into(), python::none());
    context.insert("documents".into(), python::none());
    context.insert("add_generation_prompt".into(), Value::from(input.add_generation_prompt));
    context.insert("bos_token".into(), Value::from(input.bos_token.as_str()));
    context.insert("eos_token".into(), Value::from(input.eos_token.as_str()));
    for (name, value) in &input.variables {
        context.insert(Value::from(name.as_str()), value.clone());
    }
    let out = tmpl.render(Value::from(context)).map_err(template_error)?;
    if out.len() > MAX_OUTPUT {
        return Err(Error::InvalidArgument(format!(
            "the chat template produced more than {MAX_OUTPUT} bytes"
        )));
    }
    Ok(out)
}

/// The environment transformers renders chat templates in (its
/// `_compile_jinja_template`), with the fuel budget on top.
fn environment(now: SystemTime) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    env.set_syntax(syntax());
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(python_method);
    // jinja2 prints values with Python's str(): None, True, ['a', 'b'].
    env.set_formatter(|out, _state, value| {
        match value.as_str() {
            Some(s) => out.write_str(s),
            None => out.write_str(&python::str(value)),
        }
        .map_err(minijinja::Error::from)
    });
    // soft_str: a Markup stays one.
    env.add_filter("string", |value: Value| markup::like(&value, python::str(&value)));
    env.add_filter("escape", |value: Value| markup::escape(&value));
    env.add_filter("e", |value: Value| markup::escape(&value));
    env.add_function(markup::ADD, markup::add);
    env.add_function(markup::CONCAT, markup::concat);
    env.add_test("none", |value: Value| python::is_none(&value));
    env.add_test("sequence", |value: Value| python::is_sequence(&value));
    env.add_test("iterable", |value: Value| python::is_iterable(&value));
    python::add_generator_filters(&mut env);
    env.add_filter("tojson", python::tojson);
    env.add_filter("trim", trim);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_function("strftime_now", move |format: String| python::strftime(now, &format));
    env
}

/// transformers' whitespace control: `trim_blocks` and `lstrip_blocks`.
fn syntax() -> SyntaxConfig {
    SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .expect("the default delimiters are valid")
}

/// transformers' `{% generation %}...{% endgeneration %}` marks the assistant's
/// text for its training masks and otherwise renders its body as it is, in a
/// scope of its own (a call block). minijinja has no custom tags, so the tags
/// become `{% with %}...{% endwith %}`, which does the same, whitespace control
/// and all. Rewriting the source is the only way short of a fork of the parser.
fn generation_blocks_as_with(template: &str) -> std::borrow::Cow<'_, str> {
    if !template.contains("generation") {
        return template.into();
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(close) = tag[2..].find("%}").map(|e| e + 2) else {
            break;
        };
        let end = close + 2;
        match tag[2..close].trim_matches(|c: char| c == '-' || c == '+').trim() {
            "generation" => out.push_str(&tag[..end].replacen("generation", "with", 1)),
            "endgeneration" => out.push_str(&tag[..end].replacen("endgeneration", "endwith", 1)),
            _ => out.push_str(&tag[..end]),
        }
        rest = &tag[end..];
    }
    // An unclosed tag stays as it is, for the parser to report.
    out.push_str(rest);
    out.into()
}

/// Python's methods on strings, lists and dicts (minijinja-contrib's), but
/// `strip` and its kin, which strip Python's whitespace and see through a
/// content's marks, as `trim` does (and keep a Markup one, as jinja2's do).
fn python_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> std::result::Result<Value, minijinja::Error> {
    let ends = match method {
        "strip" => (true, true),
        "lstrip" => (true, false),
        "rstrip" => (false, true),
        _ => return minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args),
    };
    let (Some(s), [] | [_]) = (value.as_str(), args) else {
        return minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args);
    };
    let chars = match args.first() {
        Some(chars) if !python::is_none(chars) => match chars.as_str() {
            Some(chars) => Some(chars.to_string()),
            None => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    "strip arg must be None or str",
                ))
            }
        },
        _ => None,
    };
    Ok(markup::like(value, strip(s, chars.as_deref(), ends)))
}

/// jinja2's `trim`: `soft_str(value).strip(chars)`, a Markup if the value is one.
fn trim(value: Value, chars: Option<String>) -> Value {
    markup::like(&value, strip(&python::str(&value), chars.as_deref(), (true, true)))
}

/// Python's `strip` at the `(start, end)` asked for: `chars`, else Python's
/// whitespace. It must see through a content's marks, or it would strip nothing.
fn strip(s: &str, chars: Option<&str>, (start, end): (bool, bool)) -> String {
    let strip_ends = |s: &str| {
        let stripped = |c: char| chars.map_or_else(|| python::is_space(c), |chars| chars.contains(c));
        let s = if start { s.trim_start_matches(stripped) } else { s };
        if end { s.trim_end_matches(stripped) } else { s }.to_string()
    };
    match between_marks(s) {
        Some(inner) => marked(&strip_ends(inner)),
        None => strip_ends(s),
    }
}

/// The message with its content marked (a string, or the `text` of each part),
/// pushing each content it marks onto `contents`.
fn marked_message(message: &Value, contents: &mut Vec<String>) -> Value {
    let Ok(keys) = message.try_iter() else {
        return message.clone();
    };
    if message.kind() != ValueKind::Map {
        return message.clone();
    }
    let mut mark = |s: &str| {
        if !s.is_empty() {
            contents.push(s.to_string());
        }
        Value::from(marked(s))
    };
    map(keys.map(|key| {
        let value = message.get_item(&key).unwrap_or_default();
        let value = match (key.as_str(), value.kind()) {
            (Some("content"), ValueKind::String) => mark(value.as_str().unwrap_or_default()),
            (Some("content"), ValueKind::Seq) => Value::from(
                value
                    .try_iter()
                    .into_iter()
                    .flatten()
                    .map(|part| marked_part(&part, &mut mark))
                    .collect::<Vec<_>>(),
            ),
            _ => value,
        };
        (key, value)
    }))
}

/// A content part with its text marked: a string, or a map's `text`.
fn marked_part(part: &Value, mark: &mut impl FnMut(&str) -> Value) -> Value {
    if let Some(s) = part.as_str() {
        return mark(s);
    }
    if part.kind() != ValueKind::Map {
        return part.clone();
    }
    map(part.try_iter().into_iter().flatten().map(|key| {
        let value = part.get_item(&key).unwrap_or_default();
        match (key.as_str(), value.as_str()) {
            (Some("text"), Some(text)) => (key, mark(text)),
            _ => (key, value),
        }
    }))
}

/// A content between marks; an empty one stays empty, so that templates testing
/// whether there is content (`{% if message.content %}`) still see none.
fn marked(content: &str) -> String {
    if content.is_empty() {
        return String::new();
    }
    let mut out = String::with_capacity(content.len() + 6);
    out.push(OPEN);
    out.extend(content.chars().filter(|&c| c != OPEN && c != CLOSE));
    out.push(CLOSE);
    out
}

fn between_marks(s: &str) -> Option<&str> {
    s.strip_prefix(OPEN).and_then(|s| s.strip_suffix(CLOSE))
}

/// The text without marks, and the ranges they enclosed. A content runs from its
/// opening mark to the next closing one, or to the end when a template cut that
/// off: more of the text is then plain, never less.
fn unmark(marked: &str) -> Rendered {
    let mut text = String::with_capacity(marked.len());
    let mut contents: Vec<Range<usize>> = Vec::new();
    let mut open = None;
    for c in marked.chars() {
        match c {
            OPEN => {
                open.get_or_insert(text.len());
            }
            CLOSE => {
                if let Some(start) = open.take() {
                    contents.push(start..text.len());
                }
            }
            _ => text.push(c),
        }
    }
    if let Some(start) = open {
        contents.push(start..text.len());
    }
    contents.retain(|r| !r.is_empty());
    Rendered { text, contents }
}

/// Where the contents lie in `text`, each looked for (as it is, else trimmed, as
/// templates often do) after the one before; those the template changed
/// otherwise or left out are not found.
fn locate(text: &str, contents: &[String]) -> Vec<Range<usize>> {
    let mut from = 0;
    let mut ranges = Vec::new();
    for content in contents {
        let trimmed = content.trim_matches(python::is_space);
        let found = [content.as_str(), trimmed]
            .into_iter()
            .filter(|c| !c.is_empty())
            .find_map(|c| text[from..].find(c).map(|at| (from + at, c.len())));
        if let Some((start, len)) = found {
            from = start + len;
            ranges.push(start..from);
        }
    }
    ranges
}

fn template_error(e: minijinja::Error) -> Error {
    Error::Template(format!("chat template: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> Value {
        message(role, content)
    }

    /// Renders `messages` with `bos` and `eos` and no other variables.
    fn render_messages(template: &str, messages: &[Value], add_generation_prompt: bool, bos: &str) -> Result<Rendered> {
        let input = ChatInput {
            messages: messages.to_vec(),
            add_generation_prompt,
            bos_token: bos.into(),
            ..Default::default()
        };
        render(template, &input)
    }

    #[test]
    fn renders_chatml() {
        let t = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                 {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let out = render_messages(t, &[msg("user", "hi")], true, "").unwrap();
        assert_eq!(out.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(out.contents, vec![17..19]);
    }

    #[test]
    fn marks_contents_even_through_trim_and_strip() {
        let t = "[{{ messages[0].content | trim }}|{{ messages[1].content }}|{{ messages[2].content.strip() }}]";
        let messages = [msg("user", "  ab "), msg("user", ""), msg("user", " c\n")];
        let out = render_messages(t, &messages, false, "").unwrap();
        assert_eq!(out.text, "[ab||c]");
        assert_eq!(out.contents, [1..3, 5..6]);
    }

    #[test]
    fn finds_the_contents_a_template_changes_by_looking_for_them() {
        // A content holding a mark, and one the template measures: the marks would
        // change the text, so the contents are looked for in it, trimmed or not.
        let t = "[{{ messages[0].content | trim }}|{{ messages[1].content }}:{{ messages[1].content | length }}]";
        let messages = [msg("user", "  a\u{FDD1}b "), msg("user", "cd")];
        let out = render_messages(t, &messages, false, "").unwrap();
        assert_eq!(out.text, "[a\u{FDD1}b|cd:2]");
        assert_eq!(out.contents, [1..6, 7..9]);
    }

    #[test]
    fn renders_llama_cpp_gemma_format() {
        let messages = [
            msg("system", " Be brief. "),
            msg("user", "hi"),
            msg("assistant", "hello "),
            msg("user", "bye"),
        ];
        let out = render_messages(builtin_template("gemma3").unwrap(), &messages, true, "<bos>").unwrap();
        assert_eq!(
            out.text,
            "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n\
             <start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn runaway_templates_run_out_of_fuel() {
        let t = "{% for i in range(50000) %}{% for j in range(50000) %}x{% endfor %}{% endfor %}";
        let err = render_messages(t, &[], false, "").unwrap_err().to_string();
        assert!(err.contains("fuel"), "{err}");
    }

    #[test]
    fn memory_bombs_run_out_of_fuel() {
        for t in [
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "{{ '%1000000000000s'|format('x') }}",
            "{{ ('x\n' * 1000)|indent(1000000000) }}",
            "{{ [1]|tojson(indent=1000000000) }}",
        ] {
            let err = render_messages(t, &[], false, "").unwrap_err().to_string();
            assert!(err.contains("fuel"), "{t}: {err}");
        }
    }

    #[test]
    fn the_deepest_values_fuel_allows_fit_the_stack() {
        // One nesting level per iteration, then recursion over all of them: printing,
        // comparing, serializing, and dropping at the end.
        let nest = "{% set ns = namespace(s=[], t=[]) %}{% for k in range(10) %}{% for i in range(100000) %}\
                    {% set ns.s = [ns.s] %}{% endfor %}{% endfor %}";
        for tail in ["{{ ns.s }}", "{{ ns.s == ns.t }}", "{{ ns.s|tojson }}", ""] {
            let err = render_messages(&format!("{nest}{tail}"), &[], false, "").unwrap_err();
            assert!(err.to_string().contains("fuel"), "{tail}: {err}");
        }
        let deepest = "{% set ns = namespace(s=[]) %}{% for k in range(2) %}{% for i in range(45000) %}\
                       {% set ns.s = [ns.s] %}{% endfor %}{% endfor %}{{ ns.s|tojson|length }} {{ ns.s|string|length }}";
        assert_eq!(render_messages(deepest, &[], false, "").unwrap().text, "180002 180002");
    }

    /// 2026-03-14 09:26:53 in local time.
    fn pinned_now() -> SystemTime {
        // SAFETY: mktime reads and normalizes a zeroed tm we own.
        let secs = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            (tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec) = (126, 2, 14, 9, 26, 53);
            tm.tm_isdst = -1;
            libc::mktime(&mut tm)
        };
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
    }

    fn render_with_transformers_setup(template: &str) -> Result<String> {
        let input = ChatInput {
            messages: vec![msg("user", "hi")],
            now: Some(pinned_now()),
            ..Default::default()
        };
        render(template, &input).map(|r| r.text)
    }

    #[test]
    fn behaves_as_transformers_jinja2() {
        // What Python's jinja2, set up as spec/support/jinja2_reference.py sets it up,
        // gives for the same templates with `messages` and `tools=None`.
        let cases = [
            ("{% if true %}\n  x\n  {% endif %}\ny", "  x\ny"),
            (
                "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}\
                 {% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
                "02",
            ),
            ("{% set x = 1 %}{%- generation %}\n{% set x = 2 %}[{{ x }}]{% endgeneration -%}\n {{ x }}", "[2]1"),
            ("{{ strftime_now('%d %b %Y %H:%M:%S.%f%z%Z') }}", "14 Mar 2026 09:26:53.000000"),
            (
                r#"{{ {"b": [1, 2.5, none, true, 1e-07], "a": "é<\n"}|tojson }}"#,
                r#"{"b": [1, 2.5, null, true, 1e-07], "a": "é<\n"}"#,
            ),
            (
                r#"{{ {"b": [1, {}], "a": []}|tojson(indent=2, sort_keys=true) }}"#,
                "{\n  \"a\": [],\n  \"b\": [\n    1,\n    {}\n  ]\n}",
            ),
            (
                r#"{{ {"b": [1, 2]}|tojson(separators=(",", ":"), ensure_ascii=true) }}|{{ "é😀"|tojson(ensure_ascii=true) }}"#,
                r#"{"b":[1,2]}|"\u00e9\ud83d\ude00""#,
            ),
            (
                r#"{{ [1, 'a', "it's", none, true, 2.0] }}|{{ {'k': none} }}|{{ none }}|{{ true }}|{{ 1.5e20 }}"#,
                r#"[1, 'a', "it's", None, True, 2.0]|{'k': None}|None|True|1.5e+20"#,
            ),
            (
                "{{ tools is none }}|{{ tools is iterable }}|{{ tools|tojson }}|{{ tools|string }}|{{ 'x' if tools else 'y' }}",
                "True|False|null|None|y",
            ),
            (
                "{{ messages|map(attribute='role')|list|tojson }}|\
                 {{ 'yes' if messages|selectattr('role', 'equalto', 'bot') else 'no' }}|{{ tools|map('upper')|list }}",
                r#"["user"]|yes|[]"#,
            ),
            ("{{ 'ab' is sequence }}|{{ {'a': 1} is sequence }}|{{ 3 is sequence }}", "True|True|False"),
            (
                "{{ tools|default(1) }}|{{ tools[0] }}|{{ tools.y }}|{{ tools|trim }}|{{ tools|lower }}|\
                 {{ tools ~ 1 }}|{{ tools|map('x')|list }}",
                "None|||None|none|None1|[]",
            ),
            ("{{ '  x \u{1c}'|trim }}|{{ 'xxaxx'|trim('x') }}", "x|a"),
            // A Markup (`|safe`, `|e`) plus a plain string escapes the plain one;
            // `~` gives a plain string; `string`, `trim` and `strip` keep a Markup.
            (
                r#"{{ "<a>"|safe + "<b>" }}|{{ "<b>" + "<a>"|safe }}|{{ "<a>"|safe + "<b>"|safe }}|{{ "<a>" + "<b>" }}"#,
                "<a>&lt;b&gt;|&lt;b&gt;<a>|<a><b>|<a><b>",
            ),
            (
                r#"{{ ("<a>"|safe + "&") + "'\"" }}|{{ ("<a>"|safe ~ "<b>"|safe) + "<c>" }}|{{ "<x>"|e + "<y>" }}"#,
                "<a>&amp;&#39;&#34;|<a><b><c>|&lt;x&gt;&lt;y&gt;",
            ),
            (
                r#"{{ ("<x>"|safe|string) + "<" }}|{{ ("<x> "|safe|trim) + "<" }}|{{ ("<x> "|safe).strip() + "<" }}"#,
                "<x>&lt;|<x>&lt;|<x>&lt;",
            ),
            (
                r#"{{ "<a>"|safe + {"b": "<"}|tojson }}|{{ {"a": "<"|safe + "<"}|tojson }}|{{ "a/'\""|e }}|{{ none|e }}"#,
                r#"<a>{&#34;b&#34;: &#34;&lt;&#34;}|{"a": "<&lt;"}|a/&#39;&#34;|None"#,
            ),
            (
                "{% set s %}<a>{% endset %}{{ s + '<b>' }}|{% macro m() %}<a>{% endmacro %}{{ m() + '<b>' }}|\
                 {{ 1 + 2 }}|{{ [1] + [2] }}|{{ 1.5 + 1 }}|{{ true + 1 }}|{{ 9223372036854775807 + 1 }}|\
                 {% for i in range(5) if i > 1 %}{{ loop.length }}{% endfor %}",
                "<a><b>|<a><b>|3|[1, 2]|2.5|2|9223372036854775808|333",
            ),
            (
                "{{ ' x\u{1c}'.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ ' a '.rstrip() }}|{{ 'ab'.strip(none) }}",
                "x|axx| a|ab",
            ),
        ];
        for (template, jinja2) in cases {
            let ours = render_with_transformers_setup(template).unwrap_or_else(|e| panic!("{template}: {e}"));
            assert_eq!(ours, jinja2, "{template}");
        }
        // Where jinja2 raises: None is not iterable and has no length, nor has a
        // generator, which is not JSON serializable either.
        for template in [
            "{% for t in tools %}{% endfor %}",
            "{{ messages|map(attribute='role')|tojson }}",
            "{{ tools|length }}",
            "{{ [1, 2]|select|length }}",
            "{{ 1 in tools }}",
            "{{ tools|list }}",
            "{{ tools|join }}",
            "{{ tools|first }}",
            "{{ tools|count }}",
            "{{ tools|last }}",
            "{{ tools|sort }}",
            "{{ tools|unique|list }}",
            "{{ tools|batch(2)|list }}",
            "{{ tools|sum }}",
            "{{ 'x'|safe + 1 }}",
            "{{ 'x'|safe + none }}",
            "{{ 'x' + foo }}",
            "{{ [1] + (2,) }}",
        ] {
            assert!(render_with_transformers_setup(template).is_err(), "{template}");
        }
    }

    #[test]
    fn rewrites_only_whole_generation_tags() {
        assert_eq!(
            generation_blocks_as_with("{%- generation -%}{{ 'generation' }}{%+ endgeneration %}{% if x %}"),
            "{%- with -%}{{ 'generation' }}{%+ endwith %}{% if x %}"
        );
        for unclosed in ["{% generation", "{% 東", "{%"] {
            assert_eq!(generation_blocks_as_with(unclosed), unclosed);
            let err = render_messages(unclosed, &[], false, "").unwrap_err();
            assert!(matches!(err, Error::Template(_)), "{unclosed}: {err}");
        }
    }

    fn render_with(template: &str, variables: &[&str]) -> Result<String> {
        let input = ChatInput {
            variables: variables.iter().map(|n| (n.to_string(), Value::from(true))).collect(),
            ..Default::default()
        };
        render(template, &input).map(|r| r.text)
    }

    #[test]
    fn a_variable_the_template_does_not_read_is_an_invalid_argument() {
        let t = "{% if flag %}x{% endif %}{{ raise_exception('no') if false }}";
        assert_eq!(
            render_with(t, &["flag", "tools", "documents", "tool_choice", "bos_token"]).unwrap(),
            "x"
        );
        let err = render_with(t, &["flag", "falg", "other"]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("unknown keywords: :falg, :other"), "{err}");
        assert!(err.to_string().contains("its own: flag)"), "{err}");
        assert!(
            render_with("x", &["+"]).is_err(),
            "not a name of the template's operators"
        );
        // Read anywhere: set from itself, in a test, a macro, a call or filter
        // block, a loop's filter, a with block; or anything where `debug()` shows all.
        for (t, name) in [
            ("{% set a = a | default(1) %}{{ a }}", "a"),
            ("{% if b is not defined %}{% set b = 1 %}{% endif %}", "b"),
            ("{% macro m() %}{{ c }}{% endmacro %}", "c"),
            (
                "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}{{ d }}{% endcall %}",
                "d",
            ),
            ("{% filter upper %}{{ e }}{% endfilter %}", "e"),
            ("{% for i in [1] if f %}{% endfor %}", "f"),
            ("{% with g = g %}{{ g }}{% endwith %}", "g"),
            ("{{ h() if false }}", "h"),
            ("{{ debug() if false }}", "anything"),
        ] {
            assert!(render_with(t, &[name]).is_ok(), "{t}");
        }
    }

    #[test]
    fn raise_exception_is_an_error() {
        let err = render_messages("{{ raise_exception('no system role') }}", &[], false, "").unwrap_err();
        assert!(err.to_string().contains("no system role"));
    }
}
