//! qwen2 (Qwen2, Qwen2.5, Qwen2.5-Coder): llama's block with biases on Q, K
//! and V (none on the output projection), NEOX rope (the two halves of each
//! head rotated together), and usually an untied output head. The forward
//! graph is llama's: only the weights differ.

use super::common::{load_llama_like, no_extra_hparams, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Kind, Loader, NormType, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen2",
    models: "Qwen2, Qwen2.5, Qwen2.5-Coder",
    rope_mode: RopeMode::Neox,
    read_hparams: no_extra_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_with(loader, hp, true)
}

/// qwen2's weights, its Q, K and V biases required when `qkv_bias` (else optional, as
/// llama.cpp's qwen2vl declares them), and an optional bias on the head.
pub(super) fn load_with(loader: &mut Loader, hp: &HParams, qkv_bias: bool) -> Result<Weights> {
    let mut weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| l.llama_block(hp, il, qkv_bias))?;
    if let Some(head) = &mut weights.head {
        head.bias = loader.optional_vector("output.bias", u64::from(hp.n_vocab))?;
    }
    Ok(weights)
}
