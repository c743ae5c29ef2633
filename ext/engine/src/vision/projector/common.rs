//! What several projectors share: a width read from a tensor's shape, and clip.cpp's
//! two-layer GELU MLP.

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::{Error, Result};

/// A tensor's `i`th dimension, which gives a projector's width: an [`Error::Load`] saying
/// the `expected` shape where the tensor is missing or that dimension is empty.
pub(super) fn required_dim(l: &Loader, name: &str, i: usize, expected: &str) -> Result<u64> {
    match l.tensor_dims(name).and_then(|dims| dims.get(i).copied()) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(Error::Load(format!(
            "tensor {name} is missing or empty: {expected} expected"
        ))),
    }
}

/// clip.cpp's `build_ffn` of two layers with biases and `FFN_GELU` between (the MLP of
/// LFM2's, Qwen2-VL's, InternVL's, LLaVA's and MobileVLM's projectors).
pub(super) fn mlp_gelu(g: &Graph, cur: Tensor, (w1, b1): (Tensor, Tensor), (w2, b2): (Tensor, Tensor)) -> Tensor {
    let cur = g.add(g.mul_mat(w1, cur), b1);
    let cur = g.gelu(cur);
    g.add(g.mul_mat(w2, cur), b2)
}
