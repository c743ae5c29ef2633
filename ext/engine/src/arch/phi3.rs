//! phi3 (Phi-3, Phi-4-mini): llama's pre-norm block with Q, K and V fused in one
//! projection (`attn_qkv`), the gate and up projections fused in one twice as wide
//! (`ffn_up`, SwiGLU over its two halves), NEOX rope, and Q scaled by
//! 1/sqrt(head size) before flash attention. A sliding window in the file is
//! ignored, as llama.cpp ignores it. Phi-3.5 and Phi-4-mini carry LongRoPE: long and
//! short frequency factors (`rope_factors_long/short`), the long ones used when the
//! context is longer than the original one, and `rope.scaling.attn_factor`.

use super::common::{load_llama_like, run_layers, Head};
use super::llama::ffn_residual;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, FfnWeights, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, RopeFactors,
    Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "phi3",
    models: "Phi-3, Phi-3.5, Phi-4-mini",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// A sliding window is read and dropped, as llama.cpp drops it (its Phi SWA is disabled).
fn read_hparams(keys: &Keys, _: &mut HParams) -> Result<()> {
    keys.opt_u32("attention.sliding_window")?;
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let (embd, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
    let pairs = u64::from(hp.rope.n_dims / 2);
    let rope_factors = RopeFactors {
        long: loader.optional_vector("rope_factors_long.weight", pairs)?,
        short: loader.optional_vector("rope_factors_short.weight", pairs)?,
        ..RopeFactors::default()
    };
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(l.attention(hp, il, false)?),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: FfnWeights::GatedFused {
                up: l.matrix(&n("ffn_up.weight"), &[embd, 2 * ff])?,
                down: l.matrix(&n("ffn_down.weight"), &[ff, embd])?,
            },
            ffn_post_norm: None,
        })
    })?;
    Ok(Weights {
        layer_out_scales: Vec::new(),
        altup: None,
        laurel: Vec::new(),
        experts_beside_mlp: Vec::new(),
        per_layer_embd: None,
        rope_factors,
        ..weights
    })
}

/// phi3's graph, which phimoe's files run too.
pub(crate) fn build(b: &GraphBuilder) -> Tensor {
    let q_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, q_scale))
}

fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, q_scale: f32) -> Tensor {
    let g = b.graph;
    let rope = &b.hparams().rope;
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer.attn(), attn_in, il);
    let q = g.scale(b.rope(q, rope), q_scale);
    let k = b.rope(k, rope);
    let attn = b.attention(layer.attn(), il, q, k, v, 1.0);
    ffn_residual(b, layer, il, attn, x)
}
