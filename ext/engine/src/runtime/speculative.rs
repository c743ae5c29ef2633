//! Speculative decoding of one sequence, as llama.cpp's `llama-speculative-simple`
//! and `llama-lookup` run it: a drafter guesses the next few tokens, the target
//! evaluates the last token and the guesses in one pass (a row of logits each), and
//! keeps the guesses it agrees with plus a token of its own; the cells of the
//! rejected guesses are dropped from the KV caches. A pass then yields one to
//! k + 1 tokens for about the price of one, since decoding on a CPU is bound by
//! reading the weights.
//!
//! Drafters ([`DraftSource`]): a draft model (a smaller model of the same
//! vocabulary, in a context of its own, proposing its greedy choices, or at a
//! temperature its samples), prompt lookup ([`NgramCache`]: the n-grams of the
//! prompt and the text so far), or copying ([`copy_draft`]: what followed the last
//! earlier occurrence of the text's last few tokens).
//!
//! The passes follow llama.cpp's schedule exactly, so that greedy ids can be
//! compared with its tools': the prompt but its last token is evaluated first, by
//! both models; then each round the draft model evaluates the last token and its
//! guesses one by one, forgets them, and both models evaluate the target's batch
//! `[last, guesses...]` (`llama-speculative-simple`). With lookup the prompt's last
//! token is evaluated alone first (`llama-lookup`).
//!
//! Choosing: each row is sampled with the request's sampler chain, and a guess is
//! accepted with probability min(1, p(x)/q(x)), p the target's distribution and q
//! the drafter's; a rejected guess is replaced by a draw from norm(max(p − q, 0)).
//! The text then has the target's distribution (Leviathan et al., 2023); greedy, it
//! is the target's own choices. A lookup's or a greedy draft's q is a point mass.
//! Seeded sampling draws other numbers than plain decoding, so a seed gives
//! another (equally distributed) text.

use std::collections::VecDeque;
use std::time::Instant;

use crate::runtime::batcher::{admit, take_token, Admitted, DraftStats, Event, Request, Summary};
use crate::runtime::context::BatchToken;
use crate::runtime::ngram_cache::{copy_draft, NgramCache};
use crate::text::sampler::{greedy, Sampler, SamplerParams};
use crate::text::stream::{FinishReason, TextParams, TextStream};
use crate::{Context, Error, Model, Result, StopReason};

/// The most tokens one draft holds (a verification pass computes one more row).
pub const MAX_DRAFT_TOKENS: u32 = 16;
/// Where adaptive drafts start.
const ADAPTIVE_START: u32 = 4;
/// How far a fully accepted draft grows the next (llama.cpp's server and Hugging
/// Face's assisted generation use the same rule: grow by two, shrink by one).
const ADAPTIVE_GROWTH: u32 = 2;
/// llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID:
/// vocabularies may differ in size by this much (padding), and their tokens are
/// compared from this id on.
const VOCAB_MAX_SIZE_DIFFERENCE: usize = 128;
const VOCAB_CHECK_START: usize = 5;
/// Mixed into the request's seed for the draft model's own draws (llama.cpp's).
const DRAFT_SEED_MIX: u64 = 0x85eb_ca6b;

/// Who drafts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftSource {
    /// The draft model's context.
    Model,
    /// Prompt lookup: no second model.
    Lookup,
    /// Copying from the prompt and the text so far ([`copy_draft`]): no second model.
    Copy,
}

impl DraftSource {
    /// Its name in the APIs: `model`, `lookup`, `copy`.
    pub fn name(self) -> &'static str {
        match self {
            DraftSource::Model => "model",
            DraftSource::Lookup => "lookup",
            DraftSource::Copy => "copy",
        }
    }

    pub fn from_name(name: &str) -> Option<DraftSource> {
        [DraftSource::Model, DraftSource::Lookup, DraftSource::Copy]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// How many tokens a draft holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftLength {
    /// Starts at 4; a draft accepted in full grows the next by 2, a rejection
    /// shrinks it by 1, within 1 to [`MAX_DRAFT_TOKENS`].
    Adaptive,
    /// Always this many (fewer near `max_tokens` and the end of the context, and a
    /// lookup drafts only what its n-grams continue).
    Fixed(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeParams {
    pub source: DraftSource,
    pub length: DraftLength,
}

/// Refuses speculative decoding with a model that keeps a recurrent state (the target
/// or its draft model): each round takes back the guesses the target rejects, and a
/// state holds a whole sequence or nothing (see [`crate::memory::recurrent`]). llama.cpp
/// can keep snapshots of the last states for this (`n_rs_seq`, off by default); elelem
/// does not.
pub fn check_speculable(ctx: &Context, role: &str) -> Result<()> {
    if ctx.is_recurrent() {
        return Err(Error::InvalidArgument(format!(
            "speculative decoding takes back the guesses the target rejects, which the {role} ({}) cannot do: \
             its recurrent state holds a whole sequence or nothing; decode it with draft: false",
            ctx.model().hparams.arch.name
        )));
    }
    Ok(())
}

/// Whether `draft` can draft for `target`, as llama.cpp's
/// `common_speculative_are_compatible` decides: the same kind of vocabulary, the same
/// BOS and EOS handling, sizes within 128 tokens, and the same token texts.
pub fn check_compatible(target: &Model, draft: &Model) -> Result<()> {
    let (t, d) = (target.tokenizer()?, draft.tokenizer()?);
    let refuse = |why: String| {
        Err(Error::IncompatibleDraft(format!(
            "the draft model cannot draft for this model: {why}"
        )))
    };
    if t.model_name() != d.model_name() {
        return refuse(format!(
            "their vocabularies are of different kinds ({} and {})",
            t.model_name(),
            d.model_name()
        ));
    }
    if t.add_bos() != d.add_bos() || (t.add_bos() && t.bos() != d.bos()) {
        return refuse(format!("their BOS tokens differ ({:?} and {:?})", t.bos(), d.bos()));
    }
    if t.add_eos() != d.add_eos() || (t.add_eos() && t.eos() != d.eos()) {
        return refuse(format!("their EOS tokens differ ({:?} and {:?})", t.eos(), d.eos()));
    }
    let (n_t, n_d) = (t.n_vocab(), d.n_vocab());
    if n_t.abs_diff(n_d) > VOCAB_MAX_SIZE_DIFFERENCE {
        return refuse(format!("their vocabularies have {n_t} and {n_d} tokens"));
    }
    let piece =
        |tokenizer: &crate::Tokenizer, id| String::from_utf8_lossy(tokenizer.token_to_piece(id, true)).into_owned();
    if let Some(id) = (VOCAB_CHECK_START..n_t.min(n_d))
        .find(|&id| t.token_to_piece(id as u32, true) != d.token_to_piece(id as u32, true))
    {
        let id = id as u32;
        return refuse(format!(
            "token {id} is {:?} for this model and {:?} for the draft",
            piece(t, id),
            piece(d, id)
        ));
    }
    Ok(())
}

/// A distribution over tokens: (token, probability) pairs.
type Distribution = Vec<(u32, f64)>;

fn probability(distribution: &[(u32, f64)], token: u32) -> f64 {
    distribution.iter().find(|d| d.0 == token).map_or(0.0, |d| d.1)
}

/// One draft: its tokens and the distribution each was drawn from, sorted by token.
#[derive(Default)]
struct Draft {
    tokens: Vec<u32>,
    q: Vec<Distribution>,
}

impl Draft {
    fn certain(tokens: Vec<u32>) -> Draft {
        let q = tokens.iter().map(|&t| vec![(t, 1.0)]).collect();
        Draft { tokens, q }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Prompt,
    Decoding,
    Done,
}

/// One speculative generation: a state machine the caller drives with
/// [`Speculation::next_event`], giving it the target's context and, for a draft
/// model, the draft's (both sequence 0, both the caller's alone meanwhile).
pub struct Speculation {
    prompt: Vec<u32>,
    params: TextParams,
    logprobs: Option<u32>,
    source: DraftSource,
    length: DraftLength,
    /// The next draft's length (adaptive).
    k: u32,
    sampler: Sampler,
    /// The draft model's draws, at a temperature.
    draft_sampler: Sampler,
    text: TextStream,
    /// Lookup's n-grams, and the text they come from (the prompt, then each token).
    ngrams: NgramCache,
    history: Vec<u32>,
    /// The last token chosen, which the target has not evaluated yet.
    last: u32,
    phase: Phase,
    tokens: Vec<u32>,
    events: VecDeque<Event>,
    finish_reason: Option<FinishReason>,
    reused: usize,
    stats: DraftStats,
    prompt_seconds: f64,
    decode_seconds: f64,
    decode_passes: usize,
    decode_tokens: usize,
}

impl Speculation {
    /// Checks the request (a constraint or a chooser cannot be speculated) and the
    /// pair of models; `draft` is the draft model's context, for
    /// [`DraftSource::Model`].
    pub fn new(
        target: &Context,
        draft: Option<&Context>,
        request: Request,
        params: SpeculativeParams,
    ) -> Result<Speculation> {
        let Request {
            prompt,
            embeddings,
            params: text_params,
            logprobs,
            choose,
            constraint,
        } = request;
        if constraint.is_some() || choose.is_some() {
            return Err(Error::InvalidArgument(
                "speculative decoding takes no constraint (json_schema:, grammar:, lark:, regex:, choice:, tools:): \
                 pass draft: false"
                    .into(),
            ));
        }
        if !embeddings.is_empty() {
            return Err(Error::InvalidArgument(
                "speculative decoding takes text only: a prompt with images needs draft: false".into(),
            ));
        }
        check_speculable(target, "model")?;
        if let Some(draft) = draft {
            check_speculable(draft, "draft model")?;
        }
        let model = target.model();
        let n_ctx = target.n_ctx_seq();
        let Admitted { text, sampler } = admit(model, (n_ctx, &target.capacity_words()), &prompt, &[], &text_params)?;
        if let DraftLength::Fixed(k) = params.length {
            if !(1..=MAX_DRAFT_TOKENS).contains(&k) {
                return Err(Error::InvalidArgument(format!(
                    "a draft holds 1 to {MAX_DRAFT_TOKENS} tokens, got {k}"
                )));
            }
        }
        match (params.source, draft) {
            (DraftSource::Model, None) => {
                return Err(Error::InvalidArgument(
                    "drafting with a model needs the draft model's context".into(),
                ))
            }
            (DraftSource::Model, Some(draft)) => {
                check_compatible(model, draft.model())?;
                if draft.n_ctx_seq() < n_ctx {
                    return Err(Error::InvalidArgument(format!(
                        "the draft's context ({}) is smaller than the target's ({})",
                        draft.capacity_words(),
                        target.capacity_words()
                    )));
                }
            }
            (DraftSource::Lookup | DraftSource::Copy, _) => {}
        }
        // The draft model draws at the request's temperature, without penalties (any q
        // keeps the target's distribution; a closer one is accepted more often).
        let draft_sampler = Sampler::new(SamplerParams {
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: text_params.sampler.seed ^ DRAFT_SEED_MIX,
            ..text_params.sampler.clone()
        });
        let k = match params.length {
            DraftLength::Adaptive => ADAPTIVE_START,
            DraftLength::Fixed(k) => k,
        };
        Ok(Speculation {
            last: *prompt.last().expect("not empty"),
            history: Vec::new(),
            prompt,
            params: text_params,
            logprobs,
            source: params.source,
            length: params.length,
            k,
            sampler,
            draft_sampler,
            text,
            ngrams: NgramCache::default(),
            phase: Phase::Prompt,
            tokens: Vec::new(),
            events: VecDeque::new(),
            finish_reason: None,
            reused: 0,
            stats: DraftStats::default(),
            prompt_seconds: 0.0,
            decode_seconds: 0.0,
            decode_passes: 0,
            decode_tokens: 0,
        })
    }

    /// The next event, running passes until there is one; `None` once the generation
    /// is over and its events are taken. After an error (an interrupt), the contexts
    /// are consistent but the generation cannot go on.
    pub fn next_event(&mut self, target: &mut Context, mut draft: Option<&mut Context>) -> Result<Option<Event>> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Ok(Some(event));
            }
            match self.phase {
                Phase::Prompt => self.start(target, draft.as_deref_mut())?,
                Phase::Decoding => self.round(target, draft.as_deref_mut())?,
                Phase::Done => return Ok(None),
            }
        }
    }

    fn draft_context<'c>(&self, draft: Option<&'c mut Context>) -> Result<Option<&'c mut Context>> {
        match (self.source, draft) {
            (DraftSource::Lookup | DraftSource::Copy, _) => Ok(None),
            (DraftSource::Model, Some(draft)) => Ok(Some(draft)),
            (DraftSource::Model, None) => Err(Error::Internal("the draft model's context is missing".into())),
        }
    }

    /// Evaluates the prompt but its last token in both contexts (keeping, with
    /// `reuse_prefix`, what each shares with its previous sequence); without a draft
    /// model (lookup, copy), then the last token alone, and chooses the first token.
    fn start(&mut self, target: &mut Context, draft: Option<&mut Context>) -> Result<()> {
        let start = Instant::now();
        let head = &self.prompt[..self.prompt.len() - 1];
        let reuse = self.params.generate.reuse_prefix;
        self.reused = prefill(target, head, reuse)?;
        if let Some(draft) = self.draft_context(draft)? {
            prefill(draft, head, reuse)?;
        }
        self.prompt_seconds += start.elapsed().as_secs_f64();
        if self.params.generate.max_tokens == 0 {
            self.phase = Phase::Done;
            self.finish(target, FinishReason::Generation(StopReason::Length));
            return Ok(());
        }
        self.phase = Phase::Decoding;
        if self.source != DraftSource::Model {
            let start = Instant::now();
            target.decode_batch(&[BatchToken {
                token: self.last,
                seq: 0,
                output: true,
            }])?;
            self.prompt_seconds += start.elapsed().as_secs_f64();
            self.history = self.prompt.clone();
            if self.source == DraftSource::Lookup {
                self.ngrams.update(&self.history, self.history.len());
            }
            let p = self.sampler.distribution(target.output_logits(0));
            let token = self.sampler.draw(&p);
            self.take(target, token, 0);
            if let Some(reason) = self.finish_reason {
                self.finish(target, reason);
            }
        }
        Ok(())
    }

    /// One round: a draft, the target's pass over it, the tokens it keeps. A round that
    /// is aborted leaves both caches as they were before it, so the next call plays it again.
    fn round(&mut self, target: &mut Context, draft: Option<&mut Context>) -> Result<()> {
        let mut draft_ctx = self.draft_context(draft)?;
        let n_past = target.seq_tokens(0).len();
        let result = self.play_round(target, draft_ctx.as_deref_mut(), n_past);
        if matches!(result, Err(Error::Aborted)) {
            // The draft's guesses, or the target's pass without the draft's, are half done.
            target.seq_truncate(0, n_past)?;
            if let Some(draft) = draft_ctx {
                draft.seq_truncate(0, n_past)?;
            }
        }
        result
    }

    fn play_round(&mut self, target: &mut Context, mut draft_ctx: Option<&mut Context>, n_past: usize) -> Result<()> {
        let start = Instant::now();
        // Room for the verification pass and the token after it, within max_tokens.
        let room = target.n_ctx_seq().saturating_sub(n_past + 2);
        let budget = (self.params.generate.max_tokens as usize).saturating_sub(self.tokens.len() + 1);
        let k = (self.k as usize).min(room).min(budget);
        let proposal = match draft_ctx.as_deref_mut() {
            None if self.source == DraftSource::Copy => Draft::certain(copy_draft(&self.history, k)),
            None => Draft::certain(self.ngrams.draft(&self.history, k)),
            Some(draft) => self.draft_with_model(draft, target.model().hparams.n_vocab, n_past, k)?,
        };
        let batch: Vec<BatchToken> = std::iter::once(self.last)
            .chain(proposal.tokens.iter().copied())
            .map(|token| BatchToken {
                token,
                seq: 0,
                output: true,
            })
            .collect();
        target.decode_batch(&batch)?;
        if let Some(draft) = draft_ctx.as_deref_mut() {
            // The draft model evaluates what the target evaluated (its last row only),
            // as llama.cpp's draft-simple processes the target's batch.
            let mut copy = batch.clone();
            copy.iter_mut().for_each(|t| t.output = false);
            draft.decode_batch(&copy)?;
        }
        let (mut agreed, mut taken) = (0, 0);
        for row in 0..batch.len() {
            let guess = proposal.tokens.get(row).map(|&t| (t, &proposal.q[row][..]));
            let (token, accepted) = verify(&mut self.sampler, target.output_logits(row), guess);
            agreed += usize::from(accepted);
            taken += 1;
            self.take(target, token, row);
            if !accepted || self.phase == Phase::Done {
                break;
            }
        }
        // Every token taken but the last is an accepted guess: the caches keep the last
        // token and those, as a plain decode would hold them.
        target.seq_truncate(0, n_past + taken)?;
        if let Some(draft) = draft_ctx {
            draft.seq_truncate(0, n_past + taken)?;
        }
        self.stats.proposed += proposal.tokens.len();
        self.stats.accepted += agreed;
        self.decode_passes += 1;
        self.decode_tokens += taken;
        self.adapt(proposal.tokens.len(), agreed, k);
        self.decode_seconds += start.elapsed().as_secs_f64();
        if let Some(reason) = self.finish_reason {
            self.finish(target, reason);
        }
        Ok(())
    }

    /// The draft model's guesses after `self.last`, each evaluated to make the next;
    /// then its context forgets them (the verification pass evaluates them again).
    fn draft_with_model(&mut self, draft: &mut Context, n_vocab: u32, n_past: usize, k: usize) -> Result<Draft> {
        let mut proposal = Draft::default();
        if k == 0 {
            return Ok(proposal);
        }
        if draft.seq_tokens(0).len() != n_past {
            return Err(Error::Internal("the draft's cache is not the target's".into()));
        }
        let mut token = self.last;
        let greedy_draft = self.params.sampler.temperature <= 0.0;
        loop {
            draft.decode_batch(&[BatchToken {
                token,
                seq: 0,
                output: true,
            }])?;
            let logits = draft.logits();
            let (guess, mut q) = if greedy_draft {
                let guess = greedy(logits);
                (guess, vec![(guess, 1.0)])
            } else {
                let q = self.draft_sampler.distribution(logits);
                (self.draft_sampler.draw(&q), q)
            };
            if guess >= n_vocab {
                break; // a token the target does not have (a padded vocabulary)
            }
            q.sort_unstable_by_key(|d| d.0);
            proposal.tokens.push(guess);
            proposal.q.push(q);
            if proposal.tokens.len() == k {
                break;
            }
            token = guess;
        }
        draft.seq_truncate(0, n_past)?;
        Ok(proposal)
    }

    /// A chosen token (from the target's output `row`): its text and event, and
    /// whether the generation ends with it.
    fn take(&mut self, target: &Context, token: u32, row: usize) {
        self.sampler.accept(token);
        self.tokens.push(token);
        if self.source != DraftSource::Model {
            self.history.push(token);
            if self.source == DraftSource::Lookup {
                self.ngrams.update(&self.history, 1);
            }
        }
        let logits = target.output_logits(row);
        let room = target.n_ctx_seq().saturating_sub(self.prompt.len());
        let (event, stop) = take_token(
            target.model(),
            &mut self.text,
            &self.params.generate,
            token,
            self.logprobs.map(|k| (logits, k)),
            false,
            (self.tokens.len(), room),
        );
        self.events.push_back(event);
        match stop {
            Some(reason) => {
                self.finish_reason = Some(reason);
                self.phase = Phase::Done;
            }
            None => self.last = token,
        }
    }

    /// Grows the next draft after one accepted in full, shrinks it after a rejection.
    fn adapt(&mut self, drafted: usize, agreed: usize, asked: usize) {
        if self.length != DraftLength::Adaptive || drafted == 0 {
            return;
        }
        if agreed == drafted && drafted == asked {
            self.k = (self.k + ADAPTIVE_GROWTH).min(MAX_DRAFT_TOKENS);
        } else if agreed < drafted {
            self.k = self.k.saturating_sub(1).max(1);
        }
    }

    fn finish(&mut self, target: &Context, finish_reason: FinishReason) {
        let tail = self.text.finish();
        let summary = Summary {
            finish_reason,
            tokens: std::mem::take(&mut self.tokens),
            text: self.text.text().to_string(),
            prompt_tokens: self.prompt.len(),
            reused_tokens: self.reused,
            prompt_seconds: self.prompt_seconds,
            decode_seconds: self.decode_seconds,
            decode_passes: self.decode_passes,
            n_past: target.seq_tokens(0).len(),
            constraint_seconds: Vec::new(),
            decode_tokens: self.decode_tokens,
            draft: Some(self.stats),
        };
        self.events.push_back(Event::Done { tail, summary });
    }
}

/// Chooses the token of one row of the target's logits with its sampler: the guess
/// `(token, q)` (q sorted by token) if accepted, with probability min(1, p/q), else a
/// draw from the residual norm(max(p − q, 0)); past the draft, a draw from p.
fn verify(sampler: &mut Sampler, logits: &[f32], guess: Option<(u32, &[(u32, f64)])>) -> (u32, bool) {
    let p = sampler.distribution(logits);
    let Some((token, q)) = guess else {
        return (sampler.draw(&p), false);
    };
    let (p_x, q_x) = (probability(&p, token), lookup(q, token));
    if p_x >= q_x || (p_x > 0.0 && sampler.uniform() * q_x < p_x) {
        return (token, true);
    }
    let residual: Distribution = p
        .iter()
        .map(|&(t, p_t)| (t, (p_t - lookup(q, t)).max(0.0)))
        .filter(|r| r.1 > 0.0)
        .collect();
    (sampler.draw(&residual), false)
}

/// `token`'s probability in a distribution sorted by token.
fn lookup(sorted: &[(u32, f64)], token: u32) -> f64 {
    sorted
        .binary_search_by_key(&token, |d| d.0)
        .map_or(0.0, |i| sorted[i].1)
}

/// Starts sequence 0 of `ctx` with `head` (the prompt but its last token) in its
/// cache: a fresh sequence from an empty cache, as llama.cpp's, or with
/// `reuse_prefix` keeping the prefix it shares with the cached one. Returns the
/// tokens kept.
fn prefill(ctx: &mut Context, head: &[u32], reuse_prefix: bool) -> Result<usize> {
    let kept = if reuse_prefix && !head.is_empty() {
        ctx.seq_keep(0);
        ctx.restart_with_prefix(head)
    } else {
        ctx.clear();
        0
    };
    if kept < head.len() {
        ctx.decode(&head[kept..])?;
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::sampler::tests::sampler;

    /// The tokens chosen over many rows with the same logits and guess, as frequencies.
    fn frequencies(logits: &[f32], guess: u32, q: &[(u32, f64)], n: usize) -> (Vec<f64>, f64) {
        let mut s = sampler(1.0, 42);
        let mut counts = vec![0usize; logits.len()];
        let mut accepted = 0;
        let mut draft = sampler(1.0, 7);
        for _ in 0..n {
            // The guess is drawn from q, as a draft model draws it.
            let guess = if q.len() == 1 { guess } else { draft.draw(q) };
            let (token, ok) = verify(&mut s, logits, Some((guess, q)));
            counts[token as usize] += 1;
            accepted += usize::from(ok);
        }
        (
            counts.iter().map(|&c| c as f64 / n as f64).collect(),
            accepted as f64 / n as f64,
        )
    }

    #[test]
    fn accepted_and_resampled_tokens_follow_the_targets_distribution() {
        let logits = [0.0f32, 1.0, 2.0, 0.5];
        let total: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        let p: Vec<f64> = logits.iter().map(|&l| f64::from(l).exp() / total).collect();
        // A draft distribution unlike p (sorted by token), and a point mass (a lookup's guess).
        let q = [(0, 0.5), (1, 0.1), (2, 0.1), (3, 0.3)];
        for (guess, q) in [(0, &q[..]), (3, &[(3u32, 1.0)][..]), (2, &[(2u32, 1.0)][..])] {
            let (freq, accepted) = frequencies(&logits, guess, q, 40_000);
            for (f, p) in freq.iter().zip(&p) {
                assert!((f - p).abs() < 0.012, "guess {guess}: {freq:?} against {p:?}");
            }
            // A point mass on x is accepted with probability p(x).
            if q.len() == 1 {
                assert!(
                    (accepted - p[guess as usize]).abs() < 0.012,
                    "{accepted} against {}",
                    p[guess as usize]
                );
            }
        }
    }

    #[test]
    fn greedy_accepts_exactly_the_greedy_choice() {
        let logits = [0.1f32, 3.0, 2.9];
        let mut s = sampler(0.0, 1);
        assert_eq!(verify(&mut s, &logits, Some((1, &[(1, 1.0)]))), (1, true));
        assert_eq!(verify(&mut s, &logits, Some((2, &[(2, 1.0)]))), (1, false));
        assert_eq!(verify(&mut s, &logits, None), (1, false));
    }
}
