//! `Model#generate` and its kin (`complete`, `each_token`, `generate_all`):
//! requests submitted to the model's scheduler, their events handed to Ruby.

use std::sync::atomic::{AtomicBool, Ordering};

use elelem_engine as engine;
use magnus::{method, prelude::*, Error, RArray, RClass, RHash, RString, Ruby, TryConvert, Value};

use super::constraint::ConstraintArg;
use super::errors::{self, engine_error};
use super::model::Model;
use super::nogvl::{resumable, without_gvl, Interrupt};
use super::speculation::{speculate, speculation};

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
    /// Runs a generation among whatever else the model is generating. `prompt` is
    /// an Array of ids or a String (tokenized with special tokens, as llama.cpp's
    /// tools do). With a block, yields each id (`yield_text` false) or each piece
    /// of text. `logprobs` asks for each token's log-probability and that many
    /// alternatives. `constraint` is nil or `[kind, payload]` (see
    /// [`ConstraintArg`]). Returns a Hash describing the result (with images,
    /// `:image_encode_seconds` too; with audio, `:audio_encode_seconds`).
    fn run(
        ruby: &Ruby,
        rb_self: &Self,
        prompt: Value,
        opts: RHash,
        yield_text: bool,
        logprobs: Option<u32>,
        constraint: Option<RArray>,
    ) -> Result<RHash, Error> {
        let runtime = rb_self.runtime(ruby)?;
        let scheduler = scheduler(ruby, &runtime)?;
        let (prompt, embeddings, encode_seconds) = prompt_with_images(ruby, &runtime, prompt, opts)?;
        let params = text_params(ruby, opts)?;
        let constraint = ConstraintArg::new(ruby, constraint)?;
        let speculation = speculation(ruby, &runtime, opts, !matches!(constraint, ConstraintArg::None))?;
        let request = engine::Request {
            prompt,
            embeddings,
            params,
            logprobs,
            choose: None,
            constraint: constraint.build(ruby, scheduler.model())?,
        };
        let mut deliver = Delivery::new(ruby, yield_text, logprobs.is_some());
        let with_encode = |h: RHash| -> Result<RHash, Error> {
            for &(key, seconds) in &encode_seconds {
                h.aset(ruby.to_symbol(key), seconds)?;
            }
            Ok(h)
        };
        // Speculation runs a sequence's passes itself: it takes the context when nothing
        // else runs, else the request decodes among the others.
        if let Some(speculation) = speculation {
            if let Some(lease) = scheduler.try_lease().map_err(|e| engine_error(ruby, e))? {
                return with_encode(speculate(ruby, &runtime, lease, request, speculation, &mut deliver)?);
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
                return with_encode(result);
            }
        }
    }

    /// Generates from every prompt in the same passes: all are submitted before the
    /// first pass, so they are evaluated in lockstep. `attachments` holds a Hash per
    /// prompt: its `:images` and `:plain` ranges, as `opts` holds them for [`Model::run`]
    /// (each prompt's images are encoded before any is submitted). With a block, yields
    /// `[index, piece or id]`. Returns a result Hash per prompt.
    fn run_all(
        ruby: &Ruby,
        rb_self: &Self,
        prompts: RArray,
        attachments: RArray,
        opts: RHash,
        constraint: Option<RArray>,
    ) -> Result<RArray, Error> {
        let runtime = rb_self.runtime(ruby)?;
        let scheduler = scheduler(ruby, &runtime)?;
        let params = text_params(ruby, opts)?;
        let constraint = ConstraintArg::new(ruby, constraint)?;
        let inputs = (0..prompts.len())
            .map(|i| {
                let prompt: Value = prompts.entry(i as isize)?;
                let (ids, embeddings, _) = prompt_with_images(ruby, &runtime, prompt, attachments.entry(i as isize)?)?;
                Ok((ids, embeddings, RString::from_value(prompt).is_some()))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let mut requests = Vec::with_capacity(inputs.len());
        for (prompt, embeddings, yield_text) in inputs {
            let request = engine::Request {
                prompt,
                embeddings,
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
}

/// Hands a generation's events to Ruby: yields each piece (or id) to the block, if
/// any, collects the logprobs, and makes the result Hash at the end.
pub(super) struct Delivery<'r> {
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
    pub(super) fn event(&mut self, event: Option<engine::Event>) -> Result<Option<RHash>, Error> {
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

/// The scheduler of the model's sequences; an embedding model has none.
fn scheduler<'r>(ruby: &Ruby, runtime: &'r engine::Runtime) -> Result<&'r engine::Scheduler, Error> {
    runtime.scheduler().ok_or_else(|| {
        let hp = &runtime.model().hparams;
        Error::new(
            ruby.get_inner(&errors::ERROR),
            format!(
                "{} ({}) is an embedding model: it has no text to generate; use embed or rerank",
                hp.name.as_deref().unwrap_or(runtime.path()),
                hp.arch.name
            ),
        )
    })
}

/// A prompt's ids, its media's embeddings, and the seconds their encoding took under each
/// timing's name (`image_encode_seconds` with images, `audio_encode_seconds` with audio).
type PromptParts = (Vec<u32>, Vec<engine::PromptEmbeddings>, Vec<(&'static str, f64)>);

/// The prompt's ids and, when `opts[:images]` holds media (binary Strings of their files:
/// images, or WAV files for a projector with an audio encoder, in marker order), their
/// embeddings: the text places them with `Elelem::Images::MARKER`, laid out
/// as mtmd lays them out (see [`engine::runtime::vision::VisionContext::prompt`]), with special
/// tokens parsed but in the byte ranges `opts[:plain]` (`[[start, end], ...]`: a chat's
/// contents), and the seconds each encoder's passes took for them (none without media).
/// Encoding runs without the GVL; an interrupt stops it.
fn prompt_with_images(
    ruby: &Ruby,
    runtime: &engine::Runtime,
    prompt: Value,
    opts: RHash,
) -> Result<PromptParts, Error> {
    let images: Option<RArray> = opts.lookup(ruby.to_symbol("images"))?;
    let Some(images) = images.filter(|i| !i.is_empty()) else {
        let model = runtime.model();
        return Ok((prompt_ids(ruby, model, prompt)?, Vec::new(), Vec::new()));
    };
    let arg_error = |message: &str| Error::new(ruby.exception_arg_error(), message.to_string());
    let vision = runtime.vision().ok_or_else(|| {
        arg_error("this model was opened without a projector (Elelem.open's mmproj:): it takes no images")
    })?;
    let text = RString::from_value(prompt)
        .ok_or_else(|| arg_error("a prompt with images is text, not token ids"))?
        .to_string()?;
    let images = (0..images.len())
        .map(|i| {
            let image: RString = images.entry(i as isize)?;
            // SAFETY: copied at once, before any Ruby code can run.
            Ok(unsafe { image.as_slice() }.to_vec())
        })
        .collect::<Result<Vec<Vec<u8>>, Error>>()?;
    let plain: Option<Vec<(usize, usize)>> = opts.lookup(ruby.to_symbol("plain"))?;
    let plain: Vec<std::ops::Range<usize>> = plain.unwrap_or_default().into_iter().map(|(s, e)| s..e).collect();
    let model = runtime.model();
    let context = runtime
        .scheduler()
        .ok_or_else(|| arg_error("an embedding model takes no images"))?
        .params();
    let capacity = (context.n_ctx_seq(), context.capacity_words());
    let interrupt = AtomicBool::new(false);
    let built = without_gvl(ruby, &interrupt, || {
        let images: Vec<&[u8]> = images.iter().map(Vec::as_slice).collect();
        let capacity = (capacity.0, capacity.1.as_str());
        vision.prompt(model, &text, &plain, &images, capacity, &interrupt)
    })?
    .map_err(|e| engine_error(ruby, e))?;
    let timings = [
        ("image_encode_seconds", built.image_encode_seconds),
        ("audio_encode_seconds", built.audio_encode_seconds),
    ];
    let timings = timings.into_iter().filter_map(|(key, s)| s.map(|s| (key, s))).collect();
    Ok((built.ids, built.embeddings, timings))
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
        presence_penalty: f32::try_convert(get("presence_penalty")?)?,
        frequency_penalty: f32::try_convert(get("frequency_penalty")?)?,
        logit_bias: Vec::<(u32, f32)>::try_convert(get("logit_bias")?)?,
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

pub fn init(class: &RClass) -> Result<(), Error> {
    class.define_private_method("_run", method!(Model::run, 5))?;
    class.define_private_method("_run_all", method!(Model::run_all, 4))
}
