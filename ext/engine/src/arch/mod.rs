//! One module per architecture: its extra hyper-parameters, which tensors it
//! needs, and its forward graph built from the shared pieces in [`crate::layers`],
//! gathered in its `ARCH`. Adding an architecture is one file here and one line
//! in [`REGISTRY`].

mod gemma2;
mod gemma3;
mod granite;
mod llama;
mod olmo2;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen3moe;
mod smollm3;

use crate::ggml::Tensor;
use crate::hparams::{HParams, Keys, RopeMode};
use crate::layers::GraphBuilder;
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
    /// Before attention (post-norm blocks, olmo2's, have none).
    pub attn_norm: Option<Tensor>,
    pub attn: AttentionWeights,
    /// After attention, before its residual add (gemma2, gemma3, olmo2).
    pub attn_post_norm: Option<Tensor>,
    /// Before the feed-forward.
    pub ffn_norm: Option<Tensor>,
    pub ffn: FfnWeights,
    /// After the feed-forward, before its residual add.
    pub ffn_post_norm: Option<Tensor>,
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
    pub output_norm: Tensor,
    /// The output head; `token_embd.weight` when the model ties them.
    pub output: Tensor,
    pub output_bias: Option<Tensor>,
    /// Per-pair divisors of the rotary frequencies, where the model has them.
    pub rope_factors: RopeFactors,
    pub layers: Vec<LayerWeights>,
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
    let output_norm = loader.vector("output_norm.weight", embd)?;
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
        output_norm,
        output,
        output_bias: None,
        rope_factors: RopeFactors::default(),
        layers,
    })
}

/// Runs `block` over every layer from the embeddings `x`, then the output head.
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
    b.logits(x)
}
