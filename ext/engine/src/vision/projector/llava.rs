//! LLaVA's projectors (`PROJECTOR_TYPE_MLP` and `PROJECTOR_TYPE_MLP_NORM`, the `llava`
//! graph of `tools/mtmd/models/llava.cpp`): the CLIP encoder's hidden states (of its
//! feature layers, side by side, or of the layer before the last: see
//! [`crate::vision::encoder`]) of each patch, then LLaVA 1.5's two-layer MLP with GELU
//! between (`mm.0`, `mm.2`, with biases), or Yi-VL's (`mm_norm`: the file has `mm.3`, as
//! clip.cpp tells the two apart): `mm.0`, a LayerNorm (`mm.1`), GELU, `mm.3`, a LayerNorm
//! (`mm.4`), both norms with the encoder's `eps`.
//!
//! What is special: clip.cpp appends the class token after the patches, then keeps the rows
//! from 1 on (its `patches` input, meant to skip a class token in front): the first patch
//! is dropped and the class token kept, and so it is here. `v.image_newline` (LLaVA 1.6's)
//! is read and never used, as mtmd lays a sliced image out without it.

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::{Error, Result};

/// The MLP's weights, by variant.
pub enum LlavaWeights {
    /// `mm.0.*` (`[n_embd · n_feature_stack, n_hidden]`) and `mm.2.*`
    /// (`[n_hidden, n_text_embd]`).
    Mlp {
        mm_0_w: Tensor,
        mm_0_b: Tensor,
        mm_2_w: Tensor,
        mm_2_b: Tensor,
    },
    /// `mm.0.*`, the LayerNorm `mm.1.*`, `mm.3.*` and the LayerNorm `mm.4.*`.
    MlpNorm {
        mm_0_w: Tensor,
        mm_0_b: Tensor,
        mm_1_w: Tensor,
        mm_1_b: Tensor,
        mm_3_w: Tensor,
        mm_3_b: Tensor,
        mm_4_w: Tensor,
        mm_4_b: Tensor,
    },
}

impl LlavaWeights {
    pub fn n_mmproj_embd(&self) -> u32 {
        match self {
            LlavaWeights::Mlp { mm_2_w, .. } => (*mm_2_w).ne()[1] as u32,
            LlavaWeights::MlpNorm { mm_3_w, .. } => (*mm_3_w).ne()[1] as u32,
        }
    }
}

fn dim(l: &Loader, name: &str, i: usize, expected: &str) -> Result<u64> {
    match l.tensor_dims(name).and_then(|dims| dims.get(i).copied()) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(Error::Load(format!(
            "tensor {name} is missing or empty: {expected} expected"
        ))),
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<LlavaWeights> {
    let features = u64::from(hp.n_embd) * u64::from(hp.n_feature_stack());
    let hidden = dim(l, "mm.0.weight", 1, "[n_embd * feature layers, n_hidden]")?;
    let mm_0_w = l.matrix("mm.0.weight", &[features, hidden])?;
    let mm_0_b = l.vector("mm.0.bias", hidden)?;
    let weights = if l.has("mm.3.weight") {
        let n_text_embd = dim(l, "mm.3.weight", 1, "[n_hidden, n_text_embd]")?;
        LlavaWeights::MlpNorm {
            mm_0_w,
            mm_0_b,
            mm_1_w: l.vector("mm.1.weight", hidden)?,
            mm_1_b: l.vector("mm.1.bias", hidden)?,
            mm_3_w: l.matrix("mm.3.weight", &[hidden, n_text_embd])?,
            mm_3_b: l.vector("mm.3.bias", n_text_embd)?,
            mm_4_w: l.vector("mm.4.weight", n_text_embd)?,
            mm_4_b: l.vector("mm.4.bias", n_text_embd)?,
        }
    } else {
        let n_text_embd = dim(l, "mm.2.weight", 1, "[n_hidden, n_text_embd]")?;
        LlavaWeights::Mlp {
            mm_0_w,
            mm_0_b,
            mm_2_w: l.matrix("mm.2.weight", &[hidden, n_text_embd])?,
            mm_2_b: l.vector("mm.2.bias", n_text_embd)?,
        }
    };
    let n_text_embd = u64::from(weights.n_mmproj_embd());
    l.unused("v.image_newline", &[n_text_embd], false)?;
    Ok(weights)
}

/// `clip_graph_llava`'s projector over the encoder's `[n_features, n_pos]` output of a
/// `grid` of patches.
pub fn build(g: &Graph, hp: &ClipHParams, w: &LlavaWeights, cur: Tensor, (width, height): (i64, i64)) -> Tensor {
    let n_patches = width * height;
    let cur = g.reshape_2d(cur, cur.ne()[0], cur.ne()[1]);
    // clip.cpp's rows `1 + i` where there is a class token (its `get_rows` of consecutive
    // rows: the same values as this view of them).
    let first = cur.ne()[1] - n_patches;
    let nb1 = cur.nb()[1];
    let cur = g.view_2d(cur, cur.ne()[0], n_patches, nb1, first as usize * nb1);
    match w {
        LlavaWeights::Mlp {
            mm_0_w,
            mm_0_b,
            mm_2_w,
            mm_2_b,
        } => {
            let cur = g.add(g.mul_mat(*mm_0_w, cur), *mm_0_b);
            let cur = g.gelu(cur);
            g.add(g.mul_mat(*mm_2_w, cur), *mm_2_b)
        }
        LlavaWeights::MlpNorm {
            mm_0_w,
            mm_0_b,
            mm_1_w,
            mm_1_b,
            mm_3_w,
            mm_3_b,
            mm_4_w,
            mm_4_b,
        } => {
            // Both LayerNorms with the encoder's eps.
            let cur = g.add(g.mul_mat(*mm_0_w, cur), *mm_0_b);
            let cur = g.add(g.mul(g.layer_norm(cur, hp.eps), *mm_1_w), *mm_1_b);
            let cur = g.gelu(cur);
            let cur = g.add(g.mul_mat(*mm_3_w, cur), *mm_3_b);
            g.add(g.mul(g.layer_norm(cur, hp.eps), *mm_4_w), *mm_4_b)
        }
    }
}
