//! phimoe (Phi-3.5-MoE): phi3's graph (Q scaled by 1/sqrt(head size) after NEOX rope,
//! LongRoPE's factors where present) on separate Q, K and V with biases where the
//! file has them, RMS norms with a bias added, biases on the attention output and
//! the logits, and, in place of the feed-forward, a mixture of SwiGLU experts
//! `feed_forward_length` wide with renormalized softmax weights.

use super::common::{load_llama_like, read_expert_counts, Head};
use super::phi3;
use crate::ggml::RopeMode;
use crate::model::{
    ArchSpec, AttentionWeights, HParams, Keys, Kind, LayerWeights, Loader, Mixer, Norm, NormType, RopeFactors, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "phimoe",
    models: "Phi-3.5-MoE",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build: phi3::build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_expert_counts(keys, hp)?;
    // llama.cpp sizes the experts by feed_forward_length and leaves this key unread.
    keys.opt_u32("expert_feed_forward_length")?;
    hp.n_ff_exp = hp.n_ff;
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    // An RMS norm's weight and the bias llama.cpp adds after it.
    let norm = |l: &mut Loader, prefix: &str| -> Result<Norm> { l.layer_norm(prefix, embd) };
    let pairs = u64::from(hp.n_embd / hp.n_head / 2);
    let rope_factors = RopeFactors {
        long: loader.optional_vector("rope_factors_long.weight", pairs)?,
        short: loader.optional_vector("rope_factors_short.weight", pairs)?,
        ..RopeFactors::default()
    };
    let mut weights = load_llama_like(loader, hp, Head::Own, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn = l.attention(hp, il, false)?;
        Ok(LayerWeights {
            attn_norm: Some(norm(l, &n("attn_norm"))?),
            mixer: Mixer::Attention(AttentionWeights {
                bo: Some(l.vector(&n("attn_output.bias"), embd)?),
                ..attn
            }),
            attn_post_norm: None,
            ffn_norm: Some(norm(l, &n("ffn_norm"))?),
            ffn: l.experts_ffn(hp, il, None, false)?,
            ffn_post_norm: None,
        })
    })?;
    if let Some(head) = &mut weights.head {
        head.norm.bias = Some(loader.vector("output_norm.bias", embd)?);
        head.bias = Some(loader.vector("output.bias", u64::from(hp.n_vocab))?);
    }
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
