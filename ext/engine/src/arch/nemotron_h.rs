//! nemotron_h (NVIDIA Nemotron-H, Nemotron Nano 2: dense): three kinds of layer, each
//! an RMS norm, one piece and the residual add, told apart as llama.cpp tells them from
//! the per-layer `attention.head_count_kv` and `feed_forward_length`: a Mamba-2 mixer
//! (both 0; see [`GraphBuilder::mamba2`]), attention (no feed-forward) without rope
//! (llama.cpp's `LLAMA_ROPE_TYPE_NONE`) at 1/sqrt(head size), or a feed-forward alone
//! (a width), ungated with a squared ReLU (`FfnWeights::ReluSquared`), which keeps
//! neither a cache nor a state. The norms' epsilon is `attention.layer_norm_rms_epsilon`,
//! else the required `attention.layer_norm_epsilon`. llama.cpp's
//! `src/models/nemotron-h.cpp`. Refused: experts (`expert_count`; Nemotron 3's MoE files
//! are the architecture nemotron_h_moe, which elelem does not run), multi-token
//! prediction (`nextn_predict_layers`), and feed-forward widths that differ between
//! layers, which llama.cpp would run.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_ssm, ArchSpec, FfnWeights, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType,
    Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "nemotron_h",
    models: "Nemotron-H (4B to 56B), Nemotron Nano 2 (9B, 12B)",
    // llama.cpp's LLAMA_ROPE_TYPE_NONE: nothing rotates.
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let arch = hp.arch.name;
    let n_layer = hp.n_layer as usize;
    let layer_eps = keys.f32("attention.layer_norm_epsilon")?;
    hp.norm_eps = keys.opt_f32("attention.layer_norm_rms_epsilon")?.unwrap_or(layer_eps);
    hp.ssm = Some(read_ssm(keys)?);
    let widths = keys
        .opt_u32s("feed_forward_length", n_layer)?
        .filter(|widths| widths.len() == n_layer)
        .ok_or_else(|| {
            Error::Load(format!(
                "{arch}.feed_forward_length must hold one width per layer ({n_layer})"
            ))
        })?;
    let mut ffn_widths = widths.iter().copied().filter(|&n| n > 0);
    let n_ff = ffn_widths.next().unwrap_or(0);
    if ffn_widths.any(|other| other != n_ff) {
        return Err(Error::Unsupported(format!(
            "{arch}.feed_forward_length differs between layers ({widths:?}), which elelem does not run; llama.cpp does"
        )));
    }
    hp.n_ff = n_ff;
    // llama.cpp's is_recr: no KV heads (which the common reader marked) and no feed-forward.
    hp.recurrent = hp.recurrent.iter().zip(&widths).map(|(&r, &w)| r && w == 0).collect();
    hp.ffn_only = widths.iter().map(|&w| w > 0).collect();
    if hp.head_dim_k != hp.head_dim_v {
        return Err(Error::Load(format!(
            "{arch}: attention.key_length ({}) and value_length ({}) must be equal",
            hp.head_dim_k, hp.head_dim_v
        )));
    }
    // What llama.cpp reads for experts, which without `expert_count` (refused) go unused.
    let _ = keys.opt_u32s("expert_feed_forward_length", n_layer)?;
    let _ = keys.opt_u32s("expert_used_count", n_layer)?;
    for key in [
        "expert_shared_feed_forward_length",
        "expert_shared_count",
        "moe_latent_size",
    ] {
        let _ = keys.opt_u32(key)?;
    }
    let _ = keys.opt_bool("expert_weights_norm")?;
    let _ = keys.opt_f32("expert_weights_scale")?;
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let (mixer, ffn) = match (hp.recurrent[il as usize], hp.ffn_only[il as usize]) {
            (true, _) => (Mixer::Mamba2(l.mamba2_mixer(hp, il, false)?), FfnWeights::None),
            (false, false) => (Mixer::Attention(l.attention(hp, il, false)?), FfnWeights::None),
            (false, true) => (Mixer::None, l.relu_squared_ffn(hp, il)?),
        };
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&format!("blk.{il}.attn_norm.weight"), embd)?),
            mixer,
            attn_post_norm: None,
            ffn_norm: None,
            ffn,
            ffn_post_norm: None,
        })
    })
}

/// norm → Mamba-2 mixer, attention or squared-ReLU feed-forward → residual.
fn build(b: &GraphBuilder) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    run_layers(b, b.embed(), |layer, il, x| {
        let normed = b.norm(x, layer.attn_norm, "attn_norm", il);
        let out = match &layer.mixer {
            Mixer::Mamba2(mixer) => b.mamba2(mixer, normed, il),
            Mixer::Attention(attn) => {
                let (q, k, v) = b.qkv(attn, normed, il);
                b.attention(attn, il, q, k, v, hp.kq_scale())
            }
            Mixer::None => b.ffn(&layer.ffn, normed, il, Glu::Silu),
            Mixer::ShortConv(_) | Mixer::DeltaNet(_) | Mixer::Mla(_) | Mixer::Parallel { .. } => {
                unreachable!("nemotron_h's layers are Mamba-2 mixers, attention or feed-forwards (load)")
            }
        };
        let (out, residual) = b.select_outputs_if_last(il, out, x);
        g.add(out, residual).set_name(&format!("l_out-{il}"))
    })
}
