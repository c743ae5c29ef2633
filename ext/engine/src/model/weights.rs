//! The typed weights an architecture declares (see [`super::spec::ArchSpec`]) and its
//! graph reads: a block's norms, attention and feed-forward, the output head.

use crate::ggml::Tensor;

/// The weights of one transformer block. What every block has is required; the
/// norms an architecture may lack are options the graph applies where present.
pub struct LayerWeights {
    /// Before attention (post-norm blocks, olmo2's and bert's, have none).
    pub attn_norm: Option<Norm>,
    /// What mixes the tokens: attention, or a recurrent layer's.
    pub mixer: Mixer,
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

impl LayerWeights {
    /// The attention of a layer that attends: every layer, but in a model with
    /// recurrent layers, whose graph asks only its attention layers.
    pub fn attn(&self) -> &AttentionWeights {
        self.mixer.attention()
    }
}

/// What a layer mixes the tokens with (llama.cpp's `is_recr` tells which).
pub enum Mixer {
    Attention(AttentionWeights),
    /// LFM2's gated short convolution.
    ShortConv(ShortConvWeights),
    /// Mamba-2's selective state space (mamba2's, granitehybrid's).
    Mamba2(Mamba2Weights),
    /// A gated delta net, linear attention with a delta-rule state (qwen35's).
    DeltaNet(DeltaNetWeights),
    /// Multi-head latent attention (deepseek2's, see [`crate::model::Mla`]).
    Mla(MlaWeights),
    /// Attention and a Mamba-2 mixer side by side on the same input, their outputs
    /// added (falcon-h1's): the layer keeps a cache and a state.
    Parallel {
        attention: AttentionWeights,
        mamba2: Mamba2Weights,
    },
    /// None: the layer is its feed-forward alone, keeping neither a cache nor a state
    /// (nemotron_h's feed-forward layers, [`super::HParams::ffn_only`]).
    None,
}

impl Mixer {
    /// The attention of an attention layer (`KvShape::attends`).
    pub fn attention(&self) -> &AttentionWeights {
        match self {
            Mixer::Attention(attn) | Mixer::Parallel { attention: attn, .. } => attn,
            Mixer::ShortConv(_) | Mixer::Mamba2(_) | Mixer::DeltaNet(_) | Mixer::Mla(_) | Mixer::None => {
                unreachable!(
                    "a recurrent, latent-attention or feed-forward-only layer's graph reads no attention weights"
                )
            }
        }
    }

    /// [`Mixer::attention`], taken out of the layer.
    pub fn into_attention(self) -> AttentionWeights {
        match self {
            Mixer::Attention(attn) | Mixer::Parallel { attention: attn, .. } => attn,
            Mixer::ShortConv(_) | Mixer::Mamba2(_) | Mixer::DeltaNet(_) | Mixer::Mla(_) | Mixer::None => {
                unreachable!(
                    "a recurrent, latent-attention or feed-forward-only layer's graph reads no attention weights"
                )
            }
        }
    }
}

/// Multi-head latent attention's weights (llama.cpp's for deepseek2; the widths are
/// [`crate::model::Mla`]'s): Q from `q` (the compression `attn_q_a`, its RMS norm
/// `attn_q_a_norm` and `attn_q_b`, or one `attn_q`), [n_embd, n_head · head_dim_k] in
/// all; `kv_a` [n_embd, kv_lora_rank + n_rot] (`attn_kv_a_mqa`) the compressed K and V
/// row and the rope part of K, `kv_a_norm` [kv_lora_rank] the row's RMS norm; `k_b`
/// [head_dim_nope, kv_lora_rank, n_head] projects each head's query into the compressed
/// space, `v_b` [kv_lora_rank, head_dim_v, n_head] each head's output out of it; `wo`
/// [n_head · head_dim_v, n_embd] the output projection.
#[derive(Clone, Copy)]
pub struct MlaWeights {
    pub q: MlaQuery,
    pub kv_a: Tensor,
    pub kv_a_norm: Tensor,
    pub k_b: Tensor,
    pub v_b: Tensor,
    pub wo: Tensor,
}

/// How multi-head latent attention projects Q.
#[derive(Clone, Copy)]
pub enum MlaQuery {
    /// Through a compression: `b · rms_norm(a · x) · norm` (DeepSeek-V2, V3, Kimi K2).
    Compressed { a: Tensor, norm: Tensor, b: Tensor },
    /// One projection (DeepSeek-V2-Lite).
    Direct(Tensor),
}

/// LFM2's short convolution (llama.cpp's `shortconv`): `in_proj` [n_embd, 3 n_embd]
/// gives the gates B and C and the input x, `conv` [kernel, n_embd] is a depthwise
/// causal convolution over `B · x`, `out_proj` [n_embd, n_embd] projects `C ·` its output.
#[derive(Clone, Copy)]
pub struct ShortConvWeights {
    pub in_proj: Tensor,
    pub conv: Tensor,
    pub out_proj: Tensor,
}

/// Mamba-2's mixer (llama.cpp's `ssm_*` tensors; the widths are [`crate::model::Ssm`]'s):
/// `in_proj` [n_embd, d_in_proj] gives z, x, B, C and the time steps; `conv`
/// [d_conv, conv_channels] (plus `conv_bias`, where the file has it) is a depthwise
/// causal convolution over x, B and C; `dt_bias` [n_head] is added to the time steps;
/// `a` and `d` [1, n_head] are the decay (the file holds `-exp(A_log)`) and the skip
/// connection; `norm` [d_inner / n_group, n_group] the grouped RMS norm before
/// `out_proj` [d_inner, n_embd], where the model has it (falcon-h1's may not).
#[derive(Clone, Copy)]
pub struct Mamba2Weights {
    pub in_proj: Tensor,
    pub conv: Tensor,
    pub conv_bias: Option<Tensor>,
    pub dt_bias: Tensor,
    pub a: Tensor,
    pub d: Tensor,
    pub norm: Option<Tensor>,
    pub out_proj: Tensor,
}

/// A gated delta net's weights (llama.cpp's for qwen35 and qwen3next: `attn_qkv` and
/// `attn_gate` or `ssm_in`, `ssm_*`; the widths are its [`crate::model::Ssm`]'s, keys of `d_state`
/// in `n_group` heads and values of `d_state` in `n_head` heads): `qkvz` gives the
/// queries, keys and values that the depthwise causal convolution `conv` [d_conv,
/// 2 · keys + values] runs over, and the output gate z; `beta_alpha` each head's write
/// strength and, with `dt_bias` [n_head] and `a` [n_head] (the file holds
/// `-exp(A_log)`), its decay; `norm` [d_state] the output's RMS norm per head, `out`
/// [values, n_embd] its projection.
#[derive(Clone, Copy)]
pub struct DeltaNetWeights {
    pub qkvz: Qkvz,
    pub conv: Tensor,
    pub dt_bias: Tensor,
    pub a: Tensor,
    pub beta_alpha: BetaAlpha,
    pub norm: Tensor,
    pub out: Tensor,
}

/// The projections of a delta net's queries, keys and values (Q, K, V) and of its output
/// gate (z).
#[derive(Clone, Copy)]
pub enum Qkvz {
    /// `attn_qkv` [n_embd, 2 · keys + values] and `attn_gate` [n_embd, values].
    Apart { qkv: Tensor, gate: Tensor },
    /// `ssm_in` [n_embd, 2 · keys + 2 · values] (older qwen3next conversions): per key
    /// head, its query, its key, then the values and the gates of the value heads it
    /// serves.
    Interleaved(Tensor),
}

/// The projections of a delta net's write strengths (beta) and decays (alpha), one of
/// each per value head.
#[derive(Clone, Copy)]
pub enum BetaAlpha {
    /// `ssm_beta` and `ssm_alpha`, [n_embd, n_head] each (qwen35's).
    Apart { beta: Tensor, alpha: Tensor },
    /// `ssm_ba` [n_embd, 2 · n_head] (qwen3next's): for each key head, the betas of the
    /// value heads it serves, then their alphas.
    Grouped(Tensor),
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
    /// A logit per head that joins every soft-max of its scores and takes part of the
    /// weight, attending to no value (gpt-oss's `attn_sinks`).
    pub sinks: Option<Tensor>,
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
    /// None: the block is its mixer alone (mamba2's).
    None,
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
    /// `down(relu(up x + up_b)²) + down_b` (llama.cpp's `LLM_FFN_RELU_SQR` without a
    /// gate: nemotron_h's).
    ReluSquared {
        up: Tensor,
        up_b: Option<Tensor>,
        down: Tensor,
        down_b: Option<Tensor>,
    },
    /// `down(xielu(up x))` with the layer's xIELU parameters `[alpha_n, alpha_p, beta,
    /// eps]` (apertus).
    Xielu { up: Tensor, down: Tensor, params: [f32; 4] },
    /// A mixture of SwiGLU experts: the router [n_embd, n_expert] and the experts'
    /// stacked weights [.., .., n_expert], a bias [n_expert] added to the router's
    /// probabilities to pick the experts (not to weigh them) and a shared expert beside
    /// them, where the model has those.
    Experts {
        router: Tensor,
        gate: Tensor,
        up: Tensor,
        down: Tensor,
        selection_bias: Option<Tensor>,
        shared: Option<SharedExpert>,
        biases: Option<ExpertBiases>,
    },
}

/// Biases on the router's logits [n_expert] and on each expert's projections
/// [width, n_expert] (gpt-oss).
#[derive(Clone, Copy)]
pub struct ExpertBiases {
    pub router: Tensor,
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
}

/// An expert every token goes through besides those it is routed to: a SwiGLU
/// feed-forward, its output scaled by the sigmoid of `gate_inp · x` where the model has
/// that gate (`ffn_gate_inp_shexp`: qwen2moe's, qwen35moe's), computed as [`SharedGate`] says.
#[derive(Clone, Copy)]
pub struct SharedExpert {
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    pub gate_inp: Option<(Tensor, SharedGate)>,
}

/// How llama.cpp's graph computes the shared expert's sigmoid gate from its logit:
/// the two round differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedGate {
    /// `silu(logit) / logit` (qwen2moe's).
    SiluOverLogit,
    /// `sigmoid(logit)` (qwen35moe's).
    Sigmoid,
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
    /// Per layer, a [1] weight its output is multiplied by, where the model has one
    /// (gemma4's `layer_output_scale`); empty for the others.
    pub layer_out_scales: Vec<Option<Tensor>>,
    /// Gemma 4's and Gemma 3n's per-layer embeddings (E2B's, E4B's), where the model has them.
    pub per_layer_embd: Option<PerLayerEmbeddings>,
    /// Gemma 3n's alternating updates, where the model has them.
    pub altup: Option<AltUp>,
    /// Per layer, Gemma 3n's learned augmented residual; empty for the others.
    pub laurel: Vec<Laurel>,
    /// Per layer, Gemma 4's mixture of experts beside its MLP, where the layer has one
    /// (26B-A4B's); empty for the others.
    pub experts_beside_mlp: Vec<Option<ExpertsBesideMlp>>,
}

/// Gemma 4's mixture of experts (llama.cpp's gemma4 MoE layer), computed beside the
/// layer's MLP and added to it: `pre_norm` [n_embd] before the experts and `post_norm`
/// after them, `mlp_post_norm` after the MLP; the router [n_embd, n_expert] reads the
/// attention's output RMS-normed, scaled by 1/sqrt(n_embd) and by `router_scale`
/// [n_embd]; GELU experts, their projections optionally scaled per expert ([n_expert]).
pub struct ExpertsBesideMlp {
    pub pre_norm: Norm,
    pub post_norm: Norm,
    pub mlp_post_norm: Norm,
    pub router: Tensor,
    pub router_scale: Tensor,
    pub gate_up: ExpertGateUp,
    pub down: Tensor,
    pub down_scale: Option<Tensor>,
}

/// The gate and up projections of stacked experts.
pub enum ExpertGateUp {
    /// One [n_embd, 2 · n_ff_exp, n_expert] stack, the gate the first half of each row.
    Fused(Tensor),
    /// Two [n_embd, n_ff_exp, n_expert] stacks, each with its optional per-expert scale.
    Separate {
        gate: Tensor,
        up: Tensor,
        gate_scale: Option<Tensor>,
        up_scale: Option<Tensor>,
    },
}

/// Gemma 3n's alternating updates (llama.cpp's `altup_*`): the hidden state is kept as
/// `n_streams` streams of [n_embd, n_tokens], the layers computing on one (`active`) and
/// the others predicted from it and corrected after it. `proj` [n_embd, n_embd,
/// n_streams - 1] makes the other streams from the embeddings, `unembd_proj` (the same
/// shape) brings them back before the head.
pub struct AltUp {
    pub n_streams: i64,
    pub active: usize,
    pub proj: Tensor,
    pub unembd_proj: Tensor,
    pub layers: Vec<AltUpLayer>,
}

/// A layer's weights of [`AltUp`]: the router (`router_norm` [n_embd], `router` [n_embd,
/// n_streams]) gives each token's modalities, `predict_coef` [n_streams, n_streams²] turns
/// them into the predictions' mixing coefficients and `correct_coef` [n_streams, n_streams]
/// into the corrections'; `correct_scale` [n_embd] scales the corrected active stream
/// before the per-layer embedding.
pub struct AltUpLayer {
    pub router_norm: Tensor,
    pub router: Tensor,
    pub predict_coef: Tensor,
    pub correct_coef: Tensor,
    pub correct_scale: Tensor,
}

/// A layer's LAuReL (learned augmented residual, llama.cpp's `laurel_*`): `r · (l · x)`
/// through a rank-`laurel_rank` bottleneck (`l` [n_embd, rank], `r` [rank, n_embd]),
/// RMS-normed by `post_norm` and added to `x`.
pub struct Laurel {
    pub l: Tensor,
    pub r: Tensor,
    pub post_norm: Tensor,
}

/// Gemma 4's and Gemma 3n's per-layer embeddings (llama.cpp's `per_layer_*`): `tok_embd` [width · n_layer,
/// n_vocab] rows by token, `model_proj` [n_embd, width · n_layer] projecting the scaled
/// embeddings, `proj_norm` [width] RMS-norming each layer's part; and per layer its
/// `inp_gate` [n_embd, width], `proj` [width, n_embd] and `post_norm` [n_embd].
pub struct PerLayerEmbeddings {
    pub tok_embd: Tensor,
    pub model_proj: Tensor,
    pub proj_norm: Tensor,
    pub layers: Vec<[Tensor; 3]>,
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
