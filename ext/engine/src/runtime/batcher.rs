//! Continuous batching: every pass over the context carries the next token of
//! each running sequence and chunks of newly arrived prompts, as llama.cpp's
//! server builds its batches, and each sequence's logits are sampled with its own
//! sampler. A request alone is evaluated exactly as llama.cpp's completion loop
//! evaluates it (its prompt in micro-batches, then one token a pass), so its
//! tokens are llama.cpp's.
//!
//! The [`Batcher`] is single-threaded bookkeeping over a [`Context`]; a pass is
//! split into [`Batcher::plan`] and [`Batcher::complete`] so that a caller can
//! compute it without holding whatever guards the batcher (see
//! [`crate::Scheduler`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::memory::kv_cache::SeqId;
use crate::runtime::context::{BatchToken, ImageGrid};
use crate::text::constraint::Constraint;
use crate::text::sampler::{log_softmax_top, Sampler};
use crate::text::stream::{FinishReason, TextParams, TextStream};
use crate::{Context, Error, GenerateParams, Model, Result, StopReason};

/// A request's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);

/// Chooses a token from logits, instead of the sampler (tools that watch the logits).
pub type Chooser<'a> = Box<dyn FnMut(&[f32]) -> u32 + Send + 'a>;

/// Rows of a prompt given as embeddings rather than tokens (an image's, from its
/// projector), decoded in passes of their own as mtmd's helper decodes them.
#[derive(Clone)]
pub struct PromptEmbeddings {
    /// The first row's index in the prompt, whose ids there the sequence records in their
    /// place (the same ids for the same image let a later prompt reuse its cells).
    pub start: usize,
    /// n_embd values per row (a model with deepstack layers: its `n_embd_inp`).
    pub embd: Arc<[f32]>,
    /// False when the rows see each other in both directions (Gemma 3's image tokens):
    /// they are then one pass.
    pub causal: bool,
    /// For a model under multi-dimensional rope, the image's grid of (across, down)
    /// tokens, by which the rows are placed ([`Context::decode_image`]); `None`: one
    /// position per row.
    pub grid: Option<(u32, u32)>,
}

impl PromptEmbeddings {
    fn rows(&self, n_embd: usize) -> std::ops::Range<usize> {
        self.start..self.start + self.embd.len() / n_embd
    }

    /// The positions the rows take in the sequence: one each, or for an image under
    /// multi-dimensional rope the longer side of its grid (mtmd's `n_pos`).
    pub fn n_pos(&self, n_embd: usize) -> usize {
        match self.grid {
            Some((nx, ny)) => nx.max(ny) as usize,
            None => self.embd.len() / n_embd,
        }
    }
}

/// What to generate.
pub struct Request<'a> {
    pub prompt: Vec<u32>,
    /// The prompt's rows given as embeddings, in order, apart.
    pub embeddings: Vec<PromptEmbeddings>,
    pub params: TextParams,
    /// Each token's log-probability and this many likeliest alternatives.
    pub logprobs: Option<u32>,
    pub choose: Option<Chooser<'a>>,
    /// What the generated text must match (a JSON Schema, a grammar, ...), built
    /// before submission; the logits are masked by it before sampling (or
    /// choosing) and each token is committed to it after. Logprobs stay the
    /// model's raw distribution, unmasked.
    pub constraint: Option<Constraint>,
}

/// A token's log-probability under the model (log-softmax of its raw logits) and
/// the likeliest alternatives, likeliest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprob {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// How a request went.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub finish_reason: FinishReason,
    pub tokens: Vec<u32>,
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens whose K and V were kept from the sequence's previous request.
    pub reused_tokens: usize,
    /// Wall time of the passes that evaluated its prompt, and of those that
    /// produced its other tokens (shared with whatever else they carried).
    pub prompt_seconds: f64,
    pub decode_seconds: f64,
    /// How many passes evaluated one of its generated tokens.
    pub decode_passes: usize,
    /// The tokens its sequence holds in the cache at the end (prompt and fed tokens).
    pub n_past: usize,
    /// Per generated token of a constrained request, the seconds its mask and
    /// commit took (empty without a constraint).
    pub constraint_seconds: Vec<f64>,
    /// Generated tokens that decode passes produced (the others came with the prompt's
    /// last pass): one a pass, or with speculative decoding up to a draft's length + 1.
    pub decode_tokens: usize,
    /// Speculative decoding's drafts, when it drafted.
    pub draft: Option<DraftStats>,
}

/// How a speculative generation's drafts fared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftStats {
    /// Draft tokens the target verified.
    pub proposed: usize,
    /// Those it agreed with (kept without a pass of their own).
    pub accepted: usize,
}

/// What a request produced since it was last asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A generated token and the text it lets through (possibly empty: part of a
    /// character, or what could still start a stop string).
    Token {
        id: u32,
        text: String,
        logprob: Option<Logprob>,
    },
    /// The end: the text held back until now, and the summary.
    Done { tail: String, summary: Summary },
}

/// One pass: the tokens, and whose they are.
pub struct Plan {
    pub batch: Vec<BatchToken>,
    /// The batch's embeddings, when it is a prompt's rows given as embeddings.
    embeddings: Option<PlannedRows>,
    /// Per request in the pass: how many of its prompt tokens it carries (0 for a
    /// decode step), and which of the pass's output rows is its, if any.
    members: Vec<(RequestId, usize, Option<usize>)>,
}

/// A pass's rows given as embeddings: whether they attend causally, and where they lie in
/// their image's grid for a model under multi-dimensional rope.
struct PlannedRows {
    embd: Vec<f32>,
    causal: bool,
    grid: Option<ImageGrid>,
}

impl Plan {
    /// Evaluates the pass.
    pub fn decode(&self, ctx: &mut Context) -> Result<()> {
        match &self.embeddings {
            None => ctx.decode_batch(&self.batch),
            Some(PlannedRows {
                embd,
                causal,
                grid: None,
            }) => ctx.decode_embeddings(&self.batch, embd, *causal),
            Some(PlannedRows {
                embd,
                causal,
                grid: Some(grid),
            }) => ctx.decode_image(&self.batch, embd, *causal, *grid),
        }
    }
}

struct Slot {
    request: Option<RequestId>,
    /// When it last finished a request, for evicting the least recently used cache.
    last_used: u64,
}

struct Active<'a> {
    prompt: Vec<u32>,
    embeddings: Vec<PromptEmbeddings>,
    params: TextParams,
    sampler: Sampler,
    choose: Option<Chooser<'a>>,
    constraint: Option<Constraint>,
    logprobs: Option<u32>,
    text: TextStream,
    slot: Option<SeqId>,
    /// Prompt tokens in the cache (kept or evaluated).
    fed: usize,
    reused: usize,
    /// The last token sampled, to be evaluated next.
    pending: Option<u32>,
    tokens: Vec<u32>,
    events: VecDeque<Event>,
    done: bool,
    failed: Option<Error>,
    prompt_seconds: f64,
    decode_seconds: f64,
    decode_passes: usize,
    constraint_seconds: Vec<f64>,
}

impl Active<'_> {
    /// The prompt's rows given as embeddings that hold row `i`, if any.
    fn embeddings_at(&self, i: usize, n_embd: usize) -> Option<&PromptEmbeddings> {
        self.embeddings.iter().find(|e| e.rows(n_embd).contains(&i))
    }

    /// Where the next prompt rows of another kind than row `i`'s begin (embeddings or
    /// tokens): a pass holds one kind.
    fn same_kind_until(&self, i: usize, n_embd: usize) -> usize {
        match self.embeddings_at(i, n_embd) {
            Some(e) => e.rows(n_embd).end,
            None => self
                .embeddings
                .iter()
                .map(|e| e.start)
                .find(|&start| start > i)
                .unwrap_or(self.prompt.len()),
        }
    }

    /// [`Context::reusable_prefix`], cut back to the start of rows given as embeddings
    /// that it would end within: they are decoded whole.
    fn reusable_prefix(&self, ctx: &Context, seq: SeqId) -> usize {
        let kept = ctx.reusable_prefix(seq, &self.prompt);
        let n_embd = ctx.model().hparams.n_embd_inp() as usize;
        self.embeddings_at(kept, n_embd).map_or(kept, |e| e.start)
    }

    /// Cells it may still need: the rest of its prompt and its tokens to come.
    fn cells_to_come(&self, ctx: &Context) -> usize {
        let budget = self.prompt.len() + self.params.generate.max_tokens as usize;
        let held = self.slot.map_or(0, |s| ctx.seq_tokens(s).len());
        budget.min(ctx.n_ctx_seq()).saturating_sub(held)
    }
}

/// A generated token's event (the text it adds to its request's, its log-probability
/// when asked: `logprobs` holds the logits it was drawn from and how many alternatives
/// to give), and why the request ends with it, if it does: a stop string, an
/// end-of-generation token, a complete constrained text (`complete`), `max_tokens`, or a
/// full context. `(generated, room)`: the tokens generated so far (this one included)
/// and how many fit after the prompt. Plain and speculative decoding deliver through it.
pub(crate) fn take_token(
    model: &Model,
    text: &mut TextStream,
    params: &GenerateParams,
    token: u32,
    logprobs: Option<(&[f32], u32)>,
    complete: bool,
    (generated, room): (usize, usize),
) -> (Event, Option<FinishReason>) {
    let eos = !params.ignore_eos && model.is_eog(token);
    let piece = match model.tokenizer() {
        Ok(tokenizer) if !eos => text.push(tokenizer.token_to_piece(token, false)),
        _ => String::new(),
    };
    let stop = if text.stopped() {
        Some(FinishReason::Stop)
    } else if eos {
        Some(FinishReason::Generation(StopReason::Eos))
    } else if complete {
        // The constrained text is complete: nothing more may follow it.
        Some(FinishReason::Stop)
    } else if generated >= params.max_tokens as usize {
        Some(FinishReason::Generation(StopReason::Length))
    } else if generated >= room {
        Some(FinishReason::Generation(StopReason::ContextFull))
    } else {
        None
    };
    let logprob = logprobs.map(|(logits, k)| {
        let (logprob, top) = log_softmax_top(logits, token, k as usize);
        Logprob { logprob, top }
    });
    let event = Event::Token {
        id: token,
        text: piece,
        logprob,
    };
    (event, stop)
}

/// A request that passed [`admit`]: its text stream, and its sampler, which has
/// seen the prompt (the repeat penalty's window starts in it).
pub(crate) struct Admitted {
    pub text: TextStream,
    pub sampler: Sampler,
}

/// Checks a request before it takes a sequence, for plain and speculative decoding
/// alike: a prompt of known ids that fits a sequence (`capacity`: its tokens, and
/// the same in words for the error), valid sampling, and stop strings (which need
/// the model's tokenizer; without one ids still generate, with no text).
pub(crate) fn admit(
    model: &Model,
    capacity: (usize, &str),
    prompt: &[u32],
    embeddings: &[PromptEmbeddings],
    params: &TextParams,
) -> Result<Admitted> {
    if prompt.is_empty() {
        return Err(Error::InvalidArgument("the prompt is empty".into()));
    }
    let is_token = check_embeddings(model, prompt.len(), embeddings)?;
    let n_vocab = model.hparams.n_vocab;
    let tokens = prompt.iter().zip(&is_token).filter(|(_, &t)| t).map(|(&t, _)| t);
    if let Some(bad) = tokens.clone().find(|&t| t >= n_vocab) {
        return Err(Error::InvalidArgument(format!(
            "token id {bad} is out of range (vocabulary size {n_vocab})"
        )));
    }
    if prompt.len() > capacity.0 {
        return Err(Error::ContextFull(format!(
            "{} tokens do not fit: the sequence holds 0 of {}",
            prompt.len(),
            capacity.1
        )));
    }
    params.sampler.validate().map_err(Error::InvalidArgument)?;
    let text = TextStream::new(params.stop.clone())?;
    if text.has_stops() {
        model.tokenizer()?;
    }
    let mut sampler = Sampler::new(params.sampler.clone());
    tokens.for_each(|t| sampler.accept(t));
    Ok(Admitted { text, sampler })
}

/// Checks a prompt's rows given as embeddings (a model that takes them, whole rows,
/// within the prompt, in order, apart) and says which of its rows are tokens.
fn check_embeddings(model: &Model, n_prompt: usize, embeddings: &[PromptEmbeddings]) -> Result<Vec<bool>> {
    let mut is_token = vec![true; n_prompt];
    if embeddings.is_empty() {
        return Ok(is_token);
    }
    model.check_takes_embeddings()?;
    let n_embd = model.hparams.n_embd_inp() as usize;
    let mut end = 0;
    for e in embeddings {
        let rows = e.rows(n_embd);
        if e.embd.is_empty() || e.embd.len() % n_embd != 0 || rows.start < end || rows.end > n_prompt {
            return Err(Error::InvalidArgument(format!(
                "embeddings of {} values at row {} do not fit the prompt: whole rows of n_embd {n_embd}, \
                 in order, within its {n_prompt} rows",
                e.embd.len(),
                e.start
            )));
        }
        is_token[rows.clone()].fill(false);
        end = rows.end;
    }
    Ok(is_token)
}

pub struct Batcher<'a> {
    model: Arc<Model>,
    /// The most tokens a sequence holds, in words for errors.
    n_ctx_seq: (usize, String),
    slots: Vec<Slot>,
    /// Requests waiting for a slot, first come first served.
    queue: VecDeque<RequestId>,
    requests: HashMap<RequestId, Active<'a>>,
    next_id: u64,
    clock: u64,
    max_queue: usize,
}

impl<'a> Batcher<'a> {
    /// A batcher over a context's `n_seq_max` sequences, holding at most `max_queue`
    /// requests waiting for one (0: a request is refused unless a sequence is free).
    pub fn new(ctx: &Context, max_queue: usize) -> Batcher<'a> {
        Batcher {
            model: Arc::clone(ctx.model()),
            n_ctx_seq: (ctx.n_ctx_seq(), ctx.capacity_words()),
            slots: (0..ctx.params().n_seq_max)
                .map(|_| Slot {
                    request: None,
                    last_used: 0,
                })
                .collect(),
            queue: VecDeque::new(),
            requests: HashMap::new(),
            next_id: 1,
            clock: 0,
            max_queue,
        }
    }

    /// Queues a request, after checking what can be checked now.
    pub fn submit(&mut self, request: Request<'a>) -> Result<RequestId> {
        let Request {
            prompt,
            embeddings,
            params,
            logprobs,
            choose,
            constraint,
        } = request;
        let Admitted { text, sampler } = admit(
            &self.model,
            (self.n_ctx_seq.0, &self.n_ctx_seq.1),
            &prompt,
            &embeddings,
            &params,
        )?;
        // Waiting requests take the free sequences first, at the next pass: only those
        // beyond them wait in the queue.
        let free = self.slots.iter().filter(|s| s.request.is_none()).count();
        if self.queue.len() >= free + self.max_queue {
            return Err(Error::Busy(format!(
                "every sequence is busy and {} requests are waiting already",
                self.queue.len() - free.min(self.queue.len())
            )));
        }
        let id = RequestId(self.next_id);
        self.next_id += 1;
        self.requests.insert(
            id,
            Active {
                prompt,
                embeddings,
                params,
                sampler,
                choose,
                constraint,
                logprobs,
                text,
                slot: None,
                fed: 0,
                reused: 0,
                pending: None,
                tokens: Vec::new(),
                events: VecDeque::new(),
                done: false,
                failed: None,
                prompt_seconds: 0.0,
                decode_seconds: 0.0,
                decode_passes: 0,
                constraint_seconds: Vec::new(),
            },
        );
        self.queue.push_back(id);
        Ok(id)
    }

    /// The next event of `id`, if any; its error if it failed. `Ok(None)` while it is
    /// waiting or running, and once it is done and its events are taken (or unknown).
    pub fn next_event(&mut self, id: RequestId) -> Result<Option<Event>> {
        let Some(active) = self.requests.get_mut(&id) else {
            return Ok(None);
        };
        if let Some(event) = active.events.pop_front() {
            return Ok(Some(event));
        }
        if let Some(e) = active.failed.take() {
            self.remove(id);
            return Err(e);
        }
        if active.done {
            self.remove(id);
        }
        Ok(None)
    }

    /// Whether `id` has nothing more to give (done and drained, failed and told, or
    /// unknown).
    pub fn finished(&self, id: RequestId) -> bool {
        !self.requests.contains_key(&id)
    }

    /// Whether no request is waiting or running (some may hold events not yet taken).
    pub fn has_no_work(&self) -> bool {
        self.requests.values().all(|active| active.done)
    }

    /// Whether no request is waiting, running, or holding events not yet taken.
    pub fn is_idle(&self) -> bool {
        self.requests.is_empty()
    }

    /// Drops a request wherever it is: waiting, running (its sequence's cache stays,
    /// for a later request to reuse), or done.
    pub fn cancel(&mut self, id: RequestId) {
        self.remove(id);
    }

    fn remove(&mut self, id: RequestId) {
        if let Some(active) = self.requests.remove(&id) {
            self.queue.retain(|&q| q != id);
            if let Some(slot) = active.slot {
                self.release(slot);
            }
        }
    }

    fn release(&mut self, slot: SeqId) {
        self.clock += 1;
        let slot = &mut self.slots[slot as usize];
        if slot.request.is_some() {
            slot.request = None;
            slot.last_used = self.clock;
        }
    }

    /// Fails every request with `e` (the model is closing).
    pub fn fail_all(&mut self, e: &Error) {
        let ids: Vec<RequestId> = self.requests.keys().copied().collect();
        for id in ids {
            self.fail(id, e.clone());
        }
        self.queue.clear();
    }

    /// Admits waiting requests to free sequences, then lays out the next pass: the
    /// next token of every running sequence, then prompt chunks, within one
    /// micro-batch. `None` when there is nothing to evaluate.
    pub fn plan(&mut self, ctx: &mut Context) -> Option<Plan> {
        self.admit(ctx);
        if let Some(plan) = self.plan_embeddings(ctx) {
            return Some(plan);
        }
        let n_embd = self.model.hparams.n_embd_inp() as usize;
        let mut budget = ctx.max_batch() as usize;
        let mut batch = Vec::new();
        let mut members = Vec::new();
        let mut n_outputs = 0;
        let running: Vec<(SeqId, RequestId)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(s, slot)| Some((s as SeqId, slot.request?)))
            .collect();
        for &(seq, id) in &running {
            let active = &self.requests[&id];
            if let (Some(token), true) = (active.pending, budget > 0) {
                members.push((id, 0, Some(n_outputs)));
                n_outputs += 1;
                batch.push(BatchToken {
                    token,
                    seq,
                    output: true,
                });
                budget -= 1;
            }
        }
        for &(seq, id) in &running {
            let active = &self.requests[&id];
            let left = active.same_kind_until(active.fed, n_embd) - active.fed;
            if left == 0 || budget == 0 {
                continue;
            }
            let n = left.min(budget);
            let last = active.fed + n == active.prompt.len();
            let chunk = &active.prompt[active.fed..active.fed + n];
            batch.extend(chunk.iter().map(|&token| BatchToken {
                token,
                seq,
                output: false,
            }));
            let row = last.then(|| {
                let end = batch.len() - 1;
                batch[end].output = true;
                n_outputs += 1;
                n_outputs - 1
            });
            members.push((id, n, row));
            budget -= n;
        }
        (!batch.is_empty()).then_some(Plan {
            batch,
            embeddings: None,
            members,
        })
    }

    /// A pass of the first running request whose prompt goes on with rows given as
    /// embeddings: as many as a pass takes (all of them when they see each other both
    /// ways: more than a pass takes then fails the request), alone (a pass starts from
    /// token ids or from embeddings).
    fn plan_embeddings(&self, ctx: &Context) -> Option<Plan> {
        let n_embd = self.model.hparams.n_embd_inp() as usize;
        self.slots.iter().enumerate().find_map(|(seq, slot)| {
            let id = slot.request?;
            let active = &self.requests[&id];
            let e = active.embeddings_at(active.fed, n_embd)?;
            let rows = e.rows(n_embd);
            let n = match e.causal {
                true => (rows.end - active.fed).min(ctx.max_batch() as usize),
                false => rows.end - active.fed,
            };
            let last = active.fed + n == active.prompt.len();
            let batch: Vec<BatchToken> = (active.fed..active.fed + n)
                .map(|i| BatchToken {
                    token: active.prompt[i],
                    seq: seq as SeqId,
                    output: last && i + 1 == active.fed + n,
                })
                .collect();
            let first = active.fed - rows.start;
            let from = first * n_embd;
            Some(Plan {
                batch,
                embeddings: Some(PlannedRows {
                    embd: e.embd[from..from + n * n_embd].to_vec(),
                    causal: e.causal,
                    grid: e.grid.map(|(nx, ny)| ImageGrid {
                        nx,
                        ny,
                        first: first as u32,
                    }),
                }),
                members: vec![(id, n, last.then_some(0))],
            })
        })
    }

    /// Gives waiting requests free sequences, in order, while the cache has room for
    /// what they and the running ones may still need (when nothing runs, a request is
    /// admitted regardless: if it outgrows the cache it stops with `context_full`).
    fn admit(&mut self, ctx: &mut Context) {
        while let Some(&id) = self.queue.front() {
            let Some(seq) = self.choose_slot(ctx, id) else { return };
            let active = &self.requests[&id];
            let reuse = active.params.generate.reuse_prefix;
            let kept = if reuse { active.reusable_prefix(ctx, seq) } else { 0 };
            let budget = active.prompt.len() + active.params.generate.max_tokens as usize;
            // A batch-invariant context gives each sequence cells of its own, whose bits
            // nothing else changes: there is nothing to wait for, and nothing to evict.
            let shared_cells = !ctx.params().batch_invariant;
            if !reuse && shared_cells {
                // A fresh sequence starts from an empty cache, as llama.cpp's does, so
                // its cells (and so its bits) are those of a lone run.
                self.evict_idle(ctx, usize::MAX, None);
            }
            let needed = budget.min(ctx.n_ctx_seq()) - kept;
            let pledged: usize = self
                .slots
                .iter()
                .filter_map(|s| s.request)
                .map(|r| self.requests[&r].cells_to_come(ctx))
                .sum();
            // The sequence's own cache beyond the kept prefix is freed on admission.
            let available = |ctx: &Context| ctx.free_cells() as usize + ctx.seq_tokens(seq).len() - kept;
            if shared_cells && available(ctx) < needed + pledged {
                self.evict_idle(ctx, needed + pledged - available(ctx), Some(seq));
                let running = self.slots.iter().any(|s| s.request.is_some());
                if running && available(ctx) < needed + pledged {
                    return;
                }
            }
            self.queue.pop_front();
            if let Err(e) = ctx.seq_truncate(seq, kept) {
                // reusable_prefix keeps only what the memory can cut back to.
                self.fail(id, e);
                continue;
            }
            self.slots[seq as usize].request = Some(id);
            let active = self.requests.get_mut(&id).expect("queued requests are known");
            active.slot = Some(seq);
            active.fed = kept;
            active.reused = kept;
        }
    }

    /// A free sequence for `id`: the one whose cache shares the longest prefix with
    /// its prompt when it reuses prefixes, else the first free one.
    fn choose_slot(&self, ctx: &Context, id: RequestId) -> Option<SeqId> {
        let active = &self.requests[&id];
        let free = (0..self.slots.len() as SeqId).filter(|&s| self.slots[s as usize].request.is_none());
        if active.params.generate.reuse_prefix {
            // max_by_key keeps the last maximum: reversed, the first free slot wins ties.
            free.rev()
                .max_by_key(|&s| (active.reusable_prefix(ctx, s), self.slots[s as usize].last_used))
        } else {
            free.min()
        }
    }

    /// Frees the caches of idle sequences, least recently used first, until `cells`
    /// are freed (all of them with `usize::MAX`); `keep` is spared.
    fn evict_idle(&mut self, ctx: &mut Context, cells: usize, keep: Option<SeqId>) {
        let mut idle: Vec<(u64, SeqId)> = (0..self.slots.len() as SeqId)
            .filter(|&s| Some(s) != keep && self.slots[s as usize].request.is_none())
            .filter(|&s| !ctx.seq_tokens(s).is_empty())
            .map(|s| (self.slots[s as usize].last_used, s))
            .collect();
        idle.sort_unstable();
        let mut freed = 0;
        for (_, seq) in idle {
            if freed >= cells {
                break;
            }
            freed += ctx.seq_tokens(seq).len();
            ctx.seq_forget(seq);
        }
    }

    /// Takes in a pass's outcome: samples each output row with its request's sampler,
    /// or fails the requests the pass carried. An interrupted pass changes nothing
    /// (the context forgot its tokens): it is planned again.
    pub fn complete(&mut self, ctx: &Context, plan: Plan, result: Result<()>, seconds: f64) {
        match result {
            Ok(()) => {}
            Err(Error::Aborted) => return,
            Err(Error::ContextFull(message)) => {
                for (id, n_prompt, _) in plan.members {
                    if self.requests.contains_key(&id) {
                        if n_prompt > 0 {
                            self.fail(id, Error::ContextFull(message.clone()));
                        } else {
                            self.finish(ctx, id, FinishReason::Generation(StopReason::ContextFull));
                        }
                    }
                }
                return;
            }
            Err(e) => {
                for (id, _, _) in plan.members {
                    self.fail(id, e.clone());
                }
                return;
            }
        }
        for (id, n_prompt, row) in plan.members {
            let Some(active) = self.requests.get_mut(&id).filter(|a| !a.done && a.failed.is_none()) else {
                continue; // cancelled or failed during the pass
            };
            if n_prompt > 0 {
                active.fed += n_prompt;
                active.prompt_seconds += seconds;
            } else {
                active.pending = None;
                active.decode_seconds += seconds;
                active.decode_passes += 1;
            }
            let Some(row) = row else { continue };
            if active.params.generate.max_tokens == 0 {
                self.finish(ctx, id, FinishReason::Generation(StopReason::Length));
                continue;
            }
            self.sample(ctx, id, ctx.output_logits(row));
        }
    }

    fn sample(&mut self, ctx: &Context, id: RequestId, logits: &[f32]) {
        let active = self.requests.get_mut(&id).expect("sampled requests are known");
        // A constrained request samples from a masked copy; an unconstrained one
        // from the logits themselves, exactly as before.
        let start = std::time::Instant::now();
        let masked = match active.constraint.as_mut() {
            Some(constraint) => {
                let mut masked = logits.to_vec();
                if let Err(e) = constraint.mask(&mut masked) {
                    self.fail(id, e);
                    return;
                }
                Some(masked)
            }
            None => None,
        };
        let mask_seconds = start.elapsed().as_secs_f64();
        let choice_logits = masked.as_deref().unwrap_or(logits);
        let token = match active.choose.as_mut() {
            Some(choose) => choose(choice_logits),
            None => active.sampler.sample(choice_logits),
        };
        if let Some(constraint) = active.constraint.as_mut() {
            let start = std::time::Instant::now();
            if let Err(e) = constraint.commit(token) {
                self.fail(id, e);
                return;
            }
            active
                .constraint_seconds
                .push(mask_seconds + start.elapsed().as_secs_f64());
        }
        active.sampler.accept(token);
        active.tokens.push(token);
        let complete = active.constraint.as_ref().is_some_and(Constraint::is_finished);
        let room = ctx.n_ctx_seq().saturating_sub(active.prompt.len());
        let (event, stop) = take_token(
            ctx.model(),
            &mut active.text,
            &active.params.generate,
            token,
            active.logprobs.map(|k| (logits, k)),
            complete,
            (active.tokens.len(), room),
        );
        active.events.push_back(event);
        match stop {
            Some(reason) => self.finish(ctx, id, reason),
            None => active.pending = Some(token),
        }
    }

    fn finish(&mut self, ctx: &Context, id: RequestId, finish_reason: FinishReason) {
        let active = self.requests.get_mut(&id).expect("finished requests are known");
        let tail = active.text.finish();
        let n_past = active.slot.map_or(0, |s| ctx.seq_tokens(s).len());
        let summary = Summary {
            finish_reason,
            tokens: std::mem::take(&mut active.tokens),
            text: active.text.text().to_string(),
            prompt_tokens: active.prompt.len(),
            reused_tokens: active.reused,
            prompt_seconds: active.prompt_seconds,
            decode_seconds: active.decode_seconds,
            decode_passes: active.decode_passes,
            n_past,
            constraint_seconds: std::mem::take(&mut active.constraint_seconds),
            decode_tokens: active.decode_passes,
            draft: None,
        };
        active.events.push_back(Event::Done { tail, summary });
        active.done = true;
        if let Some(slot) = active.slot.take() {
            self.release(slot);
        }
    }

    fn fail(&mut self, id: RequestId, e: Error) {
        if let Some(active) = self.requests.get_mut(&id) {
            active.failed = Some(e);
            if let Some(slot) = active.slot.take() {
                self.release(slot);
            }
        }
    }

    /// Plans, evaluates and completes one pass on this thread; false when there was
    /// nothing to evaluate.
    pub fn step(&mut self, ctx: &mut Context) -> Result<bool> {
        let Some(plan) = self.plan(ctx) else {
            return Ok(false);
        };
        let start = std::time::Instant::now();
        let result = plan.decode(ctx);
        let seconds = start.elapsed().as_secs_f64();
        ctx.count(plan.batch.len(), seconds);
        let aborted = matches!(result, Err(Error::Aborted));
        self.complete(ctx, plan, result, seconds);
        if aborted {
            return Err(Error::Aborted);
        }
        Ok(true)
    }
}
