//! Qwen2-VL's projector (`PROJECTOR_TYPE_QWEN2VL`, `qwen2vl_merger`; the end of
//! `tools/mtmd/models/qwen2vl.cpp`): the ViT's output, whose patches the encoder has
//! already ordered in 2 x 2 blocks (the input reorder of [`crate::vision::encoder`]), is read
//! as one row of `4 · n_embd` values per block, then a two-layer MLP with biases and GELU
//! between (`mm.0`, `mm.2`).
//!
//! Qwen2.5-VL's (`PROJECTOR_TYPE_QWEN25VL`, `qwen2.5vl_merger`) is the same merger: clip.cpp
//! builds both in one graph, and what differs is the ViT's (RMS norms, the gated
//! feed-forward, window attention: [`crate::vision::encoder`]).
//!
//! What is special: the merge is only a reshape, because the encoder ran on the reordered
//! patches; the ViT's positions are rotary (`GGML_ROPE_TYPE_VISION`), so the file has no
//! position embeddings. The language model's width is `mm.2.weight`'s second dimension.
//! Under window attention the merged patches come out grouped by window, and the encoder
//! puts them back in order after this MLP, as rows `clip.vision.projection_dim` wide
//! (clip.cpp's reshape): that width must be the MLP's.

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::{Error, Result};

use super::common::GeluMlp;

/// `mm.0.*` (`[n_embd · 4, n_hidden]`) and `mm.2.*` (`[n_hidden, n_text_embd]`).
pub struct Qwen2vlWeights {
    pub mlp: GeluMlp,
}

impl Qwen2vlWeights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.mlp.n_out()
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Qwen2vlWeights> {
    let merged = u64::from(hp.n_embd) * u64::from(hp.n_merge).pow(2);
    let mlp = GeluMlp::load(l, "mm.0", "mm.2", merged)?;
    let n_text_embd = mlp.n_out();
    if hp.window_attention().is_some() && n_text_embd != hp.projection_dim {
        return Err(Error::Load(format!(
            "invalid vision projector: clip.vision.projection_dim {} is not mm.2.weight's width {n_text_embd}, \
             which the window attention's reorder of the merged patches takes",
            hp.projection_dim
        )));
    }
    Ok(Qwen2vlWeights { mlp })
}

/// qwen2vl.cpp's multimodal projection over the encoder's `[n_embd, n_patches]` output.
pub fn build(g: &Graph, hp: &ClipHParams, w: &Qwen2vlWeights, cur: Tensor) -> Tensor {
    let merged = i64::from(hp.n_embd) * i64::from(hp.n_merge).pow(2);
    let n_tokens = cur.ne()[1] / i64::from(hp.n_merge).pow(2);
    let cur = g.reshape_3d(cur, merged, n_tokens, 1);
    w.mlp.build(g, cur)
}
