//! seed_oss (ByteDance Seed-OSS): llama's graph (NEOX rope here), with Q, K and V
//! biases where the file has them, no attention output bias, and the norm before
//! the feed-forward stored as `post_attention_norm` (it is applied where llama's
//! `ffn_norm` is, after the attention's residual add).

use super::common::{load_llama_like, no_extra_hparams, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, HParams, Kind, LayerWeights, Loader, Mixer, NormType, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "seed_oss",
    models: "Seed-OSS (36B)",
    rope_mode: RopeMode::Neox,
    read_hparams: no_extra_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(l.attention_without_output_bias(hp, il, false)?),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
            ffn: l.gated_ffn(hp, il)?,
            ffn_post_norm: None,
        })
    })
}
