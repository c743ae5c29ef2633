//! glm4 (GLM-4-0414, GLM-4-9B/32B): llama's block with NORM rope over part of each
//! head (`rope.dimension_count`, half of it in the released models), the attention
//! and feed-forward outputs RMS-normed again before their residual adds (as
//! gemma's), and the gate and up projections fused in one `ffn_up` twice as wide
//! (SwiGLU over its two halves, as phi3's). The attention scale is 1/sqrt(head
//! size). Multimodal files (M-RoPE sections) and files with multi-token-prediction
//! layers carry keys this graph does not read, and are refused.

use super::common::{load_llama_like, no_extra_hparams, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, FfnWeights, Glu, GraphBuilder, HParams, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "glm4",
    models: "GLM-4-0414 (GLM-4-9B, GLM-4-32B, GLM-Z1)",
    rope_mode: RopeMode::Norm,
    read_hparams: no_extra_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let (embd, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(l.attention_without_output_bias(hp, il, false)?),
            attn_post_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: FfnWeights::GatedFused {
                up: l.matrix(&n("ffn_up.weight"), &[embd, 2 * ff])?,
                down: l.matrix(&n("ffn_down.weight"), &[ff, embd])?,
            },
            ffn_post_norm: Some(l.norm(&n("post_ffw_norm.weight"), embd)?),
        })
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, kq_scale))
}

/// norm → attention → post-norm → residual → norm → fused SwiGLU → post-norm → residual.
fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let g = b.graph;
    let rope = &b.hparams().rope;
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer.attn(), attn_in, il);
    let attn = b.attention(layer.attn(), il, b.rope(q, rope), b.rope(k, rope), v, kq_scale);
    let (attn, residual) = b.select_outputs_if_last(il, attn, x);
    let attn = b.norm(attn, layer.attn_post_norm, "post_attn_norm", il);
    let ffn_inp = g.add(attn, residual).set_name(&format!("ffn_inp-{il}"));
    let ffn = b.norm(ffn_inp, layer.ffn_norm, "ffn_norm", il);
    let ffn = b.ffn(&layer.ffn, ffn, il, Glu::Silu);
    let ffn = b.norm(ffn, layer.ffn_post_norm, "post_mlp_norm", il);
    g.add(ffn, ffn_inp).set_name(&format!("l_out-{il}"))
}
