//! gemma4 (Gemma 4: the dense 31B, the mixture of experts 26B-A4B, the small E2B and
//! E4B). What differs from gemma3:
//! - Sliding and full-attention layers have heads of their own sizes
//!   (`attention.key_length_swa`, `value_length_swa`) and may have KV head counts of
//!   their own (a per-layer `attention.head_count_kv`); which layers slide is the
//!   `attention.sliding_window_pattern` array.
//! - Sliding layers rotate with `rope.freq_base_swa` over `rope.dimension_count_swa`
//!   dimensions; full layers with the file's base and the shared `rope_freqs`
//!   (proportional rope: a factor per pair, huge where a pair does not rotate).
//! - Q and K are RMS-normed per head with weights, V without one; a layer without
//!   `attn_v` takes V = K (before the norms). The attention scale is 1.
//! - Every row runs through the last layer; the output rows are picked after the
//!   final norm. A layer's output may be multiplied by its `layer_output_scale`.
//! - Per-layer embeddings (`embedding_length_per_layer_input` > 0: E2B's, E4B's): the
//!   token's `per_layer_token_embd` rows plus the embeddings projected
//!   (`per_layer_model_proj`, `per_layer_proj_norm`) give each layer an input, which
//!   gates (`inp_gate`, GELU) a projection (`proj`, `post_norm`) added after its
//!   feed-forward.
//! - KV sharing (`attention.shared_kv_layers`): the last layers keep no cache and
//!   attend with their Q over the last cached layer of their kind.
//! - Feed-forward widths may differ between layers (a per-layer `feed_forward_length`:
//!   E2B's double-wide MLP).
//! - The embeddings are scaled by sqrt(n_embd), the logits may be soft-capped.
//! - A layer with a router (`ffn_gate_inp`: 26B-A4B's) runs a mixture of GELU experts
//!   beside its MLP ([`ExpertsBesideMlp`]), each with norms of its own, and adds the
//!   two. The router reads the attention's output RMS-normed and scaled (by 1/sqrt(n_embd)
//!   and `ffn_gate_inp.scale`), not the experts' input; the softmax weights of the
//!   picked experts are renormalized. The experts' gate and up projections may be one
//!   stack (`ffn_gate_up_exps`), and their outputs scaled per expert
//!   (`ffn_down_exps.scale`).
//!
//! Refused at load (`Error::Unsupported`; llama.cpp runs them): a fused `attn_qkv`, KV
//! heads differing among the layers of one kind, and KV sharing that would read a layer
//! of another kind.

use super::common::{load_llama_like, read_expert_counts, share_kv, Head};
use crate::ggml::{Rope, RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, AttentionWeights, ExpertGateUp, ExpertGating, ExpertsBesideMlp, Glu, GraphBuilder, HParams,
    Keys, Kind, LayerWeights, Loader, Mixer, NormType, QkvWeights, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "gemma4",
    models: "Gemma 4 (31B, 26B-A4B, E2B, E4B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn unsupported(what: &str) -> Error {
    Error::Unsupported(format!(
        "gemma4: {what} is not something elelem runs; llama.cpp runs it"
    ))
}

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let per_layer = keys.u32("embedding_length_per_layer_input")?;
    if u64::from(per_layer) * u64::from(hp.n_layer) > 1 << 20 {
        return Err(Error::Load(format!(
            "gemma4: embedding_length_per_layer_input ({per_layer}) × block_count ({}) exceeds 2^20",
            hp.n_layer
        )));
    }
    hp.n_embd_per_layer = per_layer;
    let shared = keys.opt_u32("attention.shared_kv_layers")?.unwrap_or(0);
    // llama.cpp requires the window and the pattern array.
    keys.u32("attention.sliding_window")?;
    if !keys.has("attention.sliding_window_pattern") {
        return Err(Error::Load(
            "missing required metadata key gemma4.attention.sliding_window_pattern".into(),
        ));
    }
    let head_k = keys.opt_u32("attention.key_length_swa")?.unwrap_or(hp.head_dim_k);
    let head_v = keys.opt_u32("attention.value_length_swa")?.unwrap_or(hp.head_dim_v);
    let rope_dims = keys.opt_u32("rope.dimension_count_swa")?.unwrap_or(hp.rope.n_dims);
    if hp.head_dim_k != hp.head_dim_v || head_k != head_v {
        return Err(Error::Load(format!(
            "gemma4 requires K and V heads of one size (key_length {}, value_length {}, key_length_swa {head_k}, \
             value_length_swa {head_v})",
            hp.head_dim_k, hp.head_dim_v
        )));
    }
    if head_k == 0
        || u64::from(head_k) * u64::from(hp.n_head) > 1 << 20
        || rope_dims == 0
        || rope_dims > head_k
        || rope_dims % 2 != 0
    {
        return Err(Error::Load(format!(
            "gemma4: key_length_swa ({head_k}) must be 1 to 2^20 / head_count, rope.dimension_count_swa \
             ({rope_dims}) even and at most it"
        )));
    }
    let swa_rope = Rope {
        freq_base: 10_000.0,
        freq_scale: 1.0,
        n_dims: rope_dims,
        ..hp.rope.clone()
    };
    hp.swa = read_swa(keys, hp.n_layer, 0, 0, swa_rope)?;
    let Some(swa) = &hp.swa else {
        return Err(Error::Load("gemma4: attention.sliding_window must not be 0".into()));
    };
    // The cache keeps one width per group (sliding, full): their layers' must agree.
    for sliding in [false, true] {
        let mut counts = (0..hp.n_layer as usize)
            .filter(|&il| swa.layers[il] == sliding)
            .map(|il| hp.n_head_kv_of(il));
        if let Some(first) = counts.next() {
            if counts.any(|n| n != first) {
                return Err(unsupported(&format!(
                    "attention.head_count_kv differing among the {} layers ({:?})",
                    if sliding { "sliding" } else { "full-attention" },
                    hp.n_head_kv_layers
                )));
            }
        }
    }
    if hp.recurrent.contains(&true) {
        return Err(Error::Load("gemma4: every layer needs KV heads".into()));
    }
    hp.head_dims_swa = (head_k != hp.head_dim_k).then_some((head_k, head_v));
    if shared > 0 {
        // llama.cpp asserts two cached layers at least; a sharing layer reads the last
        // cached full-attention layer, or the one before it when it slides.
        if shared > hp.n_layer.saturating_sub(2) {
            return Err(Error::Load(format!(
                "gemma4: attention.shared_kv_layers ({shared}) must leave two of the {} layers their caches",
                hp.n_layer
            )));
        }
        share_kv(hp, hp.n_layer - shared, unsupported)?;
    }
    hp.per_layer_heads = true;
    hp.final_logit_softcap = keys.opt_f32("final_logit_softcapping")?.filter(|&c| c != 0.0);
    if hp.n_expert > 0 {
        read_expert_counts(keys, hp)?;
        // One width, or one per layer of which llama.cpp takes the first.
        hp.n_ff_exp = keys
            .opt_u32s("expert_feed_forward_length", hp.n_layer as usize)?
            .and_then(|widths| widths.first().copied())
            .unwrap_or(0);
        if hp.n_ff_exp == 0 || u64::from(hp.n_ff_exp) > 1 << 20 {
            return Err(Error::Load(format!(
                "gemma4: expert_feed_forward_length ({}) must be 1 to 2^20 with experts",
                hp.n_ff_exp
            )));
        }
        // llama.cpp's gemma4 graph: softmax over the logits, the picked weights renormalized.
        hp.expert_gating = ExpertGating::Softmax;
        hp.expert_weights_norm = true;
        hp.expert_weights_scale = 0.0;
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let (mut out_scales, mut experts) = (Vec::new(), Vec::new());
    let mut weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let (layer, out_scale) = layer(l, hp, il)?;
        out_scales.push(out_scale);
        experts.push(experts_beside_mlp(l, hp, il)?);
        Ok(layer)
    })?;
    weights.layer_out_scales = out_scales;
    weights.experts_beside_mlp = experts;
    if hp.n_embd_per_layer > 0 {
        weights.per_layer_embd = Some(loader.per_layer_embeddings(hp)?);
    }
    // One `rope_freqs` for every full-attention layer, a factor per rotated pair.
    if let Some(full) = (0..hp.n_layer as usize).find(|&il| !hp.is_swa(il)) {
        weights.rope_factors.freqs = Some(loader.vector("rope_freqs.weight", u64::from(hp.head_dim_k_of(full) / 2))?);
    }
    Ok(weights)
}

fn layer(l: &mut Loader, hp: &HParams, il: u32) -> Result<(LayerWeights, Option<Tensor>)> {
    let n = |s: &str| format!("blk.{il}.{s}");
    let i = il as usize;
    if l.has(&n("attn_qkv.weight")) {
        return Err(unsupported(&format!("layer {il}'s fused attn_qkv")));
    }
    let embd = u64::from(hp.n_embd);
    let head = u64::from(hp.head_dim_k_of(i));
    let q_dim = head * u64::from(hp.n_head);
    let (k_dim, v_dim) = (u64::from(hp.n_embd_k_gqa_of(i)), u64::from(hp.n_embd_v_gqa_of(i)));
    // A layer sharing an earlier one's cache may have K (and its norm), which llama.cpp
    // loads and leaves unused; it needs neither.
    let has_kv = il < hp.n_layer_kv;
    let wq = l.matrix(&n("attn_q.weight"), &[embd, q_dim])?;
    let wk = match has_kv {
        true => l.matrix(&n("attn_k.weight"), &[embd, k_dim])?,
        false => l.optional_matrix(&n("attn_k.weight"), &[embd, k_dim])?.unwrap_or(wq),
    };
    let q_norm = l.vector(&n("attn_q_norm.weight"), head)?;
    let k_norm = match has_kv {
        true => Some(l.vector(&n("attn_k_norm.weight"), head)?),
        false => l.optional_vector(&n("attn_k_norm.weight"), head)?,
    };
    let attn = AttentionWeights {
        qkv: QkvWeights::Separate {
            wq,
            wk,
            // No V projection: V is K (build's `wv == wk`).
            wv: l.optional_matrix(&n("attn_v.weight"), &[embd, v_dim])?.unwrap_or(wk),
            bq: None,
            bk: None,
            bv: None,
        },
        q_norm: Some(q_norm),
        k_norm,
        wo: l.matrix(&n("attn_output.weight"), &[q_dim, embd])?,
        bo: None,
        sinks: None,
    };
    let layer = LayerWeights {
        attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
        mixer: Mixer::Attention(attn),
        attn_post_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
        ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
        ffn: l.gated_ffn(hp, il)?,
        ffn_post_norm: Some(l.norm(&n("post_ffw_norm.weight"), embd)?),
    };
    let out_scale = l.optional_vector(&n("layer_output_scale.weight"), 1)?;
    Ok((layer, out_scale))
}

/// The layer's experts beside its MLP, where it has a router (`ffn_gate_inp`).
fn experts_beside_mlp(l: &mut Loader, hp: &HParams, il: u32) -> Result<Option<ExpertsBesideMlp>> {
    let n = |s: &str| format!("blk.{il}.{s}");
    if !l.has(&n("ffn_gate_inp.weight")) {
        return Ok(None);
    }
    if hp.n_expert == 0 {
        return Err(Error::Load(format!(
            "gemma4: layer {il} has a router (ffn_gate_inp) but the file no expert_count"
        )));
    }
    let (embd, ff, n_expert) = (u64::from(hp.n_embd), u64::from(hp.n_ff_exp), u64::from(hp.n_expert));
    let used = hp.n_expert_used;
    let gate_up = match l.has(&n("ffn_gate_up_exps.weight")) {
        true => ExpertGateUp::Fused(l.experts(&n("ffn_gate_up_exps.weight"), &[embd, 2 * ff, n_expert], used)?),
        false => ExpertGateUp::Separate {
            gate: l.experts(&n("ffn_gate_exps.weight"), &[embd, ff, n_expert], used)?,
            up: l.experts(&n("ffn_up_exps.weight"), &[embd, ff, n_expert], used)?,
            gate_scale: l.optional_vector(&n("ffn_gate_exps.scale"), n_expert)?,
            up_scale: l.optional_vector(&n("ffn_up_exps.scale"), n_expert)?,
        },
    };
    Ok(Some(ExpertsBesideMlp {
        pre_norm: l.norm(&n("pre_ffw_norm_2.weight"), embd)?,
        post_norm: l.norm(&n("post_ffw_norm_2.weight"), embd)?,
        mlp_post_norm: l.norm(&n("post_ffw_norm_1.weight"), embd)?,
        router: l.matrix(&n("ffn_gate_inp.weight"), &[embd, n_expert])?,
        router_scale: l.vector(&n("ffn_gate_inp.scale"), embd)?,
        gate_up,
        down: l.experts(&n("ffn_down_exps.weight"), &[ff, embd, n_expert], used)?,
        down_scale: l.optional_vector(&n("ffn_down_exps.scale"), n_expert)?,
    }))
}

fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    let x = b.embed_scaled((hp.n_embd as f32).sqrt());
    let per_layer = b.weights.per_layer_embd.as_ref().map(|ple| b.per_layer_inputs(ple, x));
    let x = b
        .layers()
        .iter()
        .enumerate()
        .fold(x, |x, (il, layer)| block(b, layer, il, x, per_layer));
    b.output_selecting_after_norm(x)
}

/// llama.cpp's gemma4 block.
fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, per_layer: Option<Tensor>) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let attn = layer.attn();
    let QkvWeights::Separate { wq, wk, wv, .. } = attn.qkv else {
        unreachable!("gemma4's load refuses a fused attn_qkv")
    };
    let rope = hp.layer_rope(il);
    let factors = match hp.is_swa(il) {
        true => None,
        false => b.weights.rope_factors.freqs,
    };
    let pos = b.inputs.pos.0;
    let cur = b.norm(x, layer.attn_norm, "attn_norm", il);
    let src = hp.kv_source(il);
    let cur = if src == il {
        let k = g.mul_mat(wk, cur);
        let v = if wv == wk { k } else { g.mul_mat(wv, cur) };
        let (q, k, v) = b.heads(g.mul_mat(wq, cur), k, v, il);
        let q = g.rope(b.norm_if(q, attn.q_norm, "Qcur_normed", il), pos, rope, factors);
        let k = b.norm_if(k, attn.k_norm, "Kcur_normed", il);
        let v = g.rms_norm(v, hp.norm_eps).set_name(&format!("Vcur_normed-{il}"));
        let k = g.rope(k, pos, rope, factors);
        b.attention(attn, il, q, k, v, 1.0)
    } else {
        // KV sharing: Q alone, over the cache of layer `src`.
        let q = g.reshape_3d(
            g.mul_mat(wq, cur),
            hp.head_dim_k_of(il).into(),
            hp.n_head.into(),
            b.n_tokens,
        );
        let q = g.rope(b.norm_if(q, attn.q_norm, "Qcur_normed", il), pos, rope, factors);
        b.attention_shared(attn, il, src, q, 1.0)
    };
    let cur = b.norm(cur, layer.attn_post_norm, "attn_post_norm", il);
    let attn_out = g.add(cur, x).set_name(&format!("attn_out-{il}"));
    let cur = match b.weights.experts_beside_mlp.get(il).and_then(Option::as_ref) {
        Some(experts) => {
            let mlp = b.norm(attn_out, layer.ffn_norm, "ffn_norm_1", il);
            let mlp = b.ffn(&layer.ffn, mlp, il, Glu::Gelu);
            let mlp = b.norm(mlp, Some(experts.mlp_post_norm), "ffn_mlp", il);
            let moe = b.norm(attn_out, Some(experts.pre_norm), "ffn_norm_2", il);
            let moe = mixture_of_experts(b, experts, attn_out, moe, il);
            let moe = b.norm(moe, Some(experts.post_norm), "ffn_moe", il);
            g.add(mlp, moe).set_name(&format!("ffn_moe_combined-{il}"))
        }
        None => {
            let cur = b.norm(attn_out, layer.ffn_norm, "ffn_norm", il);
            b.ffn(&layer.ffn, cur, il, Glu::Gelu)
        }
    };
    let cur = b.norm(cur, layer.ffn_post_norm, "ffn_post_norm", il);
    let mut cur = g.add(cur, attn_out);
    if let (Some(inputs), Some(ple)) = (per_layer, &b.weights.per_layer_embd) {
        cur = g.add(cur, b.per_layer_embedding(ple, inputs, il, cur, "per_layer_embd_out"));
    }
    let cur = match b.weights.layer_out_scales.get(il).copied().flatten() {
        Some(scale) => g.mul(cur, scale),
        None => cur,
    };
    cur.set_name(&format!("l_out-{il}"))
}

/// The experts on the rows `x` [n_embd, n_rows], routed by the attention's output
/// `attn_out` (llama.cpp's gemma4 router before its `build_moe_ffn`).
fn mixture_of_experts(b: &GraphBuilder, e: &ExpertsBesideMlp, attn_out: Tensor, x: Tensor, il: usize) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let [n_embd, n_rows, ..] = x.ne();
    let routed = g.scale(g.rms_norm(attn_out, hp.norm_eps), 1.0 / (hp.n_embd as f32).sqrt());
    let logits = g.mul_mat(e.router, g.mul(routed, e.router_scale));
    let (selected, weights) = b.pick_experts(logits.set_name(&format!("ffn_moe_logits-{il}")), None);
    let n_expert = i64::from(hp.n_expert);
    // Each picked expert's row of the per-expert scales (llama.cpp's `build_lora_mm_id`).
    let scaled = |t: Tensor, scale: Option<Tensor>| {
        scale.map_or(t, |s| {
            let s = g.repeat_4d(g.reshape_3d(s, 1, n_expert, 1), [1, n_expert, n_rows, 1]);
            g.mul(t, g.get_rows(s, selected))
        })
    };
    let x = g.reshape_3d(x, n_embd, 1, n_rows);
    let (gate, up) = match e.gate_up {
        ExpertGateUp::Fused(gate_up) => {
            let both = g.mul_mat_id(gate_up, x, selected);
            let [width, used, rows, _] = both.ne();
            let [_, nb1, nb2, _] = both.nb();
            let half = |i: i64| {
                g.view_3d(
                    both,
                    [width / 2, used, rows],
                    nb1,
                    nb2,
                    (i * width / 2) as usize * both.nb()[0],
                )
            };
            (half(0), half(1))
        }
        ExpertGateUp::Separate {
            gate,
            up,
            gate_scale,
            up_scale,
        } => {
            let up = scaled(g.mul_mat_id(up, x, selected), up_scale);
            (scaled(g.mul_mat_id(gate, x, selected), gate_scale), up)
        }
    };
    let experts = scaled(g.mul_mat_id(e.down, g.geglu_split(gate, up), selected), e.down_scale);
    b.sum_experts(g.mul(experts, weights))
}
