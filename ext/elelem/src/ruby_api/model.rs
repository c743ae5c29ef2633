//! `Elelem::Model`: a model and the scheduler of its context's sequences. The
//! Ruby class (lib/elelem/model.rb) validates options and offers the friendly
//! API; these are its native primitives. Nothing here takes turns: generations
//! from many threads run together in the scheduler's passes.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use elelem_engine as engine;
use engine::serde_json;
use magnus::{function, method, prelude::*, Error, RArray, RHash, RModule, RString, Ruby, TryConvert, Value};

use super::errors::{self, engine_error};
use super::nogvl::{resumable, without_gvl, Interrupt};
use super::template_value;
use super::tokenizer::Tokenizer;

struct Loaded {
    model: Arc<engine::Model>,
    /// The sequences that generate text; `None` for an embedding-only model (an encoder).
    scheduler: Option<Scheduler>,
    /// The context that gives embeddings, made by the first `embed` (for the pooling it
    /// asked for; another pooling makes another). One embedding call runs at a time.
    embedder: Mutex<Option<engine::Embedder>>,
    n_ctx: u32,
    n_threads: usize,
    adaptive_threads: bool,
    /// Whether a sequence's tokens are independent of what else the passes carry
    /// (`ContextParams::batch_invariant`).
    batch_invariant: bool,
    path: String,
    /// The draft model's context, for speculative decoding (`Elelem.open(..., draft:)`).
    draft: Option<Mutex<engine::Context>>,
    /// The draft model's name (its file's, else its architecture's).
    draft_name: Option<String>,
    /// How generations speculate unless a call says otherwise.
    speculation: Option<engine::SpeculativeParams>,
}

impl Loaded {
    fn scheduler(&self, ruby: &Ruby) -> Result<&engine::Scheduler, Error> {
        self.scheduler.as_deref().ok_or_else(|| {
            let hp = &self.model.hparams;
            Error::new(
                ruby.get_inner(&errors::ERROR),
                format!(
                    "{} ({}) is an embedding model: it has no text to generate; use embed or rerank",
                    hp.name.as_deref().unwrap_or(&self.path),
                    hp.arch.name
                ),
            )
        })
    }
}

type Scheduler = Arc<engine::Scheduler>;

#[magnus::wrap(class = "Elelem::Model", free_immediately, size)]
pub struct Model {
    /// `None` once closed. Calls clone the scheduler out and never hold this lock
    /// while they wait or compute.
    state: Mutex<Option<Arc<Loaded>>>,
}

/// An interrupt of the thread waiting on a request: it stops waiting, and the
/// pass it runs for everybody, if any, is aborted (and planned again).
struct RequestInterrupt<'a> {
    flag: AtomicBool,
    scheduler: &'a engine::Scheduler,
    id: engine::RequestId,
}

impl Interrupt for RequestInterrupt<'_> {
    fn clear(&self) {
        self.flag.store(false, Ordering::SeqCst);
    }

    fn raise(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.scheduler.abort_if_running(self.id);
    }
}

/// Cancels its request when dropped: however a generation ends (its end, an
/// exception, an interrupt, a `break` out of the block), its sequence is freed.
struct Cancel<'a>(&'a engine::Scheduler, engine::RequestId);

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        self.0.cancel(self.1);
    }
}

impl Model {
    /// `path` is taken as bytes: file names need not be UTF-8. `cache_types` are the KV
    /// cache's K and V types by name. `draft` is nil, a draft model's path, or an open
    /// `Elelem::Model` whose weights draft; `drafter` ("lookup" or "copy") makes that
    /// drafter the default instead; `draft_tokens` fixes a draft's length (nil: adaptive). `batch_invariant`
    /// opens the weights unrepacked for a batch-invariant context.
    #[allow(clippy::too_many_arguments)]
    fn open(
        ruby: &Ruby,
        path: RString,
        n_ctx: u32,
        (n_threads, adaptive_threads): (usize, bool),
        parallel: u32,
        max_queue: usize,
        flash_attn: bool,
        cache_types: (String, String),
        draft: Value,
        (drafter, draft_tokens): (Option<String>, Option<u32>),
        batch_invariant: bool,
    ) -> Result<Model, Error> {
        // SAFETY: copied at once, before any Ruby code can run.
        let path = PathBuf::from(OsStr::from_bytes(unsafe { path.as_slice() }));
        let cache_type = |name: &str| {
            engine::CacheType::from_name(name)
                .ok_or_else(|| Error::new(ruby.exception_arg_error(), format!("unknown KV cache type {name}")))
        };
        let (type_k, type_v) = (cache_type(&cache_types.0)?, cache_type(&cache_types.1)?);
        let draft = DraftArg::new(ruby, draft)?;
        let length = draft_tokens.map_or(engine::DraftLength::Adaptive, engine::DraftLength::Fixed);
        let never = AtomicBool::new(false);
        let loaded = without_gvl(ruby, &never, || -> engine::Result<Loaded> {
            let model_params = engine::ModelParams {
                repack: !batch_invariant,
                ..Default::default()
            };
            let model = Arc::new(engine::Model::open(&path, &model_params)?);
            if batch_invariant && model.hparams.arch.kind == engine::model::Kind::Encoder {
                return Err(engine::Error::InvalidArgument(
                    "batch_invariant applies to generating text, and this is an embedding model".into(),
                ));
            }
            let params = engine::ContextParams {
                n_ctx,
                n_threads,
                adaptive_threads,
                flash_attn,
                ..Default::default()
            };
            let draft_model = match draft {
                DraftArg::None => None,
                DraftArg::Path(path) => Some(Arc::new(engine::Model::open(&path, &engine::ModelParams::default())?)),
                DraftArg::Model(model) => Some(model),
            };
            let draft_name = draft_model.as_ref().map(|m| {
                let hp = &m.hparams;
                hp.name.clone().unwrap_or_else(|| hp.arch.name.to_string())
            });
            let (scheduler, draft) = match model.hparams.arch.kind {
                engine::model::Kind::Decoder => {
                    let target = engine::ContextParams {
                        n_seq_max: parallel,
                        type_k,
                        type_v,
                        batch_invariant,
                        // A speculative verification pass has a row per drafted token, and one more.
                        n_outputs_max: engine::runtime::speculative::MAX_DRAFT_TOKENS + 1,
                        ..params.clone()
                    };
                    let ctx = engine::Context::new(Arc::clone(&model), target)?;
                    let draft = match draft_model {
                        Some(draft_model) => {
                            engine::runtime::speculative::check_compatible(&model, &draft_model)?;
                            let mut draft = engine::Context::new(draft_model, params)?;
                            // A speculation holds the target's lease while it drafts.
                            draft.share_workers(&ctx);
                            Some(Mutex::new(draft))
                        }
                        None => None,
                    };
                    (Some(Arc::new(engine::Scheduler::new(ctx, max_queue))), draft)
                }
                engine::model::Kind::Encoder if draft_model.is_some() => {
                    return Err(engine::Error::IncompatibleDraft(
                        "an embedding model generates no text to draft".into(),
                    ))
                }
                engine::model::Kind::Encoder => (None, None),
            };
            let source = if draft.is_some() {
                Some(engine::DraftSource::Model)
            } else {
                drafter.as_deref().and_then(engine::DraftSource::from_name)
            };
            Ok(Loaded {
                model,
                scheduler,
                embedder: Mutex::new(None),
                n_ctx,
                n_threads,
                adaptive_threads,
                batch_invariant,
                path: path.display().to_string(),
                draft,
                draft_name,
                speculation: source.map(|source| engine::SpeculativeParams { source, length }),
            })
        })?
        .map_err(|e| engine_error(ruby, e))?;
        Ok(Model {
            state: Mutex::new(Some(Arc::new(loaded))),
        })
    }

    fn loaded(&self, ruby: &Ruby) -> Result<Arc<Loaded>, Error> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.clone().ok_or_else(|| errors::closed(ruby))
    }

    fn model(&self, ruby: &Ruby) -> Result<Arc<engine::Model>, Error> {
        Ok(Arc::clone(&self.loaded(ruby)?.model))
    }

    /// Runs a generation among whatever else the model is generating. `prompt` is
    /// an Array of ids or a String (tokenized with special tokens, as llama.cpp's
    /// tools do). With a block, yields each id (`yield_text` false) or each piece
    /// of text. `logprobs` asks for each token's log-probability and that many
    /// alternatives. `constraint` is nil or `[kind, payload]` (see
    /// [`ConstraintArg`]). Returns a Hash describing the result.
    fn run(
        ruby: &Ruby,
        rb_self: &Self,
        prompt: Value,
        opts: RHash,
        yield_text: bool,
        logprobs: Option<u32>,
        constraint: Option<RArray>,
    ) -> Result<RHash, Error> {
        let loaded = rb_self.loaded(ruby)?;
        let scheduler = loaded.scheduler(ruby)?;
        let prompt = prompt_ids(ruby, scheduler.model(), prompt)?;
        let params = text_params(ruby, opts)?;
        let constraint = ConstraintArg::new(ruby, constraint)?;
        let speculation = speculation(ruby, &loaded, opts, !matches!(constraint, ConstraintArg::None))?;
        let request = engine::Request {
            prompt,
            params,
            logprobs,
            choose: None,
            constraint: constraint.build(ruby, scheduler.model())?,
        };
        let mut deliver = Delivery::new(ruby, yield_text, logprobs.is_some());
        // Speculation runs a sequence's passes itself: it takes the context when nothing
        // else runs, else the request decodes among the others.
        if let Some(speculation) = speculation {
            if let Some(lease) = scheduler.try_lease().map_err(|e| engine_error(ruby, e))? {
                return speculate(ruby, &loaded, lease, request, speculation, &mut deliver);
            }
        }
        let id = scheduler.submit(request).map_err(|e| engine_error(ruby, e))?;
        let _cancel = Cancel(scheduler, id);
        let interrupt = RequestInterrupt {
            flag: AtomicBool::new(false),
            scheduler,
            id,
        };
        loop {
            let event = resumable(ruby, &interrupt, || scheduler.next_event(id, &interrupt.flag))?
                .map_err(|e| engine_error(ruby, e))?;
            if let Some(result) = deliver.event(event)? {
                return Ok(result);
            }
        }
    }

    /// Generates from every prompt in the same passes: all are submitted before the
    /// first pass, so they are evaluated in lockstep. With a block, yields `[index,
    /// piece or id]`. Returns a result Hash per prompt.
    fn run_all(
        ruby: &Ruby,
        rb_self: &Self,
        prompts: RArray,
        opts: RHash,
        constraint: Option<RArray>,
    ) -> Result<RArray, Error> {
        let loaded = rb_self.loaded(ruby)?;
        let scheduler = loaded.scheduler(ruby)?;
        let params = text_params(ruby, opts)?;
        let constraint = ConstraintArg::new(ruby, constraint)?;
        let mut requests = Vec::with_capacity(prompts.len());
        for i in 0..prompts.len() {
            let prompt: Value = prompts.entry(i as isize)?;
            let yield_text = RString::from_value(prompt).is_some();
            let request = engine::Request {
                prompt: prompt_ids(ruby, scheduler.model(), prompt)?,
                params: params.clone(),
                logprobs: None,
                choose: None,
                constraint: constraint.build(ruby, scheduler.model())?,
            };
            let id = scheduler.submit(request).map_err(|e| engine_error(ruby, e))?;
            requests.push((Cancel(scheduler, id), yield_text));
        }
        let block = ruby.block_given();
        // A Ruby Array, not a Vec: the result Hashes must be where the GC sees them (the
        // stack, or an object on it) while the block runs and the waits release the GVL.
        let results = ruby.ary_new_capa(requests.len());
        for _ in 0..requests.len() {
            results.push(ruby.qnil())?;
        }
        let handle = |i: usize, event: engine::Event| -> Result<(), Error> {
            let yield_text = requests[i].1;
            match event {
                engine::Event::Token { id, text, .. } => {
                    if block && !yield_text {
                        let _: Value = ruby.yield_value((i, id))?;
                    } else if block && !text.is_empty() {
                        let _: Value = ruby.yield_value((i, text))?;
                    }
                }
                engine::Event::Done { tail, summary } => {
                    if block && yield_text && !tail.is_empty() {
                        let _: Value = ruby.yield_value((i, tail))?;
                    }
                    results.store(i as isize, summary_hash(ruby, &summary)?)?;
                }
            }
            Ok(())
        };
        loop {
            for (i, (cancel, _)) in requests.iter().enumerate() {
                while let Some(event) = scheduler.poll_event(cancel.1).map_err(|e| engine_error(ruby, e))? {
                    handle(i, event)?;
                }
            }
            let Some(i) = (0..requests.len()).find(|&i| results.entry::<Value>(i as isize).is_ok_and(|r| r.is_nil()))
            else {
                break;
            };
            let id = requests[i].0 .1;
            let interrupt = RequestInterrupt {
                flag: AtomicBool::new(false),
                scheduler,
                id,
            };
            let event = resumable(ruby, &interrupt, || scheduler.next_event(id, &interrupt.flag))?
                .map_err(|e| engine_error(ruby, e))?
                .ok_or_else(|| Error::new(ruby.get_inner(&errors::ERROR), "the request vanished"))?;
            handle(i, event)?;
        }
        Ok(results)
    }

    /// The model's tokenizer, shared with it.
    fn tokenizer(ruby: &Ruby, rb_self: &Self) -> Result<Tokenizer, Error> {
        let model = rb_self.model(ruby)?;
        let tokenizer = model.tokenizer().map_err(|e| engine_error(ruby, e))?;
        Ok(Tokenizer(Arc::clone(tokenizer)))
    }

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
        let rendered = render(ruby, &model, chat)?;
        let tokenizer = model.tokenizer().map_err(|e| engine_error(ruby, e))?;
        let plain = if parse_special { &[][..] } else { &rendered.contents[..] };
        Ok(ruby.ary_from_vec(tokenizer.tokenize_with_plain(&rendered.text, true, plain)))
    }

    /// Splits a finished reply, given as its generated ids, into `[content,
    /// reasoning, [[name, arguments_json], ...]]` by the tool-call format of
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
            calls.push((call.name, call.arguments.to_string()))?;
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
    /// Symbol (`:hermes`, `:llama3_json`, `:mistral`, `:mistral_args`, `:unsupported`).
    fn tool_call_format(ruby: &Ruby, rb_self: &Self, template: Option<String>) -> Result<magnus::Symbol, Error> {
        let template = template.or_else(|| rb_self.model(ruby).ok()?.chat_template().map(str::to_string));
        Ok(ruby.to_symbol(match tool_call_format(template.as_deref()) {
            engine::text::tool_calls::ToolCallFormat::Hermes => "hermes",
            engine::text::tool_calls::ToolCallFormat::Llama3Json => "llama3_json",
            engine::text::tool_calls::ToolCallFormat::Mistral => "mistral",
            engine::text::tool_calls::ToolCallFormat::MistralArgs => "mistral_args",
            engine::text::tool_calls::ToolCallFormat::Unsupported => "unsupported",
        }))
    }

    /// Frees the context now (a pass in flight finishes first); generations still
    /// running on other threads raise `ClosedError`. The weights go with the last
    /// of them.
    fn close(&self) -> bool {
        let loaded = self.state.lock().unwrap_or_else(|p| p.into_inner()).take();
        loaded
            .inspect(|l| {
                if let Some(scheduler) = &l.scheduler {
                    scheduler.close();
                }
            })
            .is_some()
    }

    fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    fn info(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        let loaded = rb_self.loaded(ruby)?;
        let hp = &loaded.model.hparams;
        let h = ruby.hash_new();
        let sym = |k: &str| ruby.to_symbol(k);
        h.aset(sym("architecture"), hp.arch.name)?;
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
        h.aset(sym("n_ctx"), loaded.n_ctx)?;
        h.aset(
            sym("parallel"),
            loaded.scheduler.as_ref().map_or(0, |s| s.params().n_seq_max),
        )?;
        h.aset(sym("n_threads"), loaded.n_threads)?;
        h.aset(sym("adaptive_threads"), loaded.adaptive_threads)?;
        h.aset(sym("batch_invariant"), loaded.batch_invariant)?;
        h.aset(
            sym("flash_attn"),
            loaded.scheduler.as_ref().is_none_or(|s| s.params().flash_attn),
        )?;
        let cache_types = loaded
            .scheduler
            .as_ref()
            .map(|s| (s.params().type_k, s.params().type_v));
        h.aset(sym("cache_type_k"), cache_types.map(|t| sym(t.0.name())))?;
        h.aset(sym("cache_type_v"), cache_types.map(|t| sym(t.1.name())))?;
        h.aset(
            sym("kind"),
            sym(match hp.arch.kind {
                engine::model::Kind::Decoder => "decoder",
                engine::model::Kind::Encoder => "encoder",
            }),
        )?;
        h.aset(sym("pooling"), hp.pooling.map(|p| sym(p.name())))?;
        h.aset(sym("embedding_length"), hp.n_embd)?;
        h.aset(sym("causal"), hp.causal_attn)?;
        h.aset(
            sym("draft"),
            match loaded.speculation.map(|s| s.source) {
                Some(engine::DraftSource::Model) => loaded.draft_name.clone().map(|name| ruby.into_value(name)),
                Some(source) => Some(sym(source.name()).as_value()),
                None => None,
            },
        )?;
        h.aset(
            sym("draft_tokens"),
            match loaded.speculation.map(|s| s.length) {
                Some(engine::DraftLength::Fixed(k)) => Some(ruby.into_value(k)),
                Some(engine::DraftLength::Adaptive) => Some(sym("auto").as_value()),
                None => None,
            },
        )?;
        h.aset(sym("n_gpu_layers"), 0)?;
        h.aset(sym("backend"), "CPU")?;
        Ok(h)
    }

    /// Memory use, as of the last pass (the speed of a generation is in its result).
    fn stats(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        let loaded = rb_self.loaded(ruby)?;
        let model = &loaded.model;
        let h = ruby.hash_new();
        let sym = |k: &str| ruby.to_symbol(k);
        if let Some(scheduler) = &loaded.scheduler {
            let snapshot = scheduler.snapshot();
            h.aset(sym("compute_buffer_bytes"), snapshot.compute_buffer_bytes)?;
            h.aset(sym("compute_buffer_bytes_min"), snapshot.stats.compute_buffer_bytes_min)?;
            h.aset(sym("compute_buffer_bytes_max"), snapshot.stats.compute_buffer_bytes_max)?;
            h.aset(sym("kv_cache_bytes"), snapshot.kv_cache_bytes)?;
        }
        h.aset(sym("weights_bytes"), model.weights_bytes())?;
        h.aset(sym("repacked_weights_bytes"), model.repacked_bytes())?;
        Ok(h)
    }
}

/// Hands a generation's events to Ruby: yields each piece (or id) to the block, if
/// any, collects the logprobs, and makes the result Hash at the end.
struct Delivery<'r> {
    ruby: &'r Ruby,
    block: bool,
    yield_text: bool,
    logprobs: Option<RArray>,
}

impl<'r> Delivery<'r> {
    fn new(ruby: &'r Ruby, yield_text: bool, logprobs: bool) -> Delivery<'r> {
        Delivery {
            ruby,
            block: ruby.block_given(),
            yield_text,
            logprobs: logprobs.then(|| ruby.ary_new()),
        }
    }

    /// The result Hash once the generation is done.
    fn event(&mut self, event: Option<engine::Event>) -> Result<Option<RHash>, Error> {
        let ruby = self.ruby;
        match event {
            Some(engine::Event::Token {
                id: token,
                text,
                logprob,
            }) => {
                if let (Some(lp), Some(all)) = (logprob, self.logprobs) {
                    all.push(logprob_hash(ruby, token, &lp)?)?;
                }
                if self.block {
                    if !self.yield_text {
                        let _: Value = ruby.yield_value(token)?;
                    } else if !text.is_empty() {
                        let _: Value = ruby.yield_value(text)?;
                    }
                }
                Ok(None)
            }
            Some(engine::Event::Done { tail, summary }) => {
                if self.block && self.yield_text && !tail.is_empty() {
                    let _: Value = ruby.yield_value(tail)?;
                }
                let h = summary_hash(ruby, &summary)?;
                if let Some(all) = self.logprobs {
                    h.aset(ruby.to_symbol("logprobs"), all)?;
                }
                Ok(Some(h))
            }
            None => Err(Error::new(ruby.get_inner(&errors::ERROR), "the request vanished")),
        }
    }
}

/// How a call speculates: `draft:` (nil: the model's default, or "none", "lookup",
/// "copy", "model") and `draft_tokens:` (nil: the model's default). A constrained call does
/// not speculate by default, and refuses to when asked.
fn speculation(
    ruby: &Ruby,
    loaded: &Loaded,
    opts: RHash,
    constrained: bool,
) -> Result<Option<engine::SpeculativeParams>, Error> {
    let draft: Option<String> = opts.lookup(ruby.to_symbol("draft"))?;
    let draft_tokens: Option<u32> = opts.lookup(ruby.to_symbol("draft_tokens"))?;
    let invalid = |message: &str| Error::new(ruby.exception_arg_error(), message.to_string());
    let source = match draft.as_deref() {
        None if constrained => return Ok(None),
        None => loaded.speculation.map(|s| s.source),
        Some("none") => None,
        Some("model") if loaded.draft.is_some() => Some(engine::DraftSource::Model),
        Some("model") => {
            return Err(invalid(
                "draft: :model needs a draft model: open the model with Elelem.open(path, draft: draft_path)",
            ))
        }
        Some(name) => {
            Some(engine::DraftSource::from_name(name).ok_or_else(|| invalid(&format!("unknown draft {name}")))?)
        }
    };
    let Some(source) = source else {
        if draft_tokens.is_some() {
            return Err(invalid(
                "draft_tokens: is the length of speculative drafts: give draft: :lookup or :copy too, or open the model \
                 with a draft model",
            ));
        }
        return Ok(None);
    };
    if constrained {
        return Err(invalid(
            "speculative decoding takes no constraint (json_schema:, grammar:, lark:, regex:, choice:, tools:): \
             pass draft: false",
        ));
    }
    let length = match draft_tokens {
        Some(k) => engine::DraftLength::Fixed(k),
        None => loaded.speculation.map_or(engine::DraftLength::Adaptive, |s| s.length),
    };
    Ok(Some(engine::SpeculativeParams { source, length }))
}

/// An interrupt of a speculative generation: both contexts' abort flags.
struct SpeculationInterrupt(Arc<AtomicBool>, Option<Arc<AtomicBool>>);

impl Interrupt for SpeculationInterrupt {
    fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
        if let Some(draft) = &self.1 {
            draft.store(false, Ordering::SeqCst);
        }
    }

    fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
        if let Some(draft) = &self.1 {
            draft.store(true, Ordering::SeqCst);
        }
    }
}

/// Runs a speculative generation on the leased context (and the draft model's).
fn speculate(
    ruby: &Ruby,
    loaded: &Loaded,
    mut lease: engine::Lease<'_>,
    request: engine::Request<'static>,
    params: engine::SpeculativeParams,
    deliver: &mut Delivery,
) -> Result<RHash, Error> {
    let mut draft = match params.source {
        engine::DraftSource::Model => loaded
            .draft
            .as_ref()
            .map(|d| d.lock().unwrap_or_else(|p| p.into_inner())),
        engine::DraftSource::Lookup | engine::DraftSource::Copy => None,
    };
    let mut speculation =
        engine::Speculation::new(&lease, draft.as_deref(), request, params).map_err(|e| engine_error(ruby, e))?;
    let interrupt = SpeculationInterrupt(lease.abort_flag(), draft.as_ref().map(|d| d.abort_flag()));
    loop {
        // A close from the streaming block ends the generation, as it ends a plain one.
        if lease.is_closed() {
            return Err(errors::closed(ruby));
        }
        let draft_ctx = draft.as_deref_mut();
        let event = without_gvl(ruby, &interrupt, || speculation.next_event(&mut lease, draft_ctx))?
            .map_err(|e| engine_error(ruby, e))?;
        if let Some(result) = deliver.event(event)? {
            return Ok(result);
        }
    }
}

/// A draft model as `Elelem.open` takes it.
enum DraftArg {
    None,
    Path(PathBuf),
    Model(Arc<engine::Model>),
}

impl DraftArg {
    fn new(ruby: &Ruby, draft: Value) -> Result<DraftArg, Error> {
        if draft.is_nil() {
            return Ok(DraftArg::None);
        }
        if let Some(path) = RString::from_value(draft) {
            // SAFETY: copied at once, before any Ruby code can run.
            return Ok(DraftArg::Path(PathBuf::from(OsStr::from_bytes(unsafe {
                path.as_slice()
            }))));
        }
        let model = <&Model>::try_convert(draft)?;
        Ok(DraftArg::Model(model.model(ruby)?))
    }
}

/// The flag that interrupts an embedding call: its context's abort flag.
struct AbortInterrupt(Arc<AtomicBool>);

impl Interrupt for AbortInterrupt {
    fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Model {
    /// Embeds each input (an Array of token-id Arrays, checked in Ruby) with `pooling`
    /// (a name, or nil for the model's own) and llama-embedding's `normalize` number,
    /// packing at most `batch_texts` into a pass. Returns an Array of Float Arrays (for
    /// pooling `none`, each text's token rows one after another).
    fn embed(
        ruby: &Ruby,
        rb_self: &Self,
        inputs: Vec<Vec<u32>>,
        pooling: Option<String>,
        normalize: i32,
        batch_texts: u32,
    ) -> Result<RArray, Error> {
        let loaded = rb_self.loaded(ruby)?;
        let invalid = |msg: String| Error::new(ruby.exception_arg_error(), msg);
        let pooling = match pooling.as_deref() {
            None => None,
            Some(name) => {
                Some(engine::Pooling::from_name(name).ok_or_else(|| invalid(format!("unknown pooling {name}")))?)
            }
        };
        let normalize = engine::Normalize::from_id(normalize)
            .ok_or_else(|| invalid(format!("unknown normalization {normalize}")))?;
        let mut slot = loaded.embedder.lock().unwrap_or_else(|p| p.into_inner());
        let wanted = pooling
            .or(loaded.model.hparams.pooling)
            .unwrap_or(engine::Pooling::None);
        let reusable = slot
            .as_ref()
            .is_some_and(|e| e.pooling() == wanted && e.batch_texts() == batch_texts);
        let never = AtomicBool::new(false);
        if !reusable {
            *slot = None;
            let params = engine::EmbedParams {
                n_ctx: loaded.n_ctx,
                n_threads: loaded.n_threads,
                adaptive_threads: loaded.adaptive_threads,
                pooling: Some(wanted),
                batch_texts,
            };
            let model = Arc::clone(&loaded.model);
            let embedder = without_gvl(ruby, &never, || engine::Embedder::new(model, params))?
                .map_err(|e| engine_error(ruby, e))?;
            *slot = Some(embedder);
        }
        let embedder = slot.as_mut().expect("made above");
        let interrupt = AbortInterrupt(embedder.abort_flag());
        let vectors =
            resumable(ruby, &interrupt, || embedder.embed(&inputs, normalize))?.map_err(|e| engine_error(ruby, e))?;
        Ok(ruby.ary_from_iter(vectors.into_iter().map(|v| ruby.ary_from_vec(v))))
    }

    /// The most tokens an input to `embed` may have.
    fn embed_max_tokens(ruby: &Ruby, rb_self: &Self) -> Result<usize, Error> {
        let loaded = rb_self.loaded(ruby)?;
        Ok(engine::runtime::embed::max_tokens(&loaded.model, loaded.n_ctx) as usize)
    }
}

/// A finished generation as the Ruby side takes it: what it made, why it stopped,
/// and the work it took.
fn summary_hash(ruby: &Ruby, s: &engine::Summary) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    let sym = |k: &str| ruby.to_symbol(k);
    h.aset(sym("text"), s.text.as_str())?;
    h.aset(sym("tokens"), ruby.ary_from_vec(s.tokens.clone()))?;
    h.aset(sym("prompt_tokens"), s.prompt_tokens)?;
    h.aset(sym("finish_reason"), sym(s.finish_reason.as_str()))?;
    h.aset(sym("reused_prompt_tokens"), s.reused_tokens)?;
    h.aset(sym("n_past"), s.n_past)?;
    h.aset(sym("evaluated_prompt_tokens"), s.prompt_tokens - s.reused_tokens)?;
    h.aset(sym("prompt_seconds"), s.prompt_seconds)?;
    h.aset(sym("decode_tokens"), s.decode_tokens)?;
    h.aset(sym("decode_passes"), s.decode_passes)?;
    h.aset(sym("decode_seconds"), s.decode_seconds)?;
    if let Some(draft) = s.draft {
        h.aset(sym("draft_proposed"), draft.proposed)?;
        h.aset(sym("draft_accepted"), draft.accepted)?;
    }
    if !s.constraint_seconds.is_empty() {
        let micros = s.constraint_seconds.iter().map(|&t| t * 1e6);
        h.aset(sym("constraint_us"), ruby.ary_from_iter(micros))?;
    }
    Ok(h)
}

fn logprob_hash(ruby: &Ruby, token: u32, lp: &engine::Logprob) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    h.aset(ruby.to_symbol("token"), token)?;
    h.aset(ruby.to_symbol("logprob"), lp.logprob)?;
    let top = ruby.ary_new();
    for &(id, logprob) in &lp.top {
        top.push((id, logprob))?;
    }
    h.aset(ruby.to_symbol("top"), top)?;
    Ok(h)
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

fn tool_call_format(template: Option<&str>) -> engine::text::tool_calls::ToolCallFormat {
    template.map_or(
        engine::text::tool_calls::ToolCallFormat::Unsupported,
        engine::text::tool_calls::ToolCallFormat::detect,
    )
}

/// A constraint as the Ruby side passes it (checked there): `[kind, payload]`,
/// the kind one of `json_schema` (a JSON document), `grammar` (GBNF), `lark`,
/// `regex`, `choice` (a JSON array of strings), or `tools` (a JSON array of
/// tool definitions, and the chat template as a third element: the lazy
/// constraint on the calls of the template's format).
enum ConstraintArg {
    None,
    Eager(engine::ConstraintSpec),
    Tools(Vec<serde_json::Value>, Option<String>),
}

impl ConstraintArg {
    fn new(ruby: &Ruby, arg: Option<RArray>) -> Result<ConstraintArg, Error> {
        let Some(arg) = arg else { return Ok(ConstraintArg::None) };
        let kind: String = arg.entry(0)?;
        let payload: String = arg.entry(1)?;
        let json = |what: &str| -> Result<serde_json::Value, Error> {
            serde_json::from_str(&payload)
                .map_err(|e| Error::new(ruby.exception_arg_error(), format!("{what} is not valid JSON: {e}")))
        };
        Ok(match kind.as_str() {
            "json_schema" => ConstraintArg::Eager(engine::ConstraintSpec::JsonSchema(json("json_schema")?)),
            "grammar" => ConstraintArg::Eager(engine::ConstraintSpec::Gbnf(payload)),
            "lark" => ConstraintArg::Eager(engine::ConstraintSpec::Lark(payload)),
            "regex" => ConstraintArg::Eager(engine::ConstraintSpec::Regex(payload)),
            "choice" => {
                let choices: Vec<String> = serde_json::from_value(json("choice")?)
                    .map_err(|e| Error::new(ruby.exception_arg_error(), format!("choice: {e}")))?;
                ConstraintArg::Eager(engine::ConstraintSpec::Choice(choices))
            }
            "tools" => {
                let tools = match json("tools")? {
                    serde_json::Value::Array(tools) => tools,
                    _ => return Err(Error::new(ruby.exception_arg_error(), "tools must be an Array")),
                };
                ConstraintArg::Tools(tools, arg.entry(2)?)
            }
            other => {
                return Err(Error::new(
                    ruby.exception_arg_error(),
                    format!("unknown constraint kind {other}"),
                ))
            }
        })
    }

    /// Compiles the constraint for one request, without the GVL (a large schema
    /// takes a while); an unsupported one is an `ArgumentError` naming the part.
    fn build(&self, ruby: &Ruby, model: &Arc<engine::Model>) -> Result<Option<engine::Constraint>, Error> {
        if matches!(self, ConstraintArg::None) {
            return Ok(None);
        }
        let tokenizer = Arc::clone(model.tokenizer().map_err(|e| engine_error(ruby, e))?);
        let never = AtomicBool::new(false);
        without_gvl(ruby, &never, || -> engine::Result<Option<engine::Constraint>> {
            match self {
                ConstraintArg::None => Ok(None),
                ConstraintArg::Eager(spec) => engine::Constraint::new(&tokenizer, spec).map(Some),
                ConstraintArg::Tools(tools, template) => {
                    let template = template.as_deref().or_else(|| model.chat_template());
                    let triggers = tool_call_format(template).triggers(tools)?;
                    if triggers.is_empty() {
                        return Ok(None);
                    }
                    engine::Constraint::lazy(&tokenizer, &triggers).map(Some)
                }
            }
        })?
        .map_err(|e| engine_error(ruby, e))
    }
}

fn prompt_ids(ruby: &Ruby, model: &engine::Model, prompt: Value) -> Result<Vec<u32>, Error> {
    if let Some(text) = RString::from_value(prompt) {
        let tokenizer = model.tokenizer().map_err(|e| engine_error(ruby, e))?;
        let text = text.to_string()?;
        return Ok(tokenizer.tokenize(&text, true, true));
    }
    // Each id fits a u32 (checked in Ruby); the scheduler checks the vocabulary.
    Vec::<u32>::try_convert(prompt)
}

fn text_params(ruby: &Ruby, opts: RHash) -> Result<engine::TextParams, Error> {
    let get = |k: &str| opts.fetch::<_, Value>(ruby.to_symbol(k));
    let sampler = engine::text::sampler::SamplerParams {
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
        .define_private_method("_open", function!(Model::open, 10))?;
    class.define_private_method("_run", method!(Model::run, 5))?;
    class.define_private_method("_run_all", method!(Model::run_all, 3))?;
    class.define_private_method("_parse_reply", method!(Model::parse_reply, 2))?;
    class.define_private_method("_tool_call_format", method!(Model::tool_call_format, 1))?;
    class.const_set("MAX_SEQUENCES", engine::MAX_SEQUENCES)?;
    class.const_set("MAX_DRAFT_TOKENS", engine::runtime::speculative::MAX_DRAFT_TOKENS)?;
    class.define_private_method("_tokenizer", method!(Model::tokenizer, 0))?;
    class.define_private_method("_chat_template", method!(Model::chat_template, 0))?;
    class.define_private_method("_render_chat", method!(Model::render_chat, 5))?;
    class.define_private_method("_chat_ids", method!(Model::chat_ids, 5))?;
    class.define_private_method("_close", method!(Model::close, 0))?;
    class.define_private_method("_closed?", method!(Model::is_closed, 0))?;
    class.define_private_method("_info", method!(Model::info, 0))?;
    class.define_private_method("_stats", method!(Model::stats, 0))?;
    class.define_private_method("_embed", method!(Model::embed, 4))?;
    class.define_private_method("_embed_max_tokens", method!(Model::embed_max_tokens, 0))?;
    Ok(())
}
