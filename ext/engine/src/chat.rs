//! Chat templates: the GGUF's own Jinja template (`tokenizer.chat_template`)
//! rendered with minijinja. A template is untrusted code from the file, so
//! rendering runs in minijinja's sandbox with a fuel budget, which bounds both
//! the instructions run and the bytes allocated, and a cap on the output's size,
//! on a thread of its own whose stack holds the deepest value the fuel can build.

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// Renders `messages` with `template`, as Hugging Face's `apply_chat_template` does.
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos: &str,
    eos: &str,
) -> Result<String> {
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
) -> Result<String> {
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
    let tmpl = env.template_from_str(template).map_err(template_error)?;
    let messages: Vec<minijinja::Value> = messages
        .iter()
        .map(|m| context! { role => &m.role, content => &m.content })
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
    Ok(out)
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
        assert_eq!(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
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
        assert_eq!(render(deepest, &[], false, "", "").unwrap(), "180002 180002");
    }

    #[test]
    fn raise_exception_is_an_error() {
        let err = render("{{ raise_exception('no system role') }}", &[], false, "", "").unwrap_err();
        assert!(err.to_string().contains("no system role"));
    }
}
