//! apertus (Swiss AI's Apertus). What differs from llama:
//! - Q and K get a per-head RMS norm before NEOX rope (as qwen3's). llama.cpp loads the
//!   norms' optional biases but never adds them; neither do we.
//! - The feed-forward is `down(xielu(up x))`, without a gate, with each layer's xIELU
//!   parameters from the file's `xielu.*` keys (one per layer, or one for all).
//! - The head is never tied; Llama 3.1's or LongRoPE's rope factors where present.

use super::common::{load_llama_like, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{
    ArchSpec, FfnWeights, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, RopeFactors, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "apertus",
    models: "Apertus (8B, 70B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let [alpha_n, alpha_p, beta, eps] = ["xielu.alpha_n", "xielu.alpha_p", "xielu.beta", "xielu.eps"]
        .map(|key| keys.global_f32_per_layer(key, hp.n_layer));
    let (alpha_n, alpha_p, beta, eps) = (alpha_n?, alpha_p?, beta?, eps?);
    hp.xielu = (0..hp.n_layer as usize)
        .map(|il| [alpha_n[il], alpha_p[il], beta[il], eps[il]])
        .collect();
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let (embd, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
    let head = u64::from(hp.head_dim_k);
    let pairs = u64::from(hp.rope.n_dims / 2);
    let rope_factors = RopeFactors {
        freqs: loader.optional_vector("rope_freqs.weight", pairs)?,
        long: loader.optional_vector("rope_factors_long.weight", pairs)?,
        short: loader.optional_vector("rope_factors_short.weight", pairs)?,
    };
    let weights = load_llama_like(loader, hp, Head::Own, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention(hp, il, false)?;
        let attn = l.with_head_norms(hp, il, attn)?;
        l.optional_vector(&n("attn_q_norm.bias"), head)?;
        l.optional_vector(&n("attn_k_norm.bias"), head)?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(attn),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: FfnWeights::Xielu {
                up: l.matrix(&n("ffn_up.weight"), &[embd, ff])?,
                down: l.matrix(&n("ffn_down.weight"), &[ff, embd])?,
                params: hp.xielu[il as usize],
            },
            ffn_post_norm: None,
        })
    })?;
    Ok(Weights {
        layer_out_scales: Vec::new(),
        altup: None,
        laurel: Vec::new(),
        experts_beside_mlp: Vec::new(),
        per_layer_embd: None,
        rope_factors,
        ..weights
    })
}
