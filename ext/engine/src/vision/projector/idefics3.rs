//! Idefics3's projector (`PROJECTOR_TYPE_IDEFICS3`, SmolVLM; the `idefics3` branch of
//! `tools/mtmd/models/siglip.cpp`): the pixel unshuffle of clip.cpp's
//! `build_patch_merge_permute` — each `s × s` block of the SigLIP encoder's patch grid
//! becomes one token of `s² · n_embd` values (two reshapes and permutes, in clip.cpp's
//! order) — then one linear map without bias, `mm.model.fc.weight`
//! (`[s² · n_embd, n_text_embd]`).
//!
//! What is special: nothing is averaged; the merge only regroups, so the tokens are
//! `(side / s)²` of `s²` times the width. clip.cpp pads a grid that `s` does not divide;
//! elelem refuses such a file (see [`crate::vision::hparams`]).

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::{Error, Result};

/// `mm.model.fc.weight`.
pub struct Idefics3Weights {
    /// `[n_embd · n_merge², n_text_embd]`.
    pub fc: Tensor,
}

impl Idefics3Weights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.fc.ne()[1] as u32
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Idefics3Weights> {
    let merged = u64::from(hp.n_embd) * u64::from(hp.n_merge).pow(2);
    let n_text_embd = l
        .tensor_dims("mm.model.fc.weight")
        .map_or(0, |dims| dims.get(1).copied().unwrap_or(0));
    if n_text_embd == 0 {
        return Err(Error::Load(
            "tensor mm.model.fc.weight is missing or empty: [n_embd * scale_factor^2, n_text_embd] expected".into(),
        ));
    }
    Ok(Idefics3Weights {
        fc: l.matrix("mm.model.fc.weight", &[merged, n_text_embd])?,
    })
}

/// siglip.cpp's `idefics3` branch: `build_patch_merge_permute`, then `build_mm`.
pub fn build(g: &Graph, hp: &ClipHParams, w: &Idefics3Weights, cur: Tensor) -> Tensor {
    let s = i64::from(hp.n_merge);
    let n_embd = cur.ne()[0];
    let (width, height) = (i64::from(hp.n_patches_side()), i64::from(hp.n_patches_side()));

    let cur = g.reshape_3d(cur, n_embd, width, height);
    // Unshuffle the rows.
    let cur = g.reshape_3d(cur, n_embd * s, width / s, height);
    let cur = g.permute(cur, [0, 2, 1, 3]);
    // Unshuffle the columns.
    let cur = g.cont_3d(cur, n_embd * s * s, height / s, width / s);
    let cur = g.permute(cur, [0, 2, 1, 3]);
    let ne = cur.ne();
    let cur = g.cont_2d(cur, ne[0], ne[1] * ne[2]);

    g.mul_mat(w.fc, cur)
}
