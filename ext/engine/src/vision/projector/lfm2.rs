//! LFM2-VL's projector (`PROJECTOR_TYPE_LFM2`, the `lfm2` branch of
//! `tools/mtmd/models/siglip.cpp`): the pixel unshuffle of clip.cpp's
//! `build_patch_merge_permute` (each `s × s` block of the SigLIP2 encoder's patch grid
//! becomes one token of `s² · n_embd` values; a grid that `s` does not divide is padded with
//! zeros first, as clip.cpp pads it), an optional LayerNorm (`ggml_norm` with nn.LayerNorm's
//! fixed `eps` of 1e-5, not the encoder's; its weight and bias each optional), then a
//! two-layer MLP with biases and GELU between (`mm.1`, `mm.2`).
//!
//! What is special: the encoder runs at the image's own size (dynamic resolution), so the
//! grid is the image's, not `image_size`'s; the learned position embeddings are resized to
//! it in the graph ([`crate::vision::encoder`], clip.cpp's `resize_position_embeddings`:
//! bilinear with antialiasing). The language model's width is `mm.2.weight`'s second
//! dimension.

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::Result;

use super::common::GeluMlp;

/// clip.cpp's fixed LayerNorm `eps` for LFM2's input norm (PyTorch's default).
const INPUT_NORM_EPS: f32 = 1e-5;

/// `mm.input_norm.{weight,bias}` (optional), `mm.1.*` and `mm.2.*`.
pub struct Lfm2Weights {
    /// `[n_embd · n_merge²]`.
    pub input_norm_w: Option<Tensor>,
    pub input_norm_b: Option<Tensor>,
    /// `mm.1` (`[n_embd · n_merge², n_hidden]`) and `mm.2` (`[n_hidden, n_text_embd]`).
    pub mlp: GeluMlp,
}

impl Lfm2Weights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.mlp.n_out()
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Lfm2Weights> {
    let merged = u64::from(hp.n_embd) * u64::from(hp.n_merge).pow(2);
    Ok(Lfm2Weights {
        input_norm_w: l.optional_vector("mm.input_norm.weight", merged)?,
        input_norm_b: l.optional_vector("mm.input_norm.bias", merged)?,
        mlp: GeluMlp::load(l, "mm.1", "mm.2", merged)?,
    })
}

/// siglip.cpp's `lfm2` branch over the encoder's `[n_embd, width · height]` output.
pub fn build(g: &Graph, hp: &ClipHParams, w: &Lfm2Weights, cur: Tensor, (width, height): (i64, i64)) -> Tensor {
    let s = i64::from(hp.n_merge);
    let n_embd = cur.ne()[0];

    // build_patch_merge_permute: pad the grid to the factor, unshuffle the rows, then the
    // columns.
    let pad_width = (width + s - 1) / s * s - width;
    let pad_height = (height + s - 1) / s * s - height;
    let mut cur = g.reshape_3d(cur, n_embd, width, height);
    let (mut width, mut height) = (width, height);
    if pad_width != 0 || pad_height != 0 {
        cur = g.pad(cur, [0, pad_width as i32, pad_height as i32, 0]);
        width += pad_width;
        height += pad_height;
    }
    let cur = g.reshape_3d(cur, n_embd * s, width / s, height);
    let cur = g.permute(cur, [0, 2, 1, 3]);
    let cur = g.cont_3d(cur, n_embd * s * s, height / s, width / s);
    let cur = g.permute(cur, [0, 2, 1, 3]);
    let ne = cur.ne();
    let mut cur = g.cont_2d(cur, ne[0], ne[1] * ne[2]);

    // The input norm, each part where the file has it.
    if let Some(weight) = w.input_norm_w {
        cur = g.layer_norm(cur, INPUT_NORM_EPS);
        cur = g.mul(cur, weight);
    }
    if let Some(bias) = w.input_norm_b {
        cur = g.add(cur, bias);
    }

    w.mlp.build(g, cur)
}
