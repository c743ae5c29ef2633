//! Qwen3-VL's projector (`PROJECTOR_TYPE_QWEN3VL`, `qwen3vl_merger`; the end of
//! `tools/mtmd/models/qwen3vl.cpp`): as Qwen2-VL's, the ViT's output (its patches already in
//! 2 x 2 blocks) read as one row of `4 · n_embd` values per block through a two-layer MLP
//! with biases and GELU between (`mm.0`, `mm.2`); then the deepstack features beside it.
//!
//! What is special: deepstack. Each ViT layer that has `v.deepstack.<il>.*` tensors gives
//! its output (before any post-norm) to a merger of its own: the same 2 x 2 read, a
//! LayerNorm over the `4 · n_embd` values, a GELU MLP (`fc1`, `fc2`) to the language model's
//! width. Each token's embedding is the main path's followed by the deepstack layers' in
//! layer order, `n_text_embd · (1 + n_deepstack)` values (clip.cpp's `clip_n_mmproj_embd`),
//! which the language model adds, slice by slice, to its first layers' outputs
//! ([`crate::model::HParams::n_deepstack_layers`]).

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::model::Norm;
use crate::vision::hparams::ClipHParams;
use crate::{Error, Result};

use super::common::GeluMlp;

/// One deepstack layer's merger: `v.deepstack.<il>.{norm,fc1,fc2}.*`.
pub struct DeepstackMerger {
    /// The ViT layer whose output it takes.
    pub layer: usize,
    /// `[n_embd · 4]`, with its bias.
    pub norm: Norm,
    /// `fc1`, `fc2`: `n_embd · 4` values to the main path's width.
    pub mlp: GeluMlp,
}

/// `mm.0.*`, `mm.2.*` and the deepstack mergers, by layer.
pub struct Qwen3vlWeights {
    /// `mm.0`, `mm.2`: `n_embd · 4` values to the language model's width.
    pub mlp: GeluMlp,
    pub deepstack: Vec<DeepstackMerger>,
}

impl Qwen3vlWeights {
    /// The main path's width and each deepstack layer's.
    pub fn n_mmproj_embd(&self) -> u32 {
        self.mlp.n_out() * (1 + self.deepstack.len() as u32)
    }

    /// The ViT layers whose outputs the deepstack mergers take, in order.
    pub fn deepstack_layers(&self) -> Vec<usize> {
        self.deepstack.iter().map(|d| d.layer).collect()
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Qwen3vlWeights> {
    let merged = u64::from(hp.n_embd) * u64::from(hp.n_merge).pow(2);
    let mlp = GeluMlp::load(l, "mm.0", "mm.2", merged)?;
    let mut deepstack = Vec::new();
    // clip.cpp counts a layer as deepstack where it has `fc1.weight`; the rest of its
    // merger is then required here (its concatenation needs the main path's width), and
    // a part without `fc1` is left undeclared for `check_all_used` to refuse.
    for il in 0..hp.n_layer as usize {
        let n = |t: &str| format!("v.deepstack.{il}.{t}");
        if !l.has(&n("fc1.weight")) {
            continue;
        }
        let norm = Norm {
            weight: l.vector(&n("norm.weight"), merged)?,
            bias: Some(l.vector(&n("norm.bias"), merged)?),
        };
        let merger = GeluMlp::load(l, &n("fc1"), &n("fc2"), merged)?;
        if merger.n_out() != mlp.n_out() {
            return Err(Error::Load(format!(
                "tensor {} gives {} values, not the main path's {}",
                n("fc2.weight"),
                merger.n_out(),
                mlp.n_out()
            )));
        }
        deepstack.push(DeepstackMerger {
            layer: il,
            norm,
            mlp: merger,
        });
    }
    Ok(Qwen3vlWeights { mlp, deepstack })
}

/// qwen3vl.cpp's multimodal projection over the encoder's `[n_embd, n_patches]` output and
/// the outputs of its deepstack layers (`deepstack_outputs`, in
/// [`Qwen3vlWeights::deepstack_layers`]' order).
pub fn build(g: &Graph, hp: &ClipHParams, w: &Qwen3vlWeights, cur: Tensor, deepstack_outputs: &[Tensor]) -> Tensor {
    let merged = i64::from(hp.n_embd) * i64::from(hp.n_merge).pow(2);
    let n_tokens = cur.ne()[1] / i64::from(hp.n_merge).pow(2);
    let features = w.deepstack.iter().zip(deepstack_outputs).map(|(d, &out)| {
        let feat = g.reshape_3d(out, merged, n_tokens, 1);
        let feat = g.layer_norm(feat, hp.eps);
        let feat = g.mul(feat, d.norm.weight);
        let feat = d.norm.bias.map_or(feat, |b| g.add(feat, b));
        d.mlp.build(g, feat)
    });
    // Stacked along the features, layer after layer.
    let deepstack = features.reduce(|stacked, feat| g.concat(stacked, feat, 0));

    let cur = g.reshape_3d(cur, merged, n_tokens, 1);
    let embeddings = w.mlp.build(g, cur);
    match deepstack {
        Some(deepstack) => g.concat(embeddings, deepstack, 0),
        None => embeddings,
    }
}
