//! qwen3 (Qwen3 dense models): llama's block with no Q, K or V biases, and a
//! per-head RMS norm of Q and of K before NEOX rope.

use crate::arch::llama::ffn_residual;
use crate::arch::{load_llama_like, no_extra_hparams, ArchSpec, LayerWeights, Weights};
use crate::ggml::Tensor;
use crate::hparams::{HParams, RopeMode};
use crate::layers::GraphBuilder;
use crate::model::Loader;
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen3",
    rope_mode: RopeMode::Neox,
    read_hparams: no_extra_hparams,
    load,
    build,
    experts: false,
};

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let head = u64::from(hp.head_dim_k);
    load_llama_like(loader, hp, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok(LayerWeights {
            attn_q_norm: Some(l.vector(&n("attn_q_norm.weight"), head)?),
            attn_k_norm: Some(l.vector(&n("attn_k_norm.weight"), head)?),
            ..l.llama_block(hp, il, false)?
        })
    })
}

pub(crate) fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = 1.0 / (b.hparams().head_dim_k as f32).sqrt();
    let mut x = b.embed();
    for (il, layer) in b.layers().iter().enumerate() {
        x = block(b, layer, il, x, kq_scale);
    }
    b.logits(x)
}

fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let rope = &b.hparams().rope;
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer, attn_in, il);
    let q = b.norm(q, layer.attn_q_norm, "Qcur_normed", il);
    let q = b.rope(q, rope);
    let k = b.norm(k, layer.attn_k_norm, "Kcur_normed", il);
    let k = b.rope(k, rope);
    let attn = b.attention(layer, il, q, k, v, kq_scale);
    ffn_residual(b, layer, il, attn, x)
}
