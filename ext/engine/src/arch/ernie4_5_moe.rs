//! ernie4_5-moe (ERNIE 4.5 MoE: 21B-A3B, 300B-A47B): ernie4_5's block, and past the
//! leading dense layers a mixture of SwiGLU experts in place of the feed-forward:
//! picked by the router's softmax plus a selection bias (`exp_probs_b`), weighted
//! by the renormalized probabilities, with a shared expert (no gate) beside them
//! where the file sizes one. llama.cpp's graph alternates dense and expert layers
//! by `interleave_moe_layer_step`, but its loader gives every later layer experts,
//! so only a step of 1 runs there, and here.

use super::common::{load_llama_like, read_expert_counts, Head};
use super::{ernie4_5, llama};
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Keys, Kind, Loader, NormType, Weights};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "ernie4_5-moe",
    models: "ERNIE 4.5 MoE (21B-A3B, 300B-A47B)",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build: llama::build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    ernie4_5::read_hparams(keys, hp)?;
    read_expert_counts(keys, hp)?;
    hp.n_ff_exp = keys.u32("expert_feed_forward_length")?;
    hp.n_ff_shexp = keys.opt_u32("expert_shared_feed_forward_length")?.unwrap_or(0);
    hp.n_layer_dense_lead = keys.opt_u32("leading_dense_block_count")?.unwrap_or(0);
    let step = keys.u32("interleave_moe_layer_step")?;
    if step != 1 || hp.n_ff_exp == 0 {
        return Err(Error::Load(format!(
            "ernie4_5-moe: interleave_moe_layer_step ({step}) must be 1 and expert_feed_forward_length ({}) \
             non-zero (llama.cpp's loader gives every layer past the dense ones experts)",
            hp.n_ff_exp
        )));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let ffn = if il < hp.n_layer_dense_lead {
            l.gated_ffn(hp, il)?
        } else {
            let shared = match hp.n_ff_shexp {
                0 => None,
                width => Some(l.shared_expert(hp, il, width, None)?),
            };
            l.experts_ffn(hp, il, shared, true)?
        };
        ernie4_5::layer(l, hp, il, ffn)
    })
}
