//! The generation loop: evaluate the prompt, then sample and feed back one
//! token at a time, exactly as llama.cpp's completion loop does it.

use crate::{Context, Error, Result};

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: u32,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
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
    /// The caller's callback asked to stop.
    Stopped,
}

/// Starts a fresh sequence with `prompt` and generates up to `max_tokens` tokens.
/// `sample` picks each token from the logits; `on_token` sees each token as it is
/// produced and returns `false` to stop.
pub fn generate(
    ctx: &mut Context,
    prompt: &[u32],
    params: &GenerateParams,
    mut sample: impl FnMut(&[f32]) -> u32,
    mut on_token: impl FnMut(u32) -> Result<bool>,
) -> Result<(Vec<u32>, StopReason)> {
    if prompt.is_empty() {
        return Err(Error::InvalidArgument("the prompt is empty".into()));
    }
    ctx.clear();
    let n_ctx = ctx.params().n_ctx as usize;
    let mut logits = ctx.decode(prompt)?;
    let mut out = Vec::new();
    loop {
        if out.len() >= params.max_tokens as usize {
            return Ok((out, StopReason::Length));
        }
        let token = sample(logits);
        out.push(token);
        if !on_token(token)? {
            return Ok((out, StopReason::Stopped));
        }
        if !params.ignore_eos && ctx.model().is_eog(token) {
            return Ok((out, StopReason::Eos));
        }
        if out.len() >= params.max_tokens as usize {
            return Ok((out, StopReason::Length));
        }
        if prompt.len() + out.len() >= n_ctx {
            return Ok((out, StopReason::ContextFull));
        }
        logits = ctx.decode(&[token])?;
    }
}
