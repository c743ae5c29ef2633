//! mamba2 (Mamba-2: state-spaces' mamba2-130m to 2.7b, Mamba-Codestral): no attention
//! and no feed-forward; every block is an RMS norm, a Mamba-2 mixer (`ssm_*`: a causal
//! convolution, then the selective scan, gated and group-normed; see
//! [`GraphBuilder::mamba2`]) and the residual add. Each sequence keeps a convolution
//! state and a scan state per layer instead of a KV cache (llama.cpp's
//! `llama_memory_recurrent`). The head is tied when the file has no `output.weight`.
//! llama.cpp's graph is `llama_model_mamba::graph`, its layer `build_mamba2_layer`.

use super::common::{load_llama_like, run_layers, Head};
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    read_ssm, ArchSpec, FfnWeights, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "mamba2",
    models: "Mamba-2 (130M to 2.7B), Mamba-Codestral 7B",
    // llama.cpp's LLAMA_ROPE_TYPE_NONE: nothing rotates.
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    hp.ssm = Some(read_ssm(keys)?);
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    load_llama_like(loader, hp, Head::TiedIfAbsent, |l, il| {
        Ok(LayerWeights {
            attn_norm: Some(l.norm(&format!("blk.{il}.attn_norm.weight"), embd)?),
            mixer: Mixer::Mamba2(l.mamba2_mixer(hp, il, true)?),
            attn_post_norm: None,
            ffn_norm: None,
            ffn: FfnWeights::None,
            ffn_post_norm: None,
        })
    })
}

/// norm → Mamba-2 mixer → residual, in every layer; the last keeps only the output rows.
fn build(b: &GraphBuilder) -> Tensor {
    let g = b.graph;
    run_layers(b, b.embed(), |layer, il, x| {
        let normed = b.norm(x, layer.attn_norm, "attn_norm", il);
        let Mixer::Mamba2(mixer) = &layer.mixer else {
            unreachable!("every mamba2 layer is a Mamba-2 mixer (load)")
        };
        let mixed = b.mamba2(mixer, normed, il);
        let (mixed, residual) = b.select_outputs_if_last(il, mixed, x);
        g.add(mixed, residual).set_name(&format!("l_out-{il}"))
    })
}
