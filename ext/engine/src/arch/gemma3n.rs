//! gemma3n (Gemma 3n E2B and E4B, their text). What differs from gemma3:
//! - AltUp: the hidden state is 4 streams. The embeddings make them (`altup_proj`, each
//!   rescaled to the embeddings' magnitude); before each layer the streams are predicted
//!   from a router over the active one (`altup_router`, `altup_predict_coef`), the layer
//!   computes on the active prediction, and after it every prediction is corrected by the
//!   layer's innovation (`altup_correct_coef`); before the head they are merged back
//!   (`altup_unembd_proj`, the mean of the streams).
//! - LAuReL: beside attention, a rank-64 residual (`laurel_l`, `laurel_r`, its norm) of
//!   the normed input, added to the attention's output and averaged (over sqrt(2)).
//! - Per-layer embeddings 256 wide, as gemma4's, gating the corrected active stream
//!   (times `altup_correct_scale`) into each other stream.
//! - The first 10 layers' feed-forward gates are made sparse (a Gaussian top-k: the mean
//!   plus 1.645 standard deviations subtracted, then ReLU) before GELU.
//! - Q and K are RMS-normed per head with weights, V without; the attention scale is 1.
//!   Every fifth layer attends to the whole context unless the file's pattern says
//!   otherwise; the others slide, with their own rope base.
//! - KV sharing: the layers past the 20th keep no cache and attend over layer 19's (full
//!   attention) or 18's (sliding); llama.cpp loads their K and V and leaves them unused.
//! - The output rows are picked after the streams are merged, before the final norm; the
//!   logits are always soft-capped at 30.
//!
//! llama.cpp fixes the streams (4, the first active), the LAuReL rank (64), the per-layer
//! width (256), the 20 cached layers and the sparsity (the 95th percentile, the first 10
//! layers) whatever the file says: a file whose keys say otherwise is refused
//! (`Error::Unsupported`), as are a fused `attn_qkv` and Q/K/V biases.

use super::common::{load_llama_like, share_kv, Head};
use crate::ggml::{Rope, RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, AttentionWeights, FfnWeights, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer,
    NormType, QkvWeights, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "gemma3n",
    models: "Gemma 3n text (E2B, E4B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// AltUp's streams and the active one (llama.cpp's `n_altup`, `i_altup_act`).
const STREAMS: u32 = 4;
const ACTIVE: u32 = 0;
/// LAuReL's rank and the per-layer embeddings' width (`laurel_rank`, `n_embd_altup`).
const LAUREL_RANK: u32 = 64;
const PER_LAYER_WIDTH: u32 = 256;
/// The layers that keep a KV cache (`n_layer_kv_from_start`).
const CACHED_LAYERS: u32 = 20;
/// The layers whose gates are made sparse, and the standard deviations over the mean
/// the cutoff sits at (the standard normal's 95th percentile).
const SPARSE_LAYERS: usize = 10;
const SPARSITY_STD_MULTIPLIER: f32 = 1.644_853_4;
/// The logits' soft-cap (llama.cpp's default, which gemma3n does not read).
const LOGIT_SOFTCAP: f32 = 30.0;

fn unsupported(what: &str) -> Error {
    Error::Unsupported(format!(
        "gemma3n: {what} is not something elelem runs; llama.cpp runs it"
    ))
}

/// A key whose value llama.cpp does not read, fixing its own: refused where they differ.
fn differs(key: &str, value: impl std::fmt::Debug, fixed: impl std::fmt::Debug) -> Error {
    Error::Unsupported(format!(
        "gemma3n.{key} is {value:?}, which llama.cpp does not read: it runs gemma3n with {fixed:?}, so elelem \
         runs only files that say so"
    ))
}

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    for (key, fixed) in [
        ("altup_num_inputs", STREAMS),
        ("altup_active_idx", ACTIVE),
        ("embedding_length_per_layer_input", PER_LAYER_WIDTH),
    ] {
        match keys.opt_u32(key)? {
            Some(value) if value != fixed => return Err(differs(key, value, fixed)),
            _ => {}
        }
    }
    // llama.cpp's graph splits V into heads of K's size.
    if hp.head_dim_k != hp.head_dim_v {
        return Err(Error::Load(format!(
            "gemma3n requires K and V heads of one size (key_length {}, value_length {})",
            hp.head_dim_k, hp.head_dim_v
        )));
    }
    if u64::from(PER_LAYER_WIDTH) * u64::from(hp.n_layer) > 1 << 20 {
        return Err(Error::Load(format!(
            "gemma3n: block_count ({}) times the per-layer width exceeds 2^20",
            hp.n_layer
        )));
    }
    hp.n_embd_per_layer = PER_LAYER_WIDTH;
    let cached = hp.n_layer.min(CACHED_LAYERS);
    let shared = keys
        .opt_u32("attention.shared_kv_layers")?
        .unwrap_or(hp.n_layer - cached);
    if shared != hp.n_layer - cached {
        return Err(differs("attention.shared_kv_layers", shared, hp.n_layer - cached));
    }
    // The converter's scales: the standard normal's quantile of each layer's sparsity (0.95
    // on E2B's and E4B's first 10 layers, minus infinity for the others' 0). llama.cpp reads
    // none of them; a multiplier off in its last bits means the same.
    if let Some(scales) = keys.opt_f32s("activation_sparsity_scale", hp.n_layer as usize)? {
        let as_llama_cpp = scales.iter().enumerate().all(|(il, &scale)| match il < SPARSE_LAYERS {
            true => (scale - SPARSITY_STD_MULTIPLIER).abs() < 1e-5,
            false => scale == f32::NEG_INFINITY,
        });
        if !as_llama_cpp {
            return Err(differs(
                "activation_sparsity_scale",
                scales,
                format_args!(
                    "sparse gates at {SPARSITY_STD_MULTIPLIER} standard deviations on the first {SPARSE_LAYERS} \
                     layers and none on the others"
                ),
            ));
        }
    }
    match keys.opt_f32("final_logit_softcapping")? {
        Some(cap) if cap != LOGIT_SOFTCAP => return Err(differs("final_logit_softcapping", cap, LOGIT_SOFTCAP)),
        _ => {}
    }
    hp.final_logit_softcap = Some(LOGIT_SOFTCAP);
    // llama.cpp requires the window; every fifth layer attends fully unless the pattern
    // says otherwise.
    keys.u32("attention.sliding_window")?;
    let swa_rope = Rope {
        freq_base: 10_000.0,
        freq_scale: 1.0,
        ..hp.rope.clone()
    };
    hp.swa = read_swa(keys, hp.n_layer, 0, 5, swa_rope)?;
    if hp.swa.is_none() {
        return Err(Error::Load("gemma3n: attention.sliding_window must not be 0".into()));
    }
    if hp.n_layer > CACHED_LAYERS {
        share_kv(hp, CACHED_LAYERS, unsupported)?;
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let mut laurel = Vec::new();
    let mut weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let layer = layer(l, hp, il)?;
        laurel.push(l.laurel(hp, il, LAUREL_RANK)?);
        Ok(layer)
    })?;
    weights.laurel = laurel;
    weights.per_layer_embd = Some(loader.per_layer_embeddings(hp)?);
    weights.altup = Some(loader.altup(hp, STREAMS, ACTIVE)?);
    Ok(weights)
}

fn layer(l: &mut Loader, hp: &HParams, il: u32) -> Result<LayerWeights> {
    let n = |s: &str| format!("blk.{il}.{s}");
    if l.has(&n("attn_qkv.weight")) {
        return Err(unsupported(&format!("layer {il}'s fused attn_qkv")));
    }
    let embd = u64::from(hp.n_embd);
    let head = u64::from(hp.head_dim_k);
    let q_dim = head * u64::from(hp.n_head);
    let (k_dim, v_dim) = (u64::from(hp.n_embd_k_gqa()), u64::from(hp.n_embd_v_gqa()));
    let wq = l.matrix(&n("attn_q.weight"), &[embd, q_dim])?;
    let (wk, wv, k_norm) = if il < hp.n_layer_kv {
        (
            l.matrix(&n("attn_k.weight"), &[embd, k_dim])?,
            l.matrix(&n("attn_v.weight"), &[embd, v_dim])?,
            Some(l.vector(&n("attn_k_norm.weight"), head)?),
        )
    } else {
        // A layer sharing an earlier one's cache: llama.cpp loads its K, V and K norm
        // and leaves them unused (Q stands in for them here, never read).
        l.unused(&n("attn_k.weight"), &[embd, k_dim], true)?;
        l.unused(&n("attn_v.weight"), &[embd, v_dim], true)?;
        l.unused(&n("attn_k_norm.weight"), &[head], true)?;
        (wq, wq, None)
    };
    let attn = AttentionWeights {
        qkv: QkvWeights::Separate {
            wq,
            wk,
            wv,
            bq: None,
            bk: None,
            bv: None,
        },
        q_norm: Some(l.vector(&n("attn_q_norm.weight"), head)?),
        k_norm,
        wo: l.matrix(&n("attn_output.weight"), &[q_dim, embd])?,
        bo: None,
        sinks: None,
    };
    Ok(LayerWeights {
        attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
        mixer: Mixer::Attention(attn),
        attn_post_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
        ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
        ffn: l.gated_ffn(hp, il)?,
        ffn_post_norm: Some(l.norm(&n("post_ffw_norm.weight"), embd)?),
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    let x = b.embed_scaled((hp.n_embd as f32).sqrt());
    let ple = b.weights.per_layer_embd.as_ref().expect("gemma3n's load reads them");
    let altup = b.weights.altup.as_ref().expect("gemma3n's load reads it");
    let per_layer = b.per_layer_inputs(ple, x);
    let streams = b.altup_streams(altup, x);
    let streams = b
        .layers()
        .iter()
        .enumerate()
        .fold(streams, |streams, (il, layer)| block(b, layer, il, streams, per_layer));
    let x = b.altup_merge(altup, streams);
    b.output(b.output_rows(x))
}

/// llama.cpp's gemma3n block, on the streams [n_embd, n_tokens, 4].
fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, streams: Tensor, per_layer: Tensor) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let w = b.weights;
    let altup = w.altup.as_ref().expect("gemma3n's load reads it");
    let predictions = b.altup_predict(altup, streams, il);
    let active = b
        .stream(predictions, altup.active)
        .set_name(&format!("active_prediction-{il}"));
    let cur = b.norm(active, layer.attn_norm, "attn_norm", il);
    let laurel_out = b.laurel(&w.laurel[il], cur, il);
    let cur = attention(b, layer, il, cur);
    let cur = b.norm(cur, layer.attn_post_norm, "attn_post_norm", il);
    let cur = g.add(cur, active).set_name(&format!("attn_gated-{il}"));
    let attn_laurel = g
        .scale(g.add(cur, laurel_out), 1.0 / 2f32.sqrt())
        .set_name(&format!("attn_laurel-{il}"));
    let cur = b.norm(attn_laurel, layer.ffn_norm, "ffn_norm", il);
    let FfnWeights::Gated { gate, up, down } = layer.ffn else {
        unreachable!("gemma3n's load reads a gated feed-forward")
    };
    let up = g.mul_mat(up, cur);
    let gate = g.mul_mat(gate, cur);
    let gate = match il < SPARSE_LAYERS {
        true => b.gaussian_top_k(gate, SPARSITY_STD_MULTIPLIER),
        false => gate,
    };
    let cur = g.mul_mat(down, g.mul(up, g.gelu(gate)));
    // llama.cpp norms the feed-forward's output outside any layer (its il -1).
    let post_norm = layer.ffn_post_norm.expect("gemma3n's load reads it").weight;
    let cur = g.mul(g.rms_norm(cur, hp.norm_eps), post_norm);
    let activated = g.add(cur, attn_laurel).set_name(&format!("attn_ffw_laurel_gated-{il}"));
    let corrected = b.altup_correct(altup, predictions, activated, il);
    let first = g.mul(b.stream(corrected, altup.active), altup.layers[il].correct_scale);
    let first = b.per_layer_embedding(
        w.per_layer_embd.as_ref().expect("gemma3n's load reads them"),
        per_layer,
        il,
        first,
        "first_prediction_out",
    );
    b.altup_add_to_others(corrected, first).set_name(&format!("l_out-{il}"))
}

/// Attention of the normed active stream `x`: Q, K and V RMS-normed per head (V
/// without a weight), rotated, over the layer's cache; or Q alone over the cache it shares.
fn attention(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let attn = layer.attn();
    let QkvWeights::Separate { wq, wk, wv, .. } = attn.qkv else {
        unreachable!("gemma3n's load refuses a fused attn_qkv")
    };
    let (rope, pos) = (hp.layer_rope(il), b.inputs.pos.0);
    let src = hp.kv_source(il);
    if src == il {
        let (q, k, v) = b.heads(g.mul_mat(wq, x), g.mul_mat(wk, x), g.mul_mat(wv, x), il);
        let q = b.norm_if(q, attn.q_norm, "Qcur_normed", il);
        let k = b.norm_if(k, attn.k_norm, "Kcur_normed", il);
        let v = g.rms_norm(v, hp.norm_eps).set_name(&format!("Vcur_normed-{il}"));
        let q = g.rope(q, pos, rope, None);
        let k = g.rope(k, pos, rope, None);
        b.attention(attn, il, q, k, v, 1.0)
    } else {
        let q = g.reshape_3d(g.mul_mat(wq, x), hp.head_dim_k.into(), hp.n_head.into(), b.n_tokens);
        let q = g.rope(b.norm_if(q, attn.q_norm, "Qcur_normed", il), pos, rope, None);
        b.attention_shared(attn, il, src, q, 1.0)
    }
}
