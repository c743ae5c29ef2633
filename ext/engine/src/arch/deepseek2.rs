//! deepseek2 (DeepSeek-V2, V2-Lite, V3, R1, Kimi K2): multi-head latent attention in
//! llama.cpp's absorbed form ([`crate::model::Mla`]): Q through a low-rank compression
//! (`q_lora_rank`; V2-Lite projects it directly), K and V one compressed row per token
//! (`kv_lora_rank`) plus a rope part, cached as that row alone (one KV head, V its first
//! columns, no V cache); each head's query absorbed into the compressed space by
//! `attn_k_b`, its output decompressed by `attn_v_b`. NORM rope over the rope part only;
//! the attention scale is YaRN's magnitude squared over the decompressed head's root.
//! The first `leading_dense_block_count` layers have a SwiGLU feed-forward, the others a
//! mixture of SwiGLU experts (soft-max gating by default, DeepSeek-V3's sigmoid plus a
//! selection bias where the file says; picked within the best groups where it has
//! `expert_group_count`) beside an ungated shared expert
//! `expert_shared_count` experts wide. Multi-token-prediction layers are loaded and left
//! unused, as llama.cpp decodes. Refused: files from before llama.cpp split `attn_kv_b`
//! (no `key_length_mla`: llama.cpp decodes them decompressed), a per-layer expert width.

use super::common::{load_llama_like, read_expert_counts, read_expert_gating, read_nextn_layers, run_layers, Head};
use super::llama::ffn_residual;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, AttnTemperature, ExpertGating, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, Mla,
    NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "deepseek2",
    models: "DeepSeek-V2, V2-Lite, V3, R1, Kimi K2",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_nextn_layers(keys, hp)?;
    read_expert_counts(keys, hp)?;
    let n_vocab = keys.opt_u32("vocab_size")?.unwrap_or(hp.n_vocab);
    // llama.cpp's "lite" files (DeepSeek-V2-Lite, GigaChat3, Kanana-2), told by their
    // layer count: their Q has no compression, and q_lora_rank is not read.
    let lite = matches!(hp.n_layer, 26 | 27) || (hp.n_layer == 48 && n_vocab == 128_256);
    hp.n_layer_dense_lead = keys.opt_u32("leading_dense_block_count")?.unwrap_or(0);
    let q_lora_rank = match lite {
        true => {
            let _ = keys.has("attention.q_lora_rank");
            0
        }
        false => keys.u32("attention.q_lora_rank")?,
    };
    let kv_lora_rank = keys.u32("attention.kv_lora_rank")?;
    let (head_dim_k, head_dim_v) = match (
        keys.opt_u32("attention.key_length_mla")?.filter(|&n| n != 0),
        keys.opt_u32("attention.value_length_mla")?.filter(|&n| n != 0),
    ) {
        (Some(k), Some(v)) => (k, v),
        (None, None) => {
            return Err(Error::Unsupported(
                "deepseek2: a file without attention.key_length_mla and value_length_mla (converted before \
                 llama.cpp split attn_kv_b into attn_k_b and attn_v_b) is decoded decompressed by llama.cpp, \
                 which elelem does not; elelem runs the absorbed form of newer files"
                    .into(),
            ))
        }
        _ => {
            return Err(Error::Load(
                "deepseek2: attention.key_length_mla and value_length_mla come together (llama.cpp asserts)".into(),
            ))
        }
    };
    let n_rot = hp.rope.n_dims;
    let in_range = |n: u32| n > 0 && n <= 1 << 16;
    if !([kv_lora_rank, head_dim_v].into_iter().all(in_range) && q_lora_rank <= 1 << 16)
        || head_dim_k <= n_rot
        || head_dim_k > 1 << 16
        || hp.n_head_kv != 1
        || hp.head_dim_k != kv_lora_rank + n_rot
        || hp.head_dim_v != kv_lora_rank
    {
        return Err(Error::Load(format!(
            "deepseek2: latent attention needs attention.head_count_kv 1 (got {}), key_length the kv_lora_rank \
             plus rope.dimension_count ({kv_lora_rank} + {n_rot}, got {}), value_length the kv_lora_rank (got \
             {}), key_length_mla ({head_dim_k}) beyond the rope's dimensions, value_length_mla ({head_dim_v}) \
             and the ranks 1 to 65536",
            hp.n_head_kv, hp.head_dim_k, hp.head_dim_v
        )));
    }
    hp.mla = Some(Mla {
        q_lora_rank,
        kv_lora_rank,
        head_dim_k,
        head_dim_v,
    });
    let n_layer_all = (hp.n_layer + hp.n_layer_nextn) as usize;
    let widths = keys
        .opt_u32s("expert_feed_forward_length", n_layer_all)?
        .ok_or_else(|| Error::Load("missing required metadata key deepseek2.expert_feed_forward_length".into()))?;
    hp.n_ff_exp = match widths.split_first() {
        Some((&first, rest)) if rest.iter().all(|&w| w == first) => first,
        _ => {
            return Err(Error::Unsupported(format!(
                "deepseek2: experts of different widths by layer (expert_feed_forward_length {widths:?}) are \
                 not something elelem runs"
            )))
        }
    };
    let shared = keys.u32("expert_shared_count")?;
    hp.n_ff_shexp = hp
        .n_ff_exp
        .checked_mul(shared)
        .filter(|&n| n > 0 && n <= 1 << 20)
        .ok_or_else(|| {
            Error::Load(format!(
                "deepseek2: the experts' width ({}) and expert_shared_count ({shared}) must give a shared \
                 expert 1 to {} wide (llama.cpp's graph runs one in every layer with experts)",
                hp.n_ff_exp,
                1 << 20
            ))
        })?;
    // Old DeepSeek-V2 files say no gating function: soft-max, but GLM-4.7-Flash's sigmoid.
    let glm47_lite = matches!(hp.n_layer, 47 | 48) && n_vocab == 154_880;
    let default = if glm47_lite {
        ExpertGating::Sigmoid
    } else {
        ExpertGating::Softmax
    };
    read_expert_gating(keys, hp, default)?;
    read_yarn(keys, hp)?;
    let scale = keys.opt_f32("attention.temperature_scale")?.unwrap_or(0.0);
    let floor_scale = keys.opt_u32("attention.temperature_length")?.unwrap_or(0);
    if !scale.is_finite() || (scale != 0.0 && floor_scale == 0) {
        return Err(Error::Load(format!(
            "deepseek2: attention.temperature_scale ({scale}) must be finite, and where it is not 0 \
             attention.temperature_length ({floor_scale}) not 0 (llama.cpp asserts)"
        )));
    }
    if scale != 0.0 {
        hp.attn_temperature = Some(AttnTemperature {
            scale,
            floor_scale,
            offset: 0.0,
        });
    }
    Ok(())
}

/// llama.cpp's YaRN for deepseek2: the file's `yarn_log_multiplier` is 0.1 times the
/// model's `mscale_all_dim`, which llama.cpp takes back out; with it, the context's
/// magnitude correction cancels (DeepSeek-V2's `mscale` equals `mscale_all_dim`), and the
/// attention scale takes the magnitude squared, `(attn_factor (1 + 0.1 ln s) (1 + 0.1
/// mscale_all_dim ln s))² / sqrt(key_length_mla)` for the frequency scale `1/s`.
fn read_yarn(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let log_mul = keys
        .opt_f32("rope.scaling.yarn_log_multiplier")?
        .map_or(0.0, |v| v / 0.1);
    if !log_mul.is_finite() {
        return Err(Error::Load(format!(
            "deepseek2: rope.scaling.yarn_log_multiplier ({log_mul}) must be finite"
        )));
    }
    let rope = &mut hp.rope;
    let factor = 1.0 / rope.freq_scale;
    if rope.ext_factor != 0.0 && log_mul != 0.0 {
        let mscale = |scale: f32, mscale: f32| {
            if scale <= 1.0 {
                1.0
            } else {
                0.1 * mscale * scale.ln() + 1.0
            }
        };
        let m = if log_mul != 1.0 { log_mul } else { 1.0 };
        let mut attn_factor = mscale(factor, m) / mscale(factor, log_mul);
        attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
        attn_factor *= keys.opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0);
        rope.attn_factor = attn_factor;
    }
    let mla = hp.mla.expect("read before");
    let attn_factor_org = rope.attn_factor * (1.0 + 0.1 * (1.0 / rope.freq_scale).ln());
    let mscale = attn_factor_org * (1.0 + 0.1 * log_mul * (1.0 / rope.freq_scale).ln());
    hp.attention_scale = Some(mscale * mscale / (mla.head_dim_k as f32).sqrt());
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        if l.has(&n("attn_kv_b.weight")) {
            return Err(Error::Unsupported(format!(
                "deepseek2: layer {il}'s attn_kv_b is the decompressed form, which llama.cpp reads only from \
                 files without key_length_mla; elelem runs attn_k_b and attn_v_b"
            )));
        }
        let ffn = if il < hp.n_layer_dense_lead {
            l.gated_ffn(hp, il)?
        } else {
            let shared = l.shared_expert(hp, il, hp.n_ff_shexp, None)?;
            l.experts_ffn(hp, il, Some(shared), true)?
        };
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Mla(l.mla_attention(hp, il)?),
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
            ffn,
            ffn_post_norm: None,
        })
    })?;
    declare_nextn_layers(loader, hp)?;
    Ok(weights)
}

/// The multi-token-prediction layers after the decoding ones, as llama.cpp declares them
/// without `load_mtp` (shapes checked, never placed): a decoding layer's tensors, then
/// the layer's `nextn.*`; none required when the file lacks the first one's `nextn.eh_proj`.
fn declare_nextn_layers(loader: &mut Loader, hp: &HParams) -> Result<()> {
    let mla = hp.mla.expect("read with the hyper-parameters");
    let [embd, vocab, n_head, n_expert, ff, ff_exp, ff_shexp] = [
        hp.n_embd,
        hp.n_vocab,
        hp.n_head,
        hp.n_expert,
        hp.n_ff,
        hp.n_ff_exp,
        hp.n_ff_shexp,
    ]
    .map(u64::from);
    let [q_lora, kv_lora, head_k, head_v, n_rot] = [
        mla.q_lora_rank,
        mla.kv_lora_rank,
        mla.head_dim_k,
        mla.head_dim_v,
        hp.rope.n_dims,
    ]
    .map(u64::from);
    let present = loader.has(&format!("blk.{}.nextn.eh_proj.weight", hp.n_layer));
    for il in hp.n_layer..hp.n_layer + hp.n_layer_nextn {
        let mut unused = |name: &str, shape: &[u64], needed: bool| {
            loader.unused(&format!("blk.{il}.{name}"), shape, needed && present)
        };
        unused("attn_norm.weight", &[embd], true)?;
        if q_lora > 0 {
            unused("attn_q_a_norm.weight", &[q_lora], true)?;
            unused("attn_q_a.weight", &[embd, q_lora], true)?;
            unused("attn_q_b.weight", &[q_lora, n_head * head_k], true)?;
        } else {
            unused("attn_q.weight", &[embd, n_head * head_k], true)?;
        }
        unused("attn_kv_a_norm.weight", &[kv_lora], true)?;
        unused("attn_kv_a_mqa.weight", &[embd, kv_lora + n_rot], true)?;
        unused("attn_k_b.weight", &[head_k - n_rot, kv_lora, n_head], true)?;
        unused("attn_v_b.weight", &[kv_lora, head_v, n_head], true)?;
        unused("attn_output.weight", &[n_head * head_v, embd], true)?;
        unused("ffn_norm.weight", &[embd], true)?;
        if il < hp.n_layer_dense_lead {
            unused("ffn_gate.weight", &[embd, ff], true)?;
            unused("ffn_down.weight", &[ff, embd], true)?;
            unused("ffn_up.weight", &[embd, ff], true)?;
        } else {
            unused("ffn_gate_inp.weight", &[embd, n_expert], true)?;
            unused("exp_probs_b.bias", &[n_expert], false)?;
            unused("ffn_down_exps.weight", &[ff_exp, embd, n_expert], true)?;
            unused("ffn_gate_exps.weight", &[embd, ff_exp, n_expert], true)?;
            unused("ffn_up_exps.weight", &[embd, ff_exp, n_expert], true)?;
            unused("ffn_gate_shexp.weight", &[embd, ff_shexp], true)?;
            unused("ffn_down_shexp.weight", &[ff_shexp, embd], true)?;
            unused("ffn_up_shexp.weight", &[embd, ff_shexp], true)?;
        }
        unused("nextn.eh_proj.weight", &[2 * embd, embd], true)?;
        unused("nextn.enorm.weight", &[embd], true)?;
        unused("nextn.hnorm.weight", &[embd], true)?;
        unused("nextn.embed_tokens.weight", &[embd, vocab], false)?;
        unused("nextn.shared_head_head.weight", &[embd, vocab], false)?;
        unused("nextn.shared_head_norm.weight", &[embd], false)?;
    }
    Ok(())
}

/// llama.cpp's deepseek2 graph with latent attention: norm → latent attention (Q times
/// the temperature input, where the model has one) → residual → norm → SwiGLU or experts
/// beside the shared expert → residual.
fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    let kq_scale = hp.attention_scale.unwrap_or_else(|| hp.kq_scale());
    let temperature = b.attn_temperature();
    run_layers(b, b.embed(), |layer, il, x| {
        let Mixer::Mla(attn) = &layer.mixer else {
            unreachable!("every deepseek2 layer has latent attention (load)")
        };
        let normed = b.norm(x, layer.attn_norm, "attn_norm", il);
        let attn = b.mla_attention(attn, il, normed, kq_scale, temperature);
        ffn_residual(b, layer, il, attn, x)
    })
}
