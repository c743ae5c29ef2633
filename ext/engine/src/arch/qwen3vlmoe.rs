//! qwen3vlmoe (Qwen3-VL's mixture-of-experts language models): qwen3moe's layers (per-head
//! Q and K norms, a softmax router over SwiGLU experts, no shared expert) under qwen3vl's
//! interleaved multi-dimensional rope, with its deepstack slices added to the first
//! layers' outputs ([`super::qwen3vl`]).

use super::{qwen3moe, qwen3vl};
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Keys, Kind, NormType};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen3vlmoe",
    models: "Qwen3-VL mixture-of-experts models (Qwen3-VL-30B-A3B, 235B-A22B)",
    rope_mode: RopeMode::Imrope,
    read_hparams,
    load: qwen3moe::load,
    build: qwen3vl::build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    qwen3moe::read_hparams(keys, hp)?;
    qwen3vl::read_hparams(keys, hp)
}
