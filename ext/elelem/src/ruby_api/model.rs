//! `Elelem::Model`: a model and its one context. The Ruby class
//! (lib/elelem/model.rb) validates options, serializes calls with a Mutex and
//! offers the friendly API; these are its native primitives.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, UNIX_EPOCH};

use elelem_engine as engine;
use magnus::{function, method, prelude::*, Error, RArray, RHash, RModule, RString, Ruby, TryConvert, Value};

use super::errors::{self, engine_error};
use super::nogvl::without_gvl;
use super::template_value;
use super::tokenizer::Tokenizer;

struct Loaded {
    ctx: engine::Context,
    path: String,
}

#[magnus::wrap(class = "Elelem::Model", free_immediately, size)]
pub struct Model {
    // The Ruby side serializes calls; try_lock turns any overlap into an error,
    // never a wait while holding the GVL.
    state: Mutex<Option<Loaded>>,
}

impl Model {
    /// `path` is taken as bytes: file names need not be UTF-8.
    fn open(ruby: &Ruby, path: RString, n_ctx: u32, n_threads: usize, n_gpu_layers: u32) -> Result<Model, Error> {
        // SAFETY: copied at once, before any Ruby code can run.
        let path = PathBuf::from(OsStr::from_bytes(unsafe { path.as_slice() }));
        let never = AtomicBool::new(false);
        let loaded = without_gvl(ruby, &never, || -> engine::Result<Loaded> {
            let model = engine::Model::open(&path, &engine::ModelParams { n_gpu_layers })?;
            let params = engine::ContextParams {
                n_ctx,
                n_threads,
                ..Default::default()
            };
            let ctx = engine::Context::new(Arc::new(model), params)?;
            Ok(Loaded {
                ctx,
                path: path.display().to_string(),
            })
        })?
        .map_err(|e| engine_error(ruby, e))?;
        Ok(Model {
            state: Mutex::new(Some(loaded)),
        })
    }

    /// The state, unless a call on this thread holds it already (a method called
    /// from the streaming block): waiting would deadlock, so that is an error.
    fn state(&self, ruby: &Ruby) -> Result<MutexGuard<'_, Option<Loaded>>, Error> {
        match self.state.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::WouldBlock) => Err(errors::busy(ruby)),
            // Panics are caught before they can unwind through a guard; if one ever
            // did, every call starts from a clean sequence anyway.
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
        }
    }

    fn with_loaded<R>(&self, ruby: &Ruby, f: impl FnOnce(&mut Loaded) -> Result<R, Error>) -> Result<R, Error> {
        let mut guard = self.state(ruby)?;
        let loaded = guard.as_mut().ok_or_else(|| errors::closed(ruby))?;
        f(loaded)
    }

    /// Runs a generation. `prompt` is an Array of ids or a String (tokenized with
    /// special tokens, as llama.cpp's tools do). With a block, yields each id
    /// (`yield_text` false) or each piece of text. Returns a Hash describing the result.
    fn run(ruby: &Ruby, rb_self: &Self, prompt: Value, opts: RHash, yield_text: bool) -> Result<RHash, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            let prompt = prompt_ids(ruby, &loaded.ctx, prompt)?;
            let params = text_params(ruby, opts)?;
            let abort = loaded.ctx.abort_flag();
            let n_prompt = prompt.len();
            let mut generation = without_gvl(ruby, &abort, || {
                engine::TextGenerator::start(&mut loaded.ctx, &prompt, params)
            })?
            .map_err(|e| engine_error(ruby, e))?;
            let block = ruby.block_given();
            loop {
                let n_before = generation.tokens().len();
                let step = without_gvl(ruby, &abort, || generation.step())?.map_err(|e| engine_error(ruby, e))?;
                let Some(piece) = step else { break };
                if !block {
                    continue;
                }
                if yield_text {
                    if !piece.is_empty() {
                        let _: Value = ruby.yield_value(piece)?;
                    }
                } else if let Some(&token) = generation.tokens().get(n_before) {
                    let _: Value = ruby.yield_value(token)?;
                }
            }
            let h = ruby.hash_new();
            h.aset(ruby.to_symbol("text"), generation.text())?;
            h.aset(
                ruby.to_symbol("tokens"),
                ruby.ary_from_vec(generation.tokens().to_vec()),
            )?;
            h.aset(ruby.to_symbol("prompt_tokens"), n_prompt)?;
            let reason = generation
                .finish_reason()
                .map_or("length", engine::FinishReason::as_str);
            h.aset(ruby.to_symbol("finish_reason"), ruby.to_symbol(reason))?;
            Ok(h)
        })
    }

    /// The model's tokenizer, shared with it.
    fn tokenizer(ruby: &Ruby, rb_self: &Self) -> Result<Tokenizer, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            let tokenizer = loaded.ctx.model().tokenizer().map_err(|e| engine_error(ruby, e))?;
            Ok(Tokenizer(Arc::clone(tokenizer)))
        })
    }

    fn chat_template(ruby: &Ruby, rb_self: &Self) -> Result<Option<String>, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            Ok(loaded.ctx.model().chat_template().map(str::to_string))
        })
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
        rb_self.with_loaded(ruby, |loaded| Ok(render(ruby, loaded, chat)?.text))
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
        rb_self.with_loaded(ruby, |loaded| {
            let rendered = render(ruby, loaded, chat)?;
            let tokenizer = loaded.ctx.model().tokenizer().map_err(|e| engine_error(ruby, e))?;
            let plain = if parse_special { &[][..] } else { &rendered.contents[..] };
            Ok(ruby.ary_from_vec(tokenizer.tokenize_with_plain(&rendered.text, true, plain)))
        })
    }

    fn close(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        Ok(rb_self.state(ruby)?.take().is_some())
    }

    /// A model busy in a call on this thread is open.
    fn is_closed(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self.state(ruby).is_ok_and(|g| g.is_none())
    }

    fn info(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            let hp = &loaded.ctx.model().hparams;
            let params = loaded.ctx.params();
            let h = ruby.hash_new();
            let sym = |k: &str| ruby.to_symbol(k);
            h.aset(sym("architecture"), hp.arch.name())?;
            h.aset(sym("name"), hp.name.clone())?;
            h.aset(sym("size_label"), hp.size_label.clone())?;
            h.aset(sym("file_type"), hp.file_type)?;
            h.aset(sym("path"), loaded.path.clone())?;
            h.aset(sym("n_layer"), hp.n_layer)?;
            h.aset(sym("n_embd"), hp.n_embd)?;
            h.aset(sym("n_head"), hp.n_head)?;
            h.aset(sym("n_head_kv"), hp.n_head_kv)?;
            h.aset(sym("head_dim"), hp.head_dim_k)?;
            h.aset(sym("n_ff"), hp.n_ff)?;
            h.aset(sym("n_vocab"), hp.n_vocab)?;
            h.aset(sym("n_ctx_train"), hp.n_ctx_train)?;
            h.aset(sym("rope_freq_base"), hp.rope.freq_base)?;
            h.aset(sym("n_ctx"), params.n_ctx)?;
            h.aset(sym("n_threads"), params.n_threads)?;
            h.aset(sym("n_gpu_layers"), 0)?;
            h.aset(sym("backend"), "CPU")?;
            Ok(h)
        })
    }

    fn stats(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            let ctx = &loaded.ctx;
            let s = ctx.stats();
            let rate = |n: u64, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
            let h = ruby.hash_new();
            let sym = |k: &str| ruby.to_symbol(k);
            h.aset(sym("compute_buffer_bytes"), ctx.compute_buffer_bytes())?;
            h.aset(sym("compute_buffer_bytes_min"), s.compute_buffer_bytes_min)?;
            h.aset(sym("compute_buffer_bytes_max"), s.compute_buffer_bytes_max)?;
            h.aset(sym("kv_cache_bytes"), ctx.kv_cache_bytes())?;
            h.aset(sym("weights_bytes"), ctx.model().weights_bytes())?;
            h.aset(sym("repacked_weights_bytes"), ctx.model().repacked_bytes())?;
            h.aset(sym("n_past"), ctx.n_past())?;
            h.aset(sym("reused_prompt_tokens"), s.reused_tokens)?;
            h.aset(sym("prompt_tokens"), s.prompt_tokens)?;
            h.aset(sym("prompt_seconds"), s.prompt_seconds)?;
            h.aset(sym("prompt_tokens_per_s"), rate(s.prompt_tokens, s.prompt_seconds))?;
            h.aset(sym("decode_tokens"), s.decode_tokens)?;
            h.aset(sym("decode_seconds"), s.decode_seconds)?;
            h.aset(sym("decode_tokens_per_s"), rate(s.decode_tokens, s.decode_seconds))?;
            Ok(h)
        })
    }
}

/// A conversation to render, converted from Ruby; the model supplies the rest.
struct ChatRequest {
    template: Option<String>,
    input: engine::chat::ChatInput,
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
        let input = engine::chat::ChatInput {
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
fn render(ruby: &Ruby, loaded: &Loaded, chat: ChatRequest) -> Result<engine::chat::Rendered, Error> {
    let model = loaded.ctx.model();
    let template = chat
        .template
        .or_else(|| model.chat_template().map(str::to_string))
        .or_else(|| engine::chat::builtin_template(model.hparams.arch.name()).map(str::to_string))
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
    let input = engine::chat::ChatInput {
        bos_token: special(tokenizer.bos()),
        eos_token: special(tokenizer.eos()),
        ..chat.input
    };
    // Bounded by the template's fuel, not by the abort flag.
    let never = AtomicBool::new(false);
    without_gvl(ruby, &never, || engine::chat::render(&template, &input))?.map_err(|e| engine_error(ruby, e))
}

fn checked_ids(ruby: &Ruby, ctx: &engine::Context, ids: &[i64]) -> Result<Vec<u32>, Error> {
    let n_vocab = ctx.model().hparams.n_vocab;
    ids.iter()
        .map(|&id| {
            u32::try_from(id).ok().filter(|&t| t < n_vocab).ok_or_else(|| {
                Error::new(
                    ruby.exception_arg_error(),
                    format!("token id {id} is out of range (vocabulary size {n_vocab})"),
                )
            })
        })
        .collect()
}

fn prompt_ids(ruby: &Ruby, ctx: &engine::Context, prompt: Value) -> Result<Vec<u32>, Error> {
    if let Some(text) = RString::from_value(prompt) {
        let tokenizer = ctx.model().tokenizer().map_err(|e| engine_error(ruby, e))?;
        let text = text.to_string()?;
        return Ok(tokenizer.tokenize(&text, true, true));
    }
    checked_ids(ruby, ctx, &Vec::<i64>::try_convert(prompt)?)
}

fn text_params(ruby: &Ruby, opts: RHash) -> Result<engine::TextParams, Error> {
    let get = |k: &str| opts.fetch::<_, Value>(ruby.to_symbol(k));
    let sampler = engine::sampler::SamplerParams {
        temperature: f32::try_convert(get("temperature")?)?,
        top_k: u32::try_convert(get("top_k")?)?,
        top_p: f32::try_convert(get("top_p")?)?,
        min_p: f32::try_convert(get("min_p")?)?,
        repeat_penalty: f32::try_convert(get("repeat_penalty")?)?,
        repeat_last_n: u32::try_convert(get("repeat_last_n")?)?,
        seed: u64::try_convert(get("seed")?)?,
    };
    Ok(engine::TextParams {
        generate: engine::GenerateParams {
            max_tokens: u32::try_convert(get("max_tokens")?)?,
            ignore_eos: bool::try_convert(get("ignore_eos")?)?,
            reuse_prefix: bool::try_convert(get("reuse_prefix")?)?,
        },
        sampler,
        stop: Vec::<String>::try_convert(get("stop")?)?,
    })
}

pub fn init(ruby: &Ruby, elelem: &RModule) -> Result<(), Error> {
    let class = elelem.define_class("Model", ruby.class_object())?;
    // The natives are private: callers go through the Ruby methods that check arguments.
    class
        .singleton_class()?
        .define_private_method("_open", function!(Model::open, 4))?;
    class.define_private_method("_run", method!(Model::run, 3))?;
    class.define_private_method("_tokenizer", method!(Model::tokenizer, 0))?;
    class.define_private_method("_chat_template", method!(Model::chat_template, 0))?;
    class.define_private_method("_render_chat", method!(Model::render_chat, 5))?;
    class.define_private_method("_chat_ids", method!(Model::chat_ids, 5))?;
    class.define_private_method("_close", method!(Model::close, 0))?;
    class.define_private_method("_closed?", method!(Model::is_closed, 0))?;
    class.define_private_method("_info", method!(Model::info, 0))?;
    class.define_private_method("_stats", method!(Model::stats, 0))?;
    Ok(())
}
