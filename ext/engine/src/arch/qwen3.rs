//! qwen3 (Qwen3 dense models): llama's block with no Q, K or V biases, and a
//! per-head RMS norm of Q and of K before NEOX rope.

use crate::arch::llama::ffn_residual;
use crate::arch::{load_llama_like, no_extra_hparams, run_layers, ArchSpec, Head, LayerWeights, Weights};
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
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let layer = l.llama_block(hp, il, false)?;
        l.with_head_norms(hp, il, layer)
    })
}

pub(crate) fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, kq_scale))
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
