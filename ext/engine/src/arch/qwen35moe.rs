//! qwen35moe (Qwen 3.5 mixtures of experts): qwen35's blocks (gated delta nets beside
//! gated attention; see [`super::qwen35`]) with, in place of its feed-forward, a mixture
//! of SwiGLU experts, a softmax router picking `expert_used_count` of `expert_count`
//! per token, weighted by their renormalized probabilities, beside a shared expert
//! (`expert_shared_feed_forward_length` wide, else `feed_forward_length`) scaled by the
//! sigmoid of its own gate, as llama.cpp's `src/models/qwen35moe.cpp`; its
//! multi-token-prediction layers loaded and left unused, as qwen35's. Refused as
//! qwen35's is a fused `attn_qkv` on the attention layers; and experts' gate and up
//! projections fused in one tensor.

use super::common::{load_llama_like, read_expert_counts, read_expert_width, Head};
use super::qwen35;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{ArchSpec, Glu, GraphBuilder, HParams, Keys, Kind, Loader, NormType, SharedGate, Weights};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen35moe",
    models: "Qwen 3.5 mixtures of experts (35B-A3B, 122B-A10B, 397B-A17B)",
    rope_mode: RopeMode::Imrope,
    read_hparams,
    load,
    build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_experts(keys, hp)?;
    qwen35::read_hybrid(keys, hp)
}

/// The experts' keys as qwen35moe and qwen3next read them: their count, how many a
/// token uses, their width and the shared expert's (`expert_shared_feed_forward_length`,
/// else `feed_forward_length`).
pub(super) fn read_experts(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_expert_counts(keys, hp)?;
    read_expert_width(keys, hp)?;
    hp.n_ff_shexp = match keys.opt_u32("expert_shared_feed_forward_length")? {
        Some(0) | None => hp.n_ff,
        Some(n) => n,
    };
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_with(loader, hp, qwen35::QWEN35)
}

/// qwen35moe's and qwen3next's weights: qwen35's layers (their delta nets as `layout`
/// says) with experts and a sigmoid-gated shared expert, then the unused
/// multi-token-prediction layers.
pub(super) fn load_with(loader: &mut Loader, hp: &HParams, layout: qwen35::Layout) -> Result<Weights> {
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        if l.has(&format!("blk.{il}.ffn_gate_up_exps.weight")) {
            return Err(Error::Unsupported(format!(
                "{}: experts' gate and up projections in one tensor (blk.{il}.ffn_gate_up_exps) are not \
                 something elelem runs; llama.cpp does",
                hp.arch.name
            )));
        }
        let shared = l.shared_expert(hp, il, hp.n_ff_shexp, Some(SharedGate::Sigmoid))?;
        let ffn = l.experts_ffn(hp, il, Some(shared), false)?;
        qwen35::layer(l, hp, il, ffn, layout)
    })?;
    qwen35::declare_nextn_layers(loader, hp)?;
    Ok(weights)
}

fn build(b: &GraphBuilder) -> Tensor {
    build_with(b, qwen35::QWEN35)
}

/// qwen35's blocks (their delta nets as `layout` says) with the experts' feed-forward.
pub(super) fn build_with(b: &GraphBuilder, layout: qwen35::Layout) -> Tensor {
    b.output_after_norm(qwen35::blocks(b, layout, |layer, il, x| {
        b.ffn(&layer.ffn, x, il, Glu::Silu)
    }))
}
