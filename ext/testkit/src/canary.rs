//! Seeded random-weight models written by our own GGUF writer, which llama.cpp
//! loads too, so their goldens come from the reference like the real models':
//! the tiny llama canary (vocab 512, embd 64, 5 layers, 8 heads, 4 KV heads, a
//! SentencePiece-style vocabulary), one small model per architecture's
//! [`Family`], and one per weight type. The same recipe in other [`Shape`]s gives
//! the small models the hostile-file corpus starts from. The embedding models
//! ([`embedding()`]: BERT, a BERT cross-encoder, nomic-bert, a Qwen3 with last-token
//! pooling) are kept apart, since their goldens are embeddings, not greedy ids.

use elelem_gguf::{GgufWriter, TensorType, Value};
use ggml_sys as sys;

pub const SEED: u64 = 0x005e_ede1_e1e4;

/// What an architecture's files hold beyond a llama's: everything the recipe does
/// differently for it, as data (a new architecture is a new `Family` constant).
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// `general.architecture`, and the prefix of its keys.
    pub arch: &'static str,
    /// `general.name`.
    pub name: &'static str,
    /// Q, K and V biases (qwen2).
    pub qkv_bias: bool,
    /// Q, K and V in one `attn_qkv` (phi3).
    pub fused_qkv: bool,
    /// The gate and up projections in one `ffn_up` twice as wide (phi3, glm4).
    pub fused_ffn: bool,
    pub qk_norm: QkNorm,
    pub norms: Norms,
    pub norm_type: NormType,
    /// A bias on the attention's output projection (starcoder2).
    pub out_bias: bool,
    /// `down(gelu(up x + b)) + b` in place of SwiGLU (starcoder2).
    pub sequential_ffn: bool,
    /// `down(xielu(up x))` in place of SwiGLU, with the global `xielu.*` keys, a value
    /// per layer (apertus).
    pub xielu_ffn: bool,
    /// Beside a mixture of experts, a shared expert.
    pub shared_expert: SharedExpert,
    /// A bias added to the router's probabilities to pick experts (ernie4_5-moe).
    pub selection_bias: bool,
    /// Biases on the router's logits and on every expert's projections (gpt-oss).
    pub expert_biases: bool,
    /// The experts' weight type (gpt-oss's are MXFP4).
    pub experts_type: TensorType,
    /// A sink logit per head joining each attention soft-max (gpt-oss).
    pub attn_sinks: bool,
    /// How many first layers of a mixture of experts have a dense feed-forward instead.
    pub dense_lead: u32,
    /// Every `n`-th layer (counting from one) has the experts, the others a dense
    /// feed-forward (llama4's `interleave_moe_layer_step`, which the family's keys give);
    /// 0: every layer after the dense lead.
    pub moe_every: u32,
    /// A bias on the logits (phimoe).
    pub output_bias: bool,
    /// No `output.weight`: the head is the embeddings.
    pub tied_head: bool,
    pub rope_factors: RopeFactors,
    /// Gated short convolutions in place of attention on some layers (lfm2).
    pub short_conv: Option<ShortConv>,
    /// Mamba-2 mixers in place of attention: on every layer (mamba2), or on some
    /// (granitehybrid).
    pub ssm: Option<Ssm>,
    /// Gated delta nets in place of attention on some layers (qwen35).
    pub delta_net: Option<DeltaNet>,
    /// Each layer's kind, one character a layer, repeated over the layers as
    /// Nemotron-H's `hybrid_override_pattern` gives them: `M` a Mamba-2 mixer (of
    /// `ssm`), `*` attention, `-` an ungated squared-ReLU feed-forward (`ffn_up`,
    /// `ffn_down`); each alone after its norm, marked by per-layer
    /// `attention.head_count_kv` and `feed_forward_length` (nemotron_h).
    pub layer_pattern: Option<&'static str>,
    /// On every layer, attention and the Mamba-2 mixer of `ssm` (without its grouped
    /// norm) side by side, then a SwiGLU feed-forward whose norm is `ffn_norm` without
    /// `.weight`, as llama.cpp names it (falcon-h1).
    pub ssm_beside_attention: bool,
    /// Q's projection twice as wide: each head's query, then a gate on its output (qwen35).
    pub attn_output_gate: bool,
    /// The final norm's name (`token_embd_norm` in lfm2's files).
    pub output_norm: &'static str,
    /// Multi-token-prediction layers after the others (`nextn_predict_layers`, glm4moe's):
    /// a layer with experts each, and its `nextn.*` tensors.
    pub nextn: u32,
    /// Multi-head latent attention in place of Q, K and V (deepseek2).
    pub mla: Option<Mla>,
    pub vocab: Vocab,
    /// Keys beyond the common ones, without the `<arch>.` prefix.
    pub keys: &'static [(&'static str, Key)],
}

/// LFM2's recurrent layers: every layer but each `attention_period`-th (counting from
/// one) has 0 KV heads in a per-layer `attention.head_count_kv`, and `shortconv.*`
/// weights (a convolution of `kernel` steps) in place of attention's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortConv {
    pub kernel: u32,
    pub attention_period: u32,
}

impl Family {
    /// Layer `il`'s kind in the [`Family::layer_pattern`], where the family has one.
    fn layer_kind(&self, il: u32) -> Option<u8> {
        self.layer_pattern
            .map(|pattern| pattern.as_bytes()[il as usize % pattern.len()])
    }
}

impl ShortConv {
    fn attends(self, il: u32) -> bool {
        il % self.attention_period == self.attention_period - 1
    }
}

/// Mamba-2's mixers (`ssm_*` weights and `ssm.*` keys) in place of attention, with
/// `d_inner` twice the width (as llama.cpp's converter and granitehybrid require) in
/// heads of `head_dim`. With an `attention_period`, every such layer (counting from one)
/// attends instead, 0 KV heads in a per-layer `attention.head_count_kv` marking the
/// others, and every layer has a feed-forward (granitehybrid); without, no layer attends
/// nor has a feed-forward, and the file says 0 attention heads (mamba2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ssm {
    pub d_conv: u32,
    pub d_state: u32,
    pub n_group: u32,
    pub head_dim: u32,
    pub attention_period: Option<u32>,
}

impl Ssm {
    fn attends(self, il: u32) -> bool {
        self.attention_period.is_some_and(|period| il % period == period - 1)
    }
}

/// Qwen 3.5's gated delta nets (`attn_qkv`, `attn_gate` and `ssm_*` weights, `ssm.*`
/// keys) in place of attention on every layer but each `attention_period`-th (counting
/// from one; the file's `full_attention_interval`): a convolution of `d_conv` steps over
/// the queries, keys and values, `n_k_heads` heads of queries and keys and `n_v_heads`
/// of values, each `head_dim` wide (the state's `ssm.state_size`); with
/// `grouped_beta_alpha`, the betas and alphas in one `ssm_ba` (qwen3next's), not
/// `ssm_beta` and `ssm_alpha`; with `fused_qkvz`, Q, K, V and z in one `ssm_in` (older
/// qwen3next conversions'), not `attn_qkv` and `attn_gate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaNet {
    pub d_conv: u32,
    pub head_dim: u32,
    pub n_k_heads: u32,
    pub n_v_heads: u32,
    pub attention_period: u32,
    pub grouped_beta_alpha: bool,
    pub fused_qkvz: bool,
}

impl DeltaNet {
    fn attends(self, il: u32) -> bool {
        il % self.attention_period == self.attention_period - 1
    }
}

/// Multi-head latent attention as llama.cpp's converter writes DeepSeek's (the absorbed
/// form): Q through a compression `q_lora_rank` wide (`attn_q_a`, its norm, `attn_q_b`),
/// K and V one compressed row `kv_lora_rank` wide plus K's rope part (`attn_kv_a_mqa`,
/// the row's norm), each head's query absorbed into the row's space by `attn_k_b` and
/// its output decompressed by `attn_v_b`; heads of `head_dim_nope` + `head_dim_rope`
/// for Q and K, `head_dim_v` for V. The cache's one KV head is the row and the rope part.
/// A `q_lora_rank` of 0 projects Q directly (`attn_q`: DeepSeek-V2-Lite's); the key says
/// 0 then, which a file of llama.cpp's "lite" layer counts leaves unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mla {
    pub q_lora_rank: u32,
    pub kv_lora_rank: u32,
    pub head_dim_nope: u32,
    pub head_dim_rope: u32,
    pub head_dim_v: u32,
}

/// Norms of Q and K before rope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// One weight as wide as a head, shared by the heads (qwen3, gemma3).
    PerHead,
    /// One weight over all the heads (olmo2).
    Full,
}

/// Where the blocks' RMS norms sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norms {
    /// Before attention and feed-forward (llama).
    Pre,
    /// Before, and after each before its residual add (gemma2, gemma3).
    PreAndPost,
    /// After only (olmo2).
    Post,
    /// Before, the feed-forward's named `post_attention_norm` (seed_oss).
    PreFfnNamedPostAttention,
    /// Before attention only: the feed-forward reads the same normed input (cohere2).
    Parallel,
}

/// A shared expert beside the routed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedExpert {
    None,
    /// Scaled by a sigmoid gate of its own (qwen2moe).
    Gated,
    /// Added as it is (ernie4_5-moe).
    Ungated,
    /// Added as it is, its width given as a count of experts' (`expert_shared_count`: glm4moe).
    Counted,
    /// Added as it is, as wide as the experts, no key saying so (llama4).
    Implicit,
}

/// A model's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vocab {
    /// Made up (SentencePiece-style, [`Shape::n_vocab`] tokens): needs no file.
    MadeUp,
    /// A real one, as many tokens as it has: the `tokenizer.*` keys of llama.cpp's
    /// `models/ggml-vocab-<name>.gguf` and the chat template `models/templates/<template>.jinja`,
    /// from the peer suite in `vendor/llama.cpp` (`rake peer_suite`).
    Suite { name: &'static str, template: &'static str },
}

/// What the norms are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormType {
    Rms,
    /// RMS norms with a bias added (phimoe).
    RmsWithBias,
    /// LayerNorms of a weight only (cohere2).
    Layer,
    /// LayerNorms of a weight and a bias (starcoder2).
    LayerWithBias,
}

/// Frequency-factor tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeFactors {
    None,
    /// Llama 3.1's `rope_freqs.weight`.
    Llama3,
    /// LongRoPE's `rope_factors_long.weight` and `rope_factors_short.weight` (Phi-3.5, Phi-4-mini).
    LongRope,
}

/// A key's value in a [`Family`].
#[derive(Debug, Clone, Copy)]
pub enum Key {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(&'static str),
    /// An array of unsigned integers (`rope.dimension_sections`).
    U32s(&'static [u32]),
}

impl Key {
    fn value(self) -> Value {
        match self {
            Key::U32(v) => Value::U32(v),
            Key::F32(v) => Value::F32(v),
            Key::Bool(v) => Value::Bool(v),
            Key::Str(v) => Value::String(v.to_string()),
            Key::U32s(v) => Value::Array(v.iter().map(|&n| Value::U32(n)).collect()),
        }
    }
}

pub const LLAMA: Family = Family {
    arch: "llama",
    name: "elelem tiny llama canary",
    qkv_bias: false,
    fused_qkv: false,
    fused_ffn: false,
    qk_norm: QkNorm::None,
    norms: Norms::Pre,
    norm_type: NormType::Rms,
    out_bias: false,
    sequential_ffn: false,
    xielu_ffn: false,
    shared_expert: SharedExpert::None,
    selection_bias: false,
    expert_biases: false,
    experts_type: TensorType::F32,
    attn_sinks: false,
    dense_lead: 0,
    moe_every: 0,
    output_bias: false,
    tied_head: false,
    rope_factors: RopeFactors::None,
    short_conv: None,
    ssm: None,
    delta_net: None,
    layer_pattern: None,
    ssm_beside_attention: false,
    attn_output_gate: false,
    output_norm: "output_norm",
    nextn: 0,
    mla: None,
    vocab: Vocab::MadeUp,
    keys: &[],
};
pub const LLAMA31: Family = Family {
    rope_factors: RopeFactors::Llama3,
    ..LLAMA
};
pub const QWEN2: Family = Family {
    arch: "qwen2",
    name: "elelem tiny qwen2 canary",
    qkv_bias: true,
    ..LLAMA
};
/// Qwen2-VL's language model: qwen2's, rotated by M-RoPE in sections of 2, 3 and 3
/// pairs (Qwen2-VL's 16, 24 and 24 of 64, scaled to the small shape's heads of 16).
pub const QWEN2VL: Family = Family {
    arch: "qwen2vl",
    name: "elelem tiny qwen2vl canary",
    keys: &[("rope.dimension_sections", Key::U32s(&[2, 3, 3, 0]))],
    ..QWEN2
};
pub const QWEN3: Family = Family {
    arch: "qwen3",
    name: "elelem tiny qwen3 canary",
    qk_norm: QkNorm::PerHead,
    ..LLAMA
};
/// Qwen3-VL's language model: qwen3's, rotated by interleaved M-RoPE in sections of 3, 3
/// and 2 pairs (Qwen3-VL's 24, 20 and 20 of 64, scaled to the small shape's heads of 16),
/// with 2 deepstack layers (given embeddings 3 times `n_embd` wide).
pub const QWEN3VL: Family = Family {
    arch: "qwen3vl",
    name: "elelem tiny qwen3vl canary",
    keys: &[
        ("rope.dimension_sections", Key::U32s(&[3, 3, 2, 0])),
        ("n_deepstack_layers", Key::U32(2)),
    ],
    ..QWEN3
};
/// Qwen3-VL's mixture-of-experts language model: qwen3vl's keys, qwen3moe's experts.
pub const QWEN3VLMOE: Family = Family {
    arch: "qwen3vlmoe",
    name: "elelem tiny qwen3vlmoe canary",
    ..QWEN3VL
};
/// Qwen3 as its long-context files declare it: YaRN, 4 times its original context.
pub const QWEN3_YARN: Family = Family {
    keys: &[
        ("rope.scaling.type", Key::Str("yarn")),
        ("rope.scaling.factor", Key::F32(4.0)),
        ("rope.scaling.original_context_length", Key::U32(512)),
    ],
    ..QWEN3
};
/// Qwen3 as Qwen3-Embedding's files declare it: last-token pooling (its tokenizer
/// keys are set by [`Embedder::writer`]), and the head tied to the embeddings.
pub const QWEN3_EMBED: Family = Family {
    name: "elelem tiny qwen3 embedding canary",
    tied_head: true,
    keys: &[("pooling_type", Key::U32(POOLING_LAST))],
    ..QWEN3
};
pub const QWEN3MOE: Family = Family {
    arch: "qwen3moe",
    name: "elelem tiny qwen3moe canary",
    ..QWEN3
};
pub const OLMO2: Family = Family {
    arch: "olmo2",
    name: "elelem tiny olmo2 canary",
    qk_norm: QkNorm::Full,
    norms: Norms::Post,
    ..LLAMA
};
/// A window of 4 on every other layer, and an attention soft-cap low enough to bite
/// (without it the goldens leave llama.cpp's ids).
pub const GEMMA2: Family = Family {
    arch: "gemma2",
    name: "elelem tiny gemma2 canary",
    norms: Norms::PreAndPost,
    tied_head: true,
    keys: &[
        ("attention.sliding_window", Key::U32(4)),
        ("attn_logit_softcapping", Key::F32(0.5)),
        ("final_logit_softcapping", Key::F32(30.0)),
    ],
    ..LLAMA
};
pub const GEMMA3: Family = Family {
    arch: "gemma3",
    name: "elelem tiny gemma3 canary",
    qk_norm: QkNorm::PerHead,
    norms: Norms::PreAndPost,
    keys: &[
        ("attention.sliding_window", Key::U32(4)),
        ("final_logit_softcapping", Key::F32(30.0)),
    ],
    ..LLAMA
};
/// Gemma 3 as its vision models are: a sliding window (32) wider than an image's tokens
/// (16 from [`crate::mmproj::Shape::GEMMA3`]), written by [`crate::mmproj::pairs`] with the
/// image framing tokens in its vocabulary.
pub const GEMMA3_VISION: Family = Family {
    name: "elelem tiny gemma3 vision",
    keys: &[
        ("attention.sliding_window", Key::U32(32)),
        ("final_logit_softcapping", Key::F32(30.0)),
    ],
    ..GEMMA3
};
/// Gemma 4's dense layout (its 31B's), written by [`gemma4_writer`]: sliding layers of
/// 16-wide heads, full-attention layers (every third, and the last) of 32-wide heads and
/// half the KV heads, whose V is K (no `attn_v`), proportional rope through `rope_freqs`.
pub const GEMMA4: Family = Family {
    arch: "gemma4",
    name: "elelem tiny gemma4 canary",
    qk_norm: QkNorm::PerHead,
    norms: Norms::PreAndPost,
    tied_head: true,
    ..LLAMA
};

/// Gemma 4's small layout (E2B's, E4B's) in [`GEMMA4`]'s shape: per-layer embeddings 8
/// wide, and the last 3 layers attending over earlier layers' caches, their
/// feed-forwards twice as wide (E2B's double-wide MLP).
pub const GEMMA4_E: Family = Family {
    name: "elelem tiny gemma4 per-layer canary",
    keys: &[
        ("embedding_length_per_layer_input", Key::U32(8)),
        ("attention.shared_kv_layers", Key::U32(3)),
    ],
    ..GEMMA4
};

/// Gemma 3n's layout (E2B's, E4B's), written by [`gemma3n_writer`]: AltUp's 4 streams,
/// LAuReL of rank 64, per-layer embeddings 256 wide, sparse gates on the first 10
/// layers, and past 20 layers the rest sharing the caches of layers 18 and 19: the
/// widths and counts llama.cpp fixes for gemma3n.
pub const GEMMA3N: Family = Family {
    arch: "gemma3n",
    name: "elelem tiny gemma3n canary",
    qk_norm: QkNorm::PerHead,
    norms: Norms::PreAndPost,
    tied_head: true,
    ..LLAMA
};

/// Multipliers of the sizes Granite 3 uses for its width.
pub const GRANITE: Family = Family {
    arch: "granite",
    name: "elelem tiny granite canary",
    keys: &[
        ("logit_scale", Key::F32(4.0)),
        ("embedding_scale", Key::F32(6.0)),
        ("residual_scale", Key::F32(0.5)),
        ("attention.scale", Key::F32(0.125)),
    ],
    ..LLAMA
};
/// Its fourth and eighth layers have no rope (the default period).
pub const SMOLLM3: Family = Family {
    arch: "smollm3",
    name: "elelem tiny smollm3 canary",
    ..LLAMA
};
/// Not named after its architecture: llama.cpp gives the vocabulary of a model whose
/// name says "phi3" Phi-3's token attributes, which need tokens this vocabulary lacks.
pub const PHI3: Family = Family {
    arch: "phi3",
    name: "elelem tiny canary, Phi 3 shaped",
    fused_qkv: true,
    fused_ffn: true,
    ..LLAMA
};
/// Phi-3 as Phi-3.5 and Phi-4-mini ship: LongRoPE over an original context of 4096,
/// so that a context of 4096 (the goldens') rotates with the short factors.
pub const PHI3_LONGROPE: Family = Family {
    rope_factors: RopeFactors::LongRope,
    keys: &[
        ("rope.scaling.type", Key::Str("longrope")),
        ("rope.scaling.attn_factor", Key::F32(1.19)),
        ("rope.scaling.original_context_length", Key::U32(4096)),
    ],
    ..PHI3
};
/// The same with an original context of 64, so the goldens' context takes the long factors.
pub const PHI3_LONGROPE_LONG: Family = Family {
    keys: &[
        ("rope.scaling.type", Key::Str("longrope")),
        ("rope.scaling.attn_factor", Key::F32(1.19)),
        ("rope.scaling.original_context_length", Key::U32(64)),
    ],
    ..PHI3_LONGROPE
};
/// GLM-4-0414's layout: Q, K and V biases, post-norms, the feed-forward's gate and up
/// fused, and rope over half of each head.
pub const GLM4: Family = Family {
    arch: "glm4",
    name: "elelem tiny glm4 canary",
    qkv_bias: true,
    fused_ffn: true,
    norms: Norms::PreAndPost,
    keys: &[("rope.dimension_count", Key::U32(8))],
    ..LLAMA
};
/// EXAONE 4.0's layout: post-norms only, per-head Q/K norms, Llama 3.1's rope factors.
pub const EXAONE4: Family = Family {
    arch: "exaone4",
    name: "elelem tiny exaone4 canary",
    qk_norm: QkNorm::PerHead,
    norms: Norms::Post,
    rope_factors: RopeFactors::Llama3,
    ..LLAMA
};
/// EXAONE 4.0 32B's: 64 layers, which llama.cpp takes for sliding windows (here of 4)
/// on three layers of four, the fourth without rope.
pub const EXAONE4_SWA: Family = Family {
    keys: &[("attention.sliding_window", Key::U32(4))],
    ..EXAONE4
};
/// ERNIE 4.5's dense layout: llama's (what differs is in its graph).
pub const ERNIE4_5: Family = Family {
    arch: "ernie4_5",
    name: "elelem tiny ernie4_5 canary",
    ..LLAMA
};
/// Seed-OSS's layout: Q, K and V biases, its feed-forward's norm named `post_attention_norm`.
pub const SEED_OSS: Family = Family {
    arch: "seed_oss",
    name: "elelem tiny seed_oss canary",
    qkv_bias: true,
    norms: Norms::PreFfnNamedPostAttention,
    ..LLAMA
};
/// Hunyuan's dense layout: per-head Q/K norms (applied after rope), NTK-aware rope alpha.
pub const HUNYUAN_DENSE: Family = Family {
    arch: "hunyuan-dense",
    name: "elelem tiny hunyuan-dense canary",
    qk_norm: QkNorm::PerHead,
    keys: &[("rope.scaling.alpha", Key::F32(1000.0))],
    ..LLAMA
};
/// StarCoder2's layout: LayerNorms with biases, biases on every projection, a GELU
/// feed-forward.
pub const STARCODER2: Family = Family {
    arch: "starcoder2",
    name: "elelem tiny starcoder2 canary",
    qkv_bias: true,
    norm_type: NormType::LayerWithBias,
    out_bias: true,
    sequential_ffn: true,
    ..LLAMA
};
/// Command R7B's layout: one LayerNorm without bias before attention and feed-forward
/// in parallel, a window of 4 on three layers of four, the head tied, the logits scaled.
pub const COHERE2: Family = Family {
    arch: "cohere2",
    name: "elelem tiny cohere2 canary",
    norms: Norms::Parallel,
    norm_type: NormType::Layer,
    tied_head: true,
    keys: &[
        ("attention.sliding_window", Key::U32(4)),
        ("logit_scale", Key::F32(0.25)),
    ],
    ..LLAMA
};
/// OLMoE's layout: Q and K normed over their whole width, as many KV heads as heads.
pub const OLMOE: Family = Family {
    arch: "olmoe",
    name: "elelem tiny olmoe canary",
    qk_norm: QkNorm::Full,
    ..LLAMA
};
/// Qwen1.5-MoE's layout: qwen2's attention, a gated shared expert beside the experts.
pub const QWEN2MOE: Family = Family {
    arch: "qwen2moe",
    name: "elelem tiny qwen2moe canary",
    qkv_bias: true,
    shared_expert: SharedExpert::Gated,
    ..LLAMA
};
/// ERNIE 4.5 MoE's layout: a dense first layer, then experts picked with a selection
/// bias, and a shared expert without a gate.
pub const ERNIE4_5_MOE: Family = Family {
    arch: "ernie4_5-moe",
    name: "elelem tiny ernie4_5-moe canary",
    shared_expert: SharedExpert::Ungated,
    selection_bias: true,
    dense_lead: 1,
    keys: &[
        ("leading_dense_block_count", Key::U32(1)),
        ("interleave_moe_layer_step", Key::U32(1)),
    ],
    ..LLAMA
};
/// Apertus's layout: per-head Q/K norms, a gateless xIELU feed-forward, Llama 3.1's rope factors.
pub const APERTUS: Family = Family {
    arch: "apertus",
    name: "elelem tiny apertus canary",
    qk_norm: QkNorm::PerHead,
    xielu_ffn: true,
    rope_factors: RopeFactors::Llama3,
    ..LLAMA
};
/// Ministral 3's keys: YaRN (4 times an original context of 64) with its betas and log
/// multiplier, and the attention temperature, which grows at positions 64, 192, ...
pub const MISTRAL3: Family = Family {
    arch: "mistral3",
    name: "elelem tiny mistral3 canary",
    keys: &[
        ("rope.scaling.type", Key::Str("yarn")),
        ("rope.scaling.factor", Key::F32(4.0)),
        ("rope.scaling.original_context_length", Key::U32(64)),
        ("rope.scaling.yarn_beta_fast", Key::F32(16.0)),
        ("rope.scaling.yarn_beta_slow", Key::F32(2.0)),
        ("rope.scaling.yarn_log_multiplier", Key::F32(1.0)),
        ("attention.temperature_scale", Key::F32(0.5)),
    ],
    ..LLAMA
};
/// Phi-3.5-MoE's layout: RMS norms with biases, biases on Q, K, V, the attention
/// output and the logits, LongRoPE.
/// Every other layer recurrent (the first, so that the micro shape's two layers have
/// both kinds), with LFM2's convolution of 3 steps; the attention layers norm Q and K
/// per head.
pub const LFM2: Family = Family {
    arch: "lfm2",
    name: "elelem tiny lfm2 canary",
    qk_norm: QkNorm::PerHead,
    short_conv: Some(ShortConv {
        kernel: 3,
        attention_period: 2,
    }),
    output_norm: "token_embd_norm",
    ..LLAMA
};
/// Mamba-2's layout: a Mamba-2 mixer on every layer (a convolution of 4 steps, states
/// 16 wide, 2 groups of heads 16 wide), no attention and no feed-forward, the head tied
/// as in state-spaces' checkpoints.
pub const MAMBA2: Family = Family {
    arch: "mamba2",
    name: "elelem tiny mamba2 canary",
    tied_head: true,
    ssm: Some(Ssm {
        d_conv: 4,
        d_state: 16,
        n_group: 2,
        head_dim: 16,
        attention_period: None,
    }),
    ..LLAMA
};
/// Granite 4.0-H's dense layout: Mamba-2 mixers on every other layer (the first, so
/// that the micro shape's two layers have both kinds; Granite 4.0-H attends on fewer),
/// attention without rope (`rope.scaling.finetuned` false: Granite 4.0-H's NoPE) on the
/// others, a SwiGLU feed-forward on every layer, and Granite's four multipliers.
pub const GRANITE_HYBRID: Family = Family {
    arch: "granitehybrid",
    name: "elelem tiny granitehybrid canary",
    ssm: Some(Ssm {
        d_conv: 4,
        d_state: 16,
        n_group: 2,
        head_dim: 16,
        attention_period: Some(2),
    }),
    keys: &[
        ("logit_scale", Key::F32(4.0)),
        ("embedding_scale", Key::F32(6.0)),
        ("residual_scale", Key::F32(0.5)),
        ("attention.scale", Key::F32(0.125)),
        ("rope.scaling.finetuned", Key::Bool(false)),
    ],
    ..LLAMA
};
/// Nemotron-H's dense layout (Nemotron Nano 2's): layers of one kind each, by the
/// pattern `M-M*M-` (Mamba-2 mixers, squared-ReLU feed-forwards, one attention layer
/// without rope), no feed-forward norms, the Mamba-2 heads and states of granitehybrid's
/// canary; `attention.layer_norm_epsilon` beside the RMS one, which llama.cpp prefers.
/// Llama 3's real vocabulary (`llama-bpe`) with Nemotron Nano 2's chat template.
pub const NEMOTRON_H: Family = Family {
    arch: "nemotron_h",
    name: "elelem tiny nemotron_h canary",
    ssm: Some(Ssm {
        d_conv: 4,
        d_state: 16,
        n_group: 2,
        head_dim: 16,
        attention_period: None,
    }),
    layer_pattern: Some("M-M*M-"),
    vocab: Vocab::Suite {
        name: "llama-bpe",
        template: "NVIDIA-Nemotron-Nano-v2",
    },
    keys: &[("attention.layer_norm_epsilon", Key::F32(1e-3))],
    ..LLAMA
};
/// Falcon-H1's layout: attention (NEOX rope) and a Mamba-2 mixer without its grouped
/// norm side by side on every layer, then a SwiGLU feed-forward; the Mamba-2 heads and
/// states of granitehybrid's canary. Llama 3's real vocabulary (`llama-bpe`) with Llama
/// 3.1's chat template (the suite has no Falcon-H1 template).
pub const FALCON_H1: Family = Family {
    arch: "falcon-h1",
    name: "elelem tiny falcon-h1 canary",
    ssm: Some(Ssm {
        d_conv: 4,
        d_state: 16,
        n_group: 2,
        head_dim: 16,
        attention_period: None,
    }),
    ssm_beside_attention: true,
    vocab: Vocab::Suite {
        name: "llama-bpe",
        template: "meta-llama-Llama-3.1-8B-Instruct",
    },
    ..LLAMA
};
/// Qwen 3.5's dense layout: gated delta nets on every layer but every other one (the
/// first, so that the micro shape's two layers have both kinds; Qwen 3.5 attends on every
/// fourth), with a convolution of 4 steps and 2 heads of queries and keys for 4 of
/// values, 16 wide; attention with an output gate, Q and K normed per head and
/// interleaved multi-dimensional rope over half of each head in sections of 2, 1 and 1
/// pairs; the feed-forward's norm named `post_attention_norm`; a multi-token-prediction
/// layer at the end. Qwen 3.5's real vocabulary (its `qwen35` pre-tokenizer) and chat
/// template.
pub const QWEN35: Family = Family {
    arch: "qwen35",
    name: "elelem tiny qwen35 canary",
    qk_norm: QkNorm::PerHead,
    norms: Norms::PreFfnNamedPostAttention,
    delta_net: Some(DeltaNet {
        d_conv: 4,
        head_dim: 16,
        n_k_heads: 2,
        n_v_heads: 4,
        attention_period: 2,
        grouped_beta_alpha: false,
        fused_qkvz: false,
    }),
    attn_output_gate: true,
    nextn: 1,
    vocab: Vocab::Suite {
        name: "qwen35",
        template: "Qwen3.5-4B",
    },
    keys: &[
        ("rope.dimension_count", Key::U32(8)),
        ("rope.dimension_sections", Key::U32s(&[2, 1, 1, 0])),
    ],
    ..LLAMA
};
/// Qwen3-Next as older conversions wrote it: a delta net's Q, K, V and z in one `ssm_in`.
pub const QWEN3NEXT_SSM_IN: Family = Family {
    name: "elelem tiny qwen3next canary, ssm_in",
    delta_net: Some(DeltaNet {
        d_conv: 4,
        head_dim: 16,
        n_k_heads: 2,
        n_v_heads: 4,
        attention_period: 2,
        grouped_beta_alpha: true,
        fused_qkvz: true,
    }),
    ..QWEN3NEXT
};
/// Llama 4's layout: every other layer with 8 experts, 1 per token (as Scout), picked
/// by their logits and weighing their inputs, beside an ungated shared expert; NoPE on
/// every fourth layer; chunked attention on three of four (chunks of 8,192 positions,
/// beyond the goldens' contexts); Llama 3's rope factors.
pub const LLAMA4: Family = Family {
    arch: "llama4",
    name: "elelem tiny llama4 canary",
    shared_expert: SharedExpert::Implicit,
    moe_every: 2,
    keys: &[("interleave_moe_layer_step", Key::U32(2))],
    ..LLAMA31
};
/// Qwen 3.5's mixture-of-experts layout: qwen35's, with experts and a shared expert
/// scaled by its sigmoid gate.
pub const QWEN35MOE: Family = Family {
    arch: "qwen35moe",
    name: "elelem tiny qwen35moe canary",
    shared_expert: SharedExpert::Gated,
    ..QWEN35
};
/// Qwen3-Next's layout: qwen35moe's, with NEOX rope over a quarter of each head (no
/// sections), the delta nets' betas and alphas in one `ssm_ba`, Qwen's earlier
/// vocabulary (the `qwen2` pre-tokenizer) and Qwen3's chat template.
pub const QWEN3NEXT: Family = Family {
    arch: "qwen3next",
    name: "elelem tiny qwen3next canary",
    delta_net: Some(DeltaNet {
        d_conv: 4,
        head_dim: 16,
        n_k_heads: 2,
        n_v_heads: 4,
        attention_period: 2,
        grouped_beta_alpha: true,
        fused_qkvz: false,
    }),
    vocab: Vocab::Suite {
        name: "qwen2",
        template: "Qwen-Qwen3-0.6B",
    },
    keys: &[("rope.dimension_count", Key::U32(4))],
    ..QWEN35MOE
};
pub const PHIMOE: Family = Family {
    arch: "phimoe",
    name: "elelem tiny canary, Phi 3.5 MoE shaped",
    qkv_bias: true,
    norm_type: NormType::RmsWithBias,
    out_bias: true,
    output_bias: true,
    rope_factors: RopeFactors::LongRope,
    keys: &[
        ("rope.scaling.type", Key::Str("longrope")),
        ("rope.scaling.attn_factor", Key::F32(1.19)),
        ("rope.scaling.original_context_length", Key::U32(64)),
    ],
    ..LLAMA
};

/// gpt-oss's layout: Q, K, V and output biases, attention sinks, the feed-forward's
/// norm named `post_attention_norm`, MXFP4 experts with biases everywhere; a window of
/// 4 on every other layer (those rotating with a base of their own), YaRN.
pub const GPT_OSS: Family = Family {
    arch: "gpt-oss",
    name: "elelem tiny gpt-oss canary",
    qkv_bias: true,
    out_bias: true,
    attn_sinks: true,
    norms: Norms::PreFfnNamedPostAttention,
    expert_biases: true,
    experts_type: TensorType::MXFP4,
    keys: &[
        ("attention.sliding_window", Key::U32(4)),
        ("rope.freq_base_swa", Key::F32(5000.0)),
        ("rope.scaling.type", Key::Str("yarn")),
        ("rope.scaling.factor", Key::F32(4.0)),
        ("rope.scaling.original_context_length", Key::U32(64)),
    ],
    ..LLAMA
};

/// GLM-4.5's layout: Q, K and V biases, per-head Q/K norms, the feed-forward's norm
/// named `post_attention_norm`, rope over half of each head; a dense first layer, then
/// experts picked by their sigmoids plus a selection bias, weighted by the sigmoids
/// renormalized and scaled, beside an ungated shared expert as wide as one; a
/// multi-token-prediction layer at the end. Llama 3's vocabulary (GLM-4.5's splits words
/// with the same expression) and GLM-4.6's chat template.
pub const GLM4MOE: Family = Family {
    arch: "glm4moe",
    name: "elelem tiny glm4moe canary",
    qkv_bias: true,
    qk_norm: QkNorm::PerHead,
    norms: Norms::PreFfnNamedPostAttention,
    shared_expert: SharedExpert::Counted,
    selection_bias: true,
    dense_lead: 1,
    nextn: 1,
    vocab: Vocab::Suite {
        name: "llama-bpe",
        template: "GLM-4.6",
    },
    keys: &[
        ("rope.dimension_count", Key::U32(8)),
        ("leading_dense_block_count", Key::U32(1)),
        ("expert_gating_func", Key::U32(2)),
        ("expert_weights_norm", Key::Bool(true)),
        ("expert_weights_scale", Key::F32(2.5)),
    ],
    ..LLAMA
};

/// DeepSeek-V3's layout (Kimi K2's too): latent attention with Q compressed, NORM rope
/// over each head's last 8 dimensions, YaRN with V3's `mscale_all_dim` 1 (the file's
/// log multiplier 0.1); a dense first layer, then experts picked by their sigmoids plus a
/// selection bias within the better of two groups, weighted by the sigmoids renormalized
/// and scaled, beside an ungated shared expert as wide as one. DeepSeek-LLM's vocabulary (DeepSeek-V2's) and
/// DeepSeek-V3.1's chat template.
pub const DEEPSEEK2: Family = Family {
    arch: "deepseek2",
    name: "elelem tiny deepseek2 canary",
    shared_expert: SharedExpert::Counted,
    selection_bias: true,
    dense_lead: 1,
    mla: Some(Mla {
        q_lora_rank: 48,
        kv_lora_rank: 64,
        head_dim_nope: 16,
        head_dim_rope: 8,
        head_dim_v: 16,
    }),
    vocab: Vocab::Suite {
        name: "deepseek-llm",
        template: "deepseek-ai-DeepSeek-V3.1",
    },
    keys: &[
        ("leading_dense_block_count", Key::U32(1)),
        ("expert_gating_func", Key::U32(2)),
        ("expert_weights_norm", Key::Bool(true)),
        ("expert_weights_scale", Key::F32(2.5)),
        ("rope.scaling.type", Key::Str("yarn")),
        ("rope.scaling.factor", Key::F32(4.0)),
        ("rope.scaling.original_context_length", Key::U32(512)),
        ("rope.scaling.yarn_log_multiplier", Key::F32(0.1)),
        ("expert_group_count", Key::U32(2)),
        ("expert_group_used_count", Key::U32(1)),
    ],
    ..LLAMA
};
/// DeepSeek-V2-Lite's layout: Q projected directly (`q_lora_rank` 0, which llama.cpp does
/// not read from a file of 27 layers: its "lite" ones), experts weighed by their soft-max
/// without renormalizing (no gating function said: DeepSeek-V2's default) and no selection
/// bias, YaRN with V2's `mscale_all_dim` 0.707.
pub const DEEPSEEK2_LITE: Family = Family {
    name: "elelem tiny deepseek2-lite canary",
    selection_bias: false,
    mla: Some(Mla {
        q_lora_rank: 0,
        kv_lora_rank: 64,
        head_dim_nope: 16,
        head_dim_rope: 8,
        head_dim_v: 16,
    }),
    keys: &[
        ("leading_dense_block_count", Key::U32(1)),
        ("expert_weights_scale", Key::F32(1.0)),
        ("rope.scaling.type", Key::Str("yarn")),
        ("rope.scaling.factor", Key::F32(4.0)),
        ("rope.scaling.original_context_length", Key::U32(512)),
        ("rope.scaling.yarn_log_multiplier", Key::F32(0.0707)),
    ],
    ..DEEPSEEK2
};

/// A model the recipe can write: a [`Family`] in some size and weight types.
#[derive(Debug, Clone)]
pub struct Shape {
    pub family: Family,
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_layer: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_ff: u64,
    /// The attention and feed-forward weights (quantized by ggml when not F32).
    pub matrix_type: TensorType,
    /// The token embeddings and the output head.
    pub embd_type: TensorType,
    /// A mixture of `n_expert` experts, `n_expert_used` per token, instead of one
    /// feed-forward (0: none); each expert is `n_ff` wide.
    pub n_expert: u32,
    pub n_expert_used: u32,
}

pub const CANARY: Shape = Shape {
    family: LLAMA,
    n_vocab: 512,
    n_embd: 64,
    n_layer: 5,
    n_head: 8,
    n_head_kv: 4,
    n_ff: 512,
    matrix_type: TensorType::F32,
    embd_type: TensorType::F32,
    n_expert: 0,
    n_expert_used: 0,
};

/// Llama 3.1's shape in small: grouped-query attention (4 query heads a KV head),
/// 16-wide heads, and `rope_freqs`.
pub const LLAMA3: Shape = Shape {
    family: LLAMA31,
    n_vocab: 512,
    n_embd: 128,
    n_layer: 4,
    n_head: 8,
    n_head_kv: 2,
    n_ff: 384,
    matrix_type: TensorType::F32,
    embd_type: TensorType::F32,
    n_expert: 0,
    n_expert_used: 0,
};

/// A family in Llama 3's small shape.
const fn small(family: Family) -> Shape {
    Shape { family, ..LLAMA3 }
}

/// The small random-weight models whose goldens come from the reference, by golden
/// name: one per architecture's shape, and one per weight type the CPU backend can
/// multiply (a llama whose matrices are all of that type).
pub fn synthetic() -> Vec<(String, Shape)> {
    let by_arch = [
        ("tiny-llama-canary", CANARY),
        ("tiny-llama3", LLAMA3),
        // Qwen3's matrices in Q8_0 and its embeddings in F16.
        (
            "tiny-qwen3",
            Shape {
                matrix_type: TensorType::Q8_0,
                embd_type: TensorType::F16,
                ..small(QWEN3_YARN)
            },
        ),
        // 8 experts of width 64, 2 per token.
        (
            "tiny-qwen3moe",
            Shape {
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                ..small(QWEN3MOE)
            },
        ),
        ("tiny-qwen2vl", small(QWEN2VL)),
        ("tiny-qwen3vl", small(QWEN3VL)),
        // tiny-qwen3moe's experts.
        (
            "tiny-qwen3vlmoe",
            Shape {
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                ..small(QWEN3VLMOE)
            },
        ),
        ("tiny-olmo2", small(OLMO2)),
        ("tiny-gemma2", small(GEMMA2)),
        (
            "tiny-gemma4",
            Shape {
                n_layer: 6,
                n_head_kv: 4,
                ..small(GEMMA4)
            },
        ),
        // 26B-A4B's layers: 8 experts beside each MLP, 2 per token, both 64 wide.
        (
            "tiny-gemma4-moe",
            Shape {
                n_ff: 64,
                n_layer: 6,
                n_head_kv: 4,
                n_expert: 8,
                n_expert_used: 2,
                ..small(GEMMA4)
            },
        ),
        (
            "tiny-gemma4-e",
            Shape {
                n_layer: 6,
                n_head_kv: 4,
                ..small(GEMMA4_E)
            },
        ),
        // 22 layers: the last 2 share the caches of layers 18 and 19.
        (
            "tiny-gemma3n",
            Shape {
                n_layer: 22,
                n_embd: 64,
                n_head: 4,
                n_head_kv: 2,
                n_ff: 192,
                ..small(GEMMA3N)
            },
        ),
        ("tiny-granite", small(GRANITE)),
        (
            "tiny-smollm3",
            Shape {
                n_layer: 8,
                n_embd: 64,
                n_head: 4,
                n_head_kv: 1,
                ..small(SMOLLM3)
            },
        ),
        ("tiny-phi3", small(PHI3_LONGROPE)),
        ("tiny-phi3-long", small(PHI3_LONGROPE_LONG)),
        ("tiny-glm4", small(GLM4)),
        ("tiny-exaone4", small(EXAONE4)),
        (
            "tiny-exaone4-swa",
            Shape {
                n_layer: 64,
                n_embd: 64,
                n_head: 4,
                n_ff: 128,
                ..small(EXAONE4_SWA)
            },
        ),
        ("tiny-ernie4_5", small(ERNIE4_5)),
        ("tiny-seed_oss", small(SEED_OSS)),
        ("tiny-hunyuan-dense", small(HUNYUAN_DENSE)),
        ("tiny-starcoder2", small(STARCODER2)),
        ("tiny-cohere2", small(COHERE2)),
        // 8 experts of width 64, 2 per token; 8 KV heads, as its K norm needs.
        (
            "tiny-olmoe",
            Shape {
                n_head_kv: 8,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                ..small(OLMOE)
            },
        ),
        ("tiny-apertus", small(APERTUS)),
        ("tiny-mistral3", small(MISTRAL3)),
        (
            "tiny-ernie4_5-moe",
            Shape {
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                ..small(ERNIE4_5_MOE)
            },
        ),
        (
            "tiny-phimoe",
            Shape {
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                ..small(PHIMOE)
            },
        ),
        (
            "tiny-qwen2moe",
            Shape {
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                ..small(QWEN2MOE)
            },
        ),
        // Layers 1, 3 and 5 of 7 attend; the last layer is recurrent.
        (
            "tiny-lfm2",
            Shape {
                n_layer: 7,
                ..small(LFM2)
            },
        ),
        // 8 experts of width 64, 2 per token, in MXFP4.
        (
            "tiny-gpt-oss",
            Shape {
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                ..small(GPT_OSS)
            },
        ),
        // 8 experts of width 64, 2 per token; 64 wide in 4 heads, the embeddings and the
        // head of its 128,256 tokens in Q8_0.
        (
            "tiny-glm4moe",
            Shape {
                n_embd: 64,
                n_head: 4,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                embd_type: TensorType::Q8_0,
                ..small(GLM4MOE)
            },
        ),
        // 8 experts of width 64, 2 per token; 64 wide in 4 heads of latent attention (one KV
        // head: the compressed row), the embeddings and the head of its 102,400 tokens in Q8_0.
        (
            "tiny-deepseek2",
            Shape {
                n_embd: 64,
                n_head: 4,
                n_head_kv: 1,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                embd_type: TensorType::Q8_0,
                ..small(DEEPSEEK2)
            },
        ),
        // tiny-deepseek2's shape in 27 layers, as DeepSeek-V2-Lite has (llama.cpp's "lite").
        (
            "tiny-deepseek2-lite",
            Shape {
                n_layer: 27,
                n_embd: 64,
                n_head: 4,
                n_head_kv: 1,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                embd_type: TensorType::Q8_0,
                ..small(DEEPSEEK2_LITE)
            },
        ),
        // 4 layers, 16 heads of Mamba-2 in 2 groups.
        ("tiny-mamba2", small(MAMBA2)),
        // Layers 1 and 3 of 5 attend, in 4 heads of 16 (2 KV heads); the last layer is a
        // delta net. 64 wide, the embeddings and the head of its 151,936 tokens in Q8_0.
        (
            "tiny-qwen35",
            Shape {
                n_layer: 5,
                n_embd: 64,
                n_head: 4,
                embd_type: TensorType::Q8_0,
                ..small(QWEN35)
            },
        ),
        // qwen35's layers, with 8 experts of width 64, 2 per token, and a shared expert.
        (
            "tiny-qwen35moe",
            Shape {
                n_layer: 5,
                n_embd: 64,
                n_head: 4,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                embd_type: TensorType::Q8_0,
                ..small(QWEN35MOE)
            },
        ),
        // qwen35moe's shape: layers 1 and 3 of 5 attend, 8 experts of width 64, 2 per
        // token, and a shared expert.
        (
            "tiny-qwen3next",
            Shape {
                n_layer: 5,
                n_embd: 64,
                n_head: 4,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                embd_type: TensorType::Q8_0,
                ..small(QWEN3NEXT)
            },
        ),
        // tiny-qwen3next's shape, its delta nets' projections in one ssm_in.
        (
            "tiny-qwen3next-ssm-in",
            Shape {
                n_layer: 5,
                n_embd: 64,
                n_head: 4,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 2,
                embd_type: TensorType::Q8_0,
                ..small(QWEN3NEXT_SSM_IN)
            },
        ),
        // Layers 2 and 4 of 5 with 8 experts of width 64, 1 per token; layer 4 without rope.
        (
            "tiny-llama4",
            Shape {
                n_layer: 5,
                n_ff: 64,
                n_expert: 8,
                n_expert_used: 1,
                ..small(LLAMA4)
            },
        ),
        // Layers 1 and 3 of 5 attend; the last layer is a Mamba-2 mixer.
        (
            "tiny-granitehybrid",
            Shape {
                n_layer: 5,
                ..small(GRANITE_HYBRID)
            },
        ),
        // Attention beside Mamba-2 on each of 4 layers; 64 wide, the embeddings and the
        // head of its 128,256 tokens in Q8_0.
        (
            "tiny-falcon-h1",
            Shape {
                n_embd: 64,
                n_head: 4,
                embd_type: TensorType::Q8_0,
                ..small(FALCON_H1)
            },
        ),
        // Mamba-2 on layers 0, 2 and 4 of 6, attention on 3, feed-forwards alone on 1 and
        // 5; 64 wide, the embeddings and the head of its 128,256 tokens in Q8_0.
        (
            "tiny-nemotron_h",
            Shape {
                n_layer: 6,
                n_embd: 64,
                n_head: 4,
                embd_type: TensorType::Q8_0,
                ..small(NEMOTRON_H)
            },
        ),
    ];
    let by_type = WEIGHT_TYPES.iter().map(|&id| {
        let ty = TensorType::from_id(id).expect("a ggml type");
        let shape = Shape {
            matrix_type: ty,
            ..WEIGHTS
        };
        (format!("tiny-weights-{}", ty.name().to_lowercase()), shape)
    });
    by_arch
        .into_iter()
        .map(|(name, shape)| (name.to_string(), shape))
        .chain(by_type)
        .collect()
}

/// The synthetic model of that golden name.
pub fn shape(name: &str) -> Option<Shape> {
    synthetic().into_iter().find(|(n, _)| n == name).map(|(_, shape)| shape)
}

/// A language model of `family` in Qwen2.5-0.5B's shape (24 layers 896 wide, 14 heads, 2 KV
/// heads, a feed-forward 4864 wide, 151,936 tokens), in Q8_0: the bench's projector pairs'.
pub const fn qwen25_05b_q8_0(family: Family) -> Shape {
    Shape {
        family,
        n_vocab: 151_936,
        n_embd: 896,
        n_layer: 24,
        n_head: 14,
        n_head_kv: 2,
        n_ff: 4864,
        matrix_type: TensorType::Q8_0,
        embd_type: TensorType::Q8_0,
        n_expert: 0,
        n_expert_used: 0,
    }
}

/// Random-weight models in the sizes of models people run, for `rake bench`'s rows of a
/// hybrid and a mixture of experts (speed and memory beside llama.cpp; no golden): the
/// matrices (experts too) in Q4_K and the embeddings in Q6_K, as a Q4_K_M file has them.
pub fn bench_models() -> Vec<(String, Shape)> {
    let sized = |family: Family, n_vocab: u64, n_layer: u32, n_head_kv: u32, n_ff: u64| Shape {
        family,
        n_vocab,
        n_embd: 1024,
        n_layer,
        n_head: 16,
        n_head_kv,
        n_ff,
        matrix_type: TensorType::Q4_K,
        embd_type: TensorType::Q6_K,
        n_expert: 0,
        n_expert_used: 0,
    };
    vec![
        // LFM2-350M: 16 layers of width 1024, short convolutions of 3 steps on all but every
        // third (5 attend, LFM2-350M 6), 8 KV heads, a feed-forward 4608 wide, 65,536 tokens.
        (
            "bench-lfm2-350m".to_string(),
            sized(
                Family {
                    name: "elelem bench lfm2 (LFM2-350M's shape)",
                    short_conv: Some(ShortConv {
                        kernel: 3,
                        attention_period: 3,
                    }),
                    ..LFM2
                },
                65_536,
                16,
                8,
                4608,
            ),
        ),
        // A Qwen3-MoE of 0.9B weights, 0.3B used per token (Qwen3-30B-A3B's ratios at a
        // 1024 width): 16 layers, 4 KV heads, 32 experts 512 wide, 8 per token, 151,936 tokens.
        (
            "bench-qwen3moe-0.9b-a0.3b".to_string(),
            Shape {
                n_expert: 32,
                n_expert_used: 8,
                ..sized(
                    Family {
                        name: "elelem bench qwen3moe (0.9B, 0.3B per token)",
                        experts_type: TensorType::Q4_K,
                        ..QWEN3MOE
                    },
                    151_936,
                    16,
                    4,
                    512,
                )
            },
        ),
    ]
}

/// The ggml ids of the weight types with a model each: every type the CPU backend has
/// a dot product for, but F32 (the canary's) and the Q8_K/Q8_1 activation types.
const WEIGHT_TYPES: &[u32] = &[
    1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 16, 17, 22, 18, 21, 19, 29, 20, 23, 34, 35, 39,
];

/// The shape of the weight-type models: rows of 256, so that every block size fits.
const WEIGHTS: Shape = Shape {
    family: LLAMA,
    n_vocab: 512,
    n_embd: 256,
    n_layer: 2,
    n_head: 4,
    n_head_kv: 2,
    n_ff: 512,
    matrix_type: TensorType::F32,
    embd_type: TensorType::F32,
    n_expert: 0,
    n_expert_used: 0,
};

/// SplitMix64: tiny, seedable, and the same everywhere.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Weights scaled like a trained network's, 1/sqrt(fan_in), so activations stay O(1).
    pub fn matrix(&mut self, fan_in: u64, fan_out: u64) -> Vec<f32> {
        let scale = 1.0 / (fan_in as f32).sqrt();
        (0..fan_in * fan_out).map(|_| self.next_f32() * scale).collect()
    }

    pub fn around_one(&mut self, n: u64) -> Vec<f32> {
        (0..n).map(|_| 1.0 + 0.1 * self.next_f32()).collect()
    }

    pub fn small(&mut self, n: u64) -> Vec<f32> {
        (0..n).map(|_| 0.1 * self.next_f32()).collect()
    }
}

/// A seeded model of `shape`, ready to write or to alter first.
pub fn writer(shape: &Shape) -> GgufWriter {
    if shape.family.arch == "gemma4" {
        return gemma4_writer(shape);
    }
    if shape.family.arch == "gemma3n" {
        return gemma3n_writer(shape);
    }
    let &Shape {
        family,
        n_vocab,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        n_ff,
        ..
    } = shape;
    let arch = family.arch;
    let eps_key = match family.norm_type {
        NormType::Rms | NormType::RmsWithBias => "attention.layer_norm_rms_epsilon",
        NormType::Layer | NormType::LayerWithBias => "attention.layer_norm_epsilon",
    };
    let mut rng = Rng(SEED);
    let mut w = GgufWriter::new();
    let s = |v: &str| Value::String(v.to_string());
    let key = |k: &str| format!("{arch}.{k}");
    // Without attention (mamba2), 0 heads and no feed-forward, as llama.cpp's converter
    // writes them, and nothing of rope.
    let attention_free = family.ssm.is_some_and(|ssm| ssm.attention_period.is_none())
        && family.layer_pattern.is_none()
        && !family.ssm_beside_attention;
    w.set("general.architecture", s(arch))
        .set("general.name", s(family.name))
        .set("general.file_type", Value::U32(0))
        .set(&key("context_length"), Value::U32(2048))
        .set(&key("embedding_length"), Value::U32(n_embd as u32))
        .set(&key("block_count"), Value::U32(n_layer + family.nextn));
    if attention_free {
        w.set(&key("feed_forward_length"), Value::U32(0))
            .set(&key("attention.head_count"), Value::U32(0));
    } else {
        let n_ff = match family.layer_pattern {
            Some(_) => Value::Array(
                (0..n_layer)
                    .map(|il| {
                        Value::U32(if family.layer_kind(il) == Some(b'-') {
                            n_ff as u32
                        } else {
                            0
                        })
                    })
                    .collect(),
            ),
            None => Value::U32(n_ff as u32),
        };
        w.set(&key("feed_forward_length"), n_ff)
            .set(&key("attention.head_count"), Value::U32(n_head))
            .set(
                &key("attention.head_count_kv"),
                head_count_kv(family, n_layer, n_head_kv),
            )
            .set(&key("rope.dimension_count"), Value::U32(n_embd as u32 / n_head))
            .set(&key("rope.freq_base"), Value::F32(10000.0));
    }
    w.set(&key(eps_key), Value::F32(1e-5));
    if let Some(mla) = family.mla {
        // The cache's one head: the compressed row, then K's rope part; V the row.
        w.set(
            &key("attention.key_length"),
            Value::U32(mla.kv_lora_rank + mla.head_dim_rope),
        )
        .set(&key("attention.value_length"), Value::U32(mla.kv_lora_rank))
        .set(
            &key("attention.key_length_mla"),
            Value::U32(mla.head_dim_nope + mla.head_dim_rope),
        )
        .set(&key("attention.value_length_mla"), Value::U32(mla.head_dim_v))
        .set(&key("attention.q_lora_rank"), Value::U32(mla.q_lora_rank))
        .set(&key("attention.kv_lora_rank"), Value::U32(mla.kv_lora_rank))
        .set(&key("rope.dimension_count"), Value::U32(mla.head_dim_rope));
    }
    for &(name, value) in family.keys {
        w.set(&key(name), value.value());
    }
    if let Some(conv) = family.short_conv {
        w.set(&key("shortconv.l_cache"), Value::U32(conv.kernel));
    }
    if let Some(ssm) = family.ssm {
        let d_inner = 2 * n_embd as u32;
        w.set(&key("ssm.conv_kernel"), Value::U32(ssm.d_conv))
            .set(&key("ssm.inner_size"), Value::U32(d_inner))
            .set(&key("ssm.state_size"), Value::U32(ssm.d_state))
            .set(&key("ssm.time_step_rank"), Value::U32(d_inner / ssm.head_dim))
            .set(&key("ssm.group_count"), Value::U32(ssm.n_group));
    }
    if let Some(net) = family.delta_net {
        w.set(&key("ssm.conv_kernel"), Value::U32(net.d_conv))
            .set(&key("ssm.inner_size"), Value::U32(net.head_dim * net.n_v_heads))
            .set(&key("ssm.state_size"), Value::U32(net.head_dim))
            .set(&key("ssm.time_step_rank"), Value::U32(net.n_v_heads))
            .set(&key("ssm.group_count"), Value::U32(net.n_k_heads))
            .set(&key("full_attention_interval"), Value::U32(net.attention_period));
    }
    if shape.n_expert > 0 {
        w.set(&key("expert_count"), Value::U32(shape.n_expert))
            .set(&key("expert_used_count"), Value::U32(shape.n_expert_used))
            .set(&key("expert_feed_forward_length"), Value::U32(n_ff as u32));
        match family.shared_expert {
            SharedExpert::None | SharedExpert::Implicit => {}
            SharedExpert::Counted => {
                w.set(&key("expert_shared_count"), Value::U32(1));
            }
            SharedExpert::Gated | SharedExpert::Ungated => {
                w.set(&key("expert_shared_feed_forward_length"), Value::U32(n_ff as u32));
            }
        }
    }
    if family.nextn > 0 {
        w.set(&key("nextn_predict_layers"), Value::U32(family.nextn));
    }
    if family.xielu_ffn {
        // Apertus's initial values, varied by layer so that each layer's reach the graph.
        let per_layer =
            |base: f32, step: f32| Value::Array((0..n_layer).map(|il| Value::F32(base + step * il as f32)).collect());
        w.set("xielu.alpha_n", per_layer(0.8, 0.1))
            .set("xielu.alpha_p", per_layer(0.8, -0.1))
            .set("xielu.beta", per_layer(0.5, 0.0))
            .set("xielu.eps", per_layer(-1e-6, 0.0));
    }
    let n_vocab = match family.vocab {
        Vocab::MadeUp => {
            set_vocab(&mut w, n_vocab);
            n_vocab
        }
        Vocab::Suite { name, template } => set_suite_vocab(&mut w, name, template),
    };

    let head = n_embd / u64::from(n_head);
    let kv_dim = head * u64::from(n_head_kv);
    let (pre_norms, post_norms) = match family.norms {
        Norms::Pre | Norms::PreFfnNamedPostAttention | Norms::Parallel => (true, false),
        Norms::PreAndPost => (true, true),
        Norms::Post => (false, true),
    };
    add_matrix(&mut w, &mut rng, "token_embd.weight", shape.embd_type, n_embd, n_vocab);
    for il in 0..n_layer + family.nextn {
        let n = |t: &str| format!("blk.{il}.{t}");
        let ty = shape.matrix_type;
        if pre_norms {
            add_norm(&mut w, &mut rng, &n("attn_norm"), family.norm_type, n_embd);
        }
        let kind = family.layer_kind(il);
        if let Some(ssm) = family.ssm.filter(|_| family.ssm_beside_attention) {
            add_mamba2_mixer(&mut w, &mut rng, il, ssm, ty, n_embd);
            w.remove_tensor(&n("ssm_norm.weight"));
        }
        if let Some(ssm) = family
            .ssm
            .filter(|ssm| !family.ssm_beside_attention && !ssm.attends(il) && kind.is_none_or(|k| k == b'M'))
        {
            add_mamba2_mixer(&mut w, &mut rng, il, ssm, ty, n_embd);
        } else if kind == Some(b'-') {
            // A feed-forward alone: no mixer.
        } else if let Some(net) = family.delta_net.filter(|net| il < n_layer && !net.attends(il)) {
            add_delta_net(&mut w, &mut rng, il, net, ty, n_embd);
        } else if let Some(conv) = family.short_conv.filter(|c| !c.attends(il)) {
            add_matrix(&mut w, &mut rng, &n("shortconv.in_proj.weight"), ty, n_embd, 3 * n_embd);
            let kernel = u64::from(conv.kernel);
            w.add_f32(
                &n("shortconv.conv.weight"),
                &[kernel, n_embd],
                &rng.matrix(kernel, n_embd),
            );
            add_matrix(&mut w, &mut rng, &n("shortconv.out_proj.weight"), ty, n_embd, n_embd);
        } else if let Some(mla) = family.mla {
            add_mla(&mut w, &mut rng, il, mla, ty, n_embd, u64::from(n_head));
        } else {
            if family.fused_qkv {
                add_matrix(&mut w, &mut rng, &n("attn_qkv.weight"), ty, n_embd, n_embd + 2 * kv_dim);
            } else {
                let q_width = if family.attn_output_gate { 2 * n_embd } else { n_embd };
                add_matrix(&mut w, &mut rng, &n("attn_q.weight"), ty, n_embd, q_width);
                add_matrix(&mut w, &mut rng, &n("attn_k.weight"), ty, n_embd, kv_dim);
                add_matrix(&mut w, &mut rng, &n("attn_v.weight"), ty, n_embd, kv_dim);
            }
            if family.qkv_bias {
                w.add_f32(&n("attn_q.bias"), &[n_embd], &rng.small(n_embd));
                w.add_f32(&n("attn_k.bias"), &[kv_dim], &rng.small(kv_dim));
                w.add_f32(&n("attn_v.bias"), &[kv_dim], &rng.small(kv_dim));
            }
            add_matrix(&mut w, &mut rng, &n("attn_output.weight"), ty, n_embd, n_embd);
            if family.out_bias {
                w.add_f32(&n("attn_output.bias"), &[n_embd], &rng.small(n_embd));
            }
            if family.attn_sinks {
                let head_count = u64::from(n_head);
                w.add_f32(&n("attn_sinks.weight"), &[head_count], &rng.around_one(head_count));
            }
            let qk_norm_widths = match family.qk_norm {
                QkNorm::None => None,
                QkNorm::PerHead => Some((head, head)),
                QkNorm::Full => Some((n_embd, kv_dim)),
            };
            if let Some((q_width, k_width)) = qk_norm_widths {
                w.add_f32(&n("attn_q_norm.weight"), &[q_width], &rng.around_one(q_width));
                w.add_f32(&n("attn_k_norm.weight"), &[k_width], &rng.around_one(k_width));
            }
        }
        if post_norms {
            w.add_f32(&n("post_attention_norm.weight"), &[n_embd], &rng.around_one(n_embd));
            w.add_f32(&n("post_ffw_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        }
        if attention_free || kind.is_some() {
            // No feed-forward's norm: no feed-forward, or one after the layer's only norm.
        } else if family.ssm_beside_attention {
            w.add_f32(&n("ffn_norm"), &[n_embd], &rng.around_one(n_embd));
        } else if pre_norms && family.norms != Norms::Parallel {
            let name = match family.norms {
                Norms::PreFfnNamedPostAttention => "post_attention_norm",
                _ => "ffn_norm",
            };
            add_norm(&mut w, &mut rng, &n(name), family.norm_type, n_embd);
        }
        if attention_free || kind.is_some_and(|k| k != b'-') {
            // No feed-forward.
        } else if kind.is_some() {
            add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
        } else if shape.n_expert > 0
            && il >= family.dense_lead
            && (family.moe_every == 0 || (il + 1) % family.moe_every == 0)
        {
            let n_expert = u64::from(shape.n_expert);
            add_matrix(
                &mut w,
                &mut rng,
                &n("ffn_gate_inp.weight"),
                TensorType::F32,
                n_embd,
                n_expert,
            );
            if family.expert_biases {
                w.add_f32(&n("ffn_gate_inp.bias"), &[n_expert], &rng.small(n_expert));
            }
            for (name, fan_in, fan_out) in [("gate", n_embd, n_ff), ("up", n_embd, n_ff), ("down", n_ff, n_embd)] {
                let experts = n(&format!("ffn_{name}_exps"));
                add_weights(
                    &mut w,
                    &mut rng,
                    &format!("{experts}.weight"),
                    family.experts_type,
                    &[fan_in, fan_out, n_expert],
                );
                if family.expert_biases {
                    w.add_f32(
                        &format!("{experts}.bias"),
                        &[fan_out, n_expert],
                        &rng.small(fan_out * n_expert),
                    );
                }
            }
            if family.selection_bias {
                w.add_f32(&n("exp_probs_b.bias"), &[n_expert], &rng.small(n_expert));
            }
            if family.shared_expert == SharedExpert::Gated {
                w.add_f32(&n("ffn_gate_inp_shexp.weight"), &[n_embd], &rng.matrix(n_embd, 1));
            }
            if family.shared_expert != SharedExpert::None {
                add_matrix(&mut w, &mut rng, &n("ffn_gate_shexp.weight"), ty, n_embd, n_ff);
                add_matrix(&mut w, &mut rng, &n("ffn_up_shexp.weight"), ty, n_embd, n_ff);
                add_matrix(&mut w, &mut rng, &n("ffn_down_shexp.weight"), ty, n_ff, n_embd);
            }
        } else if family.xielu_ffn {
            add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
        } else if family.sequential_ffn {
            add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, n_ff);
            w.add_f32(&n("ffn_up.bias"), &[n_ff], &rng.small(n_ff));
            add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
            w.add_f32(&n("ffn_down.bias"), &[n_embd], &rng.small(n_embd));
        } else if family.fused_ffn {
            add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, 2 * n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
        } else {
            add_matrix(&mut w, &mut rng, &n("ffn_gate.weight"), ty, n_embd, n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
        }
        if il >= n_layer {
            // Multi-token prediction's own: the hidden state and the next token's
            // embedding, normed, concatenated and projected; and its head's norm.
            add_matrix(&mut w, &mut rng, &n("nextn.eh_proj.weight"), ty, 2 * n_embd, n_embd);
            for norm in ["enorm", "hnorm", "shared_head_norm"] {
                w.add_f32(&n(&format!("nextn.{norm}.weight")), &[n_embd], &rng.around_one(n_embd));
            }
        }
    }
    let pairs = head / 2;
    // Llama 3.1's factors run from 1 (high frequencies) to 8 (the lowest); these span
    // that range over the pairs, so every pair is scaled differently. LongRoPE's short
    // factors stay near 1; its long ones differ from them on every pair, so that the
    // goldens tell which were used from the first positions on.
    let ramp = |low: f32, high: f32| -> Vec<f32> {
        (0..pairs)
            .map(|i| low + (high - low) * i as f32 / (pairs - 1) as f32)
            .collect()
    };
    match family.rope_factors {
        RopeFactors::None => {}
        RopeFactors::Llama3 => {
            w.add_f32("rope_freqs.weight", &[pairs], &ramp(1.0, 8.0));
        }
        RopeFactors::LongRope => {
            w.add_f32("rope_factors_long.weight", &[pairs], &ramp(2.0, 16.0));
            w.add_f32("rope_factors_short.weight", &[pairs], &ramp(1.0, 1.5));
        }
    }
    add_norm(&mut w, &mut rng, family.output_norm, family.norm_type, n_embd);
    if !family.tied_head {
        add_matrix(&mut w, &mut rng, "output.weight", shape.embd_type, n_embd, n_vocab);
    }
    if family.output_bias {
        w.add_f32("output.bias", &[n_vocab], &rng.small(n_vocab));
    }
    w
}

/// Layer `il`'s experts beside its MLP, as Gemma 4 26B-A4B's: a router with its scale,
/// the norms around the two, and the experts, their gate and up projections stacked
/// together on even layers (`ffn_gate_up_exps`, as converted files have them) and apart
/// on odd ones, each scaled per expert on layer 1; the down projections scaled per expert.
fn gemma4_experts(w: &mut GgufWriter, rng: &mut Rng, shape: &Shape, il: u32) {
    let n = |t: &str| format!("blk.{il}.{t}");
    let (n_embd, n_expert, ff, ty) = (shape.n_embd, u64::from(shape.n_expert), shape.n_ff, shape.matrix_type);
    add_matrix(w, rng, &n("ffn_gate_inp.weight"), ty, n_embd, n_expert);
    let ty = shape.family.experts_type;
    w.add_f32(&n("ffn_gate_inp.scale"), &[n_embd], &rng.around_one(n_embd));
    for norm in ["pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"] {
        w.add_f32(&n(&format!("{norm}.weight")), &[n_embd], &rng.around_one(n_embd));
    }
    if il.is_multiple_of(2) {
        add_weights(w, rng, &n("ffn_gate_up_exps.weight"), ty, &[n_embd, 2 * ff, n_expert]);
    } else {
        for part in ["gate", "up"] {
            add_weights(
                w,
                rng,
                &n(&format!("ffn_{part}_exps.weight")),
                ty,
                &[n_embd, ff, n_expert],
            );
            if il == 1 {
                w.add_f32(
                    &n(&format!("ffn_{part}_exps.scale")),
                    &[n_expert],
                    &rng.around_one(n_expert),
                );
            }
        }
    }
    add_weights(w, rng, &n("ffn_down_exps.weight"), ty, &[ff, n_embd, n_expert]);
    w.add_f32(&n("ffn_down_exps.scale"), &[n_expert], &rng.around_one(n_expert));
}

/// [`GEMMA4`]'s model: every third layer and the last attend to the whole context with heads twice
/// as wide, half the KV heads, V = K and `rope_freqs` (rotating the first half of its
/// pairs, the rest held still as Gemma 4's proportional rope holds them); the others
/// slide over a window of 4 with their own rope base and dimensions. Each layer's output
/// is scaled (`layer_output_scale`) but the first's.
fn gemma4_writer(shape: &Shape) -> GgufWriter {
    let &Shape {
        family,
        n_vocab,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        n_ff,
        ..
    } = shape;
    let (swa_head, full_head, swa_kv, full_kv) = (16u64, 32u64, n_head_kv, (n_head_kv / 2).max(1));
    // The last layer attends to the whole context whatever the count.
    let sliding = |il: u32| il % 3 != 2 && il + 1 < n_layer;
    let family_key = |name: &str| {
        family
            .keys
            .iter()
            .find(|(k, _)| *k == name)
            .map_or(0, |(_, v)| match v {
                Key::U32(n) => u64::from(*n),
                _ => 0,
            })
    };
    let (per_layer, shared) = (
        family_key("embedding_length_per_layer_input"),
        family_key("attention.shared_kv_layers"),
    );
    // Two layers keep their caches at least (a micro shape's two: no sharing).
    let shared = shared.min(u64::from(n_layer).saturating_sub(2));
    let has_kv = |il: u32| u64::from(il) + shared < u64::from(n_layer);
    let ff = |il: u32| if has_kv(il) { n_ff } else { 2 * n_ff };
    let mut rng = Rng(SEED);
    let mut w = GgufWriter::new();
    let s = |v: &str| Value::String(v.to_string());
    let key = |k: &str| format!("gemma4.{k}");
    w.set("general.architecture", s("gemma4"))
        .set("general.name", s(family.name))
        .set("general.file_type", Value::U32(0))
        .set(&key("context_length"), Value::U32(2048))
        .set(&key("embedding_length"), Value::U32(n_embd as u32))
        .set(&key("block_count"), Value::U32(n_layer))
        .set(
            &key("feed_forward_length"),
            match shared {
                0 => Value::U32(n_ff as u32),
                _ => Value::Array((0..n_layer).map(|il| Value::U32(ff(il) as u32)).collect()),
            },
        )
        .set(&key("embedding_length_per_layer_input"), Value::U32(per_layer as u32))
        .set(&key("attention.head_count"), Value::U32(n_head))
        .set(
            &key("attention.head_count_kv"),
            Value::Array(
                (0..n_layer)
                    .map(|il| Value::U32(if sliding(il) { swa_kv } else { full_kv }))
                    .collect(),
            ),
        )
        .set(&key("attention.key_length"), Value::U32(full_head as u32))
        .set(&key("attention.value_length"), Value::U32(full_head as u32))
        .set(&key("attention.key_length_swa"), Value::U32(swa_head as u32))
        .set(&key("attention.value_length_swa"), Value::U32(swa_head as u32))
        .set(&key("attention.sliding_window"), Value::U32(4))
        .set(
            &key("attention.sliding_window_pattern"),
            Value::Array((0..n_layer).map(|il| Value::Bool(sliding(il))).collect()),
        )
        .set(&key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        .set(&key("rope.dimension_count"), Value::U32(full_head as u32))
        .set(&key("rope.dimension_count_swa"), Value::U32(swa_head as u32))
        .set(&key("rope.freq_base"), Value::F32(1_000_000.0))
        .set(&key("rope.freq_base_swa"), Value::F32(10_000.0))
        .set(&key("final_logit_softcapping"), Value::F32(30.0));
    if shared > 0 {
        w.set(&key("attention.shared_kv_layers"), Value::U32(shared as u32));
    }
    // 26B-A4B's experts beside the MLP, `n_ff` wide.
    let n_expert = u64::from(shape.n_expert);
    if n_expert > 0 {
        w.set(&key("expert_count"), Value::U32(shape.n_expert))
            .set(&key("expert_used_count"), Value::U32(shape.n_expert_used))
            .set(&key("expert_feed_forward_length"), Value::U32(n_ff as u32));
    }
    set_vocab(&mut w, n_vocab);
    add_matrix(&mut w, &mut rng, "token_embd.weight", shape.embd_type, n_embd, n_vocab);
    let ty = shape.matrix_type;
    for il in 0..n_layer {
        let n = |t: &str| format!("blk.{il}.{t}");
        let (head, kv) = match sliding(il) {
            true => (swa_head, u64::from(swa_kv)),
            false => (full_head, u64::from(full_kv)),
        };
        let q_dim = head * u64::from(n_head);
        add_norm(&mut w, &mut rng, &n("attn_norm"), NormType::Rms, n_embd);
        add_matrix(&mut w, &mut rng, &n("attn_q.weight"), ty, n_embd, q_dim);
        // A layer sharing an earlier one's cache has no K nor V of its own.
        if has_kv(il) {
            add_matrix(&mut w, &mut rng, &n("attn_k.weight"), ty, n_embd, head * kv);
        }
        if sliding(il) && has_kv(il) {
            add_matrix(&mut w, &mut rng, &n("attn_v.weight"), ty, n_embd, head * kv);
        }
        add_matrix(&mut w, &mut rng, &n("attn_output.weight"), ty, q_dim, n_embd);
        w.add_f32(&n("attn_q_norm.weight"), &[head], &rng.around_one(head));
        if has_kv(il) {
            w.add_f32(&n("attn_k_norm.weight"), &[head], &rng.around_one(head));
        }
        w.add_f32(&n("post_attention_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        add_norm(&mut w, &mut rng, &n("ffn_norm"), NormType::Rms, n_embd);
        add_matrix(&mut w, &mut rng, &n("ffn_gate.weight"), ty, n_embd, ff(il));
        add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, ff(il));
        add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, ff(il), n_embd);
        w.add_f32(&n("post_ffw_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        if n_expert > 0 {
            gemma4_experts(&mut w, &mut rng, shape, il);
        }
        if il > 0 {
            w.add_f32(&n("layer_output_scale.weight"), &[1], &[0.5 + 0.25 * il as f32]);
        }
        if per_layer > 0 {
            add_matrix(&mut w, &mut rng, &n("inp_gate.weight"), ty, n_embd, per_layer);
            add_matrix(&mut w, &mut rng, &n("proj.weight"), ty, per_layer, n_embd);
            w.add_f32(&n("post_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        }
    }
    if per_layer > 0 {
        let all = per_layer * u64::from(n_layer);
        add_matrix(
            &mut w,
            &mut rng,
            "per_layer_token_embd.weight",
            shape.embd_type,
            all,
            n_vocab,
        );
        add_matrix(&mut w, &mut rng, "per_layer_model_proj.weight", ty, n_embd, all);
        w.add_f32("per_layer_proj_norm.weight", &[per_layer], &rng.around_one(per_layer));
    }
    let pairs = full_head / 2;
    let factors: Vec<f32> = (0..pairs)
        .map(|i| if i < pairs / 2 { 1.0 + i as f32 / 2.0 } else { 1e30 })
        .collect();
    w.add_f32("rope_freqs.weight", &[pairs], &factors);
    add_norm(&mut w, &mut rng, "output_norm", NormType::Rms, n_embd);
    w
}

/// [`GEMMA3N`]'s model, as llama.cpp's converter writes Gemma 3n's: every fifth layer and
/// the last attend to the whole context, the others slide over a window of 4 with their
/// own rope base; heads twice as wide as the width over the heads; the first 10 layers'
/// gates sparse (the converter's scales: the 95th percentile's, then minus infinity);
/// past the 20th layer, the layers share caches (their K and V written, never read).
fn gemma3n_writer(shape: &Shape) -> GgufWriter {
    const STREAMS: u64 = 4;
    const LAUREL_RANK: u64 = 64;
    const PER_LAYER: u64 = 256;
    const CACHED: u32 = 20;
    let &Shape {
        family,
        n_vocab,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        n_ff,
        ..
    } = shape;
    let head = 2 * n_embd / u64::from(n_head);
    let sliding = |il: u32| il % 5 != 4 && il + 1 < n_layer;
    let mut rng = Rng(SEED);
    let mut w = GgufWriter::new();
    let s = |v: &str| Value::String(v.to_string());
    let key = |k: &str| format!("gemma3n.{k}");
    w.set("general.architecture", s("gemma3n"))
        .set("general.name", s(family.name))
        .set("general.file_type", Value::U32(0))
        .set(&key("context_length"), Value::U32(2048))
        .set(&key("embedding_length"), Value::U32(n_embd as u32))
        .set(&key("block_count"), Value::U32(n_layer))
        .set(
            &key("feed_forward_length"),
            Value::Array((0..n_layer).map(|_| Value::U32(n_ff as u32)).collect()),
        )
        .set(&key("attention.head_count"), Value::U32(n_head))
        .set(&key("attention.head_count_kv"), Value::U32(n_head_kv))
        .set(&key("attention.key_length"), Value::U32(head as u32))
        .set(&key("attention.value_length"), Value::U32(head as u32))
        .set(&key("attention.sliding_window"), Value::U32(4))
        .set(
            &key("attention.sliding_window_pattern"),
            Value::Array((0..n_layer).map(|il| Value::Bool(sliding(il))).collect()),
        )
        .set(
            &key("attention.shared_kv_layers"),
            Value::U32(n_layer.saturating_sub(CACHED)),
        )
        .set(&key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        .set(&key("rope.dimension_count"), Value::U32(head as u32))
        .set(&key("rope.freq_base"), Value::F32(1_000_000.0))
        .set(&key("rope.freq_base_swa"), Value::F32(10_000.0))
        .set(&key("final_logit_softcapping"), Value::F32(30.0))
        .set(&key("altup_active_idx"), Value::U32(0))
        .set(&key("altup_num_inputs"), Value::U32(STREAMS as u32))
        .set(&key("embedding_length_per_layer_input"), Value::U32(PER_LAYER as u32))
        .set(
            &key("activation_sparsity_scale"),
            Value::Array(
                (0..n_layer)
                    .map(|il| Value::F32(if il < 10 { 1.644_853_4 } else { f32::NEG_INFINITY }))
                    .collect(),
            ),
        );
    set_vocab(&mut w, n_vocab);
    add_matrix(&mut w, &mut rng, "token_embd.weight", shape.embd_type, n_embd, n_vocab);
    let ty = shape.matrix_type;
    let (q_dim, kv_dim) = (head * u64::from(n_head), head * u64::from(n_head_kv));
    for il in 0..n_layer {
        let n = |t: &str| format!("blk.{il}.{t}");
        add_norm(&mut w, &mut rng, &n("attn_norm"), NormType::Rms, n_embd);
        add_matrix(&mut w, &mut rng, &n("attn_q.weight"), ty, n_embd, q_dim);
        add_matrix(&mut w, &mut rng, &n("attn_k.weight"), ty, n_embd, kv_dim);
        add_matrix(&mut w, &mut rng, &n("attn_v.weight"), ty, n_embd, kv_dim);
        add_matrix(&mut w, &mut rng, &n("attn_output.weight"), ty, q_dim, n_embd);
        w.add_f32(&n("attn_q_norm.weight"), &[head], &rng.around_one(head));
        w.add_f32(&n("attn_k_norm.weight"), &[head], &rng.around_one(head));
        w.add_f32(&n("post_attention_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        add_norm(&mut w, &mut rng, &n("ffn_norm"), NormType::Rms, n_embd);
        add_matrix(&mut w, &mut rng, &n("ffn_gate.weight"), ty, n_embd, n_ff);
        add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, n_ff);
        add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
        w.add_f32(&n("post_ffw_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        add_matrix(&mut w, &mut rng, &n("inp_gate.weight"), ty, n_embd, PER_LAYER);
        add_matrix(&mut w, &mut rng, &n("proj.weight"), ty, PER_LAYER, n_embd);
        w.add_f32(&n("post_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        w.add_f32(&n("altup_router_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        w.add_f32(
            &n("altup_router.weight"),
            &[n_embd, STREAMS],
            &rng.matrix(n_embd, STREAMS),
        );
        w.add_f32(
            &n("altup_predict_coef.weight"),
            &[STREAMS, STREAMS * STREAMS],
            &rng.small(STREAMS * STREAMS * STREAMS),
        );
        w.add_f32(
            &n("altup_correct_coef.weight"),
            &[STREAMS, STREAMS],
            &rng.small(STREAMS * STREAMS),
        );
        w.add_f32(&n("altup_correct_scale.weight"), &[n_embd], &rng.around_one(n_embd));
        add_matrix(&mut w, &mut rng, &n("laurel_l.weight"), ty, n_embd, LAUREL_RANK);
        add_matrix(&mut w, &mut rng, &n("laurel_r.weight"), ty, LAUREL_RANK, n_embd);
        w.add_f32(&n("laurel_post_norm.weight"), &[n_embd], &rng.around_one(n_embd));
    }
    let all = PER_LAYER * u64::from(n_layer);
    add_matrix(
        &mut w,
        &mut rng,
        "per_layer_token_embd.weight",
        shape.embd_type,
        all,
        n_vocab,
    );
    add_matrix(&mut w, &mut rng, "per_layer_model_proj.weight", ty, n_embd, all);
    w.add_f32("per_layer_proj_norm.weight", &[PER_LAYER], &rng.around_one(PER_LAYER));
    add_weights(
        &mut w,
        &mut rng,
        "altup_proj.weight",
        ty,
        &[n_embd, n_embd, STREAMS - 1],
    );
    add_weights(
        &mut w,
        &mut rng,
        "altup_unembd_proj.weight",
        ty,
        &[n_embd, n_embd, STREAMS - 1],
    );
    add_norm(&mut w, &mut rng, "output_norm", NormType::Rms, n_embd);
    w
}

/// `attention.head_count_kv`: one count, or with short convolutions, Mamba-2 mixers or a
/// layer pattern one per layer, 0 for the layers that do not attend.
fn head_count_kv(family: Family, n_layer: u32, n_head_kv: u32) -> Value {
    let attends: Box<dyn Fn(u32) -> bool> = match (family.short_conv, family.ssm) {
        _ if family.layer_pattern.is_some() => Box::new(move |il| family.layer_kind(il) == Some(b'*')),
        _ if family.ssm_beside_attention => return Value::U32(n_head_kv),
        (Some(conv), _) => Box::new(move |il| conv.attends(il)),
        (None, Some(ssm)) => Box::new(move |il| ssm.attends(il)),
        (None, None) => return Value::U32(n_head_kv),
    };
    Value::Array(
        (0..n_layer)
            .map(|il| Value::U32(if attends(il) { n_head_kv } else { 0 }))
            .collect(),
    )
}

/// Layer `il`'s Mamba-2 mixer as llama.cpp's converter writes it: `ssm_in` (z, x, B, C
/// and the time steps), the convolution's kernel and bias, the time steps' bias, the
/// decay `ssm_a` (`-exp(A_log)`: negative, here between -e and -1/e), the skip `ssm_d`,
/// the grouped norm and `ssm_out`.
fn add_mamba2_mixer(w: &mut GgufWriter, rng: &mut Rng, il: u32, ssm: Ssm, ty: TensorType, n_embd: u64) {
    let n = |t: &str| format!("blk.{il}.{t}");
    let d_inner = 2 * n_embd;
    let (d_conv, d_state, n_group) = (u64::from(ssm.d_conv), u64::from(ssm.d_state), u64::from(ssm.n_group));
    let n_head = d_inner / u64::from(ssm.head_dim);
    let channels = d_inner + 2 * n_group * d_state;
    add_matrix(w, rng, &n("ssm_in.weight"), ty, n_embd, d_inner + channels + n_head);
    w.add_f32(
        &n("ssm_conv1d.weight"),
        &[d_conv, channels],
        &rng.matrix(d_conv, channels),
    );
    w.add_f32(&n("ssm_conv1d.bias"), &[channels], &rng.small(channels));
    w.add_f32(&n("ssm_dt.bias"), &[n_head], &rng.small(n_head));
    let a: Vec<f32> = (0..n_head).map(|_| -rng.next_f32().exp()).collect();
    w.add_f32(&n("ssm_a"), &[1, n_head], &a);
    w.add_f32(&n("ssm_d"), &[1, n_head], &rng.around_one(n_head));
    w.add_f32(
        &n("ssm_norm.weight"),
        &[d_inner / n_group, n_group],
        &rng.around_one(d_inner),
    );
    add_matrix(w, rng, &n("ssm_out.weight"), ty, d_inner, n_embd);
}

/// Layer `il`'s gated delta net as llama.cpp's converter writes Qwen 3.5's: `attn_qkv`
/// (queries, keys, values), `attn_gate` (z), the convolution's kernel, the decay's bias
/// `ssm_dt` and `ssm_a` (`-exp(A_log)`: negative, here between -e and -1/e), `ssm_beta`,
/// `ssm_alpha`, the output's norm and `ssm_out`.
fn add_delta_net(w: &mut GgufWriter, rng: &mut Rng, il: u32, net: DeltaNet, ty: TensorType, n_embd: u64) {
    let n = |t: &str| format!("blk.{il}.{t}");
    let [d_conv, head_dim, n_k_heads, n_v_heads] =
        [net.d_conv, net.head_dim, net.n_k_heads, net.n_v_heads].map(u64::from);
    let (key_dim, value_dim) = (head_dim * n_k_heads, head_dim * n_v_heads);
    let channels = 2 * key_dim + value_dim;
    if net.fused_qkvz {
        add_matrix(w, rng, &n("ssm_in.weight"), ty, n_embd, channels + value_dim);
    } else {
        add_matrix(w, rng, &n("attn_qkv.weight"), ty, n_embd, channels);
        add_matrix(w, rng, &n("attn_gate.weight"), ty, n_embd, value_dim);
    }
    w.add_f32(
        &n("ssm_conv1d.weight"),
        &[d_conv, channels],
        &rng.matrix(d_conv, channels),
    );
    w.add_f32(&n("ssm_dt.bias"), &[n_v_heads], &rng.small(n_v_heads));
    let a: Vec<f32> = (0..n_v_heads).map(|_| -rng.next_f32().exp()).collect();
    w.add_f32(&n("ssm_a"), &[n_v_heads], &a);
    if net.grouped_beta_alpha {
        add_matrix(w, rng, &n("ssm_ba.weight"), ty, n_embd, 2 * n_v_heads);
    } else {
        add_matrix(w, rng, &n("ssm_beta.weight"), ty, n_embd, n_v_heads);
        add_matrix(w, rng, &n("ssm_alpha.weight"), ty, n_embd, n_v_heads);
    }
    w.add_f32(&n("ssm_norm.weight"), &[head_dim], &rng.around_one(head_dim));
    add_matrix(w, rng, &n("ssm_out.weight"), ty, value_dim, n_embd);
}

/// Layer `il`'s latent attention as llama.cpp's converter writes DeepSeek's (see [`Mla`]).
fn add_mla(w: &mut GgufWriter, rng: &mut Rng, il: u32, mla: Mla, ty: TensorType, n_embd: u64, n_head: u64) {
    let n = |t: &str| format!("blk.{il}.{t}");
    let [q_lora, kv_lora, nope, rope, head_v] = [
        mla.q_lora_rank,
        mla.kv_lora_rank,
        mla.head_dim_nope,
        mla.head_dim_rope,
        mla.head_dim_v,
    ]
    .map(u64::from);
    if q_lora > 0 {
        add_matrix(w, rng, &n("attn_q_a.weight"), ty, n_embd, q_lora);
        w.add_f32(&n("attn_q_a_norm.weight"), &[q_lora], &rng.around_one(q_lora));
        add_matrix(w, rng, &n("attn_q_b.weight"), ty, q_lora, n_head * (nope + rope));
    } else {
        add_matrix(w, rng, &n("attn_q.weight"), ty, n_embd, n_head * (nope + rope));
    }
    add_matrix(w, rng, &n("attn_kv_a_mqa.weight"), ty, n_embd, kv_lora + rope);
    w.add_f32(&n("attn_kv_a_norm.weight"), &[kv_lora], &rng.around_one(kv_lora));
    add_weights(w, rng, &n("attn_k_b.weight"), ty, &[nope, kv_lora, n_head]);
    add_weights(w, rng, &n("attn_v_b.weight"), ty, &[kv_lora, head_v, n_head]);
    add_matrix(w, rng, &n("attn_output.weight"), ty, n_head * head_v, n_embd);
}

/// Adds the norm `<name>.weight` (around one) and, for a LayerNorm with bias, `<name>.bias`.
fn add_norm(w: &mut GgufWriter, rng: &mut Rng, name: &str, norm_type: NormType, n: u64) {
    w.add_f32(&format!("{name}.weight"), &[n], &rng.around_one(n));
    if matches!(norm_type, NormType::LayerWithBias | NormType::RmsWithBias) {
        w.add_f32(&format!("{name}.bias"), &[n], &rng.small(n));
    }
}

/// Adds a seeded `fan_in` × `fan_out` weight of type `ty`, quantized by ggml itself.
fn add_matrix(w: &mut GgufWriter, rng: &mut Rng, name: &str, ty: TensorType, fan_in: u64, fan_out: u64) {
    add_weights(w, rng, name, ty, &[fan_in, fan_out]);
}

/// Adds a seeded weight of `dims` (rows of `dims[0]`, as many as the other dimensions
/// hold: stacked experts' too) of type `ty`, quantized by ggml itself.
pub(crate) fn add_weights(w: &mut GgufWriter, rng: &mut Rng, name: &str, ty: TensorType, dims: &[u64]) {
    let (row, rows) = (dims[0], dims[1..].iter().product::<u64>());
    let values = rng.matrix(row, rows);
    if ty == TensorType::F32 {
        w.add_f32(name, dims, &values);
        return;
    }
    let size = ty.row_bytes(row).expect("rows fill whole blocks") * rows;
    let mut data = vec![0u8; size as usize];
    let ggml_type = ty.id() as sys::ggml_type;
    elelem_engine::ggml::init().expect("ggml's CPU backend loads");
    // The IQ1/IQ2 types cannot be quantized without importance weights: uniform ones.
    let importance = vec![1.0f32; row as usize];
    let imatrix = if unsafe { sys::ggml_quantize_requires_imatrix(ggml_type) } {
        importance.as_ptr()
    } else {
        std::ptr::null()
    };
    let written = unsafe {
        sys::ggml_quantize_chunk(
            ggml_type,
            values.as_ptr(),
            data.as_mut_ptr().cast(),
            0,
            rows as i64,
            row as i64,
            imatrix,
        )
    };
    assert_eq!(written as u64, size, "{name} as {ty}");
    w.add_tensor(name, dims, ty, data);
}

/// A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens (in
/// vocabularies of 512 or more), then printable pieces (a few words and single
/// characters) to fill `n_vocab`.
fn set_vocab(w: &mut GgufWriter, n_vocab: u64) {
    set_vocab_with(w, n_vocab, &[], &[]);
}

/// [`set_vocab`]'s vocabulary ending with `pieces` (normal tokens), then `controls` (control
/// tokens), in place of the filler pieces there: the image framing tokens mtmd looks up.
pub fn set_vocab_with(w: &mut GgufWriter, n_vocab: u64, pieces: &[&str], controls: &[&str]) {
    let extra = pieces.len() + controls.len();
    const NORMAL: i32 = 1;
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const BYTE: i32 = 6;
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![UNKNOWN, CONTROL, CONTROL];
    if n_vocab >= 512 {
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(BYTE);
        }
    }
    let words = [
        "▁the",
        "▁a",
        "▁of",
        "▁and",
        "▁to",
        "▁in",
        "▁is",
        "▁it",
        "▁canary",
        "▁elelem",
    ];
    let chars = ('a'..='z').chain('A'..='Z').chain('0'..='9').map(|c| c.to_string());
    let fill = words
        .iter()
        .map(|w| w.to_string())
        .chain(chars.clone())
        .chain(chars.map(|c| format!("▁{c}")));
    let n_pieces = n_vocab - extra as u64;
    for piece in fill {
        if tokens.len() as u64 == n_pieces {
            break;
        }
        if tokens.contains(&piece) {
            continue;
        }
        tokens.push(piece);
        types.push(NORMAL);
    }
    let mut i = 0;
    while (tokens.len() as u64) < n_pieces {
        tokens.push(format!("▁w{i}"));
        types.push(NORMAL);
        i += 1;
    }
    for piece in pieces {
        tokens.push(piece.to_string());
        types.push(NORMAL);
    }
    for control in controls {
        tokens.push(control.to_string());
        types.push(CONTROL);
    }
    let scores: Vec<Value> = (0..tokens.len()).map(|i| Value::F32(-(i as f32))).collect();
    w.set("tokenizer.ggml.model", Value::String("llama".into()))
        .set(
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        )
        .set("tokenizer.ggml.scores", Value::Array(scores))
        .set(
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        )
        .set("tokenizer.ggml.bos_token_id", Value::U32(1))
        .set("tokenizer.ggml.eos_token_id", Value::U32(2))
        .set("tokenizer.ggml.unknown_token_id", Value::U32(0))
        .set("tokenizer.ggml.add_bos_token", Value::Bool(true));
}

/// The peer suite's models (`rake peer_suite`): llama.cpp's tokenizer suite and chat templates.
fn suite_file(path: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../vendor/llama.cpp/models")
        .join(path);
    assert!(
        path.exists(),
        "{} is missing: run `rake peer_suite` first",
        path.display()
    );
    path
}

/// The `tokenizer.*` keys of the suite's `ggml-vocab-<name>.gguf` and the chat template
/// `templates/<template>.jinja`; returns how many tokens the vocabulary has.
fn set_suite_vocab(w: &mut GgufWriter, name: &str, template: &str) -> u64 {
    let vocab = elelem_gguf::Gguf::open(suite_file(&format!("ggml-vocab-{name}.gguf"))).expect("a vocabulary");
    for (key, value) in vocab.metadata().filter(|(key, _)| key.starts_with("tokenizer.")) {
        w.set(key, value.clone());
    }
    let text = std::fs::read_to_string(suite_file(&format!("templates/{template}.jinja"))).expect("a template");
    w.set("tokenizer.chat_template", Value::String(text));
    let tokens = vocab.get("tokenizer.ggml.tokens").and_then(Value::as_array);
    tokens.expect("the vocabulary's tokens").len() as u64
}

/// llama.cpp's pooling types (`<arch>.pooling_type`, `enum llama_pooling_type`).
pub const POOLING_NONE: u32 = 0;
pub const POOLING_MEAN: u32 = 1;
pub const POOLING_CLS: u32 = 2;
pub const POOLING_LAST: u32 = 3;
pub const POOLING_RANK: u32 = 4;

/// An encoder as llama.cpp's converter writes it: BERT (sentence-transformers'
/// models), or nomic-bert. Both have a WordPiece vocabulary, bidirectional
/// attention, LayerNorms with biases after each residual add, and token-type
/// embeddings.
#[derive(Debug, Clone, Copy)]
pub struct Encoder {
    /// `general.architecture`, and the prefix of its keys.
    pub arch: &'static str,
    pub name: &'static str,
    /// nomic-bert's layers: Q, K and V in one `attn_qkv`, rope (NEOX, llama.cpp's
    /// choice for the architecture) instead of position embeddings, a SwiGLU
    /// feed-forward (gate, up, down), and no biases on the matrices.
    pub nomic: bool,
    /// A cross-encoder's classification head as llama.cpp applies it under rank
    /// pooling (RoBERTa's, as bge-reranker converts): the first token's state
    /// through `cls` (dense, then tanh) and `cls.output` (one score).
    pub rerank: bool,
    /// `<arch>.pooling_type`.
    pub pooling: u32,
    pub n_vocab: u64,
    pub n_embd: u64,
    pub n_layer: u32,
    pub n_head: u32,
    pub n_ff: u64,
    /// `<arch>.context_length`: the position embeddings' rows (BERT).
    pub n_ctx: u64,
}

/// A small BERT in sentence-transformers' all-MiniLM's form: mean pooling.
pub const BERT: Encoder = Encoder {
    arch: "bert",
    name: "elelem tiny bert canary",
    nomic: false,
    rerank: false,
    pooling: POOLING_MEAN,
    n_vocab: 512,
    n_embd: 64,
    n_layer: 3,
    n_head: 4,
    n_ff: 128,
    n_ctx: 128,
};
pub const BERT_RERANK: Encoder = Encoder {
    name: "elelem tiny bert reranker canary",
    rerank: true,
    pooling: POOLING_RANK,
    ..BERT
};
pub const NOMIC_BERT: Encoder = Encoder {
    arch: "nomic-bert",
    name: "elelem tiny nomic-bert canary",
    nomic: true,
    ..BERT
};

/// A model of the embedding goldens: an encoder, or a decoder of the generation
/// recipe whose file names a pooling.
#[derive(Debug, Clone)]
pub enum Embedder {
    Encoder(Encoder),
    Decoder(Box<Shape>),
}

impl Embedder {
    /// The seeded model, ready to write.
    pub fn writer(&self) -> GgufWriter {
        match self {
            Embedder::Encoder(encoder) => encoder_writer(encoder),
            Embedder::Decoder(shape) => {
                let mut w = writer(shape);
                // As Qwen3-Embedding's files: no BOS, and the end-of-text token
                // appended, whose state last-token pooling reads.
                w.set("tokenizer.ggml.add_bos_token", Value::Bool(false))
                    .set("tokenizer.ggml.add_eos_token", Value::Bool(true));
                w
            }
        }
    }
}

/// The small random-weight embedding models, by golden name
/// (`spec/fixtures/embeddings/<name>.json`). Not in [`synthetic()`]: their goldens
/// are embeddings, which the greedy-id goldens cannot hold.
pub fn embedding() -> Vec<(String, Embedder)> {
    let qwen3 = Shape {
        matrix_type: TensorType::Q8_0,
        embd_type: TensorType::F16,
        ..small(QWEN3_EMBED)
    };
    [
        ("tiny-bert", Embedder::Encoder(BERT)),
        ("tiny-bert-rerank", Embedder::Encoder(BERT_RERANK)),
        ("tiny-nomic-bert", Embedder::Encoder(NOMIC_BERT)),
        ("tiny-qwen3-embed", Embedder::Decoder(Box::new(qwen3))),
    ]
    .into_iter()
    .map(|(name, model)| (name.to_string(), model))
    .collect()
}

/// A seeded encoder with llama.cpp's tensor and key names (`src/models/bert.cpp`,
/// `nomic-bert.cpp`). F32 throughout, as the converter writes small models.
/// Weights are scaled by 1/sqrt(fan_in) and every residual add is followed by a
/// LayerNorm, so activations stay O(1) and GELU, tanh and the norms in range.
fn encoder_writer(e: &Encoder) -> GgufWriter {
    let &Encoder {
        arch,
        nomic,
        n_vocab,
        n_embd,
        n_layer,
        n_head,
        n_ff,
        n_ctx,
        ..
    } = e;
    let mut rng = Rng(SEED);
    let mut w = GgufWriter::new();
    let s = |v: &str| Value::String(v.to_string());
    let key = |k: &str| format!("{arch}.{k}");
    w.set("general.architecture", s(arch))
        .set("general.name", s(e.name))
        .set("general.file_type", Value::U32(0))
        .set(&key("context_length"), Value::U32(n_ctx as u32))
        .set(&key("embedding_length"), Value::U32(n_embd as u32))
        .set(&key("feed_forward_length"), Value::U32(n_ff as u32))
        .set(&key("block_count"), Value::U32(n_layer))
        .set(&key("attention.head_count"), Value::U32(n_head))
        .set(&key("attention.layer_norm_epsilon"), Value::F32(1e-12))
        .set(&key("attention.causal"), Value::Bool(false))
        .set(&key("pooling_type"), Value::U32(e.pooling));
    if nomic {
        // nomic-embed-text's rotary base.
        w.set(&key("rope.freq_base"), Value::F32(1000.0));
    }
    if e.rerank {
        // One label: one score a pair (llama.cpp's n_cls_out).
        w.set(&key("classifier.output_labels"), Value::Array(vec![s("LABEL_0")]));
    }
    set_wordpiece_vocab(&mut w, n_vocab);

    let n_token_types = 2;
    w.add_f32("token_embd.weight", &[n_embd, n_vocab], &rng.matrix(n_embd, n_vocab));
    w.add_f32(
        "token_types.weight",
        &[n_embd, n_token_types],
        &rng.small(n_embd * n_token_types),
    );
    if !nomic {
        w.add_f32("position_embd.weight", &[n_embd, n_ctx], &rng.small(n_embd * n_ctx));
    }
    w.add_f32("token_embd_norm.weight", &[n_embd], &rng.around_one(n_embd));
    w.add_f32("token_embd_norm.bias", &[n_embd], &rng.small(n_embd));
    // A linear layer: `<name>.weight`, and `<name>.bias` when it has one.
    fn matrix(w: &mut GgufWriter, rng: &mut Rng, name: &str, fan_in: u64, fan_out: u64, bias: bool) {
        w.add_f32(
            &format!("{name}.weight"),
            &[fan_in, fan_out],
            &rng.matrix(fan_in, fan_out),
        );
        if bias {
            w.add_f32(&format!("{name}.bias"), &[fan_out], &rng.small(fan_out));
        }
    }
    for il in 0..n_layer {
        let n = |t: &str| format!("blk.{il}.{t}");
        if nomic {
            matrix(&mut w, &mut rng, &n("attn_qkv"), n_embd, 3 * n_embd, false);
        } else {
            for t in ["attn_q", "attn_k", "attn_v"] {
                matrix(&mut w, &mut rng, &n(t), n_embd, n_embd, true);
            }
        }
        matrix(&mut w, &mut rng, &n("attn_output"), n_embd, n_embd, !nomic);
        w.add_f32(&n("attn_output_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        w.add_f32(&n("attn_output_norm.bias"), &[n_embd], &rng.small(n_embd));
        if nomic {
            matrix(&mut w, &mut rng, &n("ffn_gate"), n_embd, n_ff, false);
        }
        matrix(&mut w, &mut rng, &n("ffn_up"), n_embd, n_ff, !nomic);
        matrix(&mut w, &mut rng, &n("ffn_down"), n_ff, n_embd, !nomic);
        w.add_f32(&n("layer_output_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        w.add_f32(&n("layer_output_norm.bias"), &[n_embd], &rng.small(n_embd));
    }
    if e.rerank {
        matrix(&mut w, &mut rng, "cls", n_embd, n_embd, true);
        matrix(&mut w, &mut rng, "cls.output", n_embd, 1, true);
    }
    w
}

/// A made-up WordPiece vocabulary as llama.cpp's converter writes BERT's: the five
/// control tokens first, then word-initial pieces with the phantom space `▁` and
/// continuation pieces bare (the converter's rewrite of `##piece`), filled to
/// `n_vocab` with `▁w<i>` words. The special ids and flags are those the converter
/// writes for a sentence-transformers BERT: BOS and CLS are [CLS], EOS and SEP are
/// [SEP], add_bos and add_eos true (its post-processor adds both), add_sep false.
pub fn set_wordpiece_vocab(w: &mut GgufWriter, n_vocab: u64) {
    const NORMAL: i32 = 1;
    const CONTROL: i32 = 3;
    let specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
    let words = [
        "the", "a", "of", "and", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at", "by", "this",
        "be", "from", "or", "an", "are", "not", "but", "what", "all", "were", "when", "we", "there", "can", "which",
        "their", "if", "do", "will", "each", "how", "up", "out", "about", "many", "then", "them", "so", "some", "her",
        "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "go", "see", "no", "way",
        "could", "people", "my", "than", "first", "water", "been", "call", "who", "its", "now", "find", "long", "down",
        "day", "did", "get", "come", "made", "may", "part", "ruby", "gem", "model", "text", "search", "query",
        "document", "vector", "embed", "rank", "cat", "dog", "sat", "mat", "paris", "france", "capital", "city",
        "river", "book", "read", "write", "code", "program", "canary", "elelem",
    ];
    let suffixes = [
        "s", "ed", "ing", "er", "est", "ly", "tion", "ment", "ness", "able", "ful", "less", "es",
    ];
    let letters = ('a'..='z').chain('0'..='9').map(|c| c.to_string());
    let punctuation = [".", ",", "!", "?", "'", "\"", "-", ":", ";", "(", ")"];
    let mut tokens: Vec<String> = specials.iter().map(|t| t.to_string()).collect();
    let mut types = vec![CONTROL; specials.len()];
    let pieces = words
        .iter()
        .map(|w| format!("▁{w}"))
        .chain(punctuation.iter().map(|p| format!("▁{p}")))
        .chain(letters.clone().map(|c| format!("▁{c}")))
        .chain(letters)
        .chain(suffixes.iter().map(|s| s.to_string()));
    for piece in pieces {
        if tokens.len() as u64 == n_vocab {
            break;
        }
        if !tokens.contains(&piece) {
            tokens.push(piece);
            types.push(NORMAL);
        }
    }
    let mut i = 0;
    while (tokens.len() as u64) < n_vocab {
        tokens.push(format!("▁w{i}"));
        types.push(NORMAL);
        i += 1;
    }
    w.set("tokenizer.ggml.model", Value::String("bert".into()))
        .set("tokenizer.ggml.pre", Value::String("default".into()))
        .set(
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        )
        .set(
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        )
        .set("tokenizer.ggml.token_type_count", Value::U32(2))
        .set("tokenizer.ggml.bos_token_id", Value::U32(2))
        .set("tokenizer.ggml.eos_token_id", Value::U32(3))
        .set("tokenizer.ggml.unknown_token_id", Value::U32(1))
        .set("tokenizer.ggml.seperator_token_id", Value::U32(3))
        .set("tokenizer.ggml.padding_token_id", Value::U32(0))
        .set("tokenizer.ggml.cls_token_id", Value::U32(2))
        .set("tokenizer.ggml.mask_token_id", Value::U32(4))
        .set("tokenizer.ggml.add_bos_token", Value::Bool(true))
        .set("tokenizer.ggml.add_eos_token", Value::Bool(true))
        .set("tokenizer.ggml.add_sep_token", Value::Bool(false))
        .set("tokenizer.ggml.normalizer.lowercase", Value::Bool(true));
}
