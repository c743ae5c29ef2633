//! The generation loop: evaluate the prompt, then sample and feed back one
//! token at a time, exactly as llama.cpp's completion loop does it. It is a
//! step-at-a-time state machine so a caller (the Ruby glue) can give up its
//! interpreter lock around each step and stream each token as it comes.

use crate::{Context, Error, Result};

#[derive(Debug, Clone, Default)]
pub struct GenerateParams {
    pub max_tokens: u32,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Keep the K and V of the prompt's prefix shared with the previous sequence
    /// (a chat's earlier turns) instead of evaluating it again. The continuation is
    /// then llama.cpp's with its prompt cache, not a fresh evaluation's: the
    /// remaining tokens are evaluated in smaller batches, which rounds differently.
    pub reuse_prefix: bool,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (included in the output).
    Eos,
    /// `max_tokens` were produced.
    Length,
    /// The context window is full.
    ContextFull,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::Length => "length",
            StopReason::ContextFull => "context_full",
        }
    }
}

/// A generation in progress over a context.
pub struct Generator<'c> {
    ctx: &'c mut Context,
    params: GenerateParams,
    prompt_len: usize,
    tokens: Vec<u32>,
    to_feed: Option<u32>,
    stop: Option<StopReason>,
}

impl<'c> Generator<'c> {
    /// Starts a sequence with `prompt`: a fresh one, or one that keeps the prefix
    /// shared with the previous sequence when `params.reuse_prefix`.
    pub fn start(ctx: &'c mut Context, prompt: &[u32], params: GenerateParams) -> Result<Generator<'c>> {
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt is empty".into()));
        }
        let kept = if params.reuse_prefix {
            ctx.restart_with_prefix(prompt)
        } else {
            ctx.clear();
            0
        };
        ctx.decode(&prompt[kept..])?;
        let stop = (params.max_tokens == 0).then_some(StopReason::Length);
        Ok(Generator {
            ctx,
            params,
            prompt_len: prompt.len(),
            tokens: Vec::new(),
            to_feed: None,
            stop,
        })
    }

    /// Produces the next token (feeding the previous one first), or `None` once stopped.
    pub fn step(&mut self, sample: impl FnOnce(&[f32]) -> u32) -> Result<Option<u32>> {
        if self.stop.is_some() {
            return Ok(None);
        }
        let logits = match self.to_feed.take() {
            Some(token) => self.ctx.decode(&[token])?,
            None => self.ctx.logits(),
        };
        let token = sample(logits);
        self.tokens.push(token);
        self.stop = if !self.params.ignore_eos && self.ctx.model().is_eog(token) {
            Some(StopReason::Eos)
        } else if self.tokens.len() >= self.params.max_tokens as usize {
            Some(StopReason::Length)
        } else if self.prompt_len + self.tokens.len() >= self.ctx.params().n_ctx as usize {
            Some(StopReason::ContextFull)
        } else {
            self.to_feed = Some(token);
            None
        };
        Ok(Some(token))
    }

    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn model(&self) -> &crate::Model {
        self.ctx.model()
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }
}

/// Runs a whole generation: the tokens and why it stopped.
pub fn generate(
    ctx: &mut Context,
    prompt: &[u32],
    params: GenerateParams,
    mut sample: impl FnMut(&[f32]) -> u32,
) -> Result<(Vec<u32>, StopReason)> {
    let mut generator = Generator::start(ctx, prompt, params)?;
    while generator.step(&mut sample)?.is_some() {}
    let reason = generator.stop_reason().expect("stepped until stopped");
    Ok((generator.tokens, reason))
}
