//! One sequence generated to its end on this thread: the prompt evaluated in
//! micro-batches, then one token a pass, exactly as llama.cpp's completion loop
//! does it. The loop is the [`Batcher`]'s, with a single request.

use super::batcher::{Batcher, Event, Request};
use super::context::Context;
use crate::text::stream::{FinishReason, GenerateParams, StopReason, TextParams};
use crate::Result;

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
        embeddings: Vec::new(),
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
                    FinishReason::Generation(reason) => reason,
                    FinishReason::Stop => unreachable!("no stop strings"),
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
