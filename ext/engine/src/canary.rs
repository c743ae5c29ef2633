//! The tiny llama canary: a deterministic, seeded ~0.6M-parameter llama model
//! (vocab 512, embd 64, 5 layers, 8 heads, 4 KV heads) with a SentencePiece-style
//! vocabulary, written by our own GGUF writer. llama.cpp loads it too, so its
//! golden comes from the reference like the real models'. The same recipe in
//! other [`Shape`]s gives the small models the hostile-file corpus starts from.

use elelem_gguf::{GgufWriter, TensorType, Value};
use ggml_sys as sys;

pub const SEED: u64 = 0x005e_ede1_e1e4;

/// A model the recipe can write.
#[derive(Debug, Clone)]
pub struct Shape {
    /// "llama"; "qwen2" adds Q, K and V biases; "qwen3" adds Q and K norms;
    /// "gemma3" adds Q and K norms, post-norms, a sliding window and a logit soft-cap;
    /// "olmo2" has post-norms instead of pre-norms and Q and K norms over all heads;
    /// "gemma2" has post-norms, a sliding window, both soft-caps and a tied output head;
    /// "granite" is llama with multipliers; "smollm3" is llama without rope in every
    /// fourth layer; "qwen3moe" is qwen3 with a mixture of experts; "phi3" fuses Q, K
    /// and V, and the gate and up projections.
    pub arch: &'static str,
    /// Adds `rope_freqs.weight`: Llama 3.1's rope scaling, one factor per rotated pair.
    pub rope_freqs: bool,
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
    arch: "llama",
    rope_freqs: false,
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
    arch: "llama",
    rope_freqs: true,
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

/// Qwen3's shape in small, its matrices in Q8_0 and its embeddings in F16.
pub const QWEN3: Shape = Shape {
    arch: "qwen3",
    rope_freqs: false,
    matrix_type: TensorType::Q8_0,
    embd_type: TensorType::F16,
    ..LLAMA3
};

/// Qwen3-MoE's shape in small: 8 experts of width 64, 2 per token.
pub const QWEN3MOE: Shape = Shape {
    arch: "qwen3moe",
    rope_freqs: false,
    n_ff: 64,
    n_expert: 8,
    n_expert_used: 2,
    ..LLAMA3
};

/// Phi-3's shape in small.
pub const PHI3: Shape = Shape {
    arch: "phi3",
    rope_freqs: false,
    ..LLAMA3
};

/// OLMo 2's shape in small.
pub const OLMO2: Shape = Shape {
    arch: "olmo2",
    rope_freqs: false,
    ..LLAMA3
};

/// The small random-weight models whose goldens come from the reference, by golden
/// name: one per architecture's shape, and one per weight type the CPU backend can
/// multiply (a llama whose matrices are all of that type).
pub fn synthetic() -> Vec<(String, Shape)> {
    let by_arch = [
        ("tiny-llama-canary", CANARY),
        ("tiny-llama3", LLAMA3),
        ("tiny-qwen3", QWEN3),
        ("tiny-qwen3moe", QWEN3MOE),
        ("tiny-olmo2", OLMO2),
        ("tiny-gemma2", GEMMA2),
        ("tiny-granite", GRANITE),
        ("tiny-smollm3", SMOLLM3),
        ("tiny-phi3", PHI3),
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

/// The ggml ids of the weight types with a model each: every type the CPU backend has
/// a dot product for, but F32 (the canary's) and the Q8_K/Q8_1 activation types.
const WEIGHT_TYPES: &[u32] = &[
    1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 16, 17, 22, 18, 21, 19, 29, 20, 23, 34, 35, 39,
];

/// The shape of the weight-type models: rows of 256, so that every block size fits.
const WEIGHTS: Shape = Shape {
    arch: "llama",
    rope_freqs: false,
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

/// Granite's shape in small, with multipliers of the sizes Granite 3 uses for its width.
pub const GRANITE: Shape = Shape {
    arch: "granite",
    rope_freqs: false,
    ..LLAMA3
};

/// SmolLM3's shape in small: its fourth and eighth layers have no rope.
pub const SMOLLM3: Shape = Shape {
    arch: "smollm3",
    rope_freqs: false,
    n_layer: 8,
    n_embd: 64,
    n_head: 4,
    n_head_kv: 1,
    ..LLAMA3
};

/// Gemma 2's shape in small: a window of 4 on every other layer, and an attention
/// soft-cap low enough to bite (without it the goldens leave llama.cpp's ids).
pub const GEMMA2: Shape = Shape {
    arch: "gemma2",
    rope_freqs: false,
    ..LLAMA3
};

/// SplitMix64: tiny, seedable, and the same everywhere.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Weights scaled like a trained network's, 1/sqrt(fan_in), so activations stay O(1).
    fn matrix(&mut self, fan_in: u64, fan_out: u64) -> Vec<f32> {
        let scale = 1.0 / (fan_in as f32).sqrt();
        (0..fan_in * fan_out).map(|_| self.next_f32() * scale).collect()
    }

    fn around_one(&mut self, n: u64) -> Vec<f32> {
        (0..n).map(|_| 1.0 + 0.1 * self.next_f32()).collect()
    }

    fn small(&mut self, n: u64) -> Vec<f32> {
        (0..n).map(|_| 0.1 * self.next_f32()).collect()
    }
}

/// A seeded model of `shape`, ready to write or to alter first.
pub fn writer(shape: &Shape) -> GgufWriter {
    let &Shape {
        arch,
        n_vocab,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        n_ff,
        ..
    } = shape;
    let mut rng = Rng(SEED);
    let mut w = GgufWriter::new();
    let s = |v: &str| Value::String(v.to_string());
    let key = |k: &str| format!("{arch}.{k}");
    w.set("general.architecture", s(arch))
        .set("general.name", s(&display_name(arch)))
        .set("general.file_type", Value::U32(0))
        .set(&key("context_length"), Value::U32(2048))
        .set(&key("embedding_length"), Value::U32(n_embd as u32))
        .set(&key("block_count"), Value::U32(n_layer))
        .set(&key("feed_forward_length"), Value::U32(n_ff as u32))
        .set(&key("attention.head_count"), Value::U32(n_head))
        .set(&key("attention.head_count_kv"), Value::U32(n_head_kv))
        .set(&key("rope.dimension_count"), Value::U32(n_embd as u32 / n_head))
        .set(&key("rope.freq_base"), Value::F32(10000.0))
        .set(&key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5));
    if arch == "gemma3" {
        w.set(&key("attention.sliding_window"), Value::U32(4))
            .set(&key("final_logit_softcapping"), Value::F32(30.0));
    }
    if shape.n_expert > 0 {
        w.set(&key("expert_count"), Value::U32(shape.n_expert))
            .set(&key("expert_used_count"), Value::U32(shape.n_expert_used))
            .set(&key("expert_feed_forward_length"), Value::U32(n_ff as u32));
    }
    if arch == "granite" {
        w.set(&key("logit_scale"), Value::F32(4.0))
            .set(&key("embedding_scale"), Value::F32(6.0))
            .set(&key("residual_scale"), Value::F32(0.5))
            .set(&key("attention.scale"), Value::F32(0.125));
    }
    if arch == "gemma2" {
        w.set(&key("attention.sliding_window"), Value::U32(4))
            .set(&key("attn_logit_softcapping"), Value::F32(0.5))
            .set(&key("final_logit_softcapping"), Value::F32(30.0));
    }
    set_vocab(&mut w, n_vocab);

    let kv_dim = n_embd / u64::from(n_head) * u64::from(n_head_kv);
    add_matrix(&mut w, &mut rng, "token_embd.weight", shape.embd_type, n_embd, n_vocab);
    for il in 0..n_layer {
        let n = |t: &str| format!("blk.{il}.{t}");
        let ty = shape.matrix_type;
        let olmo2 = arch == "olmo2";
        if !olmo2 {
            w.add_f32(&n("attn_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        }
        let phi3 = arch == "phi3";
        if phi3 {
            add_matrix(&mut w, &mut rng, &n("attn_qkv.weight"), ty, n_embd, n_embd + 2 * kv_dim);
        } else {
            add_matrix(&mut w, &mut rng, &n("attn_q.weight"), ty, n_embd, n_embd);
            add_matrix(&mut w, &mut rng, &n("attn_k.weight"), ty, n_embd, kv_dim);
            add_matrix(&mut w, &mut rng, &n("attn_v.weight"), ty, n_embd, kv_dim);
        }
        if arch == "qwen2" {
            w.add_f32(&n("attn_q.bias"), &[n_embd], &rng.small(n_embd));
            w.add_f32(&n("attn_k.bias"), &[kv_dim], &rng.small(kv_dim));
            w.add_f32(&n("attn_v.bias"), &[kv_dim], &rng.small(kv_dim));
        }
        add_matrix(&mut w, &mut rng, &n("attn_output.weight"), ty, n_embd, n_embd);
        if arch == "gemma3" || arch.starts_with("qwen3") {
            let head = n_embd / u64::from(n_head);
            w.add_f32(&n("attn_q_norm.weight"), &[head], &rng.around_one(head));
            w.add_f32(&n("attn_k_norm.weight"), &[head], &rng.around_one(head));
        }
        if olmo2 {
            w.add_f32(&n("attn_q_norm.weight"), &[n_embd], &rng.around_one(n_embd));
            w.add_f32(&n("attn_k_norm.weight"), &[kv_dim], &rng.around_one(kv_dim));
        }
        if arch == "gemma3" || arch == "gemma2" || olmo2 {
            w.add_f32(&n("post_attention_norm.weight"), &[n_embd], &rng.around_one(n_embd));
            w.add_f32(&n("post_ffw_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        }
        if !olmo2 {
            w.add_f32(&n("ffn_norm.weight"), &[n_embd], &rng.around_one(n_embd));
        }
        if shape.n_expert > 0 {
            let n_expert = u64::from(shape.n_expert);
            add_matrix(
                &mut w,
                &mut rng,
                &n("ffn_gate_inp.weight"),
                TensorType::F32,
                n_embd,
                n_expert,
            );
            for (name, fan_in, fan_out) in [("gate", n_embd, n_ff), ("up", n_embd, n_ff), ("down", n_ff, n_embd)] {
                let values = rng.matrix(fan_in, fan_out * n_expert);
                w.add_f32(
                    &n(&format!("ffn_{name}_exps.weight")),
                    &[fan_in, fan_out, n_expert],
                    &values,
                );
            }
        } else if phi3 {
            add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, 2 * n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
        } else {
            add_matrix(&mut w, &mut rng, &n("ffn_gate.weight"), ty, n_embd, n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_up.weight"), ty, n_embd, n_ff);
            add_matrix(&mut w, &mut rng, &n("ffn_down.weight"), ty, n_ff, n_embd);
        }
    }
    if shape.rope_freqs {
        // Llama 3.1's factors run from 1 (high frequencies) to 8 (the lowest); these
        // span that range over the pairs, so every pair is scaled differently.
        let pairs = n_embd / u64::from(n_head) / 2;
        let factors: Vec<f32> = (0..pairs).map(|i| 1.0 + 7.0 * i as f32 / (pairs - 1) as f32).collect();
        w.add_f32("rope_freqs.weight", &[pairs], &factors);
    }
    w.add_f32("output_norm.weight", &[n_embd], &rng.around_one(n_embd));
    if arch != "gemma2" {
        add_matrix(&mut w, &mut rng, "output.weight", shape.embd_type, n_embd, n_vocab);
    }
    w
}

/// `general.name`. llama.cpp gives the vocabulary of a model whose name says "phi3"
/// Phi-3's token attributes, which needs tokens this made-up vocabulary lacks.
fn display_name(arch: &str) -> String {
    match arch {
        "phi3" => "elelem tiny canary, Phi 3 shaped".into(),
        _ => format!("elelem tiny {arch} canary"),
    }
}

/// Adds a seeded `fan_in` × `fan_out` weight of type `ty`, quantized by ggml itself.
fn add_matrix(w: &mut GgufWriter, rng: &mut Rng, name: &str, ty: TensorType, fan_in: u64, fan_out: u64) {
    let values = rng.matrix(fan_in, fan_out);
    let dims = [fan_in, fan_out];
    if ty == TensorType::F32 {
        w.add_f32(name, &dims, &values);
        return;
    }
    let (row, rows) = (fan_in, fan_out);
    let size = ty.row_bytes(row).expect("rows fill whole blocks") * rows;
    let mut data = vec![0u8; size as usize];
    let ggml_type = ty.id() as sys::ggml_type;
    crate::ggml::init_once();
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
    w.add_tensor(name, &dims, ty, data);
}

/// A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens (in
/// vocabularies of 512 or more), then printable pieces (a few words and single
/// characters) to fill `n_vocab`.
fn set_vocab(w: &mut GgufWriter, n_vocab: u64) {
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
    let pieces = words
        .iter()
        .map(|w| w.to_string())
        .chain(chars.clone())
        .chain(chars.map(|c| format!("▁{c}")));
    for piece in pieces {
        if tokens.len() as u64 == n_vocab {
            break;
        }
        if tokens.contains(&piece) {
            continue;
        }
        tokens.push(piece);
        types.push(NORMAL);
    }
    let mut i = 0;
    while (tokens.len() as u64) < n_vocab {
        tokens.push(format!("▁w{i}"));
        types.push(NORMAL);
        i += 1;
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
