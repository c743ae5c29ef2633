//! mistral3 (Ministral 3, the text model): llama's graph, with
//! YaRN's beta and log-multiplier keys, and, where the file sets
//! `attention.temperature_scale`, Q multiplied after rope by a temperature growing
//! with the position, `ln(floor(pos / n) + 1) * scale + 1` for the original context
//! `n` (Llama 4's scaling). Rope factors as llama's (`rope_freqs`); a mixture of
//! experts, LongRoPE factors or feed-forward biases are refused.

use super::llama;
use crate::ggml::RopeMode;
use crate::model::hparams::read_yarn_details;
use crate::model::{ArchSpec, AttnTemperature, HParams, Keys, Kind, NormType};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "mistral3",
    models: "Ministral 3 (3B, 8B, 14B; the text model)",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load: llama::load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_yarn_details(keys, hp)?;
    let scale = keys.opt_f32("attention.temperature_scale")?.unwrap_or(0.0);
    if !scale.is_finite() {
        return Err(Error::Load(format!(
            "mistral3: attention.temperature_scale ({scale}) must be finite"
        )));
    }
    if scale != 0.0 {
        // llama.cpp's n_attn_temp_floor_scale: the original context (n_ctx_orig_yarn).
        let floor_scale = hp.rope.n_ctx_orig;
        if floor_scale == 0 {
            return Err(Error::Load(
                "mistral3: attention temperature scaling needs a non-zero original context".into(),
            ));
        }
        hp.attn_temperature = Some(AttnTemperature {
            scale,
            floor_scale,
            offset: 0.0,
        });
    }
    Ok(())
}
