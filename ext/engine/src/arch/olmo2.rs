//! olmo2 (OLMo 2). What differs from llama:
//! - No norm before attention or before the feed-forward; instead the attention
//!   and feed-forward outputs are RMS-normed before their residual adds.
//! - Q and K are RMS-normed over their whole width (all heads together), before
//!   they are split into heads and rotated (NEOX).
//! - The output head is never tied to the embeddings.
//!
//! OLMo 3 files (this architecture with a sliding window) are refused.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, AttentionWeights, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "olmo2",
    models: "OLMo 2",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, _: &mut HParams) -> Result<()> {
    match keys.opt_u32("attention.sliding_window")? {
        Some(window) if window > 0 => Err(Error::Load("olmo2: a sliding window (OLMo 3) is not supported".into())),
        _ => Ok(()),
    }
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::Own, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention_without_output_bias(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: None,
            mixer: Mixer::Attention(AttentionWeights {
                q_norm: Some(l.vector(&n("attn_q_norm.weight"), u64::from(hp.head_dim_k * hp.n_head))?),
                k_norm: Some(l.vector(&n("attn_k_norm.weight"), u64::from(hp.n_embd_k_gqa()))?),
                ..attn
            }),
            attn_post_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
            ffn_norm: None,
            ffn: l.gated_ffn(hp, il)?,
            ffn_post_norm: Some(l.norm(&n("post_ffw_norm.weight"), embd)?),
        })
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, kq_scale))
}

fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let g = b.graph;
    let rope = &b.hparams().rope;
    let (q, k, v) = b.qkv_rows(layer.attn(), x);
    let q = b.norm_if(q, layer.attn().q_norm, "Qcur_normed", il);
    let k = b.norm_if(k, layer.attn().k_norm, "Kcur_normed", il);
    let (q, k, v) = b.heads(q, k, v, il);
    let q = b.rope(q, rope);
    let k = b.rope(k, rope);
    let attn = b.attention(layer.attn(), il, q, k, v, kq_scale);
    let (attn, residual) = b.select_outputs_if_last(il, attn, x);
    let attn = b.norm(attn, layer.attn_post_norm, "attn_post_norm", il);
    let ffn_inp = g.add(attn, residual).set_name(&format!("ffn_inp-{il}"));
    let ffn = b.ffn(&layer.ffn, ffn_inp, il, Glu::Silu);
    let ffn = b.norm(ffn, layer.ffn_post_norm, "ffn_post_norm", il);
    g.add(ffn, ffn_inp).set_name(&format!("l_out-{il}"))
}
