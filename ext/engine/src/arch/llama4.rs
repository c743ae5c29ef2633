//! llama4 (Llama 4 Scout and Maverick, text): llama's blocks as llama.cpp's
//! `src/models/llama4.cpp` builds them. What is special:
//! - chunked attention: three layers of four (`attention.sliding_window_pattern`) see
//!   only their query's chunk of 8,192 positions (llama.cpp fixes the size), with a rope
//!   base of their own where the file gives `rope.freq_base_swa`: their cache is a ring,
//!   as a sliding window's, whose cells before the newest position's chunk are reused
//!   ([`Swa::chunked`]); a file without chunks (`attention.sliding_window` 0), on which
//!   llama.cpp's graph asserts, is refused;
//! - NoPE: every fourth layer attends without rope, its Q scaled by the attention
//!   temperature `ln(floor((pos + 1) / 8192) + 1) · 0.1 + 1`;
//! - the rotating layers' Q and K are L2-normed after rope (RMS-normed without a weight),
//!   except in the 128-expert model (Maverick), as llama.cpp decides by the expert count;
//! - every `interleave_moe_layer_step`-th layer has a mixture of experts: the router's
//!   logits pick `expert_used_count`, and each one's sigmoid scales its expert's input
//!   (not its output); beside them a shared expert as wide as the experts, ungated. The
//!   others have a dense SwiGLU feed-forward;
//! - `rope_freqs.weight` (Llama 3's rope factors) where the file has it.

use super::common::{load_llama_like, read_expert_counts, run_layers, Head};
use super::llama;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, AttnTemperature, ExpertGating, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer,
    NormType, Swa, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "llama4",
    models: "Llama 4 Scout and Maverick (text)",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// llama.cpp's fixed chunk, and the attention temperature's floor scale with chunks.
const CHUNK: u32 = 8192;

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_expert_counts(keys, hp)?;
    hp.n_ff_exp = keys.u32("expert_feed_forward_length")?;
    hp.n_ff_shexp = hp.n_ff_exp;
    hp.n_moe_layer_step = keys.u32("interleave_moe_layer_step")?;
    if hp.n_ff_exp == 0 {
        return Err(Error::Load("llama4: expert_feed_forward_length must not be 0".into()));
    }
    hp.expert_gating = ExpertGating::Sigmoid;
    hp.expert_weights_norm = false;
    hp.experts_weigh_input = true;
    if hp.head_dim_k != hp.head_dim_v || hp.rope.n_dims != hp.head_dim_k {
        return Err(Error::Load(format!(
            "llama4: the heads' key ({}) and value ({}) widths and the rotated dimensions ({}) must agree",
            hp.head_dim_k, hp.head_dim_v, hp.rope.n_dims
        )));
    }
    // The window read is the chunk's presence: llama.cpp fixes its size.
    let Some(swa) = read_swa(keys, hp.n_layer, CHUNK, 4, hp.rope.clone())? else {
        // llama.cpp leaves the temperature's scale 0 then, and its input asserts it is not.
        return Err(Error::Unsupported(
            "llama4 without chunked attention (attention.sliding_window 0) is not something elelem runs; \
             llama.cpp's graph asserts on it"
                .into(),
        ));
    };
    hp.swa = Some(Swa {
        window: CHUNK,
        chunked: true,
        ..swa
    });
    hp.no_rope_every = Some(4);
    hp.attn_temperature = Some(AttnTemperature {
        scale: 0.1,
        floor_scale: CHUNK,
        offset: 1.0,
    });
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let embd = u64::from(hp.n_embd);
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn_norm = l.norm(&n("attn_norm.weight"), embd)?;
        let attn = l.attention_without_output_bias(hp, il, false)?;
        let ffn_norm = l.norm(&n("ffn_norm.weight"), embd)?;
        let moe = hp.n_moe_layer_step > 0 && (il + 1).is_multiple_of(hp.n_moe_layer_step);
        let ffn = match moe {
            true => {
                let shared = l.shared_expert(hp, il, hp.n_ff_shexp, None)?;
                l.experts_ffn(hp, il, Some(shared), false)?
            }
            false => l.gated_ffn(hp, il)?,
        };
        Ok(LayerWeights {
            attn_norm: Some(attn_norm),
            mixer: Mixer::Attention(attn),
            attn_post_norm: None,
            ffn_norm: Some(ffn_norm),
            ffn,
            ffn_post_norm: None,
        })
    })?;
    llama::with_rope_freqs(loader, hp, weights)
}

/// norm → attention (rotating layers: rope with the layer's base, then Q and K
/// L2-normed where the model does; the others: Q times the temperature) → residual →
/// norm → SwiGLU or experts → residual.
fn build(b: &GraphBuilder) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let kq_scale = hp.kq_scale();
    // Only where some layer does not rotate: an input no node reads gets no buffer.
    let temperature = (0..hp.n_layer as usize)
        .any(|il| !hp.rotates(il))
        .then(|| b.attn_temperature())
        .flatten();
    // llama.cpp's use_kq_norm: all but the 128-expert model (its LLM_TYPE_17B_128E).
    let qk_norm = hp.n_expert != 128;
    run_layers(b, b.embed(), |layer, il, x| {
        let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
        let (q, k, v) = b.qkv(layer.attn(), attn_in, il);
        let (q, k) = match hp.rotates(il) {
            true => {
                let rope = hp.layer_rope(il);
                let (q, k) = (b.rope(q, rope), b.rope(k, rope));
                match qk_norm {
                    true => (g.rms_norm(q, hp.norm_eps), g.rms_norm(k, hp.norm_eps)),
                    false => (q, k),
                }
            }
            false => (temperature.map_or(q, |t| g.mul(q, t)), k),
        };
        let attn = b.attention(layer.attn(), il, q, k, v, kq_scale);
        llama::ffn_residual(b, layer, il, attn, x)
    })
}
