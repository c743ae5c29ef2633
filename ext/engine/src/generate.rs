//! One sequence generated to its end on this thread: the prompt evaluated in
//! micro-batches, then one token a pass, exactly as llama.cpp's completion loop
//! does it. The loop is the [`Batcher`]'s, with a single request.

use crate::batcher::{Batcher, Event, Request};
use crate::text::TextParams;
use crate::{Context, Result};

#[derive(Debug, Clone, Default)]
pub struct GenerateParams {
    pub max_tokens: u32,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Keep the K and V of the prompt's prefix shared with the sequence's previous
    /// request (a chat's earlier turns) instead of evaluating it again. The
    /// continuation is then llama.cpp's with its prompt cache, not a fresh
    /// evaluation's: the remaining tokens are evaluated in smaller batches, which
    /// rounds differently.
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

/// Generates from `prompt` in sequence 0 of `ctx`, choosing each token with
/// `choose` (which sees the logits): the tokens and why it stopped.
pub fn generate(
    ctx: &mut Context,
    prompt: &[u32],
    params: GenerateParams,
    choose: impl FnMut(&[f32]) -> u32 + Send,
) -> Result<(Vec<u32>, StopReason)> {
    let mut batcher = Batcher::new(ctx, 1);
    let request = Request {
        prompt: prompt.to_vec(),
        params: TextParams {
            generate: params,
            ..TextParams::default()
        },
        logprobs: None,
        choose: Some(Box::new(choose)),
        constraint: None,
    };
    let id = batcher.submit(request)?;
    loop {
        match batcher.next_event(id)? {
            Some(Event::Done { summary, .. }) => {
                let reason = match summary.finish_reason {
                    crate::FinishReason::Generation(reason) => reason,
                    crate::FinishReason::Stop => unreachable!("no stop strings"),
                };
                return Ok((summary.tokens, reason));
            }
            Some(Event::Token { .. }) => {}
            None => {
                batcher.step(ctx)?;
            }
        }
    }
}
