//! gemma3 (Gemma 3 text models). What differs from llama:
//! - The embeddings are scaled by sqrt(n_embd), by a multiply with a filled
//!   input (llama.cpp's `inp_scale_rows`).
//! - Q and K get a per-head RMS norm before rope; Q is then scaled by the
//!   attention scale, so flash attention runs with a kq_scale of 1.
//! - Five of every six layers attend through a sliding window (their own ring
//!   of cache cells, their own rope base); the rest see the whole context.
//! - The attention and feed-forward outputs are RMS-normed again before their
//!   residual adds, and the feed-forward is GeGLU.
//! - In the last layer the output rows are selected right after the attention
//!   projection, before its post-norm.
//! - The output head is usually the embeddings (tied); the logits may be soft-capped.

use crate::arch::{load_embeddings, ArchSpec, LayerWeights, Weights};
use crate::ggml::Tensor;
use crate::hparams::{read_swa, HParams, Keys, RopeMode};
use crate::layers::{Glu, GraphBuilder};
use crate::model::Loader;
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "gemma3",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
};

/// Five of every six layers slide unless the file says otherwise; the logit soft-cap if set.
fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    hp.swa = read_swa(keys, hp.n_layer, 6, &hp.rope)?;
    hp.final_logit_softcap = keys.opt_f32("final_logit_softcapping")?.filter(|&c| c != 0.0);
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let (tok_embd, output_norm, output) = load_embeddings(loader, hp)?;
    let embd = u64::from(hp.n_embd);
    let head = u64::from(hp.head_dim_k);
    let layers = (0..hp.n_layer)
        .map(|il| {
            let n = |s: &str| format!("blk.{il}.{s}");
            Ok(LayerWeights {
                attn_q_norm: Some(loader.vector(&n("attn_q_norm.weight"), head)?),
                attn_k_norm: Some(loader.vector(&n("attn_k_norm.weight"), head)?),
                attn_post_norm: Some(loader.vector(&n("post_attention_norm.weight"), embd)?),
                ffn_post_norm: Some(loader.vector(&n("post_ffw_norm.weight"), embd)?),
                // llama.cpp's gemma3 graph adds no attention output bias.
                bo: None,
                ..loader.llama_block(hp, il, false)?
            })
        })
        .collect::<Result<_>>()?;
    Ok(Weights {
        tok_embd,
        output_norm,
        output,
        output_bias: None,
        rope_freqs: None,
        layers,
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    // Gemma 3 27B scales by its embedding width per head, the others by the head size.
    let attn_scale = if hp.n_layer == 62 {
        1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt()
    } else {
        1.0 / (hp.head_dim_k as f32).sqrt()
    };
    let mut x = b.embed_scaled((hp.n_embd as f32).sqrt());
    for (il, layer) in b.layers().iter().enumerate() {
        x = block(b, layer, il, x, attn_scale);
    }
    let logits = b.logits(x);
    match hp.final_logit_softcap {
        Some(cap) => {
            let g = b.graph;
            g.scale(g.tanh(g.scale(logits, 1.0 / cap)), cap)
        }
        None => logits,
    }
}

fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, attn_scale: f32) -> Tensor {
    let g = b.graph;
    let rope = b.hparams().layer_rope(il);
    let attn_in = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer, attn_in, il);
    let q = b.norm(q, layer.attn_q_norm, "Qcur_normed", il);
    let q = b.rope(q, rope);
    let k = b.norm(k, layer.attn_k_norm, "Kcur_normed", il);
    let k = b.rope(k, rope);
    let q = g.scale(q, attn_scale);
    let attn = b.attention(layer, il, q, k, v, 1.0);
    let (attn, residual) = b.select_outputs_if_last(il, attn, x);
    let attn = b.norm(attn, layer.attn_post_norm, "attn_post_norm", il);
    let sa_out = g.add(attn, residual).set_name(&format!("sa_out-{il}"));
    let ffn = b.norm(sa_out, layer.ffn_norm, "ffn_norm", il);
    let ffn = b.ffn_gated(layer, ffn, il, Glu::Gelu);
    let ffn = b.norm(ffn, layer.ffn_post_norm, "ffn_post_norm", il);
    g.add(ffn, sa_out).set_name(&format!("l_out-{il}"))
}
