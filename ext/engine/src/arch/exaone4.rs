//! exaone4 (EXAONE 4.0). What differs from llama:
//! - No norm before attention or before the feed-forward; their outputs are
//!   RMS-normed before the residual adds (as olmo2's).
//! - Q and K get a per-head RMS norm before rope (as qwen3's); NEOX rope, with
//!   Llama 3.1's `rope_freqs` where the file has them.
//! - The 32B models (64 layers, and only they, as llama.cpp decides it) attend
//!   through a sliding window (4096 unless the file says) on three layers of every
//!   four; then only those layers rotate, the global ones attend without rope.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, RopeFactors,
    Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "exaone4",
    models: "EXAONE 4.0 (1.2B, 32B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// llama.cpp's EXAONE 4.0 32B: the one size with sliding layers.
const N_LAYER_SWA: u32 = 64;

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    if hp.n_layer == N_LAYER_SWA {
        hp.swa = read_swa(keys, hp.n_layer, 4096, 4, hp.rope.clone())?;
    } else {
        // Read, and unused without sliding layers, as in llama.cpp.
        keys.opt_u32("attention.sliding_window")?;
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention_without_output_bias(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: None,
            mixer: Mixer::Attention(l.with_head_norms(hp, il, attn)?),
            attn_post_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
            ffn_norm: None,
            ffn: l.gated_ffn(hp, il)?,
            ffn_post_norm: Some(l.norm(&n("post_ffw_norm.weight"), embd)?),
        })
    })?;
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

fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, kq_scale))
}

/// attention (per-head Q/K norms, rope on sliding layers or everywhere without them)
/// → post-norm → residual → SwiGLU → post-norm → residual.
fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let (q, k, v) = b.qkv(layer.attn(), x, il);
    let q = b.norm_if(q, layer.attn().q_norm, "Qcur_normed", il);
    let k = b.norm_if(k, layer.attn().k_norm, "Kcur_normed", il);
    // Sliding layers rotate with the global base too: llama.cpp's graph takes no
    // per-layer one.
    let (q, k) = if hp.swa.is_none() || hp.is_swa(il) {
        (b.rope(q, &hp.rope), b.rope(k, &hp.rope))
    } else {
        (q, k)
    };
    let attn = b.attention(layer.attn(), il, q, k, v, kq_scale);
    let (attn, residual) = b.select_outputs_if_last(il, attn, x);
    let attn = b.norm(attn, layer.attn_post_norm, "attn_post_norm", il);
    let ffn_inp = g.add(attn, residual).set_name(&format!("ffn_inp-{il}"));
    let ffn = b.ffn(&layer.ffn, ffn_inp, il, Glu::Silu);
    let ffn = b.norm(ffn, layer.ffn_post_norm, "ffn_post_norm", il);
    g.add(ffn, ffn_inp).set_name(&format!("l_out-{il}"))
}
