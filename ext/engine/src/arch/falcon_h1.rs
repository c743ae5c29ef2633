//! falcon-h1 (TII's Falcon-H1, 0.5B to 34B): in every layer attention and a Mamba-2
//! mixer side by side on the same normed input (`Mixer::Parallel`; see
//! [`GraphBuilder::mamba2`]), their outputs added to the residual, then an RMS-normed
//! SwiGLU feed-forward. Every layer keeps both a KV cache and a recurrent state (llama.cpp's
//! layer filters for falcon-h1 take every layer for both). NEOX rope on the attention,
//! scaled by 1/sqrt(value head size); no bias on its output (llama.cpp loads
//! `attn_output.bias` and leaves it out); the Mamba-2 grouped norm `ssm_norm` only where
//! the file has it. Falcon-H1's many multipliers (µP: of the embeddings, the head, the
//! attention's and Mamba-2's projections and each of z, x, B, C and the time steps, the
//! feed-forward's gate and down projections) are in the weights: llama.cpp's converter
//! multiplies them in, and its graph has none. The feed-forward's norm is `ffn_norm`,
//! without `.weight`, as llama.cpp names it. llama.cpp's `src/models/falcon-h1.cpp`.
//! Refused: the feed-forward's biases and per-layer `rope_freqs`, which llama.cpp would
//! load.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_ssm, ArchSpec, Glu, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "falcon-h1",
    models: "Falcon-H1 (0.5B, 1.5B, 1.5B-Deep, 3B, 7B, 34B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    hp.ssm = Some(read_ssm(keys)?);
    // llama.cpp's is_recr for every layer, and its KV cache on every layer too.
    hp.recurrent = vec![true; hp.n_layer as usize];
    hp.attention_beside_state = true;
    if hp.head_dim_k != hp.head_dim_v {
        return Err(Error::Unsupported(format!(
            "falcon-h1: attention.key_length ({}) differs from value_length ({}), which elelem does not run; \
             llama.cpp does",
            hp.head_dim_k, hp.head_dim_v
        )));
    }
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let n = |s: &str| format!("blk.{il}.{s}");
        let mamba2 = l.mamba2_mixer_with_optional_norm(hp, il, false)?;
        let attention = l.attention_without_output_bias(hp, il, false)?;
        l.unused(&n("attn_output.bias"), &[embd], false)?;
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&n("attn_norm.weight"), embd)?),
            mixer: Mixer::Parallel { attention, mamba2 },
            attn_post_norm: None,
            ffn_norm: Some(l.norm(&n("ffn_norm"), embd)?),
            ffn: l.gated_ffn(hp, il)?,
            ffn_post_norm: None,
        })
    })
}

/// norm → (attention with rope + Mamba-2 mixer) → residual → norm → SwiGLU → residual.
fn build(b: &GraphBuilder) -> Tensor {
    let g = b.graph;
    let hp = b.hparams();
    let kq_scale = 1.0 / (hp.head_dim_v as f32).sqrt();
    run_layers(b, b.embed(), |layer, il, x| {
        let Mixer::Parallel {
            attention: attn,
            mamba2,
        } = &layer.mixer
        else {
            unreachable!("every falcon-h1 layer is attention beside a Mamba-2 mixer (load)")
        };
        let normed = b.norm(x, layer.attn_norm, "attn_norm", il);
        let (q, k, v) = b.qkv(attn, normed, il);
        let attn_out = b.attention(attn, il, b.rope(q, &hp.rope), b.rope(k, &hp.rope), v, kq_scale);
        let ssm_out = b.mamba2(mamba2, normed, il);
        let mixed = g.add(attn_out, ssm_out);
        let (mixed, residual) = b.select_outputs_if_last(il, mixed, x);
        let ffn_in = g.add(mixed, residual).set_name(&format!("ffn_inp-{il}"));
        let ffn = b.norm(ffn_in, layer.ffn_norm, "ffn_norm", il);
        let ffn = b.ffn(&layer.ffn, ffn, il, Glu::Silu);
        g.add(ffn, ffn_in).set_name(&format!("l_out-{il}"))
    })
}
