//! One module per architecture: which tensors it needs, and its forward graph
//! built from the shared pieces in [`crate::layers`]. Adding an architecture is
//! one file here and one arm in [`Arch`].

mod gemma3;
mod llama;
mod qwen2;
mod qwen3;

use crate::ggml::Tensor;
use crate::hparams::{HParams, RopeMode};
use crate::layers::GraphBuilder;
use crate::model::Loader;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            "gemma3" => Ok(Arch::Gemma3),
            other => Err(Error::Load(format!(
                "unsupported architecture '{other}' (supported: llama, qwen2, qwen3, gemma3)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }

    pub fn rope_mode(self) -> RopeMode {
        match self {
            Arch::Llama => RopeMode::Norm,
            Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma3 => RopeMode::Neox,
        }
    }

    pub(crate) fn load(self, loader: &mut Loader, hp: &HParams) -> Result<Weights> {
        match self {
            Arch::Llama => llama::load(loader, hp),
            Arch::Qwen2 => qwen2::load(loader, hp),
            Arch::Qwen3 => qwen3::load(loader, hp),
            Arch::Gemma3 => gemma3::load(loader, hp),
        }
    }

    /// Builds the forward pass and returns the logits of the output rows.
    pub(crate) fn build(self, b: &GraphBuilder) -> Tensor {
        match self {
            Arch::Llama | Arch::Qwen2 => llama::build(b),
            Arch::Qwen3 => qwen3::build(b),
            Arch::Gemma3 => gemma3::build(b),
        }
    }
}

/// The weights of one transformer block; each architecture fills what it has.
#[derive(Default)]
pub struct LayerWeights {
    pub attn_norm: Option<Tensor>,
    pub wq: Option<Tensor>,
    pub wk: Option<Tensor>,
    pub wv: Option<Tensor>,
    pub bq: Option<Tensor>,
    pub bk: Option<Tensor>,
    pub bv: Option<Tensor>,
    pub wo: Option<Tensor>,
    pub bo: Option<Tensor>,
    /// Per-head RMS norms of Q and K before rope.
    pub attn_q_norm: Option<Tensor>,
    pub attn_k_norm: Option<Tensor>,
    /// The norm of the attention output before its residual add.
    pub attn_post_norm: Option<Tensor>,
    pub ffn_norm: Option<Tensor>,
    pub ffn_gate: Option<Tensor>,
    pub ffn_up: Option<Tensor>,
    pub ffn_down: Option<Tensor>,
    /// The norm of the feed-forward output before its residual add.
    pub ffn_post_norm: Option<Tensor>,
}

pub struct Weights {
    pub tok_embd: Tensor,
    pub output_norm: Tensor,
    /// The output head; `token_embd.weight` when the model ties them.
    pub output: Tensor,
    pub output_bias: Option<Tensor>,
    /// F32 [rope dims / 2]: divides each rotated pair's frequency (llama3 rope scaling).
    pub rope_freqs: Option<Tensor>,
    pub layers: Vec<LayerWeights>,
}

/// The tensors every llama-like model has outside its blocks.
pub(crate) fn load_embeddings(loader: &mut Loader, hp: &HParams) -> Result<(Tensor, Tensor, Tensor)> {
    let (embd, vocab) = (u64::from(hp.n_embd), u64::from(hp.n_vocab));
    let tok_embd = loader.rows("token_embd.weight", &[embd, vocab])?;
    let output_norm = loader.vector("output_norm.weight", embd)?;
    let output = match loader.optional_matrix("output.weight", &[embd, vocab])? {
        Some(t) => t,
        None => loader.matrix("token_embd.weight", &[embd, vocab])?,
    };
    Ok((tok_embd, output_norm, output))
}
