//! glm4moe (GLM-4.5, GLM-4.6, GLM-4.7, GLM-4.5-Air): llama's block with NEOX rope over
//! part of each head (`rope.dimension_count`), Q, K and V biases where the file has
//! them, per-head Q/K norms where it has them (GLM-4.5's, not Air's), no bias on the
//! attention output, and the feed-forward's norm named `post_attention_norm`. The first
//! `leading_dense_block_count` layers have a SwiGLU feed-forward; the others a mixture
//! of SwiGLU experts, each picked by its own sigmoid plus a selection bias
//! (`exp_probs_b`, DeepSeek-V3's gating) and weighted by the unbiased sigmoids,
//! renormalized and scaled as the file says, beside an ungated shared expert
//! `expert_shared_count` experts wide. The multi-token-prediction layers at the end
//! (`nextn_predict_layers`) are loaded and left unused, as llama.cpp decodes. Files with
//! M-RoPE sections (GLM-4.5V's) rotate by sections, which elelem does not, and are refused.

use super::common::{self, load_llama_like, read_expert_counts, read_expert_gating, read_nextn_layers, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{
    ArchSpec, AttentionWeights, ExpertGating, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "glm4moe",
    models: "GLM-4.5, GLM-4.6, GLM-4.7, GLM-4.5-Air",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build: llama::build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_nextn_layers(keys, hp)?;
    read_expert_counts(keys, hp)?;
    // Required, as llama.cpp reads it; 0 gives the tensors' fallback width.
    hp.n_ff_exp = match keys.u32("expert_feed_forward_length")? {
        0 => hp.n_ff / hp.n_expert_used,
        n => n,
    };
    let shared = keys.u32("expert_shared_count")?;
    hp.n_ff_shexp = hp
        .n_ff_exp
        .checked_mul(shared)
        .filter(|&n| n > 0 && n <= 1 << 20)
        .ok_or_else(|| {
            Error::Load(format!(
                "glm4moe: the experts' width ({}) and expert_shared_count ({shared}) must give a shared \
                 expert 1 to {} wide (llama.cpp's graph runs one in every layer with experts)",
                hp.n_ff_exp,
                1 << 20
            ))
        })?;
    hp.n_layer_dense_lead = keys.opt_u32("leading_dense_block_count")?.unwrap_or(0);
    read_expert_gating(keys, hp, ExpertGating::Sigmoid)?;
    if let Some(sections) = keys.opt_u32s("rope.dimension_sections", 4)? {
        if sections.len() >= 2 && sections[0] > 0 && sections[1] > 0 {
            return Err(Error::Unsupported(format!(
                "glm4moe: rope.dimension_sections {sections:?} make llama.cpp rotate by M-RoPE sections \
                 (GLM-4.5V's), which elelem does not"
            )));
        }
    }
    if hp.head_dim_k != hp.head_dim_v {
        return Err(Error::Load(format!(
            "glm4moe: attention.key_length ({}) and value_length ({}) must agree, as llama.cpp asserts",
            hp.head_dim_k, hp.head_dim_v
        )));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    let head = u64::from(hp.head_dim_k);
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention_without_output_bias(hp, il, false)?;
        let attn = AttentionWeights {
            q_norm: l.optional_vector(&n("attn_q_norm.weight"), head)?,
            k_norm: l.optional_vector(&n("attn_k_norm.weight"), head)?,
            ..attn
        };
        let ffn = if il < hp.n_layer_dense_lead {
            l.gated_ffn(hp, il)?
        } else {
            let shared = l.shared_expert(hp, il, hp.n_ff_shexp, None)?;
            let experts = l.experts_ffn(hp, il, Some(shared), false)?;
            l.with_selection_bias(hp, il, experts)?
        };
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(attn),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
            ffn,
            ffn_post_norm: None,
        })
    })?;
    declare_nextn_layers(loader, hp)?;
    Ok(weights)
}

/// The multi-token-prediction layers: GLM-4.5's attention, then a dense feed-forward before
/// `n_layer_dense_lead` and the experts (with their selection bias) and shared expert after.
fn declare_nextn_layers(loader: &mut Loader, hp: &HParams) -> Result<()> {
    let q_dim = u64::from(hp.head_dim_k) * u64::from(hp.n_head);
    common::declare_nextn_layers(loader, hp, q_dim, false, |layer| {
        if layer.il < hp.n_layer_dense_lead {
            return layer.dense_ffn(hp);
        }
        let (embd, n_expert) = (u64::from(hp.n_embd), u64::from(hp.n_expert));
        let (ff_exp, ff_shexp) = (u64::from(hp.n_ff_exp), u64::from(hp.n_ff_shexp));
        layer.unused("ffn_gate_inp.weight", &[embd, n_expert], true)?;
        layer.unused("exp_probs_b.bias", &[n_expert], true)?;
        layer.unused("ffn_gate_exps.weight", &[embd, ff_exp, n_expert], true)?;
        layer.unused("ffn_down_exps.weight", &[ff_exp, embd, n_expert], true)?;
        layer.unused("ffn_up_exps.weight", &[embd, ff_exp, n_expert], true)?;
        layer.unused("ffn_gate_shexp.weight", &[embd, ff_shexp], true)?;
        layer.unused("ffn_down_shexp.weight", &[ff_shexp, embd], true)?;
        layer.unused("ffn_up_shexp.weight", &[embd, ff_shexp], true)
    })
}
