//! gpt-oss (OpenAI's gpt-oss-20b and -120b; llama.cpp's `openai-moe`). What differs
//! from llama:
//! - Attention sinks: a learned logit per head joins each soft-max of its scores.
//! - Every other layer, from the first, attends through a sliding window, and rotates
//!   with `rope.freq_base_swa` where the file has it; NEOX rope, usually YaRN-scaled.
//! - Biases on Q, K and V where the file has them, and on the attention output.
//! - The feed-forward is a mixture of experts (MXFP4 in OpenAI's files) with biases on
//!   the router and on every expert's projections; the router's logits pick the
//!   experts and a soft-max over the picked ones weighs them; the experts' activation
//!   is a clamped SwiGLU (`Glu::SiluOai`).
//! - The norm before the feed-forward is named `post_attention_norm`; the head is never
//!   tied. Every row goes through the last block; the rows whose logits are wanted are
//!   picked just before the output norm.

use super::common::{load_llama_like, read_expert_counts, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, AttentionWeights, ExpertGating, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader,
    Mixer, NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "gpt-oss",
    models: "gpt-oss (20B, 120B)",
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
    hp.n_ff_exp = keys.u32("expert_feed_forward_length")?;
    if hp.n_ff_exp == 0 {
        return Err(Error::Load("gpt-oss: expert_feed_forward_length is 0".into()));
    }
    hp.expert_gating = ExpertGating::SoftmaxWeight;
    hp.expert_weights_norm = false;
    let window = keys.u32("attention.sliding_window")?;
    hp.swa = read_swa(keys, hp.n_layer, window, 2, hp.rope.clone())?;
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::Own, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention(hp, il, false)?;
        let experts = l.experts_ffn(hp, il, None, false)?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(AttentionWeights {
                sinks: Some(l.vector(&n("attn_sinks.weight"), hp.n_head.into())?),
                ..attn
            }),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
            ffn: l.with_expert_biases(hp, il, experts)?,
            ffn_post_norm: None,
        })
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    let x = b
        .layers()
        .iter()
        .enumerate()
        .fold(b.embed(), |x, (il, layer)| block(b, layer, il, x, kq_scale));
    // llama.cpp's graph keeps every row through the last block (its next-token
    // prediction reads them) and picks the rows whose logits are wanted only here.
    b.output(b.output_rows(x))
}

/// norm → Q/K/V (+ biases) → rope (the layer's) → attention with sinks (+ output bias)
/// → residual → norm → experts → residual.
fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let g = b.graph;
    let rope = b.hparams().layer_rope(il);
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer.attn(), attn_in, il);
    let attn = b.attention(layer.attn(), il, b.rope(q, rope), b.rope(k, rope), v, kq_scale);
    let ffn_in = g.add(attn, x).set_name(&format!("ffn_inp-{il}"));
    let ffn = b.norm(ffn_in, layer.ffn_norm, "attn_post_norm", il);
    let ffn = b.ffn(&layer.ffn, ffn, il, Glu::SiluOai);
    g.add(ffn, ffn_in).set_name(&format!("l_out-{il}"))
}
