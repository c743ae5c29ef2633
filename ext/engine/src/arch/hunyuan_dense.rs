//! hunyuan-dense (Hunyuan dense: 0.5B to 7B). What differs from llama:
//! - NEOX rope, and Q and K get a per-head RMS norm after rope (qwen3 norms before).
//! - No attention output bias.
//! - `rope.scaling.alpha` (NTK-aware scaling) raises the rope base to
//!   `base * alpha^(d / (d - 2))` for head size `d`, as llama.cpp computes it in f32.
//!
//! llama.cpp reads such a file's single expert as none; elelem refuses any expert count.

use super::common::{load_llama_like, run_layers, Head};
use super::llama::ffn_residual;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{ArchSpec, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "hunyuan-dense",
    models: "Hunyuan dense (Hunyuan-0.5B to 7B Instruct)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let alpha = keys.opt_f32("rope.scaling.alpha")?.unwrap_or(0.0);
    if !alpha.is_finite() {
        return Err(Error::Load(format!(
            "hunyuan-dense: rope.scaling.alpha ({alpha}) must be finite"
        )));
    }
    if alpha > 0.0 {
        let dim = hp.head_dim_k as f32;
        hp.rope.freq_base *= alpha.powf(dim / (dim - 2.0));
        if !(hp.rope.freq_base.is_finite() && hp.rope.freq_base > 0.0) {
            return Err(Error::Load(format!(
                "hunyuan-dense: rope.scaling.alpha {alpha} makes the rope base {}",
                hp.rope.freq_base
            )));
        }
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention_without_output_bias(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(l.with_head_norms(hp, il, attn)?),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: l.gated_ffn(hp, il)?,
            ffn_post_norm: None,
        })
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, kq_scale))
}

/// llama's block with Q and K normed per head after rope.
fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let rope = &b.hparams().rope;
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer.attn(), attn_in, il);
    let (q, k) = (b.rope(q, rope), b.rope(k, rope));
    let k = b.norm_if(k, layer.attn().k_norm, "Kcur_norm", il);
    let q = b.norm_if(q, layer.attn().q_norm, "Qcur_norm", il);
    let attn = b.attention(layer.attn(), il, q, k, v, kq_scale);
    ffn_residual(b, layer, il, attn, x)
}
