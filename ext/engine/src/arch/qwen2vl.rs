//! qwen2vl (Qwen2-VL's and Qwen2.5-VL's language models): qwen2's block and weights
//! (its Q, K and V biases optional), rotated by multi-dimensional rope in sections
//! (`rope.dimension_sections`, ggml's M-RoPE): each position has a coordinate per
//! section, a text token's `[p, p, p, 0]`, an image's `[t, y, x, 0]` (mtmd's layout), and
//! each coordinate turns its section's pairs. The rope covers whole heads, as llama.cpp asserts.

use super::common::read_rope_sections;
use super::{llama, qwen2};
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Keys, Kind, Loader, NormType, Weights};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen2vl",
    models: "Qwen2-VL, Qwen2.5-VL",
    rope_mode: RopeMode::Mrope,
    read_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    if hp.head_dim_k != hp.head_dim_v || hp.rope.n_dims != hp.head_dim_k {
        return Err(Error::Load(format!(
            "qwen2vl: attention.key_length ({}), value_length ({}) and rope.dimension_count ({}) must agree",
            hp.head_dim_k, hp.head_dim_v, hp.rope.n_dims
        )));
    }
    // llama.cpp's qwen2vl reads only `rope.dimension_sections` (llama_model_qwen2vl::
    // load_arch_hparams; qwen2's, which reads `attention.layer_norm_rms_epsilon`, is not
    // called), so its RMS norms run with f_norm_rms_eps at its zero default, whatever the
    // file says. Mirrored: with the file's epsilon every normed row is scaled a little
    // differently from the reference's, which flips near ties (the tiny-qwen2vl golden
    // under aarch64's SVE variants). The file's value is still required and checked
    // (HParams::read).
    if hp.norm_eps.is_finite() {
        hp.norm_eps = 0.0;
    }
    read_rope_sections(keys, hp)
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    qwen2::load_with(loader, hp, false)
}
