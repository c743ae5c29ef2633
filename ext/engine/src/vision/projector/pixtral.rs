//! Pixtral's projector (`PROJECTOR_TYPE_PIXTRAL`, `tools/mtmd/models/pixtral.cpp`, after
//! the ViT of RMS norms, SiLU-gated feed-forward and 2D RoPE in [`crate::vision::encoder`]):
//! Mistral Small 3.x's patch merger where the file has one (the RMS-normed patches, each
//! `s × s` block unfolded by an `im2col` into one row of `s² · n_embd` values, then
//! `mm.patch_merger.weight`), the LLaVA MLP (`mm.1`, GELU, `mm.2`, biases optional), and
//! the `[IMG_BREAK]` embedding (`v.token_embd.img_break`) after each row of tokens but the
//! last.
//!
//! What is special: the image is any size (multiples of the merged patch, as mtmd's
//! dynamic-size preprocessing makes it), and the `[IMG_BREAK]` rows are the projector's
//! output, not tokens of the prompt: an image of `w × h` merged patches gives
//! `w · h + h - 1` embeddings. clip.cpp builds the break rows by scaling an unset tensor
//! by 0 and adding the embedding; elelem repeats the embedding, the same values without
//! reading unset memory.

use super::common::GeluMlp;
use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::{Error, Result};

/// Mistral Small's patch merger: `mm.input_norm.weight` and `mm.patch_merger.weight`.
pub struct PatchMerger {
    /// `[n_embd]`.
    pub input_norm: Tensor,
    /// `[n_embd · n_merge², n_embd]`.
    pub merge: Tensor,
}

/// The merger (optional), `mm.1.*`, `mm.2.*` and `v.token_embd.img_break`.
pub struct PixtralWeights {
    pub merger: Option<PatchMerger>,
    /// `mm.1` (`[n_embd, n_hidden]`) and `mm.2` (`[n_hidden, n_text_embd]`), their biases
    /// optional.
    pub mlp: GeluMlp,
    /// `[n_text_embd]`.
    pub img_break: Tensor,
}

impl PixtralWeights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.mlp.n_out()
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<PixtralWeights> {
    let embd = u64::from(hp.n_embd);
    let merged = embd * u64::from(hp.n_merge).pow(2);
    // clip.cpp merges only where the file has the merger, but counts the tokens by
    // `spatial_merge_size` (and multiplies by the input norm unchecked): the three go
    // together.
    let merger = if l.has("mm.patch_merger.weight") || hp.n_merge > 1 {
        if !l.has("mm.patch_merger.weight") {
            return Err(Error::Load(format!(
                "tensor mm.patch_merger.weight is missing: clip.vision.spatial_merge_size is {}",
                hp.n_merge
            )));
        }
        Some(PatchMerger {
            input_norm: l.vector("mm.input_norm.weight", embd)?,
            merge: l.matrix("mm.patch_merger.weight", &[merged, embd])?,
        })
    } else {
        None
    };
    let mlp = GeluMlp::load_optional_biases(l, "mm.1", "mm.2", embd)?;
    let img_break = l.vector("v.token_embd.img_break", u64::from(mlp.n_out()))?;
    Ok(PixtralWeights { merger, mlp, img_break })
}

/// pixtral.cpp after `build_vit`, over the encoder's `[n_embd, width · height]` output.
pub fn build(g: &Graph, hp: &ClipHParams, w: &PixtralWeights, cur: Tensor, (width, height): (i64, i64)) -> Tensor {
    let s = i64::from(hp.n_merge);
    let n_embd = cur.ne()[0];
    let mut cur = cur;
    if let Some(merger) = &w.merger {
        cur = g.mul(g.rms_norm(cur, hp.eps), merger.input_norm);
        // The patches as a [width, height, n_embd] image, unfolded in s x s windows (as
        // torch's `unfold`): an im2col whose kernel gives only its shape.
        let grid = g.reshape_3d(cur, n_embd, width, height);
        let grid = g.cont(g.permute(grid, [2, 0, 1, 3]));
        let kernel = g.view_3d(grid, [s, s, n_embd], 0, 0, 0);
        let cols = g.im2col_2d(kernel, grid, s as i32, s as i32, grid.ggml_type());
        let ne = cols.ne();
        let cols = g.reshape_2d(cols, ne[0], ne[1] * ne[2]);
        cur = g.mul_mat(merger.merge, cols);
    }

    // LlavaMultiModalProjector (GELU always).
    let cur = w.mlp.build(g, cur);

    // [IMG_BREAK] after each row: the rows as [n_text_embd, columns, rows], a column of
    // breaks appended, the last row's break left out.
    let (columns, rows) = (width / s, height / s);
    let n_text_embd = cur.ne()[0];
    let tokens = g.reshape_3d(cur, n_text_embd, columns, rows);
    let breaks = g.repeat_4d(w.img_break, [n_text_embd, 1, rows, 1]);
    let tokens = g.concat(tokens, breaks, 1);
    let n_out = columns * rows + rows - 1;
    g.view_2d(tokens, n_text_embd, n_out, tokens.nb()[1], 0)
}
