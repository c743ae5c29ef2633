//! Chat templates: the GGUF's own Jinja template (`tokenizer.chat_template`)
//! rendered with minijinja. A template is untrusted code from the file, so
//! rendering runs in minijinja's sandbox with a fuel budget, which bounds both
//! the instructions run and the bytes allocated, and a cap on the output's size,
//! on a thread of its own whose stack holds the deepest value the fuel can build.
//!
//! Each message's content reaches the template between two marks, so the
//! rendered prompt says which of its bytes are content: a caller can then
//! tokenize those as plain text and the template's own markup as special tokens.

use std::ops::Range;

use minijinja::{context, Environment, ErrorKind};

use crate::{Error, Result};

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
/// in the rendered text; they are removed from contents beforehand.
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// A rendered prompt and where the messages' contents lie in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    /// Byte ranges of `text` that came from message contents, in order.
    pub contents: Vec<Range<usize>>,
}

/// Renders `messages` with `template`, as Hugging Face's `apply_chat_template` does.
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos: &str,
    eos: &str,
) -> Result<Rendered> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("elelem-chat-template".into())
            .stack_size(STACK)
            .spawn_scoped(scope, || {
                render_here(template, messages, add_generation_prompt, bos, eos)
            })
            .map_err(|e| Error::OutOfMemory(format!("a thread to render the chat template: {e}")))?
            .join()
            .map_err(|_| Error::Internal("rendering the chat template panicked".into()))?
    })
}

fn render_here(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos: &str,
    eos: &str,
) -> Result<Rendered> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    // `trim` must see through the marks, or it would trim nothing.
    env.add_filter("trim", |s: String, chars: Option<String>| -> String {
        let trim = |s: &str| match &chars {
            Some(chars) => s.trim_matches(|c| chars.contains(c)).to_string(),
            None => s.trim().to_string(),
        };
        match s.strip_prefix(OPEN).and_then(|s| s.strip_suffix(CLOSE)) {
            Some(inner) => format!("{OPEN}{}{CLOSE}", trim(inner)),
            None => trim(&s),
        }
    });
    let tmpl = env.template_from_str(template).map_err(template_error)?;
    let messages: Vec<minijinja::Value> = messages
        .iter()
        .map(|m| context! { role => &m.role, content => marked(&m.content) })
        .collect();
    let out = tmpl
        .render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => bos,
            eos_token => eos,
        })
        .map_err(template_error)?;
    if out.len() > MAX_OUTPUT {
        return Err(Error::InvalidArgument(format!(
            "the chat template produced more than {MAX_OUTPUT} bytes"
        )));
    }
    Ok(unmark(&out))
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

fn template_error(e: minijinja::Error) -> Error {
    Error::Template(format!("chat template: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }

    #[test]
    fn renders_chatml() {
        let t = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                 {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let out = render(t, &[msg("user", "hi")], true, "", "").unwrap();
        assert_eq!(out.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(out.contents, vec![17..19]);
    }

    #[test]
    fn marks_contents_even_through_trim_and_strips_stray_marks() {
        let t = "[{{ messages[0].content | trim }}|{{ messages[1].content }}|{{ messages[2].content }}]";
        let messages = [msg("user", "  a\u{FDD1}b "), msg("user", ""), msg("user", "c")];
        let out = render(t, &messages, false, "", "").unwrap();
        assert_eq!(out.text, "[ab||c]");
        assert_eq!(out.contents, [1..3, 5..6]);
    }

    #[test]
    fn renders_llama_cpp_gemma_format() {
        let messages = [
            msg("system", " Be brief. "),
            msg("user", "hi"),
            msg("assistant", "hello "),
            msg("user", "bye"),
        ];
        let out = render(builtin_template("gemma3").unwrap(), &messages, true, "<bos>", "").unwrap();
        assert_eq!(
            out.text,
            "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n\
             <start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn runaway_templates_run_out_of_fuel() {
        let t = "{% for i in range(50000) %}{% for j in range(50000) %}x{% endfor %}{% endfor %}";
        let err = render(t, &[], false, "", "").unwrap_err().to_string();
        assert!(err.contains("fuel"), "{err}");
    }

    #[test]
    fn memory_bombs_run_out_of_fuel() {
        for t in [
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "{{ '%1000000000000s'|format('x') }}",
            "{{ ('x\n' * 1000)|indent(1000000000) }}",
        ] {
            let err = render(t, &[], false, "", "").unwrap_err().to_string();
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
            let err = render(&format!("{nest}{tail}"), &[], false, "", "").unwrap_err();
            assert!(err.to_string().contains("fuel"), "{tail}: {err}");
        }
        let deepest = "{% set ns = namespace(s=[]) %}{% for k in range(2) %}{% for i in range(45000) %}\
                       {% set ns.s = [ns.s] %}{% endfor %}{% endfor %}{{ ns.s|tojson|length }} {{ ns.s|string|length }}";
        assert_eq!(render(deepest, &[], false, "", "").unwrap().text, "180002 180002");
    }

    #[test]
    fn raise_exception_is_an_error() {
        let err = render("{{ raise_exception('no system role') }}", &[], false, "", "").unwrap_err();
        assert!(err.to_string().contains("no system role"));
    }
}
