//! ernie4_5 (ERNIE 4.5 dense, 0.3B): llama's graph (NORM rope, SwiGLU, 1/sqrt(head
//! size)) without rope factors, and without an attention output bias in the graph:
//! llama.cpp loads `attn_output.bias` where the file has one but never adds it, and
//! so neither do we. It reads `rope.dimension_sections` (PaddleOCR's) and leaves
//! them unused here too.

use super::common::{load_llama_like, Head};
use super::llama;
use crate::ggml::RopeMode;
use crate::model::{ArchSpec, FfnWeights, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "ernie4_5",
    models: "ERNIE 4.5 dense (0.3B)",
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build: llama::build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

/// Reads (and leaves unused) PaddleOCR's M-RoPE sections, as llama.cpp does.
pub(crate) fn read_hparams(keys: &Keys, _: &mut HParams) -> Result<()> {
    keys.has("rope.dimension_sections");
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        let ffn = l.gated_ffn(hp, il)?;
        layer(l, hp, il, ffn)
    })
}

/// llama's block around the feed-forward `ffn`, its `attn_output.bias` declared
/// (where present) and left out (ernie4_5-moe's too).
pub(crate) fn layer(l: &mut Loader, hp: &HParams, il: u32, ffn: FfnWeights) -> Result<LayerWeights> {
    let embd = u64::from(hp.n_embd);
    let n = |s: &str| format!("blk.{il}.{s}");
    let attn_norm = Some(l.norm(&n("attn_norm.weight"), embd)?);
    let attn = l.attention_without_output_bias(hp, il, false)?;
    l.optional_vector(&n("attn_output.bias"), embd)?;
    Ok(LayerWeights {
        attn_norm,
        mixer: Mixer::Attention(attn),
        attn_post_norm: None,
        ffn_norm: Some(l.norm(&n("ffn_norm.weight"), embd)?),
        ffn,
        ffn_post_norm: None,
    })
}
