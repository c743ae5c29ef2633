//! Llama 4's projector (`PROJECTOR_TYPE_LLAMA4`, `tools/mtmd/models/llama4.cpp`, after the
//! ViT with its class token, learned positions and 2D RoPE in [`crate::vision::encoder`]):
//! the pixel shuffle of `Llama4VisionPixelShuffleMLP` (each `s × s` block of the square
//! patch grid becomes one token of `s² · n_embd` values: one reshape, one permute, in
//! clip.cpp's order), the adapter MLP (`mm.model.mlp.1`, GELU, `mm.model.mlp.2`, GELU; no
//! biases), then the projection `mm.model.fc.weight` to the language model's width.
//!
//! What is special: the class token is dropped before the shuffle; the shuffle is not
//! Idefics3's unshuffle (its second permute is left out, as in transformers), so the
//! tokens' order within a block differs from it.

use super::common::required_dim;
use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::Result;

/// `mm.model.mlp.1.weight`, `mm.model.mlp.2.weight` and `mm.model.fc.weight`.
pub struct Llama4Weights {
    /// `[n_embd · n_merge², n_hidden]`.
    pub mlp_1: Tensor,
    /// `[n_hidden, n_adapter]`.
    pub mlp_2: Tensor,
    /// `[n_adapter, n_text_embd]`.
    pub fc: Tensor,
}

impl Llama4Weights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.fc.ne()[1] as u32
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Llama4Weights> {
    let merged = u64::from(hp.n_embd) * u64::from(hp.n_merge).pow(2);
    let hidden = required_dim(l, "mm.model.mlp.1.weight", 1, "[n_embd * scale_factor^2, n_hidden]")?;
    let adapter = required_dim(l, "mm.model.mlp.2.weight", 1, "[n_hidden, n_adapter]")?;
    let n_text_embd = required_dim(l, "mm.model.fc.weight", 1, "[n_adapter, n_text_embd]")?;
    Ok(Llama4Weights {
        mlp_1: l.matrix("mm.model.mlp.1.weight", &[merged, hidden])?,
        mlp_2: l.matrix("mm.model.mlp.2.weight", &[hidden, adapter])?,
        fc: l.matrix("mm.model.fc.weight", &[adapter, n_text_embd])?,
    })
}

/// llama4.cpp after the class token's removal, over `[n_embd, side²]` (fixed-size tiles:
/// the grid is square).
pub fn build(g: &Graph, hp: &ClipHParams, w: &Llama4Weights, cur: Tensor) -> Tensor {
    let s = i64::from(hp.n_merge);
    let n_embd = cur.ne()[0];
    let side = i64::from(hp.n_patches_side());

    // The pixel shuffle.
    let cur = g.reshape_4d(cur, [n_embd * s, side / s, side, 1]);
    let cur = g.permute(cur, [0, 2, 1, 3]);
    let cur = g.cont_4d(cur, [n_embd * s * s, side / s, side / s, 1]);
    let cur = g.cont_2d(cur, n_embd * s * s, side * side / s / s);

    // Llama4VisionMLP2: GELU after each layer.
    let cur = g.gelu(g.mul_mat(w.mlp_1, cur));
    let cur = g.gelu(g.mul_mat(w.mlp_2, cur));
    g.mul_mat(w.fc, cur)
}
