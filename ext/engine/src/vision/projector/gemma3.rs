//! Gemma 3's projector (`PROJECTOR_TYPE_GEMMA3`, the `gemma3` branch of
//! `tools/mtmd/models/siglip.cpp`): the SigLIP encoder's `n × n` patch embeddings are
//! average-pooled in `k × k` windows (`k` = `n_merge`, 4: 64 × 64 patches of an 896 image
//! become 256 tokens), RMS-normed with the soft-embedding norm's weight (no bias, the
//! encoder's `eps`), and multiplied by the input projection, stored as clip.cpp reads it:
//! `[n_text_embd, n_embd]`, transposed in the graph (so the product is `Wᵀ · x`, and the
//! language model's width is the weight's first dimension).
//!
//! What is special: the pooling needs a square grid of patches, which the fixed-size
//! preprocessing guarantees; the transposed projection is made contiguous on every encode,
//! as clip.cpp does, so that the bits are its bits.

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::{Error, Result};

/// `mm.input_projection.weight` and `mm.soft_emb_norm.weight`.
pub struct Gemma3Weights {
    /// `[n_text_embd, n_embd]`.
    pub input_proj: Tensor,
    /// `[n_embd]`.
    pub soft_emb_norm: Tensor,
}

impl Gemma3Weights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.input_proj.ne()[0] as u32
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Gemma3Weights> {
    let embd = u64::from(hp.n_embd);
    // The language model's width is whatever the file says: the first dimension.
    let n_text_embd = l
        .tensor_dims("mm.input_projection.weight")
        .map_or(0, |dims| dims.first().copied().unwrap_or(0));
    if n_text_embd == 0 {
        return Err(Error::Load(
            "tensor mm.input_projection.weight is missing or empty: [n_text_embd, n_embd] expected".into(),
        ));
    }
    Ok(Gemma3Weights {
        // Transposed in the graph: F32 or F16 (ggml copies no quantized transpose).
        input_proj: l.values("mm.input_projection.weight", &[n_text_embd, embd])?,
        soft_emb_norm: l.vector("mm.soft_emb_norm.weight", embd)?,
    })
}

/// siglip.cpp's `gemma3` branch, op for op.
pub fn build(g: &Graph, hp: &ClipHParams, w: &Gemma3Weights, cur: Tensor) -> Tensor {
    let n_embd = i64::from(hp.n_embd);
    let side = i64::from(hp.n_patches_side());
    let k = hp.n_merge as i32;

    let cur = g.transpose(cur);
    let cur = g.cont_4d(cur, [side, side, n_embd, 1]);
    // Pooling to reduce the number of output tokens.
    let cur = g.pool_2d_avg(cur, k, k, k, k);
    let pooled = cur.ne()[0];
    let cur = g.reshape_3d(cur, pooled * pooled, n_embd, 1);
    let cur = g.cont(g.transpose(cur));

    // The norm before the projection.
    let cur = g.rms_norm(cur, hp.eps);
    let cur = g.mul(cur, w.soft_emb_norm);

    g.mul_mat(g.cont(g.transpose(w.input_proj)), cur)
}
