//! qwen35 (Qwen 3.5 dense): a hybrid of gated delta nets and gated attention, as
//! llama.cpp's `src/models/qwen35.cpp`. Most layers (all but every
//! `full_attention_interval`-th, or those `attention.recurrent_layers` marks) are
//! linear attention with a delta-rule state (see [`delta_net`]): per sequence a
//! convolution state and a state of `d_state × d_state` per value head in the
//! recurrent memory, beside the KV cache of the others. The attention layers project Q
//! twice as wide (each head's query, then its gate), RMS-norm Q and K per head, rotate
//! them with interleaved multi-dimensional rope (`rope.dimension_sections`; a text
//! token's coordinates are `[p, p, p, 0]`) and scale the attention's output by the
//! gate's sigmoid before `attn_output`. Each block is pre-normed, its feed-forward
//! (SwiGLU) post-attention-normed; the last block runs on every row, and the output
//! rows are picked after the final norm. The multi-token-prediction layers at the end
//! (`nextn_predict_layers`) are loaded and left unused, as llama.cpp decodes. Refused: a
//! fused `attn_qkv` on the attention layers.

use super::common::{self, load_llama_like, read_nextn_layers, read_rope_sections, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_ssm, ArchSpec, AttentionWeights, BetaAlpha, DeltaNetWeights, FfnWeights, Glu, GraphBuilder, HParams, Keys,
    Kind, LayerWeights, Loader, Mixer, NormType, QkvWeights, Qkvz, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen35",
    models: "Qwen 3.5 dense (0.8B, 2B, 4B, 9B, 27B)",
    rope_mode: RopeMode::Imrope,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_hybrid(keys, hp)
}

/// What qwen35 and qwen35moe read alike: the rope sections, then what qwen3next reads
/// too ([`read_delta_nets`]).
pub(super) fn read_hybrid(keys: &Keys, hp: &mut HParams) -> Result<()> {
    read_rope_sections(keys, hp)?;
    read_delta_nets(keys, hp)
}

/// What qwen35, qwen35moe and qwen3next read alike: the multi-token-prediction layers,
/// the delta nets' `ssm.*` keys, and which layers are recurrent.
pub(super) fn read_delta_nets(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let arch = hp.arch.name;
    read_nextn_layers(keys, hp)?;
    let ssm = read_ssm(keys)?;
    // llama.cpp's tensors have heads of d_state keys and values; its graph's value heads
    // are d_inner / time_step_rank wide, and its state d_state · d_inner.
    if ssm.d_inner != ssm.d_state * ssm.n_head {
        return Err(Error::Load(format!(
            "{arch}: ssm.inner_size ({}) must be ssm.state_size ({}) times ssm.time_step_rank ({})",
            ssm.d_inner, ssm.d_state, ssm.n_head
        )));
    }
    if hp.head_dim_k != hp.head_dim_v {
        return Err(Error::Load(format!(
            "{arch}: attention.key_length ({}) and value_length ({}) must agree",
            hp.head_dim_k, hp.head_dim_v
        )));
    }
    hp.ssm = Some(ssm);
    // Over every layer of the file (llama.cpp's n_layer_all); the prediction layers after
    // `n_layer` attend.
    let n_layer = hp.n_layer as usize;
    let n_layer_all = n_layer + hp.n_layer_nextn as usize;
    hp.recurrent = match keys.opt_bools("attention.recurrent_layers", n_layer_all)? {
        Some(recurrent) => recurrent[..n_layer].to_vec(),
        None => {
            let interval = keys.opt_u32("full_attention_interval")?.unwrap_or(4);
            if interval == 0 {
                return Err(Error::Load(format!("{arch}.full_attention_interval must not be 0")));
            }
            (0..n_layer).map(|il| (il + 1) % interval as usize != 0).collect()
        }
    };
    if !hp.recurrent.contains(&false) || !hp.recurrent.contains(&true) {
        return Err(Error::Unsupported(format!(
            "{arch} whose layers are all recurrent or all attention ({:?}) is not one elelem runs; llama.cpp \
             runs it",
            hp.recurrent
        )));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let weights = load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let ffn = l.gated_ffn(hp, il)?;
        layer(l, hp, il, ffn, QWEN35)
    })?;
    declare_nextn_layers(loader, hp)?;
    Ok(weights)
}

/// llama.cpp's `load_block_mtp` without `load_mtp`: the multi-token-prediction layers, a
/// gated attention block (its Q projection twice as wide: the gate) with per-head Q and K
/// norms, and qwen35's feed-forward or qwen35moe's experts and gated shared expert.
pub(super) fn declare_nextn_layers(loader: &mut Loader, hp: &HParams) -> Result<()> {
    let q_dim = u64::from(hp.head_dim_k) * u64::from(hp.n_head);
    common::declare_nextn_layers(loader, hp, 2 * q_dim, true, |layer| {
        if hp.n_expert == 0 {
            return layer.dense_ffn(hp);
        }
        let (embd, n_expert) = (u64::from(hp.n_embd), u64::from(hp.n_expert));
        let (ff_exp, ff_shexp) = (u64::from(hp.n_ff_exp), u64::from(hp.n_ff_shexp));
        layer.unused("ffn_gate_inp.weight", &[embd, n_expert], true)?;
        layer.unused("ffn_down_exps.weight", &[ff_exp, embd, n_expert], true)?;
        layer.unused("ffn_gate_exps.weight", &[embd, ff_exp, n_expert], true)?;
        layer.unused("ffn_up_exps.weight", &[embd, ff_exp, n_expert], true)?;
        layer.unused("ffn_gate_inp_shexp.weight", &[embd], true)?;
        layer.unused("ffn_gate_shexp.weight", &[embd, ff_shexp], true)?;
        layer.unused("ffn_up_shexp.weight", &[embd, ff_shexp], true)?;
        layer.unused("ffn_down_shexp.weight", &[ff_shexp, embd], true)
    })
}

/// What a delta net does differently in qwen35's files and graph and in qwen3next's.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    /// Beta and alpha in qwen3next's one `ssm_ba` (see [`BetaAlpha::Grouped`]), not
    /// apart.
    pub grouped_beta_alpha: bool,
    /// Where there are fewer key heads than value heads, value head `h` reads key head
    /// `h / (n_v / n_k)` (qwen3next's: Q and K repeated so, interleaved, before the
    /// delta rule), not `h mod n_k` (qwen35's: ggml's fused op broadcasts so).
    pub grouped_key_heads: bool,
}

pub(super) const QWEN35: Layout = Layout {
    grouped_beta_alpha: false,
    grouped_key_heads: false,
};

/// Layer `il` with its feed-forward: pre-norm, a delta net or gated attention,
/// post-attention norm.
pub(super) fn layer(l: &mut Loader, hp: &HParams, il: u32, ffn: FfnWeights, layout: Layout) -> Result<LayerWeights> {
    let n = |s: &str| format!("blk.{il}.{s}");
    let embd = u64::from(hp.n_embd);
    let mixer = match hp.recurrent[il as usize] {
        true => Mixer::DeltaNet(l.delta_net(hp, il, layout.grouped_beta_alpha)?),
        false => Mixer::Attention(l.attention_with_output_gate(hp, il)?),
    };
    Ok(LayerWeights {
        attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
        mixer,
        attn_post_norm: Some(l.norm(&n("post_attention_norm.weight"), embd)?),
        ffn_norm: None,
        ffn,
        ffn_post_norm: None,
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    b.output_after_norm(blocks(b, QWEN35, |layer, il, x| b.ffn(&layer.ffn, x, il, Glu::Silu)))
}

/// Every block, on every row: norm → delta net or gated attention → residual →
/// post-attention norm → `ffn` → residual.
pub(super) fn blocks(b: &GraphBuilder, layout: Layout, ffn: impl Fn(&LayerWeights, usize, Tensor) -> Tensor) -> Tensor {
    let g = b.graph;
    b.layers().iter().enumerate().fold(b.embed(), |x, (il, layer)| {
        let normed = b.norm(x, layer.attn_norm, "attn_norm", il);
        let mixed = match &layer.mixer {
            Mixer::DeltaNet(net) => delta_net(b, net, layout, normed, il),
            Mixer::Attention(attn) => gated_attention(b, attn, normed, il),
            Mixer::ShortConv(_) | Mixer::Mamba2(_) | Mixer::Mla(_) | Mixer::None | Mixer::Parallel { .. } => {
                unreachable!("qwen35's and qwen3next's layers are delta nets or attention (load)")
            }
        };
        let residual = g.add(mixed, x).set_name(&format!("attn_residual-{il}"));
        let post = b.norm(residual, layer.attn_post_norm, "attn_post_norm", il);
        let out = ffn(layer, il, post);
        g.add(out, residual).set_name(&format!("l_out-{il}"))
    })
}

/// llama.cpp's `build_layer_attn`: the joint Q and gate projection split by views, Q
/// and K RMS-normed per head, rotated by sections, attention, its output times the
/// gate's sigmoid, then `attn_output`.
fn gated_attention(b: &GraphBuilder, attn: &AttentionWeights, x: Tensor, il: usize) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let QkvWeights::Separate { wq, wk, wv, .. } = attn.qkv else {
        unreachable!("Loader::attention_with_output_gate loads Q, K and V apart")
    };
    let [head_dim, n_head, n_head_kv] = [hp.head_dim_k, hp.n_head, hp.n_head_kv].map(i64::from);
    let n_tokens = b.n_tokens;
    let q_full = g.mul_mat(wq, x).set_name(&format!("Qcur_full-{il}"));
    let k = g.mul_mat(wk, x);
    let v = g.mul_mat(wv, x);
    let f32_size = std::mem::size_of::<f32>();
    let (head_pair, row) = (
        2 * head_dim as usize * f32_size,
        2 * (head_dim * n_head) as usize * f32_size,
    );
    let q = g.view_3d(q_full, [head_dim, n_head, n_tokens], head_pair, row, 0);
    let q = b.norm_if(q, attn.q_norm, "Qcur_normed", il);
    let k = g.reshape_3d(k, head_dim, n_head_kv, n_tokens);
    let k = b.norm_if(k, attn.k_norm, "Kcur_normed", il);
    let gate = g.view_3d(
        q_full,
        [head_dim, n_head, n_tokens],
        head_pair,
        row,
        head_dim as usize * f32_size,
    );
    let gate = g.cont_2d(gate, head_dim * n_head, n_tokens);
    let v = g.reshape_3d(v, head_dim, n_head_kv, n_tokens);
    let (q, k) = (b.rope(q, &hp.rope), b.rope(k, &hp.rope));
    let out = b.attend(attn, il, q, k, v, hp.kq_scale());
    let gated = g.mul(out, g.sigmoid(gate)).set_name(&format!("attn_gated-{il}"));
    g.mul_mat(attn.wo, gated).set_name(&format!("attn_output-{il}"))
}

/// llama.cpp's `build_layer_attn_linear` on the normed input `x` [n_embd, n_tokens] of
/// a pass holding as many tokens of each of its sequences: `attn_qkv` gives the
/// queries, keys and values (their rows transposed behind the sequence's convolution
/// state, convolved and SiLU'd; the state keeps the last `d_conv - 1` columns),
/// `attn_gate` the output gate z, `ssm_beta` each head's write strength (its sigmoid)
/// and `ssm_alpha` its decay (`softplus(alpha + dt_bias) · a`), or qwen3next's `ssm_ba`
/// both, split by views per key head. Q and K are L2-normed per head (for qwen3next,
/// then repeated interleaved to the value heads), the delta rule runs from the
/// sequence's state ([`GraphBuilder::gated_delta_net`]); its output is RMS-normed per
/// head, gated by `silu(z)` and projected by `ssm_out`.
fn delta_net(b: &GraphBuilder, w: &DeltaNetWeights, layout: Layout, x: Tensor, il: usize) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let ssm = hp.ssm.expect("a delta net's model has its ssm");
    let [d_conv, d_inner, head_k_dim, n_k_heads, n_v_heads, channels] = [
        ssm.d_conv,
        ssm.d_inner,
        ssm.d_state,
        ssm.n_group,
        ssm.n_head,
        ssm.conv_channels(),
    ]
    .map(i64::from);
    let head_v_dim = d_inner / n_v_heads;
    let (n_seqs, n_seq_tokens) = (b.n_seqs, b.n_tokens / b.n_seqs);

    let f32_size = std::mem::size_of::<f32>();
    let (qkv_mixed, z) = match w.qkvz {
        Qkvz::Apart { qkv, gate } => {
            let qkv_mixed = g.mul_mat(qkv, x);
            let qkv_mixed = g.reshape_3d(qkv_mixed, qkv_mixed.ne()[0], n_seq_tokens, n_seqs);
            (qkv_mixed, g.mul_mat(gate, x))
        }
        Qkvz::Interleaved(ssm_in) => {
            // llama.cpp's legacy path: per key head [q, k, v, z], split by views, Q, K
            // and V made contiguous and joined.
            let values = head_v_dim * (n_v_heads / n_k_heads);
            let width = 2 * head_k_dim + 2 * values;
            let mixed = g.reshape_4d(g.mul_mat(ssm_in, x), [width, n_k_heads, n_seq_tokens, n_seqs]);
            let [_, nb1, nb2, nb3] = mixed.nb();
            let part = |len: i64, offset: i64| {
                let shape = [len, n_k_heads, n_seq_tokens, n_seqs];
                g.view_4d(mixed, shape, nb1, nb2, nb3, offset as usize * f32_size)
            };
            let z = g.cont(part(values, 2 * head_k_dim + values));
            let q = g.cont_3d(part(head_k_dim, 0), head_k_dim * n_k_heads, n_seq_tokens, n_seqs);
            let k = g.cont_3d(
                part(head_k_dim, head_k_dim),
                head_k_dim * n_k_heads,
                n_seq_tokens,
                n_seqs,
            );
            let v = g.cont_3d(
                part(values, 2 * head_k_dim),
                head_v_dim * n_v_heads,
                n_seq_tokens,
                n_seqs,
            );
            (g.concat(g.concat(q, k, 0), v, 0), z)
        }
    };
    let (beta, alpha) = match w.beta_alpha {
        BetaAlpha::Apart { beta, alpha } => {
            let beta = g.mul_mat(beta, x);
            let beta = g.sigmoid(g.reshape_4d(beta, [1, n_v_heads, n_seq_tokens, n_seqs]));
            let alpha = g.mul_mat(alpha, x);
            (beta, g.reshape_3d(alpha, n_v_heads, n_seq_tokens, n_seqs))
        }
        BetaAlpha::Grouped(ba) => {
            // Per key head, its value heads' betas then their alphas.
            let per_k = n_v_heads / n_k_heads;
            let mixed = g.reshape_4d(g.mul_mat(ba, x), [2 * per_k, n_k_heads, n_seq_tokens, n_seqs]);
            let [_, nb1, nb2, nb3] = mixed.nb();
            let shape = [per_k, n_k_heads, n_seq_tokens, n_seqs];
            let beta = g.sigmoid(g.cont(g.view_4d(mixed, shape, nb1, nb2, nb3, 0)));
            let alpha = g.view_4d(mixed, shape, nb1, nb2, nb3, per_k as usize * f32_size);
            (
                g.reshape_4d(beta, [1, n_v_heads, n_seq_tokens, n_seqs]),
                g.cont_3d(alpha, n_v_heads, n_seq_tokens, n_seqs),
            )
        }
    };
    let alpha_softplus = g.softplus(g.add(alpha, w.dt_bias));
    // -exp(A_log) · softplus(alpha + dt_bias): the log of each step's decay.
    let decay = g.mul(alpha_softplus, w.a);
    let decay = g.reshape_4d(decay, [1, n_v_heads, n_seq_tokens, n_seqs]);

    let conv_input = b.conv_window(il, g.transpose(qkv_mixed), d_conv - 1, channels);
    let conv_out = g.silu(g.ssm_conv(conv_input, w.conv));
    let token = channels as usize * f32_size;
    let heads = |head_dim: i64, n_heads: i64, offset: i64| {
        g.view_4d(
            conv_out,
            [head_dim, n_heads, n_seq_tokens, n_seqs],
            head_dim as usize * f32_size,
            token,
            token * n_seq_tokens as usize,
            offset as usize * f32_size,
        )
    };
    let key_dim = head_k_dim * n_k_heads;
    let q = l2_norm(b, heads(head_k_dim, n_k_heads, 0));
    let k = l2_norm(b, heads(head_k_dim, n_k_heads, key_dim));
    let v = heads(head_v_dim, n_v_heads, 2 * key_dim);
    let (q, k) = match layout.grouped_key_heads && n_k_heads != n_v_heads {
        false => (q, k),
        true => {
            // llama.cpp's repeat-interleave: [head, 1, n_k, ...] repeated to [head, r, n_k, ...].
            let rows = n_seq_tokens * n_seqs;
            let repeat = |t: Tensor| {
                let t = g.reshape_4d(t, [head_k_dim, 1, n_k_heads, rows]);
                let t = g.repeat_4d(t, [head_k_dim, n_v_heads / n_k_heads, n_k_heads, rows]);
                g.reshape_4d(t, [head_k_dim, n_v_heads, n_seq_tokens, n_seqs])
            };
            (repeat(q), repeat(k))
        }
    };

    let out = b.gated_delta_net(il, q, k, v, decay, beta);
    let z = g.reshape_4d(z, [head_v_dim, n_v_heads, n_seq_tokens, n_seqs]);
    let normed = b.norm(out, Some(w.norm.into()), "ssm_norm", il);
    let gated = g.mul(normed, g.silu(z));
    let flat = g.reshape_3d(gated, head_v_dim * n_v_heads, n_seq_tokens, n_seqs);
    let out = g.mul_mat(w.out, flat);
    g.reshape_2d(out, i64::from(hp.n_embd), n_seq_tokens * n_seqs)
        .set_name(&format!("linear_attn_out-{il}"))
}

/// llama.cpp's `build_gdn_l2_norm`: an RMS norm with `eps / n` scaled by `1 / sqrt(n)`,
/// over rows of `n` values.
fn l2_norm(b: &GraphBuilder, x: Tensor) -> Tensor {
    let n = x.ne()[0] as f32;
    let g = b.graph;
    g.scale(g.rms_norm(x, b.hparams().norm_eps / n), 1.0 / n.sqrt())
}
