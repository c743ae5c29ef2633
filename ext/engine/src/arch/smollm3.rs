//! smollm3 (SmolLM3): llama's graph, except that every fourth layer attends
//! without rotary embeddings (NoPE). Its files carry no rope factors.

use super::common::{load_llama_like, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Keys, Kind, Loader, NormType, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "smollm3",
    models: "SmolLM3",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// llama.cpp fixes the period (`n_no_rope_layer_step`); the file does not state it.
fn read_hparams(_: &Keys, hp: &mut HParams) -> Result<()> {
    hp.no_rope_every = Some(4);
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| l.llama_block(hp, il, false))
}
