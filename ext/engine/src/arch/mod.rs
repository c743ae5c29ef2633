//! One module per architecture: its extra hyper-parameters, which tensors it
//! needs, and its forward graph built from the shared pieces in [`crate::layers`],
//! gathered in its `ARCH`. Adding an architecture is one file here and one line
//! in [`REGISTRY`].

mod bert;
mod gemma2;
mod gemma3;
mod granite;
mod llama;
mod nomic_bert;
mod olmo2;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen3moe;
mod smollm3;

use crate::ggml::Tensor;
use crate::hparams::{HParams, Keys, RopeMode};
use crate::layers::{Glu, GraphBuilder};
use crate::model::Loader;
use crate::{Error, Result};

/// Every architecture elelem runs, by its `general.architecture` name.
const REGISTRY: &[&ArchSpec] = &[
    &llama::ARCH,
    &qwen2::ARCH,
    &qwen3::ARCH,
    &qwen3moe::ARCH,
    &gemma2::ARCH,
    &gemma3::ARCH,
    &olmo2::ARCH,
    &granite::ARCH,
    &smollm3::ARCH,
    &phi3::ARCH,
    &bert::ARCH,
    &nomic_bert::ARCH,
];

/// What makes an architecture: each module's `ARCH`.
pub struct ArchSpec {
    /// Its `general.architecture` in GGUF files, and the prefix of its keys.
    pub name: &'static str,
    pub rope_mode: RopeMode,
    /// Reads the hyper-parameters beyond the common ones into `hp` (sliding
    /// windows, soft-caps, multipliers).
    pub(crate) read_hparams: fn(&Keys, &mut HParams) -> Result<()>,
    /// Declares its weights (a missing or misshapen one is a load error).
    pub(crate) load: fn(&mut Loader, &HParams) -> Result<Weights>,
    /// Builds the forward pass and returns the logits of the output rows.
    pub(crate) build: fn(&GraphBuilder) -> Tensor,
    /// Whether its feed-forwards may be a mixture of experts (`expert_count` > 0);
    /// elsewhere such a file is refused.
    pub experts: bool,
    pub kind: Kind,
}

/// What a model's graph is, which decides its norms, its memory and its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A language model: RMS norms, a KV cache, an output head (and embeddings from
    /// its last hidden state when asked, as llama.cpp gives Qwen3-Embedding's).
    Decoder,
    /// A text encoder (BERT and kin): LayerNorms with biases, and every pass sees only
    /// its own tokens (llama.cpp gives these no KV cache), which yield embeddings only.
    Encoder,
}

/// An architecture of the [`REGISTRY`].
#[derive(Clone, Copy)]
pub struct Arch(&'static ArchSpec);

impl std::fmt::Debug for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl PartialEq for Arch {
    fn eq(&self, other: &Arch) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Arch {}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch> {
        match REGISTRY.iter().find(|spec| spec.name == name) {
            Some(spec) => Ok(Arch(spec)),
            None => {
                let names: Vec<&str> = REGISTRY.iter().map(|spec| spec.name).collect();
                Err(Error::Load(format!(
                    "unsupported architecture '{name}' (supported: {})",
                    names.join(", ")
                )))
            }
        }
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn rope_mode(self) -> RopeMode {
        self.0.rope_mode
    }

    pub fn has_experts(self) -> bool {
        self.0.experts
    }

    pub fn kind(self) -> Kind {
        self.0.kind
    }

    pub(crate) fn read_hparams(self, keys: &Keys, hp: &mut HParams) -> Result<()> {
        (self.0.read_hparams)(keys, hp)
    }

    pub(crate) fn load(self, loader: &mut Loader, hp: &HParams) -> Result<Weights> {
        (self.0.load)(loader, hp)
    }

    pub(crate) fn build(self, b: &GraphBuilder) -> Tensor {
        (self.0.build)(b)
    }
}

/// For architectures with no hyper-parameters beyond the common ones.
pub(crate) fn no_extra_hparams(_: &Keys, _: &mut HParams) -> Result<()> {
    Ok(())
}

/// The weights of one transformer block. What every block has is required; the
/// norms an architecture may lack are options the graph applies where present.
pub struct LayerWeights {
    /// Before attention (post-norm blocks, olmo2's and bert's, have none).
    pub attn_norm: Option<Norm>,
    pub attn: AttentionWeights,
    /// After attention: before its residual add (gemma2, gemma3, olmo2), or after
    /// it (bert's `attn_output_norm`).
    pub attn_post_norm: Option<Norm>,
    /// Before the feed-forward.
    pub ffn_norm: Option<Norm>,
    pub ffn: FfnWeights,
    /// After the feed-forward: before its residual add, or after it (bert's
    /// `layer_output_norm`).
    pub ffn_post_norm: Option<Norm>,
}

/// A norm's weight and, for LayerNorms, its bias. Which norm it is (RMS or
/// LayerNorm) is the architecture's [`Kind`].
#[derive(Clone, Copy)]
pub struct Norm {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl From<Tensor> for Norm {
    fn from(weight: Tensor) -> Norm {
        Norm { weight, bias: None }
    }
}

/// Self-attention's projections.
pub struct AttentionWeights {
    pub qkv: QkvWeights,
    /// RMS norms of Q and K before rope: one head wide (qwen3, gemma3) or over all
    /// the heads (olmo2).
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    pub wo: Tensor,
    pub bo: Option<Tensor>,
}

/// Q, K and V: three projections, or one fused (llama.cpp's `create_tensor_qkv`).
pub enum QkvWeights {
    Separate {
        wq: Tensor,
        wk: Tensor,
        wv: Tensor,
        bq: Option<Tensor>,
        bk: Option<Tensor>,
        bv: Option<Tensor>,
    },
    Fused {
        wqkv: Tensor,
        bqkv: Option<Tensor>,
    },
}

/// The feed-forward of a block.
pub enum FfnWeights {
    /// `down(act(gate(x)) * up(x))`.
    Gated { gate: Tensor, up: Tensor, down: Tensor },
    /// The gate and up projections in one `up` twice as wide, the gate its first half (phi3).
    GatedFused { up: Tensor, down: Tensor },
    /// `down(gelu(up(x) + up_b)) + down_b` (bert).
    Sequential {
        up: Tensor,
        up_b: Option<Tensor>,
        down: Tensor,
        down_b: Option<Tensor>,
    },
    /// A mixture of SwiGLU experts: the router [n_embd, n_expert] and the experts'
    /// stacked weights [.., .., n_expert].
    Experts {
        router: Tensor,
        gate: Tensor,
        up: Tensor,
        down: Tensor,
    },
}

pub struct Weights {
    pub tok_embd: Tensor,
    /// What an encoder adds to the token embeddings before its first block.
    pub input: Option<EncoderInput>,
    /// The language-model head: every decoder has one, encoders none.
    pub head: Option<OutputHead>,
    /// A reranker's classification head, which `rank` pooling applies.
    pub classifier: Classifier,
    /// Per-pair divisors of the rotary frequencies, where the model has them.
    pub rope_factors: RopeFactors,
    pub layers: Vec<LayerWeights>,
}

/// The final norm and the projection to the vocabulary.
pub struct OutputHead {
    pub norm: Norm,
    /// `token_embd.weight` when the model ties them.
    pub output: Tensor,
    pub bias: Option<Tensor>,
}

/// BERT's input: the first token type's row (every token is "sentence A", as in
/// llama.cpp), absolute positions where the model has them, and a LayerNorm.
pub struct EncoderInput {
    pub token_type: Option<Tensor>,
    pub positions: Option<Tensor>,
    pub norm: Norm,
}

/// `tanh(cls · x + cls_b)` then `cls_out · _ + cls_out_b`, each part where present
/// (llama.cpp's `build_pooling` for `rank`).
#[derive(Default)]
pub struct Classifier {
    pub dense: Option<(Tensor, Option<Tensor>)>,
    pub out: Option<(Tensor, Option<Tensor>)>,
}

impl Classifier {
    pub fn is_empty(&self) -> bool {
        self.dense.is_none() && self.out.is_none()
    }
}

/// F32 [rope dims / 2] tensors that divide each rotated pair's frequency: Llama 3.1's
/// `rope_freqs` (llama3 rope scaling), or LongRoPE's `rope_factors_long` and
/// `rope_factors_short` (Phi-3.5, Phi-4-mini), of which a context picks one.
#[derive(Default, Clone, Copy)]
pub struct RopeFactors {
    pub freqs: Option<Tensor>,
    pub long: Option<Tensor>,
    pub short: Option<Tensor>,
}

impl RopeFactors {
    /// The factors a context of `n_ctx_seq` cells rotates with, as llama.cpp's
    /// `get_rope_factors` picks them: `rope_freqs` if present, else LongRoPE's long
    /// factors when the context is longer than the model's original one, else the short.
    pub fn for_context(&self, n_ctx_seq: u32, n_ctx_orig: u32) -> Option<Tensor> {
        self.freqs
            .or(if n_ctx_seq > n_ctx_orig { self.long } else { self.short })
    }
}

/// Where an architecture's output head comes from.
#[derive(Clone, Copy)]
pub(crate) enum Head {
    /// `output.weight`, or the embeddings when the file has none.
    TiedIfAbsent,
    /// Always the embeddings.
    Tied,
    /// Always `output.weight`.
    Own,
}

/// The weights of a llama-like model: the embeddings, the output norm and `head`,
/// then `layer(loader, il)` for each block; no output bias and no rope factors (set
/// them after, where the architecture has them).
pub(crate) fn load_llama_like(
    loader: &mut Loader,
    hp: &HParams,
    head: Head,
    mut layer: impl FnMut(&mut Loader, u32) -> Result<LayerWeights>,
) -> Result<Weights> {
    let (embd, vocab) = (u64::from(hp.n_embd), u64::from(hp.n_vocab));
    let tok_embd = loader.rows("token_embd.weight", &[embd, vocab])?;
    let output_norm = loader.norm("output_norm.weight", embd)?;
    let output = match head {
        Head::TiedIfAbsent => loader.optional_matrix("output.weight", &[embd, vocab])?,
        Head::Tied => None,
        Head::Own => Some(loader.matrix("output.weight", &[embd, vocab])?),
    };
    let output = match output {
        Some(t) => t,
        None => loader.matrix("token_embd.weight", &[embd, vocab])?,
    };
    let layers = (0..hp.n_layer).map(|il| layer(loader, il)).collect::<Result<_>>()?;
    Ok(Weights {
        tok_embd,
        input: None,
        head: Some(OutputHead {
            norm: output_norm,
            output,
            bias: None,
        }),
        classifier: Classifier::default(),
        rope_factors: RopeFactors::default(),
        layers,
    })
}

/// An encoder's graph: its input, then post-norm blocks (the residual added, then
/// LayerNormed, after attention and after the feed-forward) around the attention
/// `attend` builds from a block's input, then the pooling.
pub(crate) fn run_encoder(b: &GraphBuilder, attend: impl Fn(&LayerWeights, usize, Tensor) -> Tensor) -> Tensor {
    let g = b.graph;
    let x = b.layers().iter().enumerate().fold(b.embed_encoder(), |x, (il, layer)| {
        let attn = attend(layer, il, x);
        let (attn, x) = b.select_outputs_if_last(il, attn, x);
        let ffn_in = b.norm(g.add(attn, x), layer.attn_post_norm, "attn_out_norm", il);
        // SiLU for a gated feed-forward (nomic-bert's); bert's sequential one is GELU.
        let ffn = b.ffn(&layer.ffn, ffn_in, il, Glu::Silu);
        b.norm(g.add(ffn, ffn_in), layer.ffn_post_norm, "layer_out_norm", il)
    });
    b.output(x)
}

/// Runs `block` over every layer from the embeddings `x`, then the output head (or
/// the pooling of embeddings, see [`GraphBuilder::output`]).
pub(crate) fn run_layers(
    b: &GraphBuilder,
    x: Tensor,
    block: impl Fn(&LayerWeights, usize, Tensor) -> Tensor,
) -> Tensor {
    let x = b
        .layers()
        .iter()
        .enumerate()
        .fold(x, |x, (il, layer)| block(layer, il, x));
    b.output(x)
}
