//! nomic-bert (nomic-embed-text): bert's post-norm encoder with rotary positions
//! instead of learned ones. What differs from bert:
//! - No position rows: Q and K (views of one fused `attn_qkv`) are rotated, NEOX style.
//! - The feed-forward is SwiGLU without biases (llama.cpp reads `ffn_up.bias` and
//!   `ffn_down.bias` where present but its graph does not use them; neither do we).

use super::bert;
use super::common::run_encoder;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, EncoderInput, GraphBuilder, HParams, Kind, LayerWeights, Loader, Mixer, NormType, Weights,
};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "nomic-bert",
    models: "nomic-embed-text",
    rope_mode: RopeMode::Neox,
    read_hparams: crate::arch::bert::read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Encoder,
    norm: NormType::Layer,
};

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    let ff = u64::from(hp.n_ff);
    let input = EncoderInput {
        token_type: loader.optional_rows("token_types.weight", &[embd, u64::from(hp.n_token_types)])?,
        positions: None,
        norm: loader.input_layer_norm("token_embd_norm", embd)?,
    };
    let layers = (0..hp.n_layer)
        .map(|il| {
            let n = |s: &str| format!("blk.{il}.{s}");
            // Declared so that a file with them loads; the graph leaves them out, as llama.cpp's.
            loader.optional_vector(&n("ffn_up.bias"), ff)?;
            loader.optional_vector(&n("ffn_down.bias"), embd)?;
            Ok(LayerWeights {
                attn_norm: None,
                mixer: Mixer::Attention(loader.attention(hp, il, false)?),
                attn_post_norm: Some(loader.layer_norm(&n("attn_output_norm"), embd)?),
                ffn_norm: None,
                ffn: loader.gated_ffn(hp, il)?,
                ffn_post_norm: Some(loader.layer_norm(&n("layer_output_norm"), embd)?),
            })
        })
        .collect::<Result<_>>()?;
    Ok(Weights {
        layer_out_scales: Vec::new(),
        altup: None,
        laurel: Vec::new(),
        experts_beside_mlp: Vec::new(),
        per_layer_embd: None,
        tok_embd: loader.rows("token_embd.weight", &[embd, u64::from(hp.n_vocab)])?,
        input: Some(input),
        head: None,
        classifier: bert::classifier(loader, hp)?,
        rope_factors: Default::default(),
        layers,
    })
}

fn build(b: &GraphBuilder) -> Tensor {
    run_encoder(b, |layer, il, x| {
        let hp = b.hparams();
        let (q, k, v) = b.qkv(layer.attn(), x, il);
        let q = b.rope(q, &hp.rope);
        let k = b.rope(k, &hp.rope);
        b.attention_own_tokens(layer.attn(), il, q, k, v, hp.kq_scale())
    })
}
