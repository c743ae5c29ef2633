//! llama (Llama 2 and 3, Mistral, TinyLlama and other llama-shaped models):
//! pre-norm blocks, grouped-query attention with NORM rope (consecutive pairs
//! rotated), a SwiGLU feed-forward. Biases are optional. Llama 3.1+ files carry
//! `rope_freqs.weight`, the llama3 rope scaling as one factor per rotated pair,
//! applied in every layer.

use crate::arch::{load_embeddings, no_extra_hparams, ArchSpec, LayerWeights, Weights};
use crate::ggml::Tensor;
use crate::hparams::{HParams, RopeMode};
use crate::layers::{Glu, GraphBuilder};
use crate::model::Loader;
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "llama",
    rope_mode: RopeMode::Norm,
    read_hparams: no_extra_hparams,
    load,
    build,
};

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let (tok_embd, output_norm, output) = load_embeddings(loader, hp)?;
    let rope_freqs = loader.optional_vector("rope_freqs.weight", u64::from(hp.rope.n_dims / 2))?;
    let layers = (0..hp.n_layer)
        .map(|il| loader.llama_block(hp, il, false))
        .collect::<Result<_>>()?;
    Ok(Weights {
        tok_embd,
        output_norm,
        output,
        output_bias: None,
        rope_freqs,
        layers,
    })
}

pub(crate) fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    let kq_scale = 1.0 / (hp.head_dim_k as f32).sqrt();
    let mut x = b.embed();
    for (il, layer) in b.layers().iter().enumerate() {
        x = llama_block(b, layer, il, x, kq_scale);
    }
    b.logits(x)
}

/// The block llama and qwen2 share: norm → attention → residual → norm → SwiGLU → residual.
pub(crate) fn llama_block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let rope = &b.hparams().rope;
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer, attn_in, il);
    let q = b.rope(q, rope);
    let k = b.rope(k, rope);
    let attn = b.attention(layer, il, q, k, v, kq_scale);
    ffn_residual(b, layer, il, attn, x)
}

/// The second half of llama's block: the attention's residual add, then norm →
/// SwiGLU → residual (the output rows selected first in the last layer).
pub(crate) fn ffn_residual(b: &GraphBuilder, layer: &LayerWeights, il: usize, attn: Tensor, x: Tensor) -> Tensor {
    let (attn, residual) = b.select_outputs_if_last(il, attn, x);
    let ffn_in = b.graph.add(attn, residual).set_name(&format!("ffn_inp-{il}"));
    let ffn = b.norm(ffn_in, layer.ffn_norm, "ffn_norm", il);
    let ffn = b.ffn_gated(layer, ffn, il, Glu::Silu);
    b.graph.add(ffn, ffn_in).set_name(&format!("l_out-{il}"))
}
