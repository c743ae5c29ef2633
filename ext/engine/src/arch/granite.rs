//! granite (IBM Granite 3.x dense): llama's graph with four multipliers from
//! the file: the embeddings are scaled (`embedding_scale`), each block's
//! attention and feed-forward outputs are scaled before their residual adds
//! (`residual_scale`), the logits are divided (`logit_scale`, required) and the
//! attention scale is the file's (`attention.scale`) rather than 1/sqrt(head size).
//! Llama 3.1's `rope_freqs` may be present. Feed-forward biases, deepstack
//! embeddings and files that switch rope off are refused.

use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Keys, Kind, NormType};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "granite",
    models: "Granite 3.x dense",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load: llama::load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    // llama.cpp treats 0 as "not set" for all but the logit scale, which it divides by.
    let set = |v: Option<f32>| v.filter(|&s| s != 0.0);
    let logit_scale = keys.f32("logit_scale")?;
    if !(logit_scale.is_finite() && logit_scale != 0.0) {
        return Err(Error::Load("granite: logit_scale must be finite and non-zero".into()));
    }
    hp.logit_multiplier = Some(1.0 / logit_scale);
    hp.embedding_scale = set(keys.opt_f32("embedding_scale")?);
    hp.residual_scale = set(keys.opt_f32("residual_scale")?);
    hp.attention_scale = set(keys.opt_f32("attention.scale")?);
    if keys.opt_bool("rope.scaling.finetuned")? == Some(false) {
        return Err(Error::Load(
            "granite: files without rope (rope.scaling.finetuned false) are not supported".into(),
        ));
    }
    if keys.has("deepstack_mapping") {
        return Err(Error::Load("granite: deepstack embeddings are not supported".into()));
    }
    Ok(())
}
