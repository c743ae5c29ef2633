//! lfm2 (LiquidAI LFM2): a hybrid of gated short convolutions and attention. The
//! layers whose `attention.head_count_kv` is 0 are recurrent: `in_proj` gives the
//! gates B and C and the input x, a depthwise causal convolution of `shortconv.l_cache`
//! steps runs over `B · x` (its last `l_cache - 1` inputs carried between passes as
//! the sequence's state), and `out_proj` projects `C ·` its output. The others attend,
//! with Q and K RMS-normed per head and NEOX rope. Every layer's feed-forward is SwiGLU,
//! pre-normed. The output norm is stored as `token_embd_norm`. Files with sliding-window
//! attention (llama.cpp's hybrid ISWA memory), experts (lfm2moe) or ColBERT's dense
//! output layers are refused.

use super::common::{load_llama_like_with_norm, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, AttentionWeights, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType,
    ShortConvWeights, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "lfm2",
    models: "LiquidAI LFM2 (350M, 700M, 1.2B, 2.6B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let kernel = keys.u32("shortconv.l_cache")?;
    // llama.cpp asserts a kernel of more than one step; a state wider than the
    // widest tensor would overflow the sizes computed from it.
    if !(2..=64).contains(&kernel) {
        return Err(Error::Load(format!(
            "lfm2.shortconv.l_cache must be 2 to 64, got {kernel}"
        )));
    }
    hp.short_conv_kernel = Some(kernel);
    if keys.opt_u32("attention.sliding_window")?.is_some_and(|w| w > 0) {
        return Err(Error::Unsupported(
            "lfm2 with sliding-window attention (attention.sliding_window) is not one elelem runs; llama.cpp \
             runs it"
                .into(),
        ));
    }
    if !hp.recurrent.contains(&false) {
        return Err(Error::Load(
            "lfm2: every layer is recurrent (attention.head_count_kv is 0 for all)".into(),
        ));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    let kernel = u64::from(hp.short_conv_kernel.expect("read_hparams sets it"));
    // llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2: the final norm, under the embeddings' name.
    load_llama_like_with_norm(loader, hp, Head::TiedIfAbsent, "token_embd_norm.weight", |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let mixer = if hp.recurrent[il as usize] {
            Mixer::ShortConv(ShortConvWeights {
                in_proj: l.matrix(&n("shortconv.in_proj.weight"), &[embd, 3 * embd])?,
                conv: l.f32_weight(&n("shortconv.conv.weight"), &[kernel, embd])?,
                out_proj: l.matrix(&n("shortconv.out_proj.weight"), &[embd, embd])?,
            })
        } else {
            let attn = l.attention_without_output_bias(hp, il, false)?;
            Mixer::Attention(l.with_head_norms(hp, il, attn)?)
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

fn build(b: &GraphBuilder) -> Tensor {
    let g = b.graph;
    run_layers(b, b.embed(), |layer, il, x| {
        let normed = b.norm(x, layer.attn_norm, "operator_norm", il);
        let mixed = match &layer.mixer {
            Mixer::ShortConv(conv) => short_conv(b, conv, normed, il),
            Mixer::Attention(attn) => attention(b, attn, normed, il),
            Mixer::Mamba2(_) | Mixer::DeltaNet(_) | Mixer::Mla(_) | Mixer::None | Mixer::Parallel { .. } => {
                unreachable!("lfm2's layers are short convolutions or attention (load)")
            }
        };
        let (mixed, residual) = b.select_outputs_if_last(il, mixed, x);
        let ffn_in = g.add(residual, mixed).set_name(&format!("ffn_inp-{il}"));
        let ffn = b.norm(ffn_in, layer.ffn_norm, "ffn_norm", il);
        let ffn = b.ffn(&layer.ffn, ffn, il, Glu::Silu);
        g.add(ffn_in, ffn).set_name(&format!("l_out-{il}"))
    })
}

/// Q and K RMS-normed per head, NEOX rope, attention over the cache.
fn attention(b: &GraphBuilder, attn: &AttentionWeights, x: Tensor, il: usize) -> Tensor {
    let rope = &b.hparams().rope;
    let (q, k, v) = b.qkv(attn, x, il);
    let q = b.norm_if(q, attn.q_norm, "Qcur_normed", il);
    let k = b.norm_if(k, attn.k_norm, "Kcur_normed", il);
    b.attention(attn, il, b.rope(q, rope), b.rope(k, rope), v, b.hparams().kq_scale())
}

/// llama.cpp's `build_shortconv_block`: the pass's tokens as [n_embd, n_seq_tokens,
/// n_seqs] (the micro-batch holds as many of each sequence's), `B · x` transposed to a
/// row per channel, the sequence's state (its previous `l_cache - 1` inputs) put in
/// front, the new state (the last `l_cache - 1` columns) stored, the convolution, then
/// `out_proj · (C · conv)`.
fn short_conv(b: &GraphBuilder, conv: &ShortConvWeights, x: Tensor, il: usize) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let n_embd = i64::from(hp.n_embd);
    let d_conv = i64::from(hp.short_conv_kernel.expect("read_hparams sets it")) - 1;
    let (n_seqs, n_seq_tokens) = (b.n_seqs, b.n_tokens / b.n_seqs);
    let x = g.reshape_3d(x, n_embd, n_seq_tokens, n_seqs);
    let bcx = g.mul_mat(conv.in_proj, x);
    let f32_size = std::mem::size_of::<f32>();
    let chunk = |i: i64| {
        g.view_3d(
            bcx,
            [n_embd, n_seq_tokens, n_seqs],
            bcx.nb()[1],
            bcx.nb()[2],
            (i * n_embd) as usize * f32_size,
        )
    };
    let (gate_b, gate_c, input) = (chunk(0), chunk(1), chunk(2));
    let bx = g.transpose(g.mul(gate_b, input));
    let bx = b.conv_window(il, bx, d_conv, n_embd);
    let out = g.ssm_conv(bx, conv.conv);
    let y = g.mul_mat(conv.out_proj, g.mul(gate_c, out));
    g.reshape_2d(y, n_embd, n_seq_tokens * n_seqs)
        .set_name(&format!("shortconv_out-{il}"))
}
