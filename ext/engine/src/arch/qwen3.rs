//! qwen3 (Qwen3 dense models): llama's graph with no Q, K or V biases, and a
//! per-head RMS norm of Q and of K before NEOX rope (llama's block applies the
//! norms a layer has).

use super::common::{load_llama_like, no_extra_hparams, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Kind, LayerWeights, Loader, Mixer, NormType, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen3",
    models: "Qwen3 dense models",
    rope_mode: RopeMode::Neox,
    read_hparams: no_extra_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

pub(super) fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let layer = l.llama_block(hp, il, false)?;
        Ok(LayerWeights {
            mixer: Mixer::Attention(l.with_head_norms(hp, il, layer.mixer.into_attention())?),
            ..layer
        })
    })
}
