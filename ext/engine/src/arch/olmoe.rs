//! olmoe (OLMoE): llama's pre-norm block with olmo2's attention (Q and K RMS-normed
//! over their whole width, then split into heads and rotated, NEOX) and a mixture of
//! SwiGLU experts `feed_forward_length` wide whose weights are the router's softmax
//! probabilities as they are (not renormalized). No attention output bias; the head
//! is never tied.

use super::common::{load_llama_like, read_expert_counts, run_layers, Head};
use super::llama::ffn_residual;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, AttentionWeights, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "olmoe",
    models: "OLMoE (1B-7B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_expert_counts(keys, hp)?;
    // llama.cpp sizes the experts by feed_forward_length and leaves this key unread.
    keys.opt_u32("expert_feed_forward_length")?;
    hp.n_ff_exp = hp.n_ff;
    hp.expert_weights_norm = false;
    // Its K norm is as wide as the embeddings: without as many KV heads as heads,
    // llama.cpp's graph would not fit it.
    if hp.n_head_kv != hp.n_head {
        return Err(Error::Load(format!(
            "olmoe: attention.head_count_kv ({}) must equal attention.head_count ({})",
            hp.n_head_kv, hp.n_head
        )));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::Own, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention_without_output_bias(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(AttentionWeights {
                q_norm: Some(l.vector(&n("attn_q_norm.weight"), embd)?),
                k_norm: Some(l.vector(&n("attn_k_norm.weight"), embd)?),
                ..attn
            }),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: l.experts_ffn(hp, il, None, false)?,
            ffn_post_norm: None,
        })
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, kq_scale))
}

/// norm → Q/K/V rows, Q and K normed whole → heads → rope → attention → residual →
/// norm → experts → residual.
fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let rope = &b.hparams().rope;
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv_rows(layer.attn(), attn_in);
    let q = b.norm_if(q, layer.attn().q_norm, "Qcur_normed", il);
    let k = b.norm_if(k, layer.attn().k_norm, "Kcur_normed", il);
    let (q, k, v) = b.heads(q, k, v, il);
    let attn = b.attention(layer.attn(), il, b.rope(q, rope), b.rope(k, rope), v, kq_scale);
    ffn_residual(b, layer, il, attn, x)
}
