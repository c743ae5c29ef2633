//! granitehybrid (IBM Granite 4.0-H, dense): Mamba-2 mixers on most layers (those whose
//! `attention.head_count_kv` is 0; see [`GraphBuilder::mamba2`]), attention on the
//! others, a SwiGLU feed-forward on every layer, and Granite's multipliers: the
//! embeddings scaled (`embedding_scale`), each mixer's and feed-forward's output scaled
//! before its residual add (`residual_scale`), the logits divided (`logit_scale`) and the
//! attention scale the file's (`attention.scale`); 0 or absent, each is left out, as
//! llama.cpp does. `rope.scaling.finetuned` (on unless the file says false, as Granite
//! 4.0-H's NoPE files do) switches rope on the attention layers. llama.cpp's
//! `src/models/granite-hybrid.cpp`. Refused: its mixture-of-experts form (Granite
//! 4.0-H Tiny and Small: `expert_count`), biases on the feed-forward and per-layer
//! `rope_freqs`, which llama.cpp would load.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_ssm, ArchSpec, AttentionWeights, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer,
    NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "granitehybrid",
    models: "Granite 4.0-H dense (Micro 3B, 1B, 350M)",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    // llama.cpp treats 0 as "not set" for each of the multipliers.
    let set = |v: Option<f32>| v.filter(|&s| s != 0.0);
    if let Some(logit_scale) = set(keys.opt_f32("logit_scale")?) {
        if !logit_scale.is_finite() {
            return Err(Error::Load("granitehybrid: logit_scale must be finite".into()));
        }
        hp.logit_multiplier = Some(1.0 / logit_scale);
    }
    hp.embedding_scale = set(keys.opt_f32("embedding_scale")?);
    hp.residual_scale = set(keys.opt_f32("residual_scale")?);
    hp.attention_scale = set(keys.opt_f32("attention.scale")?);
    let ssm = read_ssm(keys)?;
    // llama.cpp asserts Mamba-2's expansion factor of 2.
    if ssm.d_inner != 2 * hp.n_embd {
        return Err(Error::Load(format!(
            "granitehybrid: ssm.inner_size ({}) must be twice embedding_length ({})",
            ssm.d_inner, hp.n_embd
        )));
    }
    hp.ssm = Some(ssm);
    // Granite's switch for rope, on unless the file says otherwise: off, no layer rotates.
    if !keys.opt_bool("rope.scaling.finetuned")?.unwrap_or(true) {
        hp.no_rope_every = Some(1);
    }
    // The shared expert's width, which llama.cpp reads and uses with experts only.
    let _ = keys.opt_u32("expert_shared_feed_forward_length")?;
    if !hp.recurrent.contains(&false) {
        return Err(Error::Load(
            "granitehybrid: every layer is recurrent (attention.head_count_kv is 0 for all)".into(),
        ));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let mixer = match hp.recurrent[il as usize] {
            true => Mixer::Mamba2(l.mamba2_mixer(hp, il, false)?),
            false => Mixer::Attention(l.attention(hp, il, false)?),
        };
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer,
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn: l.gated_ffn(hp, il)?,
            ffn_post_norm: None,
        })
    })
}

/// norm → Mamba-2 mixer or attention → (× residual scale) residual → norm → SwiGLU →
/// (× residual scale) residual.
fn build(b: &GraphBuilder) -> Tensor {
    let g = b.graph;
    let scaled = |t: Tensor| b.hparams().residual_scale.map_or(t, |s| g.scale(t, s));
    run_layers(b, b.embed(), |layer, il, x| {
        let normed = b.norm(x, layer.attn_norm, "attn_norm", il);
        let mixed = match &layer.mixer {
            Mixer::Mamba2(mixer) => b.mamba2(mixer, normed, il),
            Mixer::Attention(attn) => attention(b, attn, normed, il),
            Mixer::ShortConv(_) | Mixer::DeltaNet(_) | Mixer::Mla(_) | Mixer::None | Mixer::Parallel { .. } => {
                unreachable!("granitehybrid's layers are Mamba-2 mixers or attention (load)")
            }
        };
        let (mixed, residual) = b.select_outputs_if_last(il, mixed, x);
        let ffn_in = g.add(scaled(mixed), residual).set_name(&format!("ffn_inp-{il}"));
        let ffn = b.norm(ffn_in, layer.ffn_norm, "ffn_norm", il);
        let ffn = b.ffn(&layer.ffn, ffn, il, Glu::Silu);
        g.add(scaled(ffn), ffn_in).set_name(&format!("l_out-{il}"))
    })
}

/// Q, K and V (with their biases, where the file has them), rope where the file
/// switches it on, attention with the file's scale (else 1/sqrt(head size)).
fn attention(b: &GraphBuilder, attn: &AttentionWeights, x: Tensor, il: usize) -> Tensor {
    let hp = b.hparams();
    let (q, k, v) = b.qkv(attn, x, il);
    let (q, k) = match hp.rotates(il) {
        true => (b.rope(q, &hp.rope), b.rope(k, &hp.rope)),
        false => (q, k),
    };
    let kq_scale = hp.attention_scale.unwrap_or_else(|| hp.kq_scale());
    b.attention(attn, il, q, k, v, kq_scale)
}
