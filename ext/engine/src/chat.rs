//! Chat templates: the GGUF's own Jinja template (`tokenizer.chat_template`)
//! rendered with minijinja. A template is untrusted code from the file, so
//! rendering runs in minijinja's sandbox with a fuel budget (bounded time) and
//! a cap on the output's size.

use minijinja::{context, Environment, ErrorKind};

use crate::{Error, Result};

/// Template instructions a render may execute: real templates use a few thousand.
const FUEL: u64 = 2_000_000;
/// The longest prompt a template may produce.
const MAX_OUTPUT: usize = 16 << 20;

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
    fn raise_exception_is_an_error() {
        let err = render("{{ raise_exception('no system role') }}", &[], false, "", "").unwrap_err();
        assert!(err.to_string().contains("no system role"));
    }
}
