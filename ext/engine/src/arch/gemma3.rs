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

use super::common::{load_llama_like, run_layers, Head};
use super::gemma2;
use crate::ggml::{Rope, RopeMode, Tensor};
use crate::model::{
    read_swa, ArchSpec, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "gemma3",
    models: "Gemma 3 text models",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// Five of every six layers slide unless the file says otherwise, rotating with a base
/// of 10000 and no scaling unless it says otherwise; the logit soft-cap if set.
fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let swa_rope = Rope {
        freq_base: 10_000.0,
        freq_scale: 1.0,
        ..hp.rope.clone()
    };
    hp.swa = read_swa(keys, hp.n_layer, 0, 6, swa_rope)?;
    hp.final_logit_softcap = keys.opt_f32("final_logit_softcapping")?.filter(|&c| c != 0.0);
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let layer = gemma2::layer(l, hp, il)?;
        Ok(LayerWeights {
            mixer: Mixer::Attention(l.with_head_norms(hp, il, layer.mixer.into_attention())?),
            ..layer
        })
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    let hp = b.hparams();
    let attn_scale = gemma2::attn_scale(hp, 62);
    let x = b.embed_scaled((hp.n_embd as f32).sqrt());
    run_layers(b, x, |layer, il, x| gemma2::block(b, layer, il, x, attn_scale))
}
