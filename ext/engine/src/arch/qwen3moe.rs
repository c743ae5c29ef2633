//! qwen3moe (Qwen3 mixture-of-experts models): qwen3's attention (per-head Q/K
//! norms, NEOX rope) and, in place of its feed-forward, a mixture of SwiGLU
//! experts: a softmax router picks `expert_used_count` of `expert_count`
//! experts per token, weighted by their renormalized probabilities. There is no
//! shared expert.

use super::common::{load_llama_like, read_expert_counts, read_expert_width, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights};
use crate::Result;

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

pub(super) fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_expert_counts(keys, hp)?;
    read_expert_width(keys, hp)
}

pub(super) fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(l.with_head_norms(hp, il, attn)?),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: l.experts_ffn(hp, il, None, false)?,
            ffn_post_norm: None,
        })
    })
}
