//! InternVL's projector (`PROJECTOR_TYPE_INTERNVL`, `tools/mtmd/models/internvl.cpp`): the
//! InternViT encoder's output without its class token (appended after the patches, so
//! the first `n_patches` rows are kept), the pixel shuffle (each `s × s` block of patches
//! becomes one token of `s² · n_embd` values, in internvl.cpp's order of reshapes and
//! permutes, which is not `build_patch_merge_permute`'s), a LayerNorm with PyTorch's `eps`
//! of 1e-5 (`mm.model.mlp.0`), then a two-layer MLP with GELU between (`mm.model.mlp.1`,
//! `mm.model.mlp.3`, with biases: MobileVLM's names, as clip.cpp reads them).
//!
//! What is special: InternViT's layers scale the attention's and the feed-forward's outputs
//! (`ls1`, `ls2`, [`crate::vision::encoder`]); the language model's width is
//! `mm.model.mlp.3.weight`'s
//! second dimension.

use super::common::GeluMlp;
use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::Result;

/// clip.cpp's fixed LayerNorm `eps` for InternVL's projector norm (PyTorch's default).
const NORM_EPS: f32 = 1e-5;

/// `mm.model.mlp.0.*` (the norm), `mm.model.mlp.1.*` and `mm.model.mlp.3.*`.
pub struct InternvlWeights {
    /// `[n_embd · n_merge²]`.
    pub mm_0_w: Tensor,
    pub mm_0_b: Tensor,
    /// `mlp.1` (`[n_embd · n_merge², n_hidden]`) and `mlp.3` (`[n_hidden, n_text_embd]`).
    pub mlp: GeluMlp,
}

impl InternvlWeights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.mlp.n_out()
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<InternvlWeights> {
    let merged = u64::from(hp.n_embd) * u64::from(hp.n_merge).pow(2);
    Ok(InternvlWeights {
        mm_0_w: l.vector("mm.model.mlp.0.weight", merged)?,
        mm_0_b: l.vector("mm.model.mlp.0.bias", merged)?,
        mlp: GeluMlp::load(l, "mm.model.mlp.1", "mm.model.mlp.3", merged)?,
    })
}

/// internvl.cpp after `build_vit`, over the encoder's `[n_embd, n_patches + 1]` output of a
/// `grid` of patches.
pub fn build(g: &Graph, hp: &ClipHParams, w: &InternvlWeights, cur: Tensor, (width, height): (i64, i64)) -> Tensor {
    let s = i64::from(hp.n_merge);
    let n_embd = cur.ne()[0];
    let batch = cur.ne()[2];

    // The class token off.
    let nb = cur.nb();
    let cur = g.view_3d(cur, [n_embd, width * height, batch], nb[1], nb[2], 0);
    let cur = g.cont(cur);

    // The pixel shuffle.
    let cur = g.reshape_4d(cur, [n_embd * s, height / s, width, batch]);
    let cur = g.permute(cur, [0, 2, 1, 3]);
    let cur = g.cont_4d(cur, [n_embd * s * s, height / s, width / s, batch]);
    let cur = g.permute(cur, [0, 2, 1, 3]);
    let ne = cur.ne();
    let cur = g.cont_3d(cur, n_embd * s * s, ne[1] * ne[2], ne[3]);

    // The norm, then build_ffn(mlp.1, GELU, mlp.3).
    let cur = g.add(g.mul(g.layer_norm(cur, NORM_EPS), w.mm_0_w), w.mm_0_b);
    w.mlp.build(g, cur)
}
