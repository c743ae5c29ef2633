//! gemma2 (Gemma 2). What differs from llama:
//! - The embeddings are scaled by sqrt(n_embd) (`ggml_scale`, unlike gemma3's
//!   multiply by a filled input).
//! - Every other layer (the even ones) attends through a sliding window, 4096
//!   unless the file says otherwise, rotating like the global layers unless it
//!   gives them a base of their own.
//! - Q is scaled by the attention scale, and flash attention soft-caps the scores
//!   (`attn_logit_softcapping`, 50 unless set); the logits are soft-capped too
//!   (`final_logit_softcapping`, 30 unless set).
//! - The attention and feed-forward outputs are RMS-normed again before their
//!   residual adds, and the feed-forward is GeGLU.
//! - The output head is always the embeddings.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "gemma2",
    models: "Gemma 2",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    hp.swa = read_swa(keys, hp.n_layer, 4096, 2, hp.rope.clone())?;
    hp.attn_logit_softcap = Some(keys.opt_f32("attn_logit_softcapping")?.unwrap_or(50.0));
    hp.final_logit_softcap = Some(keys.opt_f32("final_logit_softcapping")?.unwrap_or(30.0));
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_llama_like(loader, hp, Head::Tied, |l, il| layer(l, hp, il))
}

/// A Gemma block's weights: llama's with post-norms, and no attention output bias
/// (llama.cpp's gemma graphs add none).
pub(crate) fn layer(l: &mut Loader, hp: &HParams, il: u32) -> Result<LayerWeights> {
    let embd = u64::from(hp.n_embd);
    let n = |s: &str| format!("blk.{il}.{s}");
    Ok(LayerWeights {
        attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
        mixer: Mixer::Attention(l.attention_without_output_bias(hp, il, false)?),
        attn_post_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
        ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
        ffn: l.gated_ffn(hp, il)?,
        ffn_post_norm: Some(l.norm(&n("post_ffw_norm.weight"), embd)?),
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    let attn_scale = attn_scale(hp, 46);
    let x = b.graph.scale(b.embed(), (hp.n_embd as f32).sqrt());
    run_layers(b, x, |layer, il, x| block(b, layer, il, x, attn_scale))
}

/// 1/sqrt(head size), except in the 27B models (`n_layer_27b` layers), which scale by
/// the embedding width per head.
pub(crate) fn attn_scale(hp: &HParams, n_layer_27b: u32) -> f32 {
    let width = if hp.n_layer == n_layer_27b {
        hp.n_embd / hp.n_head
    } else {
        hp.head_dim_k
    };
    1.0 / (width as f32).sqrt()
}

/// The block of Gemma 2 and 3: norm → attention (Q and K normed per head first where
/// the layer has the norms, as Gemma 3's do) → post-norm → residual → norm → GeGLU →
/// post-norm → residual.
pub(crate) fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, attn_scale: f32) -> Tensor {
    let g = b.graph;
    let rope = b.hparams().layer_rope(il);
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer.attn(), attn_in, il);
    let q = b.rope(b.norm_if(q, layer.attn().q_norm, "Qcur_normed", il), rope);
    let k = b.rope(b.norm_if(k, layer.attn().k_norm, "Kcur_normed", il), rope);
    let q = g.scale(q, attn_scale);
    let attn = b.attention(layer.attn(), il, q, k, v, 1.0);
    let (attn, residual) = b.select_outputs_if_last(il, attn, x);
    let attn = b.norm(attn, layer.attn_post_norm, "attn_post_norm", il);
    let sa_out = g.add(attn, residual).set_name(&format!("sa_out-{il}"));
    let ffn = b.norm(sa_out, layer.ffn_norm, "ffn_norm", il);
    let ffn = b.ffn(&layer.ffn, ffn, il, Glu::Gelu);
    let ffn = b.norm(ffn, layer.ffn_post_norm, "ffn_post_norm", il);
    g.add(ffn, sa_out).set_name(&format!("l_out-{il}"))
}
