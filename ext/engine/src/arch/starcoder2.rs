//! starcoder2 (StarCoder2, and Granite Code 20B/34B): llama's pre-norm block and
//! graph, but with LayerNorms (weight and bias) before attention, before the
//! feed-forward and at the output; NEOX rope; biases on every projection (Q, K and
//! V where the file has them); and a sequential feed-forward, `down(gelu(up x +
//! b)) + b`, instead of SwiGLU.

use super::common::{load_llama_like, no_extra_hparams, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{
    ArchSpec, AttentionWeights, FfnWeights, HParams, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "starcoder2",
    models: "StarCoder2 (3B, 7B, 15B), Granite Code 20B and 34B",
    rope_mode: RopeMode::Neox,
    read_hparams: no_extra_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Layer,
};

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let (embd, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
    let mut weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: Some(l.layer_norm(&n("attn_norm"), embd)?),
            mixer: Mixer::Attention(AttentionWeights {
                bo: Some(l.vector(&n("attn_output.bias"), embd)?),
                ..attn
            }),
            attn_post_norm: None,
            ffn_norm: Some(l.layer_norm(&n("ffn_norm"), embd)?),
            ffn: FfnWeights::Sequential {
                up: l.matrix(&n("ffn_up.weight"), &[embd, ff])?,
                up_b: Some(l.vector(&n("ffn_up.bias"), ff)?),
                down: l.matrix(&n("ffn_down.weight"), &[ff, embd])?,
                down_b: Some(l.vector(&n("ffn_down.bias"), embd)?),
            },
            ffn_post_norm: None,
        })
    })?;
    if let Some(head) = &mut weights.head {
        head.norm.bias = Some(loader.vector("output_norm.bias", embd)?);
    }
    Ok(weights)
}
