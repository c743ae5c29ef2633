//! Hyper-parameters from a GGUF's `<arch>.` keys, with llama.cpp's defaults,
//! validated so that no later graph can trip a ggml assert.

use elelem_gguf::{Gguf, Value};

use crate::ggml::{Rope, RopeMode, MROPE_SECTIONS};
use crate::memory::{KvShape, RecurrentShape};
use crate::{Error, Result};

/// llama.cpp's recurrent architectures (`llm_arch_is_recurrent`), whose every layer keeps
/// a state and none attends; of them elelem runs mamba2.
const RECURRENT_ARCHITECTURES: &[&str] = &["mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"];

/// The largest layer count or tensor width accepted: far beyond any real model,
/// small enough that no size computed from them overflows.
const MAX_WIDTH: u64 = 1 << 20;

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

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Decoder => "decoder",
            Kind::Encoder => "encoder",
        }
    }
}

/// The norm of an architecture's blocks and output (llama.cpp's `LLM_NORM_RMS` or
/// `LLM_NORM`), which also names the key of its epsilon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormType {
    /// RMS norm (`attention.layer_norm_rms_epsilon`): most decoders.
    Rms,
    /// LayerNorm (`attention.layer_norm_epsilon`): encoders, and decoders such as
    /// starcoder2 and cohere2.
    Layer,
}

/// How a text's token states become its embedding (llama.cpp's `llama_pooling_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// No pooling: one embedding per token.
    None,
    /// The average of the text's token states.
    Mean,
    /// The first token's state (BERT's `[CLS]`).
    Cls,
    /// The last token's state (decoders as embedders, e.g. Qwen3-Embedding).
    Last,
    /// A reranker's relevance score(s): the first token's state (the last, for a
    /// causal model) through the classification head.
    Rank,
}

impl Pooling {
    pub const ALL: [Pooling; 5] = [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::Rank];

    /// From a GGUF's `pooling_type` (llama.cpp's enum values 0 to 4).
    pub fn from_id(id: i64) -> Option<Pooling> {
        usize::try_from(id).ok().and_then(|i| Pooling::ALL.get(i).copied())
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    pub fn from_name(name: &str) -> Option<Pooling> {
        Pooling::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// What the common hyper-parameters take from an architecture (its `ArchSpec`'s facts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchTraits {
    /// Its `general.architecture` name, the prefix of its keys.
    pub name: &'static str,
    pub kind: Kind,
    pub norm: NormType,
    pub rope_mode: RopeMode,
    /// Whether its feed-forwards may be a mixture of experts.
    pub experts: bool,
}

/// Q multiplied by `ln(floor((pos + offset) / floor_scale) + 1) * scale + 1` after rope
/// (llama.cpp's `f_attn_temp_scale`, `n_attn_temp_floor_scale` and `f_attn_temp_offset`:
/// Llama 4's and Mistral 3's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnTemperature {
    pub scale: f32,
    pub floor_scale: u32,
    pub offset: f32,
}

/// How a mixture of experts weighs the experts it picks (llama.cpp's gating functions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertGating {
    /// The router's soft-max over every expert picks them and weighs them.
    Softmax,
    /// The router's logits pick them, and a soft-max over the picked ones' logits
    /// weighs them (gpt-oss).
    SoftmaxWeight,
    /// Each expert's own sigmoid of its logit picks it (plus the selection bias, where
    /// the model has one) and weighs it (DeepSeek-V3's, GLM-4.5's).
    Sigmoid,
}

/// Experts picked within groups (DeepSeek-V3's `n_group` and `topk_group`: llama.cpp's
/// `n_expert_groups` and `n_group_used`): the experts, `count` groups of consecutive ones,
/// are picked from the `used` groups whose two best experts score highest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertGroups {
    pub count: u32,
    pub used: u32,
}

/// Mamba-2's selective state space (`ssm.*`, llama.cpp's `ssm_d_conv`, `ssm_d_inner`,
/// `ssm_d_state`, `ssm_dt_rank`, `ssm_n_group`): `in_proj` gives z, x, B, C and the
/// time steps; a causal convolution of `d_conv` steps runs over x, B and C; the scan
/// runs `n_head` heads of `d_inner / n_head` channels with states `d_state` wide, B and
/// C shared by the heads of each of `n_group` groups. A gated delta net (qwen35's) reads
/// the same keys: `n_group` heads of queries and keys and `n_head` of values, each
/// `d_state` wide, its state `d_state × d_state` per value head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ssm {
    pub d_conv: u32,
    pub d_inner: u32,
    pub d_state: u32,
    /// The scan's heads (`ssm.time_step_rank`): a time step each.
    pub n_head: u32,
    pub n_group: u32,
}

impl Ssm {
    pub fn head_dim(&self) -> u32 {
        self.d_inner / self.n_head
    }

    /// The channels the convolution runs over: x, B and C.
    pub fn conv_channels(&self) -> u32 {
        self.d_inner + 2 * self.n_group * self.d_state
    }

    /// `in_proj`'s rows: z, x, B, C and the time steps.
    pub fn d_in_proj(&self) -> u32 {
        self.d_inner + self.conv_channels() + self.n_head
    }
}

/// The largest recurrent state one layer keeps for a sequence, in values: beyond
/// any real model's (Mamba-2's largest is 2^20), small enough for u32 arithmetic.
const MAX_STATE: u64 = 1 << 26;

/// Mamba-2's `ssm.*` keys, as llama.cpp's `load_arch_hparams` reads them (all required),
/// checked as its graph and ggml's `ssm_scan` assert them.
pub(crate) fn read_ssm(keys: &Keys) -> Result<Ssm> {
    let ssm = Ssm {
        d_conv: keys.u32("ssm.conv_kernel")?,
        d_inner: keys.u32("ssm.inner_size")?,
        d_state: keys.u32("ssm.state_size")?,
        n_head: keys.u32("ssm.time_step_rank")?,
        n_group: keys.u32("ssm.group_count")?,
    };
    let in_range = |v: u32| v > 0 && u64::from(v) <= MAX_WIDTH;
    if !(2..=64).contains(&ssm.d_conv)
        || ![ssm.d_inner, ssm.d_state, ssm.n_head, ssm.n_group]
            .into_iter()
            .all(in_range)
    {
        return Err(Error::Load(format!(
            "{}: ssm.conv_kernel ({}) must be 2 to 64, ssm.inner_size ({}), state_size ({}), time_step_rank ({}) \
             and group_count ({}) 1 to {MAX_WIDTH}",
            keys.prefix, ssm.d_conv, ssm.d_inner, ssm.d_state, ssm.n_head, ssm.n_group
        )));
    }
    if !(ssm.d_inner.is_multiple_of(ssm.n_head)
        && ssm.d_inner.is_multiple_of(ssm.n_group)
        && ssm.n_head.is_multiple_of(ssm.n_group))
    {
        return Err(Error::Load(format!(
            "{}: ssm.time_step_rank ({}) and ssm.group_count ({}) must divide ssm.inner_size ({}), and the \
             group count the time step rank",
            keys.prefix, ssm.n_head, ssm.n_group, ssm.d_inner
        )));
    }
    let (d_inner, d_state, n_group) = (u64::from(ssm.d_inner), u64::from(ssm.d_state), u64::from(ssm.n_group));
    let conv_state = (u64::from(ssm.d_conv) - 1) * (d_inner + 2 * n_group * d_state);
    let scan_state = d_state * d_inner;
    if conv_state.max(scan_state) > MAX_STATE {
        return Err(Error::Load(format!(
            "{}: a layer's state ({conv_state} convolution values, {scan_state} scan values) exceeds {MAX_STATE}",
            keys.prefix
        )));
    }
    Ok(ssm)
}

/// Multi-head latent attention as llama.cpp runs it in its absorbed form (deepseek2's
/// `is_mla`): K and V are one compressed row per token, `kv_lora_rank` wide, normed, with
/// a rope part `rope.n_dims` wide after it (the cache holds that row: `key_length`, one KV
/// head, V its first `kv_lora_rank` columns, `value_length`); each head's query is
/// projected into the compressed space (`attn_k_b`), and each head's output out of it
/// (`attn_v_b`). The heads' own widths once decompressed are `head_dim_k` (`key_length_mla`:
/// the part without rope, then rope's) and `head_dim_v` (`value_length_mla`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mla {
    /// Q's compression (`attention.q_lora_rank`); 0 where Q is projected directly
    /// (DeepSeek-V2-Lite's `attn_q`).
    pub q_lora_rank: u32,
    pub kv_lora_rank: u32,
    pub head_dim_k: u32,
    pub head_dim_v: u32,
}

impl Mla {
    /// The part of a head's query and key without rope.
    pub fn head_dim_nope(&self, n_rot: u32) -> u32 {
        self.head_dim_k - n_rot
    }
}

/// Sliding-window attention on some layers (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`):
/// on those layers a token at position `p` attends only to positions `p - window + 1 ..= p`,
/// its keys live in a cache of their own sized to the window, and its rope has its own base.
#[derive(Debug, Clone, PartialEq)]
pub struct Swa {
    pub window: u32,
    /// Llama 4's chunked attention (llama.cpp's `LLAMA_SWA_TYPE_CHUNKED`): a query sees
    /// the keys of its own chunk of `window` positions, not the last `window` positions.
    pub chunked: bool,
    /// Which layers slide; the others attend to the whole context.
    pub layers: Vec<bool>,
    pub rope: Rope,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    pub arch: ArchTraits,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_ff: u32,
    pub n_vocab: u32,
    pub n_ctx_train: u32,
    pub head_dim_k: u32,
    pub head_dim_v: u32,
    /// The head sizes of K and V on the sliding layers where they differ from the
    /// others' (`attention.key_length_swa`, `value_length_swa`: gemma4's); read by the
    /// architectures whose graphs take per-layer heads ([`HParams::per_layer_heads`]).
    pub head_dims_swa: Option<(u32, u32)>,
    /// Each layer's KV head count where a per-layer `attention.head_count_kv` differs
    /// between attention layers (empty: every one has `n_head_kv`).
    pub n_head_kv_layers: Vec<u32>,
    /// Each layer's feed-forward width where a per-layer `feed_forward_length` differs
    /// between layers (empty: every one is `n_ff` wide; gemma4's double-wide layers).
    pub n_ff_layers: Vec<u32>,
    /// Whether the architecture's graph takes each layer's head sizes, KV head counts
    /// and feed-forward widths (the `*_of` methods); others refuse files where they differ.
    pub per_layer_heads: bool,
    /// The layers from the first that keep a KV cache; each later one attends over an
    /// earlier layer's ([`HParams::kv_source`]: gemma4's `attention.shared_kv_layers`).
    pub n_layer_kv: u32,
    /// The width of each layer's part of Gemma 4's per-layer embeddings (0: none).
    pub n_embd_per_layer: u32,
    /// The epsilon of the architecture's norms (see [`NormType`]).
    pub norm_eps: f32,
    pub rope: Rope,
    pub swa: Option<Swa>,
    /// Logits become `cap * tanh(logits / cap)` (gemma's `final_logit_softcapping`).
    pub final_logit_softcap: Option<f32>,
    /// Attention scores become `cap * tanh(score / cap)` inside flash attention
    /// (gemma2's `attn_logit_softcapping`).
    pub attn_logit_softcap: Option<f32>,
    /// Granite's multipliers: of the embeddings, of each block's attention and
    /// feed-forward outputs before their residual adds, and the attention scale in
    /// place of 1/sqrt(head size).
    pub embedding_scale: Option<f32>,
    pub residual_scale: Option<f32>,
    pub attention_scale: Option<f32>,
    /// What the logits are multiplied by: cohere2's `logit_scale`, or 1 / granite's
    /// (which llama.cpp divides by so, in f32).
    pub logit_multiplier: Option<f32>,
    /// Q's temperature by position, where the model has one.
    pub attn_temperature: Option<AttnTemperature>,
    /// Every `n`-th layer (counting from 1) attends without rotary embeddings (SmolLM3's NoPE).
    pub no_rope_every: Option<u32>,
    /// A mixture of experts: how many, how many each token uses, and each one's width.
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub n_ff_exp: u32,
    /// The shared expert's width, where the model has one (qwen2moe).
    pub n_ff_shexp: u32,
    /// How many layers come first with a dense feed-forward, before the experts' layers.
    pub n_layer_dense_lead: u32,
    /// Every `n`-th layer (counting from one) has the experts, the others a dense
    /// feed-forward (Llama 4's `interleave_moe_layer_step`; 0 where unused).
    pub n_moe_layer_step: u32,
    /// Llama 4's routing (llama.cpp's `weight_before_ffn`): the router's logits pick the
    /// experts, and each picked expert's weight scales its input, not its output.
    pub experts_weigh_input: bool,
    /// Whether the picked experts' probabilities are renormalized to sum to one
    /// (llama.cpp's `norm_w`: qwen3moe's, not olmoe's or qwen2moe's).
    pub expert_weights_norm: bool,
    /// How the router's logits become the picked experts' weights.
    pub expert_gating: ExpertGating,
    /// Where the experts are picked within groups (see [`ExpertGroups`]).
    pub expert_groups: Option<ExpertGroups>,
    /// What the picked experts' weights are multiplied by, after any renormalization
    /// (llama.cpp's `w_scale`: `expert_weights_scale`; 0 and 1 leave them as they are).
    pub expert_weights_scale: f32,
    /// Layers at the end of the file that llama.cpp loads and its decoding graph skips
    /// (multi-token prediction's, `nextn_predict_layers`); not in `n_layer`.
    pub n_layer_nextn: u32,
    /// Qwen3-VL's deepstack layers (`n_deepstack_layers`): given embeddings are
    /// `n_embd · (1 + n)` wide ([`HParams::n_embd_inp`]), the main `n_embd` the input, slice
    /// `k` added to the output of layer `k - 1`; a token's slices are zeros.
    pub n_deepstack_layers: u32,
    /// Each layer's xIELU parameters `[alpha_n, alpha_p, beta, eps]` (apertus's
    /// feed-forward activation; empty elsewhere).
    pub xielu: Vec<[f32; 4]>,
    /// Per layer: whether it keeps a recurrent state instead of a KV cache (llama.cpp's
    /// `is_recr`: a layer with no KV heads, 0 in a per-layer `attention.head_count_kv`).
    pub recurrent: Vec<bool>,
    /// Per layer: whether it is a feed-forward alone, with neither attention nor a
    /// recurrent state (nemotron_h's), so that it keeps no cache either.
    pub ffn_only: Vec<bool>,
    /// Whether every layer attends beside its recurrent state, keeping both a cache and
    /// a state (falcon-h1's attention and Mamba-2 in parallel).
    pub attention_beside_state: bool,
    /// The kernel length of LFM2's short convolutions (`shortconv.l_cache`), which its
    /// recurrent layers run.
    pub short_conv_kernel: Option<u32>,
    /// Mamba-2's state space, which its recurrent layers (mamba2's, granitehybrid's) run,
    /// or a gated delta net's widths (qwen35's).
    pub ssm: Option<Ssm>,
    /// Whether a token attends only to earlier ones (`attention.causal`; encoders say false).
    pub causal_attn: bool,
    /// Multi-head latent attention (deepseek2's), where the model has it: its cache keeps
    /// K only, V being K's first columns.
    pub mla: Option<Mla>,
    /// How the file's model pools its embeddings (`pooling_type`), if it says.
    pub pooling: Option<Pooling>,
    /// How many token types an encoder's embeddings have rows for (its
    /// `tokenizer.ggml.token_type_count`; 0 for decoders).
    pub n_token_types: u32,
    /// How many scores a reranker's classifier gives (`classifier.output_labels`, else 1).
    pub n_cls_out: u32,
    /// `general.name`, `general.size_label` and the file type's name, for display.
    pub name: Option<String>,
    pub size_label: Option<String>,
    pub file_type: Option<&'static str>,
}

impl HParams {
    pub fn n_embd_k_gqa(&self) -> u32 {
        self.head_dim_k * self.n_head_kv
    }

    pub fn n_embd_v_gqa(&self) -> u32 {
        self.head_dim_v * self.n_head_kv
    }

    /// Layer `il`'s feed-forward width (llama.cpp's `n_ff(il)`).
    pub fn n_ff_of(&self, il: usize) -> u32 {
        self.n_ff_layers.get(il).copied().unwrap_or(self.n_ff)
    }

    /// Layer `il`'s KV heads.
    pub fn n_head_kv_of(&self, il: usize) -> u32 {
        self.n_head_kv_layers.get(il).copied().unwrap_or(self.n_head_kv)
    }

    /// Layer `il`'s head size of K (llama.cpp's `n_embd_head_k(il)`).
    pub fn head_dim_k_of(&self, il: usize) -> u32 {
        match self.head_dims_swa {
            Some((k, _)) if self.is_swa(il) => k,
            _ => self.head_dim_k,
        }
    }

    /// Layer `il`'s head size of V (llama.cpp's `n_embd_head_v(il)`).
    pub fn head_dim_v_of(&self, il: usize) -> u32 {
        match self.head_dims_swa {
            Some((_, v)) if self.is_swa(il) => v,
            _ => self.head_dim_v,
        }
    }

    /// Layer `il`'s K width over its KV heads (llama.cpp's `n_embd_k_gqa(il)`).
    pub fn n_embd_k_gqa_of(&self, il: usize) -> u32 {
        self.head_dim_k_of(il) * self.n_head_kv_of(il)
    }

    /// Layer `il`'s V width over its KV heads (llama.cpp's `n_embd_v_gqa(il)`).
    pub fn n_embd_v_gqa_of(&self, il: usize) -> u32 {
        self.head_dim_v_of(il) * self.n_head_kv_of(il)
    }

    /// The layer whose KV cache layer `il` attends over: its own, or for the layers past
    /// `n_layer_kv` the last cached one of its kind (llama.cpp's gemma3n/gemma4 reuse:
    /// the last full-attention layer, else the one before it).
    pub fn kv_source(&self, il: usize) -> usize {
        let n_kv = self.n_layer_kv as usize;
        match il < n_kv {
            true => il,
            false => n_kv - if self.is_swa(il) { 2 } else { 1 },
        }
    }

    /// Whether the layers' head sizes or KV head counts differ.
    pub fn heads_vary(&self) -> bool {
        self.head_dims_swa.is_some() || !self.n_head_kv_layers.is_empty()
    }

    pub fn is_swa(&self, il: usize) -> bool {
        self.swa.as_ref().is_some_and(|swa| swa.layers[il])
    }

    /// The KV cache's shape for this model.
    pub fn kv_shape(&self) -> KvShape {
        KvShape {
            attends: self
                .recurrent
                .iter()
                .zip(&self.ffn_only)
                .enumerate()
                .map(|(il, (&recurrent, &ffn_only))| {
                    (self.attention_beside_state || (!recurrent && !ffn_only)) && il < self.n_layer_kv as usize
                })
                .collect(),
            windows: (0..self.n_layer as usize)
                .map(|il| self.swa.as_ref().filter(|_| self.is_swa(il)).map(|swa| swa.window))
                .collect(),
            chunked: self.swa.as_ref().is_some_and(|swa| swa.chunked),
            // llama.cpp's gemma4 sets LLAMA_NON_CAUSAL_TYPE_SWA_ONLY.
            dense_layers_stay_causal: self.arch.name == "gemma4",
            n_embd_k: (0..self.n_layer as usize).map(|il| self.n_embd_k_gqa_of(il)).collect(),
            n_embd_v: (0..self.n_layer as usize).map(|il| self.n_embd_v_gqa_of(il)).collect(),
            head_dim_k: self.head_dim_k,
            head_dim_v: self.head_dim_v,
            has_v: self.mla.is_none(),
        }
    }

    /// The recurrent state's shape, where some layers keep one: llama.cpp's `n_embd_r`
    /// (a convolution's last `kernel - 1` inputs) and `n_embd_s` (Mamba-2's scan state,
    /// or a delta net's: `d_state · d_inner` both).
    pub fn recurrent_shape(&self) -> Option<RecurrentShape> {
        if !self.recurrent.contains(&true) {
            return None;
        }
        let (conv_width, ssm_width) = match (self.ssm, self.short_conv_kernel) {
            (Some(ssm), _) => ((ssm.d_conv - 1) * ssm.conv_channels(), ssm.d_state * ssm.d_inner),
            (None, Some(kernel)) => (self.n_embd * (kernel - 1), 0),
            (None, None) => return None,
        };
        Some(RecurrentShape {
            layers: self.recurrent.clone(),
            conv_width,
            ssm_width,
        })
    }

    /// Whether no layer attends (llama.cpp's recurrent architectures: mamba2): the
    /// model has no KV cache.
    pub fn attention_free(&self) -> bool {
        !self.attention_beside_state && !self.recurrent.contains(&false)
    }

    /// The width of a row of given embeddings (llama.cpp's `n_embd_inp`): `n_embd`, and
    /// `n_embd` more per deepstack layer.
    pub fn n_embd_inp(&self) -> u32 {
        self.n_embd * (1 + self.n_deepstack_layers)
    }

    /// The usual attention scale, 1/sqrt(head size).
    pub fn kq_scale(&self) -> f32 {
        1.0 / (self.head_dim_k as f32).sqrt()
    }

    /// Whether layer `il` rotates Q and K.
    pub fn rotates(&self, il: usize) -> bool {
        self.no_rope_every.is_none_or(|n| !(il + 1).is_multiple_of(n as usize))
    }

    /// The rotary embedding of layer `il`: sliding layers have their own.
    pub fn layer_rope(&self, il: usize) -> &Rope {
        match &self.swa {
            Some(swa) if swa.layers[il] => &swa.rope,
            _ => &self.rope,
        }
    }

    /// Reads and validates the hyper-parameters of `arch`; `n_vocab` comes from the
    /// embedding tensor, the one place every model states it.
    pub(crate) fn read(
        gguf: &Gguf,
        arch: ArchTraits,
        n_vocab: u32,
        read_extra: fn(&Keys, &mut HParams) -> Result<()>,
    ) -> Result<HParams> {
        let keys = Keys {
            gguf,
            prefix: arch.name,
            asked: Default::default(),
        };
        let n_embd = keys.u32("embedding_length")?;
        let n_layer = keys.u32("block_count")?;
        // llama.cpp's recurrent architectures: every layer is recurrent, and what it
        // reads of attention (the heads, 0 in their files) goes unused.
        let attention_free = RECURRENT_ARCHITECTURES.contains(&arch.name);
        let n_head = match attention_free {
            true => {
                let _ = keys.opt_u32("attention.head_count")?;
                0
            }
            false => keys.u32("attention.head_count")?,
        };
        let (n_head_kv, recurrent, n_head_kv_layers) = if attention_free {
            let _ = keys.get("attention.head_count_kv");
            (0, vec![true; n_layer as usize], Vec::new())
        } else {
            read_head_count_kv(&keys, n_head, n_layer)?
        };
        let kv_counts = n_head_kv_layers.iter().copied().filter(|&n| n > 0).chain([n_head_kv]);
        let max_head_kv = kv_counts.clone().max().unwrap_or(n_head_kv);
        if !attention_free && (n_head == 0 || kv_counts.clone().any(|n| n == 0 || n_head % n != 0)) {
            return Err(Error::Load(format!(
                "{}: attention.head_count_kv ({n_head_kv}) must divide attention.head_count ({n_head})",
                arch.name
            )));
        }
        let (head_dim_k, head_dim_v) = if attention_free {
            (0, 0)
        } else {
            let default_head_dim = if n_embd % n_head == 0 { n_embd / n_head } else { 0 };
            (
                keys.opt_u32("attention.key_length")?.unwrap_or(default_head_dim),
                keys.opt_u32("attention.value_length")?.unwrap_or(default_head_dim),
            )
        };
        if !attention_free && (head_dim_k == 0 || head_dim_v == 0 || head_dim_k % 2 != 0) {
            return Err(Error::Load(format!(
                "{}: attention heads must split embedding_length {n_embd} evenly into an even head size \
                 (head_count {n_head}, key_length {head_dim_k})",
                arch.name
            )));
        }
        let n_expert = keys.opt_u32("expert_count")?.unwrap_or(0);
        if n_expert > 0 && !arch.experts {
            return Err(Error::Unsupported(format!(
                "{}: a mixture of experts ({n_expert} experts) is not supported for this architecture by elelem; \
                 llama.cpp runs such models",
                arch.name
            )));
        }
        let n_ctx_train = keys.u32("context_length")?;
        let rope_dims = match attention_free {
            true => 0,
            false => keys.opt_u32("rope.dimension_count")?.unwrap_or(head_dim_k),
        };
        if !attention_free && (rope_dims == 0 || rope_dims > head_dim_k || rope_dims % 2 != 0) {
            return Err(Error::Load(format!(
                "{}: rope.dimension_count {rope_dims} must be even and at most the head size {head_dim_k}",
                arch.name
            )));
        }
        let freq_base = keys.opt_f32("rope.freq_base")?.unwrap_or(10_000.0);
        let eps_key = match arch.norm {
            NormType::Rms => "attention.layer_norm_rms_epsilon",
            NormType::Layer => "attention.layer_norm_epsilon",
        };
        // Checked after the architecture's keys, which may give it otherwise (nemotron_h's).
        let norm_eps = keys.opt_f32(eps_key)?;
        // One feed-forward width per layer, as llama.cpp's get_key_or_arr reads it. Widths
        // of 0 (nemotron_h's layers without a feed-forward) are the architecture's to read:
        // one that does not leaves the key unread, refused.
        let ff_key = format!("{}.feed_forward_length", arch.name);
        let ffn_gaps =
            matches!(gguf.get(&ff_key), Some(Value::Array(widths)) if widths.iter().any(|w| w.as_u64() == Some(0)));
        let mut n_ff_layers = Vec::new();
        let n_ff = match (attention_free, ffn_gaps) {
            (true, _) => keys.opt_u32("feed_forward_length")?.unwrap_or(0),
            (false, true) => 0,
            (false, false) => {
                let widths = keys
                    .opt_u32s("feed_forward_length", n_layer as usize)?
                    .ok_or_else(|| missing(arch.name, "feed_forward_length"))?;
                if widths.len() != n_layer as usize || widths.contains(&0) {
                    return Err(Error::Load(format!(
                        "{}.feed_forward_length must be one width or one per layer ({n_layer}), got {widths:?}",
                        arch.name
                    )));
                }
                n_ff_layers = widths;
                n_ff_layers.first().copied().unwrap_or(0)
            }
        };
        // Products in u64: a hostile head count times head size may wrap a u32 into
        // a width that matches the tensors while the graph uses the real factors.
        let width = |heads: u32, head_dim: u32| u64::from(heads) * u64::from(head_dim);
        // Without attention, the widths of attention are 0, and so may the feed-forward's
        // be (a mamba2 has none; its files say 0).
        for (what, v, may_be_zero) in [
            ("block_count", u64::from(n_layer), false),
            (
                "feed_forward_length",
                n_ff_layers.iter().copied().chain([n_ff]).max().map_or(0, u64::from),
                attention_free || ffn_gaps,
            ),
            ("embedding_length", u64::from(n_embd), false),
            (
                "attention.head_count × key_length",
                width(n_head, head_dim_k),
                attention_free,
            ),
            (
                "attention.head_count_kv × key_length",
                width(max_head_kv, head_dim_k),
                attention_free,
            ),
            (
                "attention.head_count_kv × value_length",
                width(max_head_kv, head_dim_v),
                attention_free,
            ),
        ] {
            if (v == 0 && !may_be_zero) || v > MAX_WIDTH {
                return Err(Error::Load(format!(
                    "{}: {what} = {v} is out of range (1 to {MAX_WIDTH})",
                    arch.name
                )));
            }
        }
        let positive = |v: f32| v.is_finite() && v > 0.0;
        if !positive(freq_base) {
            return Err(Error::Load(format!(
                "{}: rope.freq_base ({freq_base}) must be positive and finite",
                arch.name
            )));
        }
        let pooling = match keys.opt_i64("pooling_type")? {
            None | Some(-1) => None,
            Some(id) => Some(Pooling::from_id(id).ok_or_else(|| {
                Error::Load(format!(
                    "{}.pooling_type {id} is not one llama.cpp knows (0 to 4)",
                    arch.name
                ))
            })?),
        };
        let n_cls_out = match keys.get("classifier.output_labels") {
            None => 1,
            Some((full, v)) => v
                .as_array()
                .map(|labels| labels.len() as u32)
                .filter(|&n| n > 0 && u64::from(n) <= MAX_WIDTH)
                .ok_or_else(|| Error::Load(format!("{full} must be a non-empty array of labels")))?,
        };
        let rope = read_rope_scaling(&keys, arch.rope_mode, rope_dims, n_ctx_train, freq_base)?;
        let mut hp = HParams {
            arch,
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            n_ff,
            n_vocab,
            n_ctx_train,
            head_dim_k,
            head_dim_v,
            head_dims_swa: None,
            n_head_kv_layers,
            n_ff_layers: match n_ff_layers.iter().any(|&n| n != n_ff) {
                true => n_ff_layers,
                false => Vec::new(),
            },
            per_layer_heads: false,
            n_layer_kv: n_layer,
            n_embd_per_layer: 0,
            norm_eps: norm_eps.unwrap_or(f32::NAN),
            rope,
            swa: None,
            final_logit_softcap: None,
            attn_logit_softcap: None,
            embedding_scale: None,
            residual_scale: None,
            logit_multiplier: None,
            attention_scale: None,
            no_rope_every: None,
            attn_temperature: None,
            n_expert,
            n_expert_used: 0,
            n_ff_exp: 0,
            n_ff_shexp: 0,
            n_layer_dense_lead: 0,
            n_moe_layer_step: 0,
            experts_weigh_input: false,
            expert_weights_norm: true,
            expert_gating: ExpertGating::Softmax,
            expert_weights_scale: 0.0,
            expert_groups: None,
            n_layer_nextn: 0,
            n_deepstack_layers: 0,
            xielu: Vec::new(),
            ffn_only: vec![false; recurrent.len()],
            attention_beside_state: false,
            recurrent,
            short_conv_kernel: None,
            ssm: None,
            causal_attn: keys.opt_bool("attention.causal")?.unwrap_or(true),
            mla: None,
            pooling,
            n_token_types: 0,
            n_cls_out,
            name: gguf.get("general.name").and_then(Value::as_str).map(str::to_string),
            size_label: gguf
                .get("general.size_label")
                .and_then(Value::as_str)
                .map(str::to_string),
            file_type: gguf
                .get("general.file_type")
                .and_then(Value::as_u64)
                .and_then(file_type_name),
        };
        read_extra(&keys, &mut hp)?;
        if norm_eps.is_none() && hp.norm_eps.is_nan() {
            return Err(missing(arch.name, eps_key));
        }
        // Positive, or 0 where the architecture runs with 0 whatever the file's positive value
        // (qwen2vl, as llama.cpp does).
        let zeroed = hp.norm_eps == 0.0 && norm_eps.is_some_and(positive);
        if !positive(hp.norm_eps) && !zeroed {
            return Err(Error::Load(format!(
                "{}: rope.freq_base ({freq_base}) and {eps_key} ({}) must be positive and finite",
                arch.name,
                norm_eps.unwrap_or(hp.norm_eps)
            )));
        }
        keys.check_all_read()?;
        if !hp.per_layer_heads && !hp.n_ff_layers.is_empty() {
            return Err(Error::Unsupported(format!(
                "{arch}.feed_forward_length differs between layers ({:?}), which elelem's {arch} does not run; \
                 llama.cpp does",
                hp.n_ff_layers,
                arch = hp.arch.name
            )));
        }
        if !hp.per_layer_heads && !hp.n_head_kv_layers.is_empty() {
            return Err(Error::Unsupported(format!(
                "{arch}.attention.head_count_kv differs between layers ({:?}), which elelem's {arch} does not \
                 run; llama.cpp does",
                hp.n_head_kv_layers,
                arch = hp.arch.name
            )));
        }
        if hp.recurrent.contains(&true) && hp.short_conv_kernel.is_none() && hp.ssm.is_none() {
            return Err(Error::Unsupported(format!(
                "{arch}: layers without KV heads (0 in attention.head_count or attention.head_count_kv) are \
                 recurrent, which elelem's {arch} does not run; llama.cpp runs recurrent layers in the \
                 architectures made for them",
                arch = hp.arch.name
            )));
        }
        Ok(hp)
    }
}

/// `attention.head_count_kv` as llama.cpp's `get_key_or_arr` reads it: one count for
/// every layer (absent: `n_head`), or one per layer, where 0 marks a recurrent layer
/// (LFM2's). The layers that attend must agree, as every graph here assumes.
/// Returns the count (the first attention layer's), which layers are recurrent, and
/// each layer's count where the attention layers' differ (else empty).
fn read_head_count_kv(keys: &Keys, n_head: u32, n_layer: u32) -> Result<(u32, Vec<bool>, Vec<u32>)> {
    let key = "attention.head_count_kv";
    let Some((full, Value::Array(counts))) = keys.get(key) else {
        let n = keys.opt_u32(key)?.unwrap_or(n_head);
        return Ok((n, vec![false; n_layer as usize], Vec::new()));
    };
    let counts: Option<Vec<u32>> = counts
        .iter()
        .map(|c| c.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect();
    let counts = counts
        .filter(|c| c.len() == n_layer as usize)
        .ok_or_else(|| Error::Load(format!("{full} must hold one unsigned integer per layer ({n_layer})")))?;
    let mut attending = counts.iter().copied().filter(|&n| n > 0);
    let n = attending.next().unwrap_or(0);
    let per_layer = match attending.any(|other| other != n) {
        true => counts.clone(),
        false => Vec::new(),
    };
    Ok((n, counts.iter().map(|&c| c == 0).collect(), per_layer))
}

/// The rotary embedding as llama.cpp's `llama_model::load_hparams` and
/// `llama_context`'s constructor set it up from `rope.scaling.*`: the factor (or the
/// old `rope.scale_linear`) divides the frequencies, except with type `none`; YaRN
/// turns on the blend (`ext_factor` 1) and the magnitude correction, which ggml's
/// kernel multiplies by `1 + 0.1 ln(factor)` again, so llama.cpp divides that out
/// here; `rope.scaling.attn_factor` multiplies it (LongRoPE's). The arithmetic is
/// llama.cpp's, in f32, so the bits agree.
fn read_rope_scaling(keys: &Keys, mode: RopeMode, n_dims: u32, n_ctx_train: u32, freq_base: f32) -> Result<Rope> {
    let scaling = keys.opt_str("rope.scaling.type")?.unwrap_or("linear");
    if !["none", "linear", "yarn", "longrope"].contains(&scaling) {
        return Err(Error::Load(format!(
            "{}.rope.scaling.type '{scaling}' is not one llama.cpp knows (none, linear, yarn, longrope)",
            keys.prefix
        )));
    }
    // The old key name counts only without the new one, as llama.cpp reads them.
    let old_factor = keys.opt_f32("rope.scale_linear")?;
    let factor = keys.opt_f32("rope.scaling.factor")?.or(old_factor).unwrap_or(0.0);
    let attn_factor_key = keys.opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0);
    let n_ctx_orig = keys
        .opt_u32("rope.scaling.original_context_length")?
        .filter(|&n| n != 0)
        .unwrap_or(n_ctx_train);
    if !(factor.is_finite() && factor >= 0.0 && attn_factor_key.is_finite() && attn_factor_key > 0.0) {
        return Err(Error::Load(format!(
            "{}: rope.scaling.factor ({factor}) must be finite and not negative, rope.scaling.attn_factor \
             ({attn_factor_key}) positive and finite",
            keys.prefix
        )));
    }
    let freq_scale = if scaling == "none" || factor == 0.0 {
        1.0
    } else {
        1.0 / factor
    };
    let ext_factor = if scaling == "yarn" { 1.0 } else { 0.0 };
    let mut attn_factor = 1.0f32;
    if ext_factor != 0.0 {
        let factor = 1.0 / freq_scale;
        attn_factor = if factor <= 1.0 { 1.0 } else { 0.1 * factor.ln() + 1.0 };
        attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
    }
    attn_factor *= attn_factor_key;
    Ok(Rope {
        mode,
        n_dims,
        n_ctx_orig,
        freq_base,
        freq_scale,
        ext_factor,
        attn_factor,
        beta_fast: 32.0,
        beta_slow: 1.0,
        sections: [0; MROPE_SECTIONS],
    })
}

/// YaRN's details as llama.cpp reads them for the architectures that have them
/// (`rope.scaling.yarn_beta_fast`, `yarn_beta_slow`, `yarn_log_multiplier`), and the
/// magnitude correction `llama_context` then computes with the log multiplier:
/// `mscale(factor, 1) / mscale(factor, log_mul)` in place of `mscale(factor, 1)`.
pub(crate) fn read_yarn_details(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let beta_fast = keys
        .opt_f32("rope.scaling.yarn_beta_fast")?
        .unwrap_or(hp.rope.beta_fast);
    let beta_slow = keys
        .opt_f32("rope.scaling.yarn_beta_slow")?
        .unwrap_or(hp.rope.beta_slow);
    let log_mul = keys.opt_f32("rope.scaling.yarn_log_multiplier")?.unwrap_or(0.0);
    if ![beta_fast, beta_slow, log_mul].iter().all(|v| v.is_finite()) {
        return Err(Error::Load(format!(
            "{}: rope.scaling.yarn_beta_fast ({beta_fast}), yarn_beta_slow ({beta_slow}) and \
             yarn_log_multiplier ({log_mul}) must be finite",
            keys.prefix
        )));
    }
    hp.rope.beta_fast = beta_fast;
    hp.rope.beta_slow = beta_slow;
    if hp.rope.ext_factor != 0.0 && log_mul != 0.0 {
        let mscale = |scale: f32, mscale: f32| {
            if scale <= 1.0 {
                1.0
            } else {
                0.1 * mscale * scale.ln() + 1.0
            }
        };
        let factor = 1.0 / hp.rope.freq_scale;
        let mut attn_factor = mscale(factor, 1.0) / mscale(factor, log_mul);
        attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
        attn_factor *= keys.opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0);
        hp.rope.attn_factor = attn_factor;
    }
    Ok(())
}

/// The sliding window as llama.cpp's `load_swa_pattern` reads it: none unless
/// `attention.sliding_window` (else `default_window`) is non-zero; which layers slide
/// comes from `attention.sliding_window_pattern`, either one flag per layer or a
/// period `n` (every `n`-th layer, counting from 1, is global; 0 means all slide),
/// else `default_period`. Sliding layers rotate with `swa_rope`, its base replaced by
/// `rope.freq_base_swa` when the file has it.
pub(crate) fn read_swa(
    keys: &Keys,
    n_layer: u32,
    default_window: u32,
    default_period: u32,
    swa_rope: Rope,
) -> Result<Option<Swa>> {
    let window = keys.opt_u32("attention.sliding_window")?.unwrap_or(default_window);
    if window == 0 {
        return Ok(None);
    }
    let layers = match keys.get("attention.sliding_window_pattern") {
        Some((full, Value::Array(flags))) => {
            let flags: Option<Vec<bool>> = flags
                .iter()
                .map(|f| f.as_bool().or_else(|| f.as_u64().map(|n| n != 0)))
                .collect();
            flags
                .filter(|f| f.len() == n_layer as usize)
                .ok_or_else(|| Error::Load(format!("{full} must hold one boolean or integer per layer ({n_layer})")))?
        }
        _ => {
            let period = keys
                .opt_u32("attention.sliding_window_pattern")?
                .unwrap_or(default_period);
            (0..n_layer).map(|il| period == 0 || il % period < period - 1).collect()
        }
    };
    let freq_base = keys.opt_f32("rope.freq_base_swa")?.unwrap_or(swa_rope.freq_base);
    if !(freq_base.is_finite() && freq_base > 0.0) {
        return Err(Error::Load(format!(
            "{}: rope.freq_base_swa ({freq_base}) must be positive",
            keys.prefix
        )));
    }
    Ok(Some(Swa {
        window,
        chunked: false,
        layers,
        rope: Rope { freq_base, ..swa_rope },
    }))
}

/// Keys of an architecture that llama.cpp reads without their changing what it
/// computes: the vocabulary's size (the embeddings say it), whether rope was
/// fine-tuned, and the old tensor layout's name.
const INFORMATIVE_KEYS: &[&str] = &["vocab_size", "rope.scaling.finetuned", "tensor_data_layout"];

/// The keys of one architecture (`<arch>.<key>`), read with the checks their types
/// need, and remembered: a key of the file that nobody asked for is refused.
pub(crate) struct Keys<'a> {
    gguf: &'a Gguf,
    prefix: &'a str,
    /// The keys asked for, present or not (without the prefix).
    asked: std::cell::RefCell<std::collections::HashSet<String>>,
}

impl Keys<'_> {
    fn get(&self, key: &str) -> Option<(String, &Value)> {
        self.asked.borrow_mut().insert(key.to_string());
        let full = format!("{}.{key}", self.prefix);
        self.gguf.get(&full).map(|v| (full, v))
    }

    /// Refuses a file with an `<arch>.` key that neither the common reader nor the
    /// architecture's asked for: llama.cpp may read it (a YaRN parameter, a shared
    /// expert's width), and decoding without it would differ from llama.cpp's.
    fn check_all_read(&self) -> Result<()> {
        let asked = self.asked.borrow();
        let prefix = format!("{}.", self.prefix);
        let unread = self.gguf.metadata().map(|(key, _)| key).find(|key| {
            key.strip_prefix(&prefix)
                .is_some_and(|key| !asked.contains(key) && !INFORMATIVE_KEYS.contains(&key))
        });
        match unread {
            Some(key) => Err(Error::Unsupported(format!(
                "metadata key {key} is not read by elelem's {arch}, which would decode without it; llama.cpp \
                 runs {arch} models and may use it",
                arch = self.prefix
            ))),
            None => Ok(()),
        }
    }

    pub(crate) fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        match self.get(key) {
            None => Ok(None),
            Some((full, v)) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{full} must be an unsigned 32-bit integer, got {v:?}"))),
        }
    }

    /// Unsigned integers, as llama.cpp's `get_key_or_arr` reads them: an array, or one
    /// value for all `n`.
    pub(crate) fn opt_u32s(&self, key: &str, n: usize) -> Result<Option<Vec<u32>>> {
        let Some((full, v)) = self.get(key) else {
            return Ok(None);
        };
        let values = match v.as_array() {
            Some(items) => items
                .iter()
                .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect::<Option<Vec<u32>>>()
                .filter(|values| values.len() <= n),
            None => v.as_u64().and_then(|x| u32::try_from(x).ok()).map(|x| vec![x; n]),
        };
        values.map(Some).ok_or_else(|| {
            Error::Load(format!(
                "{full} must be an unsigned 32-bit integer or an array of at most {n} of them, got {v:?}"
            ))
        })
    }

    /// Floats, one for each of `n` (an array of exactly `n`).
    pub(crate) fn opt_f32s(&self, key: &str, n: usize) -> Result<Option<Vec<f32>>> {
        let Some((full, v)) = self.get(key) else {
            return Ok(None);
        };
        v.as_array()
            .and_then(|items| items.iter().map(Value::as_f32).collect::<Option<Vec<f32>>>())
            .filter(|values| values.len() == n)
            .map(Some)
            .ok_or_else(|| Error::Load(format!("{full} must be an array of {n} floats, got {v:?}")))
    }

    /// Booleans, one for each of `n` (an array of exactly `n`).
    pub(crate) fn opt_bools(&self, key: &str, n: usize) -> Result<Option<Vec<bool>>> {
        let Some((full, v)) = self.get(key) else {
            return Ok(None);
        };
        v.as_array()
            .and_then(|items| items.iter().map(Value::as_bool).collect::<Option<Vec<bool>>>())
            .filter(|values| values.len() == n)
            .map(Some)
            .ok_or_else(|| Error::Load(format!("{full} must be an array of {n} booleans, got {v:?}")))
    }

    /// A key outside the architecture's prefix (a tokenizer's).
    pub(crate) fn global_u32(&self, full: &str) -> Result<Option<u32>> {
        match self.gguf.get(full) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{full} must be an unsigned 32-bit integer, got {v:?}"))),
        }
    }

    /// A key outside the architecture's prefix holding a float for each of `n_layer`
    /// layers, or one for all of them (llama.cpp's `get_key_or_arr`); required.
    pub(crate) fn global_f32_per_layer(&self, full: &str, n_layer: u32) -> Result<Vec<f32>> {
        let value = self
            .gguf
            .get(full)
            .ok_or_else(|| Error::Load(format!("missing required metadata key {full}")))?;
        let values = match value.as_array() {
            Some(items) => items
                .iter()
                .map(Value::as_f32)
                .collect::<Option<Vec<f32>>>()
                .filter(|v| v.len() == n_layer as usize),
            None => value.as_f32().map(|v| vec![v; n_layer as usize]),
        };
        values.ok_or_else(|| {
            Error::Load(format!(
                "{full} must be a float or an array of one per layer ({n_layer})"
            ))
        })
    }

    pub(crate) fn u32(&self, key: &str) -> Result<u32> {
        self.opt_u32(key)?.ok_or_else(|| missing(self.prefix, key))
    }

    fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some((full, v)) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{full} must be a string, got {v:?}"))),
        }
    }

    fn opt_i64(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some((full, v)) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{full} must be an integer, got {v:?}"))),
        }
    }

    pub(crate) fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some((full, v)) => v
                .as_f32()
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{full} must be a float, got {v:?}"))),
        }
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some((full, v)) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{full} must be a boolean, got {v:?}"))),
        }
    }

    pub(crate) fn f32(&self, key: &str) -> Result<f32> {
        self.opt_f32(key)?.ok_or_else(|| missing(self.prefix, key))
    }
}

fn missing(prefix: &str, key: &str) -> Error {
    Error::Load(format!("missing required metadata key {prefix}.{key}"))
}

/// llama.cpp's `llama_ftype` names, for display only.
fn file_type_name(id: u64) -> Option<&'static str> {
    Some(match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        32 => "BF16",
        _ => return None,
    })
}
