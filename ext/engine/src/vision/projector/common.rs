//! What several projectors share: a width read from a tensor's shape, and clip.cpp's
//! two-layer GELU MLP with its weights.

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

/// clip.cpp's `build_ffn` of two layers with biases and `FFN_GELU` between: the MLP of
/// LFM2's, Qwen2-VL's, Qwen3-VL's (and its deepstack mergers'), InternVL's, LLaVA's, MobileVLM's
/// and Pixtral's projectors.
pub struct GeluMlp {
    /// `[n_in, n_hidden]`.
    pub up: Tensor,
    pub up_b: Option<Tensor>,
    /// `[n_hidden, n_out]`.
    pub down: Tensor,
    pub down_b: Option<Tensor>,
}

impl GeluMlp {
    /// `{up}.weight` and `.bias`, `{down}.weight` and `.bias`, biases required, taking rows
    /// `n_in` wide; the hidden and output widths are the weights' second dimensions.
    pub(super) fn load(l: &mut Loader, up: &str, down: &str, n_in: u64) -> Result<GeluMlp> {
        GeluMlp::declare(l, up, down, n_in, true)
    }

    /// [`GeluMlp::load`] with each bias optional (Pixtral's).
    pub(super) fn load_optional_biases(l: &mut Loader, up: &str, down: &str, n_in: u64) -> Result<GeluMlp> {
        GeluMlp::declare(l, up, down, n_in, false)
    }

    fn declare(l: &mut Loader, up: &str, down: &str, n_in: u64, biases: bool) -> Result<GeluMlp> {
        let (up_w, down_w) = (format!("{up}.weight"), format!("{down}.weight"));
        let hidden = required_dim(l, &up_w, 1, &format!("[{n_in}, n_hidden]"))?;
        let n_out = required_dim(l, &down_w, 1, "[n_hidden, n_out]")?;
        let bias = |l: &mut Loader, name: &str, n: u64| {
            let name = format!("{name}.bias");
            if biases {
                l.vector(&name, n).map(Some)
            } else {
                l.optional_vector(&name, n)
            }
        };
        Ok(GeluMlp {
            up: l.matrix(&up_w, &[n_in, hidden])?,
            up_b: bias(l, up, hidden)?,
            down: l.matrix(&down_w, &[hidden, n_out])?,
            down_b: bias(l, down, n_out)?,
        })
    }

    /// The width of what it gives.
    pub fn n_out(&self) -> u32 {
        self.down.ne()[1] as u32
    }

    pub fn build(&self, g: &Graph, cur: Tensor) -> Tensor {
        let cur = add_bias(g, g.mul_mat(self.up, cur), self.up_b);
        let cur = g.gelu(cur);
        add_bias(g, g.mul_mat(self.down, cur), self.down_b)
    }
}

fn add_bias(g: &Graph, cur: Tensor, bias: Option<Tensor>) -> Tensor {
    match bias {
        Some(b) => g.add(cur, b),
        None => cur,
    }
}
