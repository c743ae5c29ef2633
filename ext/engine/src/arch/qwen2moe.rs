//! qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): qwen2's attention (Q, K and V biases,
//! NEOX rope) and, in place of its feed-forward, a mixture of SwiGLU experts whose
//! weights are the router's softmax probabilities as they are (not renormalized),
//! plus a shared expert every token goes through, scaled by its own sigmoid gate.
//! The head is never tied.

use super::common::{load_llama_like, read_expert_counts, read_expert_width, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, SharedGate, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen2moe",
    models: "Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build: llama::build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_expert_counts(keys, hp)?;
    read_expert_width(keys, hp)?;
    hp.expert_weights_norm = false;
    // The shared expert's width: `expert_shared_feed_forward_length`, else `feed_forward_length`.
    hp.n_ff_shexp = match keys.opt_u32("expert_shared_feed_forward_length")? {
        Some(0) | None => hp.n_ff,
        Some(n) => n,
    };
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::Own, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let shared = l.shared_expert(hp, il, hp.n_ff_shexp, Some(SharedGate::SiluOverLogit))?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(l.attention_without_output_bias(hp, il, false)?),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: l.experts_ffn(hp, il, Some(shared), false)?,
            ffn_post_norm: None,
        })
    })
}
