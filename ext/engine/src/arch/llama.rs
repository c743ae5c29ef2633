//! llama (Llama 2 and 3, Mistral, TinyLlama and other llama-shaped models):
//! pre-norm blocks, grouped-query attention with NORM rope (consecutive pairs
//! rotated), a SwiGLU feed-forward. Biases are optional. Llama 3.1+ files carry
//! `rope_freqs.weight`, the llama3 rope scaling as one factor per rotated pair,
//! applied in every layer.

use super::common::{load_llama_like, no_extra_hparams, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{ArchSpec, Glu, GraphBuilder, HParams, Kind, LayerWeights, Loader, NormType, RopeFactors, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "llama",
    models: "Llama 2, 3 and 3.1, Mistral 7B, TinyLlama and other llama-shaped models",
    rope_mode: RopeMode::Norm,
    read_hparams: no_extra_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

pub(crate) fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| l.llama_block(hp, il, false))?;
    with_rope_freqs(loader, hp, weights)
}

/// `weights` with Llama 3's `rope_freqs.weight` (one factor per rotated pair, every
/// layer's) where the file has it.
pub(crate) fn with_rope_freqs(loader: &mut Loader, hp: &HParams, weights: Weights) -> Result<Weights> {
    Ok(Weights {
        layer_out_scales: Vec::new(),
        altup: None,
        laurel: Vec::new(),
        experts_beside_mlp: Vec::new(),
        per_layer_embd: None,
        rope_factors: RopeFactors {
            freqs: loader.optional_vector("rope_freqs.weight", u64::from(hp.rope.n_dims / 2))?,
            ..RopeFactors::default()
        },
        ..weights
    })
}

/// llama's graph, with the knobs its kin set in the hyper-parameters: an attention
/// scale, layers without rope, multipliers, Q's temperature by position (see [`HParams`]).
pub(crate) fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    let kq_scale = hp.attention_scale.unwrap_or_else(|| hp.kq_scale());
    let temperature = b.attn_temperature();
    run_layers(b, b.embed(), |layer, il, x| {
        llama_block(b, layer, il, x, kq_scale, temperature)
    })
}

/// The block llama and its kin share: norm → attention (Q and K normed per head first
/// where the layer has the norms, as qwen3's do; Q multiplied by the `temperature`
/// input after rope where the model has one) → residual → norm → SwiGLU → residual.
pub(crate) fn llama_block(
    b: &GraphBuilder,
    layer: &LayerWeights,
    il: usize,
    x: Tensor,
    kq_scale: f32,
    temperature: Option<Tensor>,
) -> Tensor {
    let hp = b.hparams();
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer.attn(), attn_in, il);
    let q = b.norm_if(q, layer.attn().q_norm, "Qcur_normed", il);
    let k = b.norm_if(k, layer.attn().k_norm, "Kcur_normed", il);
    let (q, k) = if hp.rotates(il) {
        (b.rope(q, &hp.rope), b.rope(k, &hp.rope))
    } else {
        (q, k)
    };
    let q = temperature.map_or(q, |t| b.graph.mul(q, t));
    let attn = b.attention(layer.attn(), il, q, k, v, kq_scale);
    ffn_residual(b, layer, il, attn, x)
}

/// The second half of llama's block: the attention's residual add, then norm →
/// SwiGLU (or a mixture of SwiGLU experts) → residual. In the last layer the output
/// rows are selected first; both outputs are scaled first where the model has a
/// residual multiplier.
pub(crate) fn ffn_residual(b: &GraphBuilder, layer: &LayerWeights, il: usize, attn: Tensor, x: Tensor) -> Tensor {
    let g = b.graph;
    let scaled = |t: Tensor| match b.hparams().residual_scale {
        Some(scale) => g.scale(t, scale),
        None => t,
    };
    let (attn, residual) = b.select_outputs_if_last(il, attn, x);
    let ffn_in = g.add(scaled(attn), residual).set_name(&format!("ffn_inp-{il}"));
    let ffn = b.norm(ffn_in, layer.ffn_norm, "ffn_norm", il);
    let ffn = b.ffn(&layer.ffn, ffn, il, Glu::Silu);
    g.add(scaled(ffn), ffn_in).set_name(&format!("l_out-{il}"))
}
