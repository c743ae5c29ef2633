//! `Elelem::Replies` (`Model#chat`, `#chat_prompt`, `#chat_tokens`, replies'
//! tool calls): conversations rendered with the model's chat template, and
//! replies read by the format it teaches.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, UNIX_EPOCH};

use elelem_engine as engine;
use magnus::{method, prelude::*, Error, RArray, RClass, RHash, RString, Ruby, TryConvert, Value};

use super::errors::{self, engine_error};
use super::model::Model;
use super::nogvl::without_gvl;
use super::template_value;

impl Model {
    fn chat_template(ruby: &Ruby, rb_self: &Self) -> Result<Option<String>, Error> {
        Ok(rb_self.model(ruby)?.chat_template().map(str::to_string))
    }

    /// Renders `messages` (Hashes with String keys) with `template` (or the model's
    /// own), with the template `variables` (a Hash) and `now` (`[seconds, nanoseconds]`
    /// since the epoch, or nil for the current time) for `strftime_now`.
    fn render_chat(
        ruby: &Ruby,
        rb_self: &Self,
        messages: RArray,
        template: Option<String>,
        add_generation_prompt: bool,
        variables: RHash,
        now: Option<(u64, u32)>,
    ) -> Result<String, Error> {
        let chat = ChatRequest::new(ruby, messages, template, add_generation_prompt, variables, now)?;
        Ok(render(ruby, rb_self.model(ruby)?.as_ref(), chat)?.text)
    }

    /// The token ids of the prompt `render_chat` renders, the generation prompt
    /// included. Unless `parse_special`, the messages' contents are plain text: a
    /// `<|im_end|>` typed by a user stays text, only the template's markup is special.
    fn chat_ids(
        ruby: &Ruby,
        rb_self: &Self,
        messages: RArray,
        template: Option<String>,
        parse_special: bool,
        variables: RHash,
        now: Option<(u64, u32)>,
    ) -> Result<RArray, Error> {
        let chat = ChatRequest::new(ruby, messages, template, true, variables, now)?;
        let model = rb_self.model(ruby)?;
        let (text, plain) = render_with_plain(ruby, &model, chat, parse_special)?;
        let tokenizer = model.tokenizer().map_err(|e| engine_error(ruby, e))?;
        Ok(ruby.ary_from_vec(tokenizer.tokenize_with_plain(&text, true, &plain)))
    }

    /// The prompt `chat_ids` tokenizes, as its text and the byte ranges of it read as
    /// plain text (`[[start, end], ...]`: the contents, unless `parse_special`), for a
    /// conversation with images, which the model's projector lays out around them.
    fn chat_text(
        ruby: &Ruby,
        rb_self: &Self,
        messages: RArray,
        template: Option<String>,
        parse_special: bool,
        variables: RHash,
        now: Option<(u64, u32)>,
    ) -> Result<(String, Vec<(usize, usize)>), Error> {
        let chat = ChatRequest::new(ruby, messages, template, true, variables, now)?;
        let (text, plain) = render_with_plain(ruby, rb_self.model(ruby)?.as_ref(), chat, parse_special)?;
        Ok((text, plain.iter().map(|r| (r.start, r.end)).collect()))
    }

    /// Splits a finished reply, given as its generated ids, into `[content,
    /// reasoning, [[name, arguments_json, id or nil], ...]]` by the tool-call format of
    /// `template` (or the model's own template). The ids are read with their
    /// special tokens as text (`[TOOL_CALLS]`, `<|python_tag|>`: llama.cpp's
    /// preserved tokens), less the end-of-generation tokens that end the reply;
    /// a String is taken as it is (a reply cut by a stop string).
    fn parse_reply(ruby: &Ruby, rb_self: &Self, reply: Value, template: Option<String>) -> Result<RArray, Error> {
        let model = rb_self.model(ruby)?;
        let template = template.or_else(|| model.chat_template().map(str::to_string));
        let format = tool_call_format(template.as_deref());
        let tokenizer = model.tokenizer().map_err(|e| engine_error(ruby, e))?;
        let text = match RString::from_value(reply) {
            Some(text) => text.to_string()?,
            None => {
                let tokens = Vec::<u32>::try_convert(reply)?;
                let end = tokens.iter().rposition(|&t| !model.is_eog(t)).map_or(0, |i| i + 1);
                String::from_utf8_lossy(&tokenizer.detokenize(&tokens[..end], true)).into_owned()
            }
        };
        let reply = format.parse(&text);
        let calls = ruby.ary_new();
        for call in reply.tool_calls {
            calls.push((call.name, call.arguments.to_string(), call.id))?;
        }
        Ok(ruby.ary_new_from_values(&[
            ruby.str_new(&reply.content).as_value(),
            reply
                .reasoning
                .map_or_else(|| ruby.qnil().as_value(), |r| ruby.str_new(&r).as_value()),
            calls.as_value(),
        ]))
    }

    /// The tool-call format `template` (or the model's own template) teaches, as a
    /// Symbol (`:hermes`, `:llama3_json`, `:mistral`, `:mistral_args`,
    /// `:functionary_v3_1`, `:functionary_v3_2`, `:firefunction`, `:unsupported`).
    fn tool_call_format(ruby: &Ruby, rb_self: &Self, template: Option<String>) -> Result<magnus::Symbol, Error> {
        let template = template.or_else(|| rb_self.model(ruby).ok()?.chat_template().map(str::to_string));
        Ok(ruby.to_symbol(match tool_call_format(template.as_deref()) {
            engine::text::tool_calls::ToolCallFormat::Hermes => "hermes",
            engine::text::tool_calls::ToolCallFormat::Llama3Json => "llama3_json",
            engine::text::tool_calls::ToolCallFormat::Mistral => "mistral",
            engine::text::tool_calls::ToolCallFormat::MistralArgs => "mistral_args",
            engine::text::tool_calls::ToolCallFormat::FunctionaryV31 => "functionary_v3_1",
            engine::text::tool_calls::ToolCallFormat::FunctionaryV32 => "functionary_v3_2",
            engine::text::tool_calls::ToolCallFormat::FireFunction => "firefunction",
            engine::text::tool_calls::ToolCallFormat::Unsupported => "unsupported",
        }))
    }
}

/// A conversation to render, converted from Ruby; the model supplies the rest.
struct ChatRequest {
    template: Option<String>,
    input: engine::text::chat::ChatInput,
}

impl ChatRequest {
    fn new(
        ruby: &Ruby,
        messages: RArray,
        template: Option<String>,
        add_generation_prompt: bool,
        variables: RHash,
        now: Option<(u64, u32)>,
    ) -> Result<Self, Error> {
        let messages = (0..messages.len())
            .map(|i| template_value::to_template(ruby, messages.entry(i as isize)?))
            .collect::<Result<Vec<_>, _>>()?;
        let input = engine::text::chat::ChatInput {
            messages,
            add_generation_prompt,
            variables: template_value::variables(ruby, variables)?,
            now: now.map(|(secs, nanos)| UNIX_EPOCH + Duration::new(secs, nanos)),
            ..Default::default()
        };
        Ok(ChatRequest { template, input })
    }
}

/// Renders with the request's template, else the GGUF's own, else llama.cpp's
/// built-in format for the architecture, with the model's BOS and EOS.
fn render(ruby: &Ruby, model: &engine::Model, chat: ChatRequest) -> Result<engine::text::chat::Rendered, Error> {
    let template = chat
        .template
        .or_else(|| model.chat_template().map(str::to_string))
        .or_else(|| engine::text::chat::builtin_template(model.hparams.arch.name).map(str::to_string))
        .ok_or_else(|| {
            Error::new(
                ruby.get_inner(&errors::ERROR),
                "this model has no chat template (tokenizer.chat_template); pass one with template:",
            )
        })?;
    let tokenizer = model.tokenizer().map_err(|e| engine_error(ruby, e))?;
    let special = |id: Option<u32>| {
        id.map(|t| String::from_utf8_lossy(tokenizer.token_to_piece(t, true)).into_owned())
            .unwrap_or_default()
    };
    let input = engine::text::chat::ChatInput {
        bos_token: special(tokenizer.bos()),
        eos_token: special(tokenizer.eos()),
        ..chat.input
    };
    // Bounded by the template's fuel, not by the abort flag.
    let never = AtomicBool::new(false);
    without_gvl(ruby, &never, || engine::text::chat::render(&template, &input))?.map_err(|e| engine_error(ruby, e))
}

/// The rendered prompt and the byte ranges of it read as plain text: its contents, unless
/// `parse_special` (then none).
fn render_with_plain(
    ruby: &Ruby,
    model: &engine::Model,
    chat: ChatRequest,
    parse_special: bool,
) -> Result<(String, Vec<std::ops::Range<usize>>), Error> {
    let rendered = render(ruby, model, chat)?;
    let plain = if parse_special { Vec::new() } else { rendered.contents };
    Ok((rendered.text, plain))
}

pub(super) fn tool_call_format(template: Option<&str>) -> engine::text::tool_calls::ToolCallFormat {
    template.map_or(
        engine::text::tool_calls::ToolCallFormat::Unsupported,
        engine::text::tool_calls::ToolCallFormat::detect,
    )
}

pub fn init(class: &RClass) -> Result<(), Error> {
    class.define_private_method("_parse_reply", method!(Model::parse_reply, 2))?;
    class.define_private_method("_tool_call_format", method!(Model::tool_call_format, 1))?;
    class.define_private_method("_chat_template", method!(Model::chat_template, 0))?;
    class.define_private_method("_render_chat", method!(Model::render_chat, 5))?;
    class.define_private_method("_chat_ids", method!(Model::chat_ids, 5))?;
    class.define_private_method("_chat_text", method!(Model::chat_text, 5))
}
