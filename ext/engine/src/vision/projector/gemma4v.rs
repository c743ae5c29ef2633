//! Gemma 4's projector (`PROJECTOR_TYPE_GEMMA4V`, `tools/mtmd/models/gemma4v.cpp`, after the
//! ViT in [`crate::vision::encoder`]): `Gemma4VisionPooler` (each `k × k` block of the
//! patch grid averaged, `k` = `n_merge`, 3 unless `clip.vision.projector.scale_factor`
//! says otherwise, then scaled by `sqrt(n_embd)`), the standardization
//! `(x - v.std_bias) · v.std_scale` where the file has both, an RMS norm without weight,
//! and the input projection `mm.input_projection.weight` (`[n_embd, n_text_embd]`).
//!
//! What is special: the image is any size (multiples of `patch · k`, as mtmd's
//! dynamic-size preprocessing makes it); clip.cpp's clamps of `Gemma4ClippableLinear` (the
//! `*.input_max` and such scalars) are not read, so a file with them is refused as having
//! tensors elelem does not use; without them clip.cpp clamps to ±`FLT_MAX`, which changes
//! no finite value.

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::{Error, Result};

/// `v.std_bias` and `v.std_scale` (both or neither) and `mm.input_projection.weight`.
pub struct Gemma4vWeights {
    /// `[n_embd]` each.
    pub std_bias_scale: Option<(Tensor, Tensor)>,
    /// `[n_embd, n_text_embd]`.
    pub input_proj: Tensor,
}

impl Gemma4vWeights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.input_proj.ne()[1] as u32
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Gemma4vWeights> {
    let embd = u64::from(hp.n_embd);
    let n_text_embd = l
        .tensor_dims("mm.input_projection.weight")
        .and_then(|dims| dims.get(1).copied())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            Error::Load("tensor mm.input_projection.weight is missing or empty: [n_embd, n_text_embd] expected".into())
        })?;
    // clip.cpp standardizes only where it has both.
    let std_bias_scale = match (l.has("v.std_bias"), l.has("v.std_scale")) {
        (true, true) => Some((l.vector("v.std_bias", embd)?, l.vector("v.std_scale", embd)?)),
        _ => None,
    };
    Ok(Gemma4vWeights {
        std_bias_scale,
        input_proj: l.matrix("mm.input_projection.weight", &[embd, n_text_embd])?,
    })
}

/// gemma4v.cpp after `build_vit`, over the encoder's `[n_embd, width · height]` output.
pub fn build(g: &Graph, hp: &ClipHParams, w: &Gemma4vWeights, cur: Tensor, (width, height): (i64, i64)) -> Tensor {
    let k = hp.n_merge as i32;
    let n_embd = cur.ne()[0];

    // Gemma4VisionPooler.
    let cur = g.cont_4d(g.transpose(cur), [width, height, n_embd, 1]);
    let cur = g.pool_2d_avg(cur, k, k, k, k);
    let (out_x, out_y) = (width / i64::from(k), height / i64::from(k));
    let cur = g.reshape_3d(cur, out_x * out_y, n_embd, 1);
    let cur = g.cont(g.transpose(cur));
    let mut cur = g.scale(cur, (n_embd as f32).sqrt());

    if let Some((bias, scale)) = w.std_bias_scale {
        cur = g.mul(g.sub(cur, bias), scale);
    }

    // Gemma4MultimodalEmbedder.
    let cur = g.rms_norm(cur, hp.eps);
    g.mul_mat(w.input_proj, cur)
}
