//! bert (BERT encoders: the sentence-transformers family, e.g. all-MiniLM-L6-v2, and
//! cross-encoder rerankers). What differs from the decoders:
//! - The input adds the first token type's row (every token is "sentence A") and
//!   learned absolute positions to the token embeddings, then LayerNorms them.
//! - Attention sees every token of its own sequence, earlier or later, and nothing
//!   else: there is no KV cache (llama.cpp's `llm_graph_input_attn_no_cache`).
//! - Blocks are post-norm: LayerNorm (with bias) after each residual add; the
//!   feed-forward is `down(gelu(up x + b)) + b`; every projection has a bias.
//! - There is no output head: the last block's states are pooled into embeddings,
//!   or, for a reranker, into `cls`/`cls.output` scores.

use super::common::run_encoder;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{
    ArchSpec, Classifier, EncoderInput, FfnWeights, GraphBuilder, HParams, Keys, Kind, LayerWeights, Loader, Mixer,
    NormType, Weights,
};
use crate::{Error, Result};

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "bert",
    models: "BERT encoders: sentence-transformers (all-MiniLM), cross-encoder rerankers",
    // Unused: BERT's positions are learned rows, not rotations.
    rope_mode: RopeMode::Norm,
    read_hparams,
    load,
    build,
    experts: false,
    kind: Kind::Encoder,
    norm: NormType::Layer,
};

/// The token type count (`tokenizer.ggml.token_type_count`), which llama.cpp
/// requires of BERT-like files.
pub(crate) fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    hp.n_token_types = keys
        .global_u32("tokenizer.ggml.token_type_count")?
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::Load(format!("{} model needs to define token type count", hp.arch.name)))?;
    Ok(())
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    let embd = u64::from(hp.n_embd);
    let ff = u64::from(hp.n_ff);
    let input = EncoderInput {
        token_type: loader.optional_rows("token_types.weight", &[embd, u64::from(hp.n_token_types)])?,
        positions: Some(loader.rows("position_embd.weight", &[embd, u64::from(hp.n_ctx_train)])?),
        norm: loader.input_layer_norm("token_embd_norm", embd)?,
    };
    let layers = (0..hp.n_layer)
        .map(|il| {
            let n = |s: &str| format!("blk.{il}.{s}");
            Ok(LayerWeights {
                attn_norm: None,
                mixer: Mixer::Attention(loader.attention(hp, il, false)?),
                attn_post_norm: Some(loader.layer_norm(&n("attn_output_norm"), embd)?),
                ffn_norm: None,
                ffn: FfnWeights::Sequential {
                    up: loader.matrix(&n("ffn_up.weight"), &[embd, ff])?,
                    up_b: loader.optional_vector(&n("ffn_up.bias"), ff)?,
                    down: loader.matrix(&n("ffn_down.weight"), &[ff, embd])?,
                    down_b: loader.optional_vector(&n("ffn_down.bias"), embd)?,
                },
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
        classifier: classifier(loader, hp)?,
        rope_factors: Default::default(),
        layers,
    })
}

/// A reranker's head, where the file has one: `cls` [n_embd, n_embd] and
/// `cls.output` [n_embd, n_cls_out], each with an optional bias.
pub(crate) fn classifier(loader: &mut Loader, hp: &HParams) -> Result<Classifier> {
    let embd = u64::from(hp.n_embd);
    let n_out = u64::from(hp.n_cls_out);
    let dense = match loader.optional_matrix("cls.weight", &[embd, embd])? {
        Some(w) => Some((w, loader.optional_vector("cls.bias", embd)?)),
        None => None,
    };
    let out = match loader.optional_matrix("cls.output.weight", &[embd, n_out])? {
        Some(w) => Some((w, loader.optional_vector("cls.output.bias", n_out)?)),
        None => None,
    };
    Ok(Classifier { dense, out })
}

fn build(b: &GraphBuilder) -> Tensor {
    run_encoder(b, |layer, il, x| {
        let (q, k, v) = b.qkv(layer.attn(), x, il);
        b.attention_own_tokens(layer.attn(), il, q, k, v, b.hparams().kq_scale())
    })
}
