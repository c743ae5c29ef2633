//! cohere2 (Command R7B, Command A). What differs from llama:
//! - LayerNorms without bias (before each block, and at the output).
//! - Attention and feed-forward run in parallel on the same normed input, and both
//!   are added to the block's input: `x + ffn(norm x) + attn(norm x)`.
//! - Three layers of every four attend through a sliding window; only those rotate
//!   (NORM rope, the global base: llama.cpp's graph takes no per-layer one), the
//!   fourth attends without rope.
//! - No attention output bias; the head is always the embeddings; the logits are
//!   multiplied by `logit_scale`.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "cohere2",
    models: "Command R7B, Command A",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Layer,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let window = keys.u32("attention.sliding_window")?;
    hp.swa = read_swa(keys, hp.n_layer, window, 4, hp.rope.clone())?;
    hp.logit_multiplier = Some(keys.f32("logit_scale")?).filter(|&s| s != 0.0);
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::Tied, |l, il| {
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&format!("blk.{il}.attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(l.attention_without_output_bias(hp, il, false)?),
            attn_post_norm: None,
            ffn_norm: None,
            ffn: l.gated_ffn(hp, il)?,
            ffn_post_norm: None,
        })
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let kq_scale = b.hparams().kq_scale();
    run_layers(b, b.embed(), |layer, il, x| block(b, layer, il, x, kq_scale))
}

fn block(b: &GraphBuilder, layer: &LayerWeights, il: usize, x: Tensor, kq_scale: f32) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let normed = b.norm(x, layer.attn_norm, "attn_norm", il);
    let (q, k, v) = b.qkv(layer.attn(), normed, il);
    let (q, k) = if hp.is_swa(il) {
        (b.rope(q, &hp.rope), b.rope(k, &hp.rope))
    } else {
        (q, k)
    };
    let attn = b.attention(layer.attn(), il, q, k, v, kq_scale);
    let (attn, x) = b.select_outputs_if_last(il, attn, x);
    let ffn = b.ffn(&layer.ffn, b.select_output_if_last(il, normed), il, Glu::Silu);
    g.add(g.add(ffn, x), attn).set_name(&format!("l_out-{il}"))
}
