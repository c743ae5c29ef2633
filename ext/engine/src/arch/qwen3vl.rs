//! qwen3vl (Qwen3-VL's dense language models): qwen3's block and weights (per-head Q and K
//! norms), rotated by interleaved multi-dimensional rope (`LLAMA_ROPE_TYPE_IMROPE`: ggml's
//! rope_multi turns pair `i` by the coordinate `i mod 3` picks, within the sections of
//! `rope.dimension_sections`, rather than section after section), images placed on a grid
//! as Qwen2-VL's.
//!
//! What is special: deepstack. Given embeddings (an image's, from the `qwen3vl_merger`
//! projector) are `n_embd · (1 + n_deepstack_layers)` wide: the first `n_embd` values are
//! the input, and slice `k` is added to the output of layer `k - 1`, for the first
//! `n_deepstack_layers` layers. A token's rows are its embedding padded with zeros, so its
//! slices add zeros (llama.cpp's `build_inp_embd` pads them so).

use super::common::{read_rope_sections, run_layers};
use super::{llama, qwen3};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{ArchSpec, GraphBuilder, HParams, Keys, Kind, LayerWeights, NormType};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen3vl",
    models: "Qwen3-VL dense models",
    rope_mode: RopeMode::Imrope,
    read_hparams,
    load: qwen3::load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// The rope sections and the deepstack layers (qwen3vl's and qwen3vlmoe's).
pub(super) fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let arch = hp.arch.name;
    if hp.head_dim_k != hp.head_dim_v || hp.rope.n_dims != hp.head_dim_k {
        return Err(Error::Load(format!(
            "{arch}: attention.key_length ({}), value_length ({}) and rope.dimension_count ({}) must agree",
            hp.head_dim_k, hp.head_dim_v, hp.rope.n_dims
        )));
    }
    hp.n_deepstack_layers = keys.opt_u32("n_deepstack_layers")?.unwrap_or(0);
    // The last layer's output is its output rows only, to which llama.cpp could not add
    // a slice of every token.
    if hp.n_deepstack_layers >= hp.n_layer {
        return Err(Error::Load(format!(
            "{arch}.n_deepstack_layers ({}) must be fewer than the {} layers",
            hp.n_deepstack_layers, hp.n_layer
        )));
    }
    read_rope_sections(keys, hp)
}

/// qwen3vl.cpp's graph (and qwen3vlmoe.cpp's): llama's block, then each deepstack slice
/// added to its layer's output.
pub(super) fn build(b: &GraphBuilder) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let n_embd = i64::from(hp.n_embd);
    let (rows, x) = b.embed_deepstack();
    run_layers(b, x, |layer: &LayerWeights, il, x| {
        let out = llama::llama_block(b, layer, il, x, hp.kq_scale(), None);
        if il >= hp.n_deepstack_layers as usize {
            return out;
        }
        let offset = (il + 1) * n_embd as usize * std::mem::size_of::<f32>();
        let slice = g.view_2d(rows, n_embd, b.n_tokens, rows.nb()[1], offset);
        g.add(out, slice).set_name(&format!("deepstack_out-{il}"))
    })
}
