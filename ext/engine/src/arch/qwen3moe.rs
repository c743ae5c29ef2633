//! qwen3moe (Qwen3 mixture-of-experts models): qwen3's attention (per-head Q/K
//! norms, NEOX rope) and, in place of its feed-forward, a mixture of SwiGLU
//! experts: a softmax router picks `expert_used_count` of `expert_count`
//! experts per token, weighted by their renormalized probabilities. There is no
//! shared expert.

use super::common::{load_llama_like, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, FfnWeights, HParams, Keys, Kind, LayerWeights, Loader, NormType, Weights};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen3moe",
    models: "Qwen3 mixture-of-experts models (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build: llama::build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// llama.cpp's `LLAMA_MAX_EXPERTS`.
const MAX_EXPERTS: u32 = 512;

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let n_used = keys.opt_u32("expert_used_count")?.unwrap_or(0);
    if hp.n_expert == 0 || hp.n_expert > MAX_EXPERTS || n_used == 0 || n_used > hp.n_expert {
        return Err(Error::Load(format!(
            "qwen3moe: expert_count ({}) must be 1 to {MAX_EXPERTS} and expert_used_count ({n_used}) 1 to it",
            hp.n_expert
        )));
    }
    hp.n_expert_used = n_used;
    hp.n_ff_exp = match keys.opt_u32("expert_feed_forward_length")? {
        Some(n) if n > 0 => n,
        _ => hp.n_ff / n_used,
    };
    if hp.n_ff_exp == 0 {
        return Err(Error::Load("qwen3moe: the experts' feed-forward width is 0".into()));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    let (ff, n_expert) = (u64::from(hp.n_ff_exp), u64::from(hp.n_expert));
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let used = hp.n_expert_used;
        let attn = l.attention(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            attn: l.with_head_norms(hp, il, attn)?,
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: FfnWeights::Experts {
                router: l.matrix(&n("ffn_gate_inp.weight"), &[embd, n_expert])?,
                gate: l.experts(&n("ffn_gate_exps.weight"), &[embd, ff, n_expert], used)?,
                up: l.experts(&n("ffn_up_exps.weight"), &[embd, ff, n_expert], used)?,
                down: l.experts(&n("ffn_down_exps.weight"), &[ff, embd, n_expert], used)?,
            },
            ffn_post_norm: None,
        })
    })
}
