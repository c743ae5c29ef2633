//! Hostile GGUF files: a corpus built with our own writer from small valid
//! models, for the tests that show a file can never crash, hang or leak the
//! process, only open and run or be refused with [`Error::Load`] naming the
//! problem: the mutation test in `cargo test`, the Ruby spec, and the fuzzer's
//! seeds.
//!
//! - [`seeds`]: valid models (llama, qwen2 and gemma3; F32, F16, Q8_0 and
//!   K-quants; tied and untied output heads), and every synthetic model's family in a
//!   micro shape.
//! - [`structured`]: one deliberate flaw each, with words the error must contain.
//! - [`mutations`]: byte-level damage to a seed: truncations, every header byte
//!   overwritten with extreme values, random bytes.
//! - [`exercise`]: what every file is put through: parse, validate, load,
//!   generate, sample, tokenize, render its chat template.

use std::sync::Arc;

use elelem_gguf::{Gguf, GgufWriter, TensorType, Value};

use crate::canary::{self, Family, Rng, Shape, Vocab};
use elelem_engine::model::Kind;
use elelem_engine::text::chat;
use elelem_engine::text::sampler::{self, Sampler, SamplerParams};
use elelem_engine::{
    generate, Context, ContextParams, EmbedParams, Embedder, GenerateParams, Model, Normalize, Pooling, Result,
};

/// What a file must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Open and generate.
    Runs,
    /// Fail to open with [`Error::Load`](elelem_engine::Error::Load), the message containing this.
    Rejected(&'static str),
    /// Either: byte-level damage may land where it does no harm.
    Either,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub bytes: Vec<u8>,
    pub expect: Expect,
}

/// Two layers of a 16-wide llama with a 64-token vocabulary: about 25 KB.
pub const MICRO: Shape = Shape {
    family: canary::LLAMA,
    n_vocab: 64,
    n_embd: 16,
    n_layer: 2,
    n_head: 4,
    n_head_kv: 2,
    n_ff: 32,
    matrix_type: TensorType::F32,
    embd_type: TensorType::F32,
    n_expert: 0,
    n_expert_used: 0,
};

/// A family in the micro shape.
const fn micro(family: Family) -> Shape {
    Shape { family, ..MICRO }
}

const QWEN2: Shape = micro(canary::QWEN2);
const QWEN3: Shape = micro(canary::QWEN3);
const OLMO2: Shape = micro(canary::OLMO2);
const GEMMA2: Shape = micro(canary::GEMMA2);
const GRANITE: Shape = micro(canary::GRANITE);
const SMOLLM3: Shape = micro(canary::SMOLLM3);
const PHI3: Shape = micro(canary::PHI3);
const QWEN3MOE: Shape = Shape {
    n_expert: 4,
    n_expert_used: 2,
    ..micro(canary::QWEN3MOE)
};
const LLAMA3: Shape = micro(canary::LLAMA31);
/// With the made-up vocabulary: 2 layers, then one predicting further tokens; heads of 8,
/// as wide as its rope.
const GLM4MOE: Shape = Shape {
    n_head: 2,
    n_head_kv: 1,
    n_expert: 4,
    n_expert_used: 2,
    ..micro(Family {
        vocab: Vocab::MadeUp,
        ..canary::GLM4MOE
    })
};
/// With the made-up vocabulary: 2 layers of two heads of latent attention (one KV head).
const DEEPSEEK2: Shape = Shape {
    n_head: 2,
    n_head_kv: 1,
    n_expert: 4,
    n_expert_used: 2,
    ..micro(Family {
        vocab: Vocab::MadeUp,
        ..canary::DEEPSEEK2
    })
};
/// [`DEEPSEEK2`] with a multi-token-prediction layer after its two (GLM-4.7-Flash's layout).
const DEEPSEEK2_NEXTN: Shape = Shape {
    family: Family {
        nextn: 1,
        ..DEEPSEEK2.family
    },
    ..DEEPSEEK2
};
/// A family's `n_deepstack_layers` key (0 where it has none).
fn deepstack_layers(family: &Family) -> u32 {
    family
        .keys
        .iter()
        .find_map(|&(key, ref value)| match (key, value) {
            ("n_deepstack_layers", canary::Key::U32(n)) => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

/// Every architecture of the synthetic models (`canary::synthetic()`, but the weight
/// types') in a micro shape: 2 layers of two 8-wide heads (one KV head, or two where
/// the model has as many as heads), 4 experts (2 per token) where it has experts.
fn micro_synthetic() -> impl Iterator<Item = (String, GgufWriter)> {
    canary::synthetic()
        .into_iter()
        .filter(|(name, _)| !name.starts_with("tiny-weights-"))
        .map(|(name, shape)| {
            let micro = Shape {
                n_embd: 16,
                n_head: 2,
                n_head_kv: if shape.n_head_kv == shape.n_head { 2 } else { 1 },
                n_expert: shape.n_expert.min(4),
                n_expert_used: shape.n_expert_used.min(2),
                // A layer pattern (nemotron_h's) whole, so that every kind of layer is there;
                // a layer after the deepstack ones (Qwen3-VL's), whose slices llama.cpp adds to
                // whole layer outputs, which its last layer does not keep.
                n_layer: shape
                    .family
                    .layer_pattern
                    .map_or(MICRO.n_layer, |p| p.len() as u32)
                    .max(deepstack_layers(&shape.family) + 1),
                // Rows of 16 fill no block of a quantized type (gpt-oss's MXFP4 experts);
                // the made-up vocabulary keeps a real one's tokens out of every mutant.
                ..micro(Family {
                    experts_type: TensorType::F32,
                    vocab: Vocab::MadeUp,
                    ..shape.family
                })
            };
            (
                format!("{}-micro", name.trim_start_matches("tiny-")),
                canary::writer(&micro),
            )
        })
}
const GEMMA3: Shape = micro(canary::GEMMA3);
/// Rows of 32 for Q8_0 blocks.
const Q8_0: Shape = Shape {
    n_embd: 32,
    n_ff: 64,
    matrix_type: TensorType::Q8_0,
    embd_type: TensorType::F16,
    ..MICRO
};
/// Rows of 256 for K-quant blocks; the Q4_K weights take the CPU backend's repacked layout.
const K_QUANTS: Shape = Shape {
    family: canary::QWEN2,
    n_embd: 256,
    n_ff: 256,
    n_layer: 1,
    matrix_type: TensorType::Q4_K,
    embd_type: TensorType::Q6_K,
    ..MICRO
};

/// The valid models everything else starts from.
pub fn seeds() -> Vec<Case> {
    let mut tied = canary::writer(&MICRO);
    tied.remove_tensor("output.weight");
    [
        ("llama-f32", canary::writer(&MICRO)),
        ("llama-tied-output", tied),
        ("qwen2-f32", canary::writer(&QWEN2)),
        ("qwen3-f32", canary::writer(&QWEN3)),
        ("olmo2-f32", canary::writer(&OLMO2)),
        ("gemma2-f32", canary::writer(&GEMMA2)),
        ("granite-f32", canary::writer(&GRANITE)),
        ("smollm3-f32", canary::writer(&SMOLLM3)),
        ("qwen3moe-f32", canary::writer(&QWEN3MOE)),
        ("phi3-f32", canary::writer(&PHI3)),
        ("llama3-rope-freqs", canary::writer(&LLAMA3)),
        ("gemma3-f32", canary::writer(&GEMMA3)),
        ("llama-q8_0-f16", canary::writer(&Q8_0)),
        ("qwen2-q4_k-q6_k", canary::writer(&K_QUANTS)),
        ("bert-f32", canary::Embedder::Encoder(canary::BERT).writer()),
        (
            "bert-rerank-f32",
            canary::Embedder::Encoder(canary::BERT_RERANK).writer(),
        ),
        ("nomic-bert-f32", canary::Embedder::Encoder(canary::NOMIC_BERT).writer()),
    ]
    .into_iter()
    .map(|(name, w)| (name.to_string(), w))
    .chain(micro_synthetic())
    .map(|(name, w)| Case {
        name,
        bytes: w.to_bytes(),
        expect: Expect::Runs,
    })
    .collect()
}

/// Files with one flaw each: every check of the loader, and what must still run.
pub fn structured() -> Vec<Case> {
    use Expect::{Rejected, Runs};
    use Value::{String as S, F32, I32, U32, U64};
    let k = |key: &str| format!("llama.{key}");
    let g = |key: &str| key.to_string();
    let text = |t: &str| Some(S(t.into()));
    let array = |v: Value, n: usize| Some(Value::Array(vec![v; n]));
    let vocabulary = |n: usize| Some(Value::Array((0..n).map(|i| S(format!("t{i}"))).collect()));
    let runaway = "{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}";
    let doubling = "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}";
    // (case, expectation, key, value or None to remove the key)
    #[rustfmt::skip]
    let metadata = vec![
        ("no-architecture", Rejected("general.architecture"), g("general.architecture"), None),
        ("architecture-not-a-string", Rejected("general.architecture"), g("general.architecture"), Some(U32(1))),
        ("unknown-architecture", Rejected("architecture 'mamba' is not one elelem runs (llama.cpp runs it)"),
            g("general.architecture"), text("mamba")),
        ("architecture-unknown-to-llama-cpp", Rejected("architecture 'nonesuch' is not one elelem runs (llama.cpp \
            does not know it either)"), g("general.architecture"), text("nonesuch")),
        // A key llama.cpp reads that elelem's llama would ignore: YaRN's correction range.
        ("unknown-key", Rejected("metadata key llama.rope.scaling.yarn_beta_fast is not read by elelem's llama"),
            k("rope.scaling.yarn_beta_fast"), Some(F32(16.0))),
        // Keys that change nothing llama.cpp computes.
        ("informative-vocab-size", Runs, k("vocab_size"), Some(U32(64))),
        ("informative-rope-finetuned", Runs, k("rope.scaling.finetuned"), Some(Value::Bool(true))),
        ("no-embedding-length", Rejected("llama.embedding_length"), k("embedding_length"), None),
        ("embedding-length-a-string", Rejected("embedding_length must be an unsigned"),
            k("embedding_length"), text("16")),
        ("embedding-length-negative", Rejected("embedding_length must be an unsigned"),
            k("embedding_length"), Some(I32(-16))),
        ("embedding-length-zero", Rejected("embedding_length 0"), k("embedding_length"), Some(U32(0))),
        ("embedding-length-not-the-tensors", Rejected("token_embd.weight has shape"),
            k("embedding_length"), Some(U32(32))),
        ("no-heads", Rejected("attention.head_count"), k("attention.head_count"), Some(U32(0))),
        ("kv-heads-zero", Rejected("head_count_kv (0) must divide"), k("attention.head_count_kv"), Some(U32(0))),
        ("kv-heads-not-dividing-heads", Rejected("head_count_kv (3) must divide"),
            k("attention.head_count_kv"), Some(U32(3))),
        ("heads-not-dividing-width", Rejected("split embedding_length 16 evenly"),
            k("attention.head_count"), Some(U32(6))),
        ("odd-head-size", Rejected("key_length 3"), k("attention.key_length"), Some(U32(3))),
        // 4 heads × 0x4000_0004 wraps to 16 in 32 bits, the width the tensors have.
        ("head-width-wrapping-32-bits", Rejected("head_count × key_length"),
            k("attention.key_length"), Some(U32(0x4000_0004))),
        ("value-width-huge", Rejected("head_count_kv × value_length"), k("attention.value_length"), Some(U32(1 << 30))),
        ("rope-dims-zero", Rejected("rope.dimension_count 0"), k("rope.dimension_count"), Some(U32(0))),
        ("rope-dims-odd", Rejected("rope.dimension_count 3"), k("rope.dimension_count"), Some(U32(3))),
        ("rope-dims-beyond-head", Rejected("rope.dimension_count 1000"), k("rope.dimension_count"), Some(U32(1000))),
        ("rope-freq-base-nan", Rejected("rope.freq_base (NaN)"), k("rope.freq_base"), Some(F32(f32::NAN))),
        ("rope-freq-base-negative", Rejected("rope.freq_base (-1)"), k("rope.freq_base"), Some(F32(-1.0))),
        ("rope-freq-base-zero", Rejected("rope.freq_base (0)"), k("rope.freq_base"), Some(F32(0.0))),
        ("rope-freq-base-infinite", Rejected("rope.freq_base (inf)"), k("rope.freq_base"), Some(F32(f32::INFINITY))),
        ("rope-freq-base-a-string", Rejected("rope.freq_base must be a float"), k("rope.freq_base"), text("1e4")),
        ("rope-scaling-nan", Rejected("rope.scaling.factor (NaN) must be finite"),
            k("rope.scaling.factor"), Some(F32(f32::NAN))),
        ("rope-scaling-negative", Rejected("rope.scaling.factor (-2) must be finite and not negative"),
            k("rope.scaling.factor"), Some(F32(-2.0))),
        ("rope-scaling-yarn", Runs, k("rope.scaling.type"), text("yarn")),
        ("rope-scaling-unknown", Rejected("rope.scaling.type 'dynamic' is not one llama.cpp knows"),
            k("rope.scaling.type"), text("dynamic")),
        ("rope-scaling-none", Runs, k("rope.scaling.type"), text("none")),
        ("rope-scaling-type-not-a-string", Rejected("rope.scaling.type must be a string"),
            k("rope.scaling.type"), Some(U32(1))),
        ("mixture-of-experts", Rejected("a mixture of experts (8 experts)"), k("expert_count"), Some(U32(8))),
        ("rms-epsilon-nan", Rejected("layer_norm_rms_epsilon (NaN)"),
            k("attention.layer_norm_rms_epsilon"), Some(F32(f32::NAN))),
        ("rms-epsilon-zero", Rejected("layer_norm_rms_epsilon (0)"),
            k("attention.layer_norm_rms_epsilon"), Some(F32(0.0))),
        ("rms-epsilon-negative", Rejected("layer_norm_rms_epsilon (-1)"),
            k("attention.layer_norm_rms_epsilon"), Some(F32(-1.0))),
        ("no-rms-epsilon", Rejected("llama.attention.layer_norm_rms_epsilon"),
            k("attention.layer_norm_rms_epsilon"), None),
        ("no-context-length", Rejected("llama.context_length"), k("context_length"), None),
        ("no-layers", Rejected("block_count = 0"), k("block_count"), Some(U32(0))),
        ("more-layers-than-tensors", Rejected("missing tensor blk.2.attn_norm.weight"), k("block_count"), Some(U32(3))),
        ("layers-huge", Rejected("block_count = 2147483648"), k("block_count"), Some(U32(1 << 31))),
        ("feed-forward-not-the-tensors", Rejected("ffn_gate.weight has shape"),
            k("feed_forward_length"), Some(U32(33))),
        ("alignment-zero", Rejected("general.alignment"), g("general.alignment"), Some(U32(0))),
        ("alignment-not-a-power-of-two", Rejected("general.alignment"), g("general.alignment"), Some(U32(48))),
        ("alignment-not-u32", Rejected("general.alignment"), g("general.alignment"), Some(U64(32))),
        ("alignment-beyond-the-offsets", Rejected("not aligned to 1048576"),
            g("general.alignment"), Some(U32(1 << 20))),
        ("vocabulary-not-an-array", Rejected("tokens has 0 entries"), g("tokenizer.ggml.tokens"), text("a")),
        ("vocabulary-shorter-than-embeddings", Rejected("tokens has 63 entries"),
            g("tokenizer.ggml.tokens"), vocabulary(63)),
        ("scores-shorter-than-vocabulary", Rejected("scores has 63 entries"),
            g("tokenizer.ggml.scores"), array(F32(0.0), 63)),
        ("types-shorter-than-vocabulary", Rejected("token_type has 63 entries"),
            g("tokenizer.ggml.token_type"), array(I32(1), 63)),
        // The tokenizer cannot be used, but ids still can.
        ("tokens-not-strings", Runs, g("tokenizer.ggml.tokens"), array(U32(0), 64)),
        ("tokens-duplicated", Runs, g("tokenizer.ggml.tokens"), array(S("a".into()), 64)),
        ("tokens-empty", Runs, g("tokenizer.ggml.tokens"), array(S(String::new()), 64)),
        ("no-tokenizer-model", Runs, g("tokenizer.ggml.model"), None),
        ("unknown-tokenizer-model", Runs, g("tokenizer.ggml.model"), text("nonesuch")),
        ("bos-out-of-range", Runs, g("tokenizer.ggml.bos_token_id"), Some(U32(1 << 30))),
        ("eos-out-of-range", Runs, g("tokenizer.ggml.eos_token_id"), Some(U32(u32::MAX))),
        // A template's failure is the caller's to see, when it renders.
        ("chat-template-runaway", Runs, g("tokenizer.chat_template"), text(runaway)),
        ("chat-template-doubling", Runs, g("tokenizer.chat_template"), text(doubling)),
        ("chat-template-malformed", Runs, g("tokenizer.chat_template"), text("{% for %}{{")),
    ];
    let mut cases = keyed(&MICRO, metadata);

    for (name, message) in [
        ("token_embd.weight", "missing tensor token_embd.weight"),
        ("output_norm.weight", "missing tensor output_norm.weight"),
        ("blk.0.ffn_down.weight", "missing tensor blk.0.ffn_down.weight"),
        ("blk.1.attn_q.weight", "missing tensor blk.1.attn_q.weight"),
        ("blk.1.attn_norm.weight", "missing tensor blk.1.attn_norm.weight"),
    ] {
        cases.push(edited(&format!("missing-{name}"), Rejected(message), &MICRO, |w| {
            w.remove_tensor(name);
        }));
    }
    let gemma = |key: &str| format!("gemma3.{key}");
    #[rustfmt::skip]
    let gemma3 = vec![
        ("gemma3-window-huge", Runs, gemma("attention.sliding_window"), Some(U32(u32::MAX))),
        ("gemma3-pattern-not-per-layer", Rejected("sliding_window_pattern must hold one boolean or integer per layer"),
            gemma("attention.sliding_window_pattern"), Some(Value::Array(vec![Value::Bool(true); 3]))),
        ("gemma3-pattern-all-global", Runs, gemma("attention.sliding_window_pattern"), Some(U32(1))),
        ("gemma3-swa-freq-base-nan", Rejected("rope.freq_base_swa (NaN)"), gemma("rope.freq_base_swa"), Some(F32(f32::NAN))),
        ("gemma3-softcap-nan", Runs, gemma("final_logit_softcapping"), Some(F32(f32::NAN))),
    ];
    cases.extend(keyed(&GEMMA3, gemma3));
    cases.push(edited(
        "gemma3-missing-q-norm",
        Rejected("missing tensor blk.0.attn_q_norm.weight"),
        &GEMMA3,
        |w| {
            w.remove_tensor("blk.0.attn_q_norm.weight");
        },
    ));
    cases.push(edited(
        "qwen3-missing-k-norm",
        Rejected("missing tensor blk.1.attn_k_norm.weight"),
        &QWEN3,
        |w| {
            w.remove_tensor("blk.1.attn_k_norm.weight");
        },
    ));
    cases.push(edited(
        "gemma2-with-output-bias",
        Rejected("tensor blk.1.attn_output.bias is not part of elelem's gemma2 graph"),
        &GEMMA2,
        |w| {
            w.add_f32("blk.1.attn_output.bias", &[16], &[0.5; 16]);
        },
    ));
    cases.push(edited(
        "gemma2-with-untied-output",
        Rejected("tensor output.weight is not part of elelem's gemma2 graph"),
        &GEMMA2,
        |w| {
            w.add_f32("output.weight", &[16, 64], &[0.5; 16 * 64]);
        },
    ));
    let granite = |key: &str| format!("granite.{key}");
    #[rustfmt::skip]
    let granite_flaws = vec![
        ("granite-no-logit-scale", Rejected("missing required metadata key granite.logit_scale"),
            granite("logit_scale"), None),
        ("granite-logit-scale-zero", Rejected("logit_scale must be finite and non-zero"),
            granite("logit_scale"), Some(F32(0.0))),
        ("granite-logit-scale-nan", Rejected("logit_scale must be finite and non-zero"),
            granite("logit_scale"), Some(F32(f32::NAN))),
        ("granite-embedding-scale-zero-is-unset", Runs, granite("embedding_scale"), Some(F32(0.0))),
        ("granite-without-rope", Rejected("files without rope"), granite("rope.scaling.finetuned"),
            Some(Value::Bool(false))),
        ("granite-deepstack", Rejected("deepstack embeddings are not supported"), granite("deepstack_mapping"),
            Some(Value::Array(vec![I32(-1), I32(0)]))),
    ];
    cases.extend(keyed(&GRANITE, granite_flaws));
    let moe = |key: &str| format!("qwen3moe.{key}");
    #[rustfmt::skip]
    let moe_flaws = vec![
        ("moe-more-used-than-experts", Rejected("expert_used_count (5) 1 to it"), moe("expert_used_count"), Some(U32(5))),
        ("moe-none-used", Rejected("expert_used_count (0) 1 to it"), moe("expert_used_count"), Some(U32(0))),
        ("moe-experts-huge", Rejected("expert_count (100000) must be 1 to 512"), moe("expert_count"), Some(U32(100_000))),
        ("moe-expert-width-not-the-tensors", Rejected("ffn_gate_exps.weight has shape"),
            moe("expert_feed_forward_length"), Some(U32(7))),
    ];
    cases.extend(keyed(&QWEN3MOE, moe_flaws));
    let glm = |key: &str| format!("glm4moe.{key}");
    #[rustfmt::skip]
    let glm4moe_flaws = vec![
        ("glm4moe-all-layers-predict-ahead", Rejected("must leave some of the block_count (3) layers"),
            glm("nextn_predict_layers"), Some(U32(3))),
        ("glm4moe-no-shared-expert", Rejected("must give a shared expert"), glm("expert_shared_count"), Some(U32(0))),
        ("glm4moe-mrope-sections", Rejected("M-RoPE sections"), glm("rope.dimension_sections"),
            Some(Value::Array(vec![U32(2), U32(1), U32(1), U32(0)]))),
        ("glm4moe-groups-none-used", Rejected("expert_group_used_count (0) 1 to fewer"), glm("expert_group_count"),
            Some(U32(2))),
        ("glm4moe-groups-of-one", Rejected("groups of 2 or more"), glm("expert_group_count"), Some(U32(4))),
        ("glm4moe-gating-unknown", Rejected("expert_gating_func 9"), glm("expert_gating_func"), Some(U32(9))),
        ("glm4moe-softmax-gating", Runs, glm("expert_gating_func"), Some(U32(1))),
        // Without the key, llama.cpp decodes every layer, and finds the predicting one's tensors unused.
        ("glm4moe-nextn-unsaid", Rejected("nextn.eh_proj.weight is not part"), glm("nextn_predict_layers"), None),
    ];
    cases.extend(keyed(&GLM4MOE, glm4moe_flaws));
    let ds = |key: &str| format!("deepseek2.{key}");
    #[rustfmt::skip]
    let deepseek2_flaws = vec![
        ("deepseek2-one-mla-length", Rejected("come together"), ds("attention.value_length_mla"), None),
        ("deepseek2-two-kv-heads", Rejected("head_count_kv 1 (got 2)"), ds("attention.head_count_kv"), Some(U32(2))),
        ("deepseek2-key-length-not-the-row", Rejected("kv_lora_rank plus rope.dimension_count"),
            ds("attention.key_length"), Some(U32(64))),
        ("deepseek2-no-q-lora-rank", Rejected("deepseek2.attention.q_lora_rank"), ds("attention.q_lora_rank"), None),
        ("deepseek2-q-lora-rank-not-the-tensors", Rejected("attn_q_a.weight has shape"),
            ds("attention.q_lora_rank"), Some(U32(8))),
        ("deepseek2-expert-widths-by-layer", Rejected("different widths by layer"),
            ds("expert_feed_forward_length"), Some(Value::Array(vec![U32(32), U32(16)]))),
        ("deepseek2-no-shared-expert", Rejected("must give a shared expert"), ds("expert_shared_count"), Some(U32(0))),
        ("deepseek2-temperature-without-length", Rejected("temperature_length (0)"),
            ds("attention.temperature_scale"), Some(F32(0.1))),
        ("deepseek2-groups-all-used", Rejected("expert_group_used_count (2) 1 to fewer"),
            ds("expert_group_used_count"), Some(U32(2))),
        ("deepseek2-groups-unsaid", Runs, ds("expert_group_count"), None),
        ("deepseek2-softmax-gating", Runs, ds("expert_gating_func"), Some(U32(1))),
        ("deepseek2-gating-unsaid", Runs, ds("expert_gating_func"), None),
        ("deepseek2-yarn-log-multiplier-nan", Rejected("yarn_log_multiplier (NaN)"),
            ds("rope.scaling.yarn_log_multiplier"), Some(F32(f32::NAN))),
    ];
    cases.extend(keyed(&DEEPSEEK2, deepseek2_flaws));
    cases.push(edited(
        // Converted before llama.cpp split attn_kv_b: llama.cpp decodes it decompressed.
        "deepseek2-decompressed-form",
        Rejected("without attention.key_length_mla"),
        &DEEPSEEK2,
        |w| {
            w.remove("deepseek2.attention.key_length_mla");
            w.remove("deepseek2.attention.value_length_mla");
        },
    ));
    cases.push(edited(
        "deepseek2-attn-kv-b-beside",
        Rejected("attn_kv_b"),
        &DEEPSEEK2,
        |w| {
            w.add_f32("blk.0.attn_kv_b.weight", &[64, 64], &vec![0.0; 64 * 64]);
        },
    ));
    // The predicting layer's tensors are declared, shapes checked, and left unused.
    cases.push(edited("deepseek2-nextn", Runs, &DEEPSEEK2_NEXTN, |_| {}));
    cases.push(edited(
        "deepseek2-nextn-without-k-b",
        Rejected("missing tensor blk.2.attn_k_b.weight"),
        &DEEPSEEK2_NEXTN,
        |w| {
            w.remove_tensor("blk.2.attn_k_b.weight");
        },
    ));
    cases.push(edited(
        // Mistral Large 3's temperature tuning: Q scaled by the position's temperature.
        "deepseek2-temperature",
        Runs,
        &DEEPSEEK2,
        |w| {
            w.set("deepseek2.attention.temperature_scale", Value::F32(0.1));
            w.set("deepseek2.attention.temperature_length", Value::U32(4));
        },
    ));
    cases.push(edited(
        "glm4moe-nextn-misshapen",
        Rejected("blk.2.nextn.enorm.weight has shape"),
        &GLM4MOE,
        |w| {
            w.remove_tensor("blk.2.nextn.enorm.weight");
            w.add_f32("blk.2.nextn.enorm.weight", &[3], &[1.0, 2.0, 3.0]);
        },
    ));
    cases.push(edited(
        "phi3-longrope-factors-misshapen",
        Rejected("rope_factors_long.weight"),
        &PHI3,
        |w| {
            w.set("phi3.rope.scaling.type", Value::String("longrope".into()));
            w.add_f32("rope_factors_long.weight", &[3], &[1.0, 2.0, 3.0]);
        },
    ));
    cases.push(edited(
        // A fused Q/K/V in a block that norms Q and K over their whole width: split
        // into contiguous rows, as llama.cpp's build_qkv does without reshaping.
        "olmo2-fused-qkv",
        Runs,
        &OLMO2,
        |w| {
            let (embd, kv) = (OLMO2.n_embd, OLMO2.n_embd / 2);
            for il in 0..OLMO2.n_layer {
                for part in ["q", "k", "v"] {
                    w.remove_tensor(&format!("blk.{il}.attn_{part}.weight"));
                }
                let values = vec![0.05; (embd * (embd + 2 * kv)) as usize];
                w.add_f32(&format!("blk.{il}.attn_qkv.weight"), &[embd, embd + 2 * kv], &values);
            }
        },
    ));
    cases.push(edited(
        // Factors without a LongRoPE scaling type: used all the same, as llama.cpp does.
        "phi3-rope-factors-alone",
        Runs,
        &PHI3,
        |w| {
            w.add_f32("rope_factors_long.weight", &[2], &[1.0, 2.0]);
        },
    ));
    cases.push(edited(
        "moe-missing-router",
        Rejected("missing tensor blk.1.ffn_gate_inp.weight"),
        &QWEN3MOE,
        |w| {
            w.remove_tensor("blk.1.ffn_gate_inp.weight");
        },
    ));
    cases.push(edited(
        "olmo3-sliding-window",
        Rejected("olmo2: a sliding window (OLMo 3) is not supported"),
        &OLMO2,
        |w| {
            w.set("olmo2.attention.sliding_window", Value::U32(4));
        },
    ));
    cases.push(edited(
        "olmo2-with-pre-norm",
        Rejected("tensor blk.0.attn_norm.weight is not part of elelem's olmo2 graph"),
        &OLMO2,
        |w| {
            w.add_f32("blk.0.attn_norm.weight", &[16], &[1.0; 16]);
        },
    ));
    // Tensors a graph would not read change llama.cpp's math or make it refuse the file.
    cases.push(edited(
        "unknown-tensor",
        Rejected("tensor blk.0.ffn_gate_shexp.weight is not part of elelem's llama graph (llama.cpp runs llama"),
        &MICRO,
        |w| {
            w.add_f32("blk.0.ffn_gate_shexp.weight", &[16, 32], &[0.5; 16 * 32]);
        },
    ));
    cases.push(edited(
        "qwen2-with-rope-freqs",
        Rejected("tensor rope_freqs.weight is not part of elelem's qwen2 graph"),
        &QWEN2,
        |w| {
            w.add_f32("rope_freqs.weight", &[2], &[1.0, 2.0]);
        },
    ));
    cases.push(edited(
        "llama-with-fused-and-separate-qkv",
        Rejected("tensor blk.0.attn_q.weight is not part of elelem's llama graph"),
        &MICRO,
        |w| {
            w.add_f32("blk.0.attn_qkv.weight", &[16, 32], &[0.5; 16 * 32]);
        },
    ));
    cases.push(edited(
        "llama3-rope-freqs-misshapen",
        Rejected("tensor rope_freqs.weight has shape [3], expected [2]"),
        &LLAMA3,
        |w| {
            w.remove_tensor("rope_freqs.weight");
            w.add_f32("rope_freqs.weight", &[3], &[1.0, 2.0, 4.0]);
        },
    ));
    cases.push(edited(
        "qwen2-missing-bias",
        Rejected("missing tensor blk.0.attn_k.bias"),
        &QWEN2,
        |w| {
            w.remove_tensor("blk.0.attn_k.bias");
        },
    ));
    for (name, dims, message) in [
        (
            "blk.0.attn_k.weight",
            &[8, 16][..],
            "tensor blk.0.attn_k.weight has shape [8, 16], expected [16, 8]",
        ),
        (
            "blk.0.attn_norm.weight",
            &[16, 2],
            "tensor blk.0.attn_norm.weight has shape [16, 2], expected [16]",
        ),
        (
            "token_embd.weight",
            &[1024],
            "tensor token_embd.weight has shape [1024]",
        ),
        (
            "output.weight",
            &[16, 63],
            "tensor output.weight has shape [16, 63], expected [16, 64]",
        ),
    ] {
        cases.push(edited(&format!("misshapen-{name}"), Rejected(message), &MICRO, |w| {
            w.remove_tensor(name);
            w.add_f32(name, dims, &vec![0.5; dims.iter().product::<u64>() as usize]);
        }));
    }
    cases.push(edited(
        "embeddings-fewer-than-vocabulary",
        Rejected("tokenizer.ggml.tokens has 64 entries but token_embd.weight has 63 rows"),
        &MICRO,
        |w| {
            w.remove_tensor("token_embd.weight").remove_tensor("output.weight");
            w.add_f32("token_embd.weight", &[16, 63], &[0.5; 16 * 63]);
        },
    ));
    // A trailing dimension of one is the same shape to ggml.
    cases.push(edited("norm-with-unit-dimensions", Runs, &MICRO, |w| {
        w.remove_tensor("blk.0.attn_norm.weight");
        w.add_f32("blk.0.attn_norm.weight", &[16, 1, 1], &[1.0; 16]);
    }));
    let retyped = |case: &str, shape: &Shape, name: &'static str, ty: u32, expect: Expect| {
        let ty = TensorType::from_id(ty).expect("a known type");
        edited(case, expect, shape, move |w| {
            let dims = [shape.n_embd, shape.n_ff];
            let size = ty.row_bytes(dims[0]).expect("whole blocks") * dims[1];
            w.remove_tensor(name);
            w.add_tensor(name, &dims, ty, vec![0x3c; size as usize]);
        })
    };
    cases.push(retyped(
        "gate-as-i32",
        &MICRO,
        "blk.0.ffn_gate.weight",
        26,
        Rejected("has type I32, which is not usable"),
    ));
    cases.push(retyped(
        "gate-as-q8_1",
        &Q8_0,
        "blk.0.ffn_gate.weight",
        9,
        Rejected("has type Q8_1, which is not usable"),
    ));
    cases.push(retyped(
        "gate-as-q8_k",
        &K_QUANTS,
        "blk.0.ffn_gate.weight",
        15,
        Rejected("has type Q8_K, which is not usable"),
    ));
    cases.push(retyped("gate-as-bf16", &MICRO, "blk.0.ffn_gate.weight", 30, Runs));
    cases.push(retyped("gate-as-iq4_nl", &Q8_0, "blk.0.ffn_gate.weight", 20, Runs));
    cases.push(edited(
        "norm-as-f16",
        Rejected("attn_norm.weight has type F16, which is not usable"),
        &MICRO,
        |w| {
            w.remove_tensor("blk.0.attn_norm.weight");
            w.add_tensor("blk.0.attn_norm.weight", &[16], TensorType::F16, vec![0; 32]);
        },
    ));
    cases.push(edited(
        "duplicate-tensor",
        Rejected("duplicate tensor name blk.0.attn_norm.weight"),
        &MICRO,
        |w| {
            w.add_f32("blk.0.attn_norm.weight", &[16], &[1.0; 16]);
        },
    ));
    cases.push(edited("dimensions-overflowing", Rejected("overflow"), &MICRO, |w| {
        w.add_tensor("huge", &[1 << 40, 1 << 40], TensorType::F32, Vec::new());
    }));
    cases.push(edited("dimension-zero", Rejected("out of range"), &MICRO, |w| {
        w.add_tensor("empty", &[16, 0], TensorType::F32, Vec::new());
    }));
    cases.push(edited("five-dimensions", Rejected("5 dimensions"), &MICRO, |w| {
        w.add_tensor("5d", &[1, 1, 1, 1, 1], TensorType::F32, vec![0; 4]);
    }));
    cases.push(edited(
        "row-not-whole-blocks",
        Rejected("not a multiple of Q8_0's block size 32"),
        &MICRO,
        |w| {
            w.add_tensor("ragged", &[16], TensorType::Q8_0, vec![0; 34]);
        },
    ));
    // Graphs of more nodes than the smallest arena holds.
    cases.push(edited(
        "many-layers",
        Runs,
        &Shape {
            n_embd: 8,
            n_head: 2,
            n_head_kv: 1,
            n_ff: 8,
            n_layer: 1200,
            ..MICRO
        },
        |_| {},
    ));

    let micro = canary::writer(&MICRO).to_bytes();
    let (q_type, q_offset) = tensor_fields(&micro, "blk.0.attn_q.weight");
    let (_, k_offset) = tensor_fields(&micro, "blk.0.attn_k.weight");
    let q_data = read_u64(&micro, q_offset);
    // Where the value of general.name (its type, then its length and text) starts.
    let name_value = after_string(&micro, "general.name");
    let [n_tensors, n_kv] = [8, 16].map(|at| read_u64(&micro, at));
    let le32 = |v: u32| v.to_le_bytes().to_vec();
    let le64 = |v: u64| v.to_le_bytes().to_vec();
    // (case, expectation, where, the bytes written there)
    #[rustfmt::skip]
    let patches = vec![
        ("magic", Rejected("not a GGUF file"), 0, b"GGML".to_vec()),
        ("version-9", Rejected("unsupported GGUF version 9"), 4, le32(9)),
        ("tensor-count-huge", Rejected("tensor count"), 8, le64(u64::MAX)),
        ("tensor-count-one-more", Rejected(""), 8, le64(n_tensors + 1)),
        ("metadata-count-huge", Rejected("metadata count"), 16, le64(1 << 40)),
        ("metadata-count-one-more", Rejected(""), 16, le64(n_kv + 1)),
        ("type-removed", Rejected("unknown tensor type 4"), q_type, le32(4)),
        ("type-unknown", Rejected("unknown tensor type 99"), q_type, le32(99)),
        ("type-huge", Rejected("unknown tensor type 4294967295"), q_type, le32(u32::MAX)),
        ("offset-misaligned", Rejected("is not aligned to 32"), q_offset, le64(q_data + 4)),
        ("offset-beyond-the-file", Rejected("outside the data section"), q_offset, le64(u64::MAX - 31)),
        ("offsets-overlapping", Rejected("overlap"), k_offset, le64(q_data)),
        ("value-type-unknown", Rejected("unknown value type 13"), name_value, le32(13)),
        ("string-length-huge", Rejected("string length"), name_value + 4, le64(u64::MAX)),
        ("not-utf8", Rejected("not valid UTF-8"), name_value - 1, vec![0xff]),
        ("array-length-huge", Rejected("array length"),
            after_string(&micro, "tokenizer.ggml.scores") + 8, le64(1 << 60)),
        ("bool-byte", Rejected("bool byte is 7"), after_string(&micro, "tokenizer.ggml.add_bos_token") + 4, vec![7]),
        // As long as the key it replaces, so only the key changes.
        ("duplicate-key", Rejected("duplicate metadata key llama.block_count"),
            after_string(&micro, "general.file_type") - 17, b"llama.block_count".to_vec()),
    ];
    cases.extend(patches.into_iter().map(|(name, expect, at, value)| {
        let mut bytes = micro.clone();
        put(&mut bytes, at, &value);
        Case {
            name: name.into(),
            bytes,
            expect,
        }
    }));

    // Weights the numbers of which are garbage: generation must go on, every id in range.
    let filled = |name: &str, which: &dyn Fn(&str) -> bool, value: f32| Case {
        name: name.into(),
        bytes: fill_f32(&micro, which, value),
        expect: Runs,
    };
    cases.push(filled("nan-weights", &|_| true, f32::NAN));
    cases.push(filled(
        "infinite-embeddings",
        &|n| n == "token_embd.weight",
        f32::INFINITY,
    ));
    cases.push(filled("nan-norms", &|n| n.contains("norm"), f32::NAN));
    cases.push(filled("huge-output-head", &|n| n == "output.weight", f32::MAX));
    let mut q8 = canary::writer(&Q8_0).to_bytes();
    let g = Gguf::from_bytes(&q8).expect("a seed");
    let q = g.tensor("blk.0.attn_q.weight").expect("present");
    for block in q8[g.tensor_range(q)].chunks_mut(34) {
        block[..2].copy_from_slice(&0x7e00u16.to_le_bytes());
    }
    cases.push(Case {
        name: "q8_0-nan-scales".into(),
        bytes: q8,
        expect: Runs,
    });
    cases.extend(encoder_flaws());
    cases.extend(mamba2_flaws());
    cases.extend(gemma4_flaws());
    cases.extend(gemma3n_flaws());
    cases
}

/// What elelem's gemma3n refuses: keys whose values llama.cpp fixes saying otherwise (it
/// runs such files with its own), KV sharing that would read a layer of another kind, a
/// fused `attn_qkv`, biases, and a sharing layer without the K and V llama.cpp loads.
fn gemma3n_flaws() -> Vec<Case> {
    use Expect::{Rejected, Runs};
    use Value::{F32, U32};
    // 22 layers: the last two share the caches of layers 18 and 19.
    const GEMMA3N: Shape = Shape {
        n_layer: 22,
        ..micro(canary::GEMMA3N)
    };
    let g = |key: &str| format!("gemma3n.{key}");
    let sparsity = |sparse: usize, scale: f32| {
        Value::Array(
            (0..22)
                .map(|il| F32(if il < sparse { scale } else { f32::NEG_INFINITY }))
                .collect(),
        )
    };
    let sliding = |full: &[u32]| Value::Array((0..22).map(|il| Value::Bool(!full.contains(&il))).collect());
    #[rustfmt::skip]
    let keys = vec![
        ("gemma3n-two-streams", Rejected("gemma3n.altup_num_inputs is 2"), g("altup_num_inputs"), Some(U32(2))),
        ("gemma3n-second-stream-active", Rejected("gemma3n.altup_active_idx is 1"), g("altup_active_idx"),
            Some(U32(1))),
        ("gemma3n-per-layer-width", Rejected("gemma3n.embedding_length_per_layer_input is 128"),
            g("embedding_length_per_layer_input"), Some(U32(128))),
        ("gemma3n-shared-kv-layers", Rejected("gemma3n.attention.shared_kv_layers is 4"),
            g("attention.shared_kv_layers"), Some(U32(4))),
        ("gemma3n-sparse-layers", Rejected("gemma3n.activation_sparsity_scale"), g("activation_sparsity_scale"),
            Some(sparsity(12, 1.644_853_4))),
        // The quantile off in its last bits, as another conversion's arithmetic may give it.
        ("gemma3n-sparsity-last-bits", Runs, g("activation_sparsity_scale"), Some(sparsity(10, 1.644_853_6))),
        ("gemma3n-softcap", Rejected("gemma3n.final_logit_softcapping is 50.0"), g("final_logit_softcapping"),
            Some(F32(50.0))),
        ("gemma3n-shared-kv-of-another-kind", Rejected("of another kind"), g("attention.sliding_window_pattern"),
            Some(sliding(&[4, 9, 14, 18, 21]))),
        ("gemma3n-value-heads-of-another-size", Rejected("K and V heads of one size"), g("attention.value_length"),
            Some(U32(4))),
        ("gemma3n-no-window", Rejected("missing required metadata key gemma3n.attention.sliding_window"),
            g("attention.sliding_window"), None),
        // The keys llama.cpp does not read, absent: it runs with its own values, as elelem.
        ("gemma3n-no-stream-count", Runs, g("altup_num_inputs"), None),
        ("gemma3n-no-sparsity", Runs, g("activation_sparsity_scale"), None),
        ("gemma3n-no-shared-kv-layers", Runs, g("attention.shared_kv_layers"), None),
        ("gemma3n-period-pattern", Runs, g("attention.sliding_window_pattern"), Some(U32(5))),
    ];
    let mut cases = keyed(&GEMMA3N, keys);
    let (embd, head) = (GEMMA3N.n_embd, 2 * GEMMA3N.n_embd / u64::from(GEMMA3N.n_head));
    cases.push(edited(
        "gemma3n-sharing-layer-without-v",
        Rejected("missing tensor blk.21.attn_v.weight"),
        &GEMMA3N,
        |w| {
            w.remove_tensor("blk.21.attn_v.weight");
        },
    ));
    cases.push(edited("gemma3n-fused-qkv", Rejected("fused attn_qkv"), &GEMMA3N, |w| {
        let width = head * u64::from(GEMMA3N.n_head + 2 * GEMMA3N.n_head_kv);
        w.add_f32(
            "blk.0.attn_qkv.weight",
            &[embd, width],
            &vec![0.0; (embd * width) as usize],
        );
    }));
    cases.push(edited("gemma3n-q-bias", Rejected("blk.0.attn_q.bias"), &GEMMA3N, |w| {
        let width = head * u64::from(GEMMA3N.n_head);
        w.add_f32("blk.0.attn_q.bias", &[width], &vec![0.0; width as usize]);
    }));
    cases.push(edited(
        "gemma3n-without-altup-proj",
        Rejected("missing tensor altup_proj.weight"),
        &GEMMA3N,
        |w| {
            w.remove_tensor("altup_proj.weight");
        },
    ));
    cases
}

/// What elelem's gemma4 refuses (llama.cpp runs or refuses it too): KV sharing that would
/// read a layer of another kind, per-layer embeddings without their tensors, KV heads it
/// cannot cache as one width per group, and experts without their counts, width or tensors.
fn gemma4_flaws() -> Vec<Case> {
    use Expect::{Rejected, Runs};
    use Value::U32;
    let gemma4 = canary::shape("tiny-gemma4").expect("a synthetic gemma4");
    let gemma4_moe = canary::shape("tiny-gemma4-moe").expect("a synthetic gemma4 with experts");
    let g = |key: &str| format!("gemma4.{key}");
    #[rustfmt::skip]
    let keys = vec![
        ("gemma4-per-layer-embeddings-absent", Rejected("per_layer_token_embd"),
            g("embedding_length_per_layer_input"), Some(U32(8))),
        ("gemma4-shared-kv-of-another-kind", Rejected("of another kind"), g("attention.shared_kv_layers"),
            Some(U32(2))),
        ("gemma4-shared-kv-all", Rejected("must leave two"), g("attention.shared_kv_layers"), Some(U32(5))),
        ("gemma4-experts-without-used-count", Rejected("expert_used_count (0)"), g("expert_count"), Some(U32(4))),
        ("gemma4-kv-heads-differ-among-sliding", Rejected("differing among the sliding layers"),
            g("attention.head_count_kv"), Some(Value::Array([4, 2, 2, 4, 4, 2].map(U32).to_vec()))),
        ("gemma4-no-pattern", Rejected("gemma4.attention.sliding_window_pattern"),
            g("attention.sliding_window_pattern"), None),
        // E2B's wider feed-forwards on its last layers.
        ("gemma4-feed-forward-widths-not-the-tensors", Rejected("blk.4.ffn_gate.weight"),
            g("feed_forward_length"), Some(Value::Array([384, 384, 384, 384, 768, 768].map(U32).to_vec()))),
        ("gemma4-feed-forward-widths-one-per-layer", Runs, g("feed_forward_length"),
            Some(Value::Array([384; 6].map(U32).to_vec()))),
    ];
    let mut cases = keyed(&gemma4, keys);
    #[rustfmt::skip]
    let moe_keys = vec![
        ("gemma4-moe-expert-width-zero", Rejected("expert_feed_forward_length (0)"), g("expert_feed_forward_length"),
            Some(U32(0))),
        ("gemma4-moe-expert-width-not-the-tensors", Rejected("blk.0.ffn_gate_up_exps.weight"),
            g("expert_feed_forward_length"), Some(U32(32))),
        ("gemma4-moe-expert-widths-per-layer", Runs, g("expert_feed_forward_length"),
            Some(Value::Array([64; 6].map(U32).to_vec()))),
        ("gemma4-moe-more-used-than-experts", Rejected("expert_used_count (9)"), g("expert_used_count"),
            Some(U32(9))),
        ("gemma4-moe-no-expert-count", Rejected("gemma4.expert_used_count is not read"), g("expert_count"), None),
    ];
    cases.extend(keyed(&gemma4_moe, moe_keys));
    cases.push(edited(
        "gemma4-moe-no-router-scale",
        Rejected("blk.0.ffn_gate_inp.scale"),
        &gemma4_moe,
        |w| {
            w.remove_tensor("blk.0.ffn_gate_inp.scale");
        },
    ));
    cases.push(edited("gemma4-moe-no-per-expert-scales", Runs, &gemma4_moe, |w| {
        for il in 0..gemma4_moe.n_layer {
            w.remove_tensor(&format!("blk.{il}.ffn_down_exps.scale"));
        }
    }));
    cases.push(edited(
        "gemma4-router",
        Rejected("has a router (ffn_gate_inp) but the file no expert_count"),
        &gemma4,
        |w| {
            w.add_f32(
                "blk.0.ffn_gate_inp.weight",
                &[gemma4.n_embd, 4],
                &vec![0.0; 4 * gemma4.n_embd as usize],
            );
        },
    ));
    cases
}

/// Mamba-2's keys and tensors: the scan's shape checked as ggml asserts it, the
/// attention keys a recurrent architecture's files carry read and left unused, and
/// granitehybrid's experts refused.
fn mamba2_flaws() -> Vec<Case> {
    use Expect::{Rejected, Runs};
    use Value::U32;
    const MAMBA2: Shape = micro(canary::MAMBA2);
    const GRANITE_HYBRID: Shape = micro(canary::GRANITE_HYBRID);
    let m = |key: &str| format!("mamba2.{key}");
    let gh = |key: &str| format!("granitehybrid.{key}");
    #[rustfmt::skip]
    let mamba2 = vec![
        ("mamba2-conv-kernel-one", Rejected("ssm.conv_kernel (1) must be 2 to 64"), m("ssm.conv_kernel"), Some(U32(1))),
        ("mamba2-groups-not-dividing", Rejected("ssm.group_count (3) must divide"), m("ssm.group_count"), Some(U32(3))),
        ("mamba2-state-huge", Rejected("state_size (1073741824)"), m("ssm.state_size"), Some(U32(1 << 30))),
        ("mamba2-no-group-count", Rejected("missing required metadata key mamba2.ssm.group_count"),
            m("ssm.group_count"), None),
        ("mamba2-state-not-the-tensors", Rejected("ssm_in.weight has shape"), m("ssm.state_size"), Some(U32(8))),
        // llama.cpp reads the heads and leaves them unused in a recurrent architecture.
        ("mamba2-heads-unused", Runs, m("attention.head_count"), Some(U32(7))),
    ];
    let mut cases = keyed(&MAMBA2, mamba2);
    cases.push(edited(
        "mamba2-missing-decay",
        Rejected("missing tensor blk.1.ssm_a"),
        &MAMBA2,
        |w| {
            w.remove_tensor("blk.1.ssm_a");
        },
    ));
    #[rustfmt::skip]
    let granite_hybrid = vec![
        ("granitehybrid-experts", Rejected("a mixture of experts (4 experts)"), gh("expert_count"), Some(U32(4))),
        ("granitehybrid-inner-size-not-twice", Rejected("ssm.inner_size (48) must be twice embedding_length (16)"),
            gh("ssm.inner_size"), Some(U32(48))),
        ("granitehybrid-all-recurrent", Rejected("attention.head_count_kv"), gh("attention.head_count_kv"),
            Some(Value::Array(vec![U32(0); 2]))),
    ];
    cases.extend(keyed(&GRANITE_HYBRID, granite_hybrid));
    cases.push(edited("granitehybrid-without-conv-bias", Runs, &GRANITE_HYBRID, |w| {
        w.remove_tensor("blk.0.ssm_conv1d.bias");
    }));
    cases.extend(nemotron_h_flaws());
    cases.extend(falcon_h1_flaws());
    cases
}

/// falcon-h1's tensors (attention beside Mamba-2 on every layer, a made-up vocabulary):
/// the ones llama.cpp loads and leaves out, the optional grouped norm, and what elelem refuses.
fn falcon_h1_flaws() -> Vec<Case> {
    use Expect::{Rejected, Runs};
    const FALCON_H1: Shape = micro(Family {
        vocab: Vocab::MadeUp,
        ..canary::FALCON_H1
    });
    let mut cases = keyed(
        &FALCON_H1,
        vec![(
            "falcon-h1-value-length-differs",
            Rejected("differs from value_length"),
            "falcon-h1.attention.value_length".into(),
            Some(Value::U32(8)),
        )],
    );
    cases.push(edited("falcon-h1-with-ssm-norm", Runs, &FALCON_H1, |w| {
        w.add_f32("blk.0.ssm_norm.weight", &[16, 2], &[1.0; 32]);
    }));
    // llama.cpp loads it, and its graph adds no bias to the attention's output.
    cases.push(edited("falcon-h1-attn-output-bias", Runs, &FALCON_H1, |w| {
        w.add_f32("blk.1.attn_output.bias", &[16], &[0.0; 16]);
    }));
    cases.push(edited(
        "falcon-h1-ffn-bias",
        Rejected("blk.0.ffn_up.bias"),
        &FALCON_H1,
        |w| {
            w.add_f32("blk.0.ffn_up.bias", &[32], &[0.0; 32]);
        },
    ));
    cases.push(edited(
        "falcon-h1-rope-freqs",
        Rejected("blk.0.rope_freqs.weight"),
        &FALCON_H1,
        |w| {
            w.add_f32("blk.0.rope_freqs.weight", &[2], &[0.0; 2]);
        },
    ));
    cases.push(edited(
        "falcon-h1-ffn-norm-suffixed",
        Rejected("missing tensor blk.0.ffn_norm"),
        &FALCON_H1,
        |w| {
            w.remove_tensor("blk.0.ffn_norm");
            w.add_f32("blk.0.ffn_norm.weight", &[16], &[1.0; 16]);
        },
    ));
    cases
}

/// nemotron_h's layer kinds (Mamba-2, attention, a feed-forward alone: `M*-M` here, a
/// made-up vocabulary): its epsilon's key, its per-layer widths, and what it refuses.
fn nemotron_h_flaws() -> Vec<Case> {
    use Expect::{Rejected, Runs};
    use Value::{F32, U32};
    const NEMOTRON_H: Shape = Shape {
        n_layer: 4,
        ..micro(Family {
            layer_pattern: Some("M*-M"),
            vocab: Vocab::MadeUp,
            ..canary::NEMOTRON_H
        })
    };
    let k = |key: &str| format!("nemotron_h.{key}");
    let widths = |w: [u32; 4]| Some(Value::Array(w.map(U32).to_vec()));
    #[rustfmt::skip]
    let keyed_cases = vec![
        ("nemotron_h-experts", Rejected("a mixture of experts (4 experts)"), k("expert_count"), Some(U32(4))),
        ("nemotron_h-nextn", Rejected("nemotron_h.nextn_predict_layers is not read"), k("nextn_predict_layers"),
            Some(U32(1))),
        ("nemotron_h-no-layer-norm-epsilon", Rejected("missing required metadata key nemotron_h.attention.layer_norm_epsilon"),
            k("attention.layer_norm_epsilon"), None),
        // llama.cpp's fallback for the RMS norms' epsilon.
        ("nemotron_h-no-rms-epsilon", Runs, k("attention.layer_norm_rms_epsilon"), None),
        ("nemotron_h-rms-epsilon-nan", Rejected("layer_norm_rms_epsilon (NaN)"), k("attention.layer_norm_rms_epsilon"),
            Some(F32(f32::NAN))),
        ("nemotron_h-ffn-widths-differ", Rejected("feed_forward_length differs between layers"),
            k("feed_forward_length"), widths([0, 0, 32, 16])),
        ("nemotron_h-ffn-widths-short", Rejected("one width per layer (4)"), k("feed_forward_length"),
            Some(Value::Array(vec![U32(0); 3]))),
    ];
    let mut cases = keyed(&NEMOTRON_H, keyed_cases);
    cases.push(edited(
        "nemotron_h-missing-ffn-up",
        Rejected("missing tensor blk.2.ffn_up.weight"),
        &NEMOTRON_H,
        |w| {
            w.remove_tensor("blk.2.ffn_up.weight");
        },
    ));
    // A gate on a feed-forward layer, which llama.cpp's nemotron_h does not declare either.
    cases.push(edited(
        "nemotron_h-ffn-layer-with-gate",
        Rejected("blk.2.ffn_gate.weight"),
        &NEMOTRON_H,
        |w| {
            w.add_f32("blk.2.ffn_gate.weight", &[16, 32], &[0.0; 16 * 32]);
        },
    ));
    cases
}

/// An encoder's own checks: its pooling, token types, learned positions and
/// reranker head.
fn encoder_flaws() -> Vec<Case> {
    use Expect::{Rejected, Runs};
    let encoder = |name: &str, expect: Expect, model: canary::Encoder, edit: &dyn Fn(&mut GgufWriter)| {
        let mut w = canary::Embedder::Encoder(model).writer();
        edit(&mut w);
        Case {
            name: name.into(),
            bytes: w.to_bytes(),
            expect,
        }
    };
    let labels = |n: usize| Value::Array(vec![Value::String("label".into()); n]);
    vec![
        encoder("bert-pooling-unknown", Rejected("pooling_type 9"), canary::BERT, &|w| {
            w.set("bert.pooling_type", Value::U32(9));
        }),
        encoder("bert-pooling-unspecified", Runs, canary::BERT, &|w| {
            w.set("bert.pooling_type", Value::I32(-1));
        }),
        encoder(
            "bert-no-token-type-count",
            Rejected("token type count"),
            canary::BERT,
            &|w| {
                w.remove("tokenizer.ggml.token_type_count");
            },
        ),
        encoder(
            "bert-token-types-mismatch",
            Rejected("token_types.weight"),
            canary::BERT,
            &|w| {
                w.set("tokenizer.ggml.token_type_count", Value::U32(7));
            },
        ),
        encoder(
            "bert-no-positions",
            Rejected("position_embd.weight"),
            canary::BERT,
            &|w| {
                w.remove_tensor("position_embd.weight");
            },
        ),
        encoder(
            "bert-context-beyond-positions",
            Rejected("position_embd.weight"),
            canary::BERT,
            &|w| {
                w.set("bert.context_length", Value::U32(1 << 20));
            },
        ),
        encoder("bert-causal", Runs, canary::BERT, &|w| {
            w.set("bert.attention.causal", Value::Bool(true));
        }),
        encoder(
            "rerank-no-labels",
            Rejected("output_labels"),
            canary::BERT_RERANK,
            &|w| {
                w.set("bert.classifier.output_labels", Value::Array(Vec::new()));
            },
        ),
        encoder(
            "rerank-labels-mismatch",
            Rejected("cls.output.weight"),
            canary::BERT_RERANK,
            &|w| {
                w.set("bert.classifier.output_labels", labels(3));
            },
        ),
        encoder(
            "nomic-bert-no-gate",
            Rejected("ffn_gate.weight"),
            canary::NOMIC_BERT,
            &|w| {
                w.remove_tensor("blk.0.ffn_gate.weight");
            },
        ),
    ]
}

/// Byte-level damage to `seed`: truncated at every length through the header
/// and at every 61st byte of the data; every header position overwritten with
/// each extreme value; and `n_random` copies with a few random bytes changed.
pub fn mutations(seed: &Case, n_random: usize) -> Vec<Case> {
    const EXTREMES: [&[u8]; 6] = [
        &[0xff; 8],
        &[0; 8],
        &[0xff, 0xff, 0xff, 0x7f],
        &[0, 0, 0, 0x80],
        &[0, 0, 0, 0, 1, 0, 0, 0],
        &[0x01],
    ];
    let bytes = &seed.bytes;
    let header = Gguf::from_bytes(bytes).expect("seeds are valid").data_offset() as usize;
    let mutant = |what: String, bytes: Vec<u8>| Case {
        name: format!("{}-{what}", seed.name),
        bytes,
        expect: Expect::Either,
    };
    let mut out = Vec::new();
    for len in (0..header + 64).chain((header + 64..bytes.len()).step_by(61)) {
        out.push(mutant(format!("truncated-{len}"), bytes[..len].to_vec()));
    }
    for at in 0..header {
        for (i, value) in EXTREMES.iter().enumerate() {
            let mut b = bytes.clone();
            put(&mut b, at, &value[..value.len().min(bytes.len() - at)]);
            out.push(mutant(format!("at-{at}-extreme-{i}"), b));
        }
    }
    let mut rng = Rng(canary::SEED ^ bytes.len() as u64);
    for i in 0..n_random {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.next_u64() % 4 {
            // Mostly the header, where the structure is.
            let span = if rng.next_u64().is_multiple_of(4) {
                b.len()
            } else {
                header
            };
            let at = (rng.next_u64() % span as u64) as usize;
            b[at] = rng.next_u64() as u8;
        }
        out.push(mutant(format!("random-{i}"), b));
    }
    out
}

/// Every seed, every structured case, and the mutations of the F32 llama and gemma3.
pub fn corpus(n_random: usize) -> Vec<Case> {
    let seeds = seeds();
    let mutated: Vec<Case> = seeds
        .iter()
        .filter(|s| ["llama-f32", "gemma3-f32"].contains(&s.name.as_str()))
        .flat_map(|s| mutations(s, n_random))
        .collect();
    seeds.into_iter().chain(structured()).chain(mutated).collect()
}

/// Opens a file from memory and, if it opens, runs it: a short generation
/// over two micro-batches, a sampled draw, tokenizing and rendering its chat
/// template when it has them. Panics if any id leaves the vocabulary.
pub fn exercise(bytes: &[u8]) -> Result<Vec<u32>> {
    let model = Arc::new(Model::from_gguf(Gguf::from_bytes(bytes)?)?);
    if model.hparams.arch.kind == Kind::Encoder {
        return exercise_encoder(model);
    }
    let n_vocab = model.hparams.n_vocab;
    let context = ContextParams {
        n_ctx: 16,
        n_threads: 1,
        n_ubatch: 4,
        n_seq_max: 1,
        pooling: None,
        flash_attn: true,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::clone(&model), context.clone())?;
    let prompt: Vec<u32> = (0..6).map(|i| i * 7 % n_vocab).collect();
    let params = |reuse_prefix| GenerateParams {
        max_tokens: 3,
        ignore_eos: true,
        reuse_prefix,
    };
    let (mut tokens, _) = generate(&mut ctx, &prompt, params(false), sampler::greedy)?;
    // A second turn that shares the first's prompt, keeping its cache.
    let turn: Vec<u32> = prompt.iter().chain(&tokens).copied().collect();
    tokens.extend(generate(&mut ctx, &turn, params(true), sampler::greedy)?.0);
    // Plain attention over a transposed V cache, as `flash_attn: false`.
    let plain = ContextParams {
        flash_attn: false,
        ..context
    };
    tokens.extend(
        generate(
            &mut Context::new(Arc::clone(&model), plain)?,
            &prompt,
            params(false),
            sampler::greedy,
        )?
        .0,
    );
    let mut sampler = Sampler::new(SamplerParams {
        temperature: 0.8,
        repeat_penalty: 1.1,
        ..Default::default()
    });
    prompt.iter().for_each(|&t| sampler.accept(t));
    tokens.push(sampler.sample(ctx.logits()));
    if let Ok(tokenizer) = model.tokenizer() {
        let ids = tokenizer.tokenize("Hello, world! <s> \u{e9}\u{1F600}", true, true);
        tokenizer.detokenize(&ids, true);
        tokens.extend(ids);
    }
    assert!(
        tokens.iter().all(|&t| t < n_vocab),
        "an id outside the vocabulary: {tokens:?}"
    );
    if let Some(template) = model.chat_template() {
        let input = chat::ChatInput {
            messages: vec![chat::message("user", "hi")],
            add_generation_prompt: true,
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
            ..Default::default()
        };
        // A template's own failure is the caller's to see; it must just end.
        let _ = chat::render(template, &input);
    }
    Ok(tokens)
}

/// An encoder's run: texts embedded two a pass with its own pooling and one vector
/// per token, each normalization, and a reranker's scores where it has the head.
fn exercise_encoder(model: Arc<Model>) -> Result<Vec<u32>> {
    let n_vocab = model.hparams.n_vocab;
    let texts: Vec<Vec<u32>> = (1..6)
        .map(|n| (0..n).map(|i| (i * 7 + n) % n_vocab).collect())
        .collect();
    let poolings = [None, Some(Pooling::None), Some(Pooling::Cls), Some(Pooling::Rank)];
    for pooling in poolings {
        let params = EmbedParams {
            n_ctx: 16,
            n_threads: 1,
            adaptive_threads: false,
            own_kernels: true,
            pooling,
            batch_texts: 2,
        };
        // A model without a reranker's head refuses rank pooling; that is an answer too.
        let Ok(mut embedder) = Embedder::new(Arc::clone(&model), params) else {
            continue;
        };
        for normalize in [
            Normalize::None,
            Normalize::MaxAbs,
            Normalize::Euclidean,
            Normalize::PNorm(3),
        ] {
            let vectors = embedder.embed(&texts, normalize)?;
            assert_eq!(vectors.len(), texts.len());
        }
    }
    if let Ok(tokenizer) = model.tokenizer() {
        return Ok(tokenizer.tokenize("Hello, world! [SEP] \u{e9}\u{1F600}", true, true));
    }
    Ok(Vec::new())
}

/// Cases that each set one metadata key of a `shape` model, or remove it (`None`).
fn keyed(shape: &Shape, edits: Vec<(&str, Expect, String, Option<Value>)>) -> Vec<Case> {
    edits
        .into_iter()
        .map(|(name, expect, key, value)| {
            edited(name, expect, shape, |w| {
                match value {
                    Some(v) => w.set(&key, v),
                    None => w.remove(&key),
                };
            })
        })
        .collect()
}

fn edited(name: &str, expect: Expect, shape: &Shape, edit: impl FnOnce(&mut GgufWriter)) -> Case {
    let mut w = canary::writer(shape);
    edit(&mut w);
    Case {
        name: name.into(),
        bytes: w.to_bytes(),
        expect,
    }
}

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Where the length-prefixed string `s` ends in the header.
fn after_string(bytes: &[u8], s: &str) -> usize {
    let mut needle = (s.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(s.as_bytes());
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{s} is in the header"))
        + needle.len()
}

/// Where a tensor's type and offset fields are.
fn tensor_fields(bytes: &[u8], name: &str) -> (usize, usize) {
    let at = after_string(bytes, name);
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let ty = at + 4 + 8 * n_dims;
    (ty, ty + 4)
}

/// `bytes` with every F32 value of the tensors `which` picks set to `value`.
fn fill_f32(bytes: &[u8], which: &dyn Fn(&str) -> bool, value: f32) -> Vec<u8> {
    let g = Gguf::from_bytes(bytes).expect("a seed");
    let mut out = bytes.to_vec();
    for t in g
        .tensors()
        .iter()
        .filter(|t| t.tensor_type == TensorType::F32 && which(&t.name))
    {
        for v in out[g.tensor_range(t)].chunks_mut(4) {
            v.copy_from_slice(&value.to_le_bytes());
        }
    }
    out
}
