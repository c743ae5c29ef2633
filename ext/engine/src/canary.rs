//! The tiny llama canary: a deterministic, seeded ~0.6M-parameter llama model
//! (vocab 512, embd 64, 5 layers, 8 heads, 4 KV heads) with a SentencePiece-style
//! vocabulary, written by our own GGUF writer. llama.cpp loads it too, so its
//! golden comes from the reference like the real models'.

use elelem_gguf::{GgufWriter, Value};

pub const N_VOCAB: u64 = 512;
pub const N_EMBD: u64 = 64;
pub const N_LAYER: u32 = 5;
pub const N_HEAD: u32 = 8;
pub const N_HEAD_KV: u32 = 4;
pub const N_FF: u64 = 512;
pub const SEED: u64 = 0x005e_ede1_e1e4;

/// SplitMix64: tiny, seedable, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // Uniform in [-1, 1).
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Weights scaled like a trained network's, 1/sqrt(fan_in), so activations stay O(1).
    fn matrix(&mut self, fan_in: u64, fan_out: u64) -> Vec<f32> {
        let scale = 1.0 / (fan_in as f32).sqrt();
        (0..fan_in * fan_out).map(|_| self.next_f32() * scale).collect()
    }

    fn around_one(&mut self, n: u64) -> Vec<f32> {
        (0..n).map(|_| 1.0 + 0.1 * self.next_f32()).collect()
    }
}

/// The canary as GGUF bytes.
pub fn canary_gguf() -> Vec<u8> {
    let mut rng = Rng(SEED);
    let mut w = GgufWriter::new();
    let s = |v: &str| Value::String(v.to_string());
    w.set("general.architecture", s("llama"))
        .set("general.name", s("elelem tiny llama canary"))
        .set("general.file_type", Value::U32(0))
        .set("llama.context_length", Value::U32(2048))
        .set("llama.embedding_length", Value::U32(N_EMBD as u32))
        .set("llama.block_count", Value::U32(N_LAYER))
        .set("llama.feed_forward_length", Value::U32(N_FF as u32))
        .set("llama.attention.head_count", Value::U32(N_HEAD))
        .set("llama.attention.head_count_kv", Value::U32(N_HEAD_KV))
        .set("llama.rope.dimension_count", Value::U32(N_EMBD as u32 / N_HEAD))
        .set("llama.rope.freq_base", Value::F32(10000.0))
        .set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    set_vocab(&mut w);

    let kv_dim = N_EMBD / u64::from(N_HEAD) * u64::from(N_HEAD_KV);
    w.add_f32("token_embd.weight", &[N_EMBD, N_VOCAB], &rng.matrix(N_EMBD, N_VOCAB));
    for il in 0..N_LAYER {
        let n = |t: &str| format!("blk.{il}.{t}");
        w.add_f32(&n("attn_norm.weight"), &[N_EMBD], &rng.around_one(N_EMBD));
        w.add_f32(&n("attn_q.weight"), &[N_EMBD, N_EMBD], &rng.matrix(N_EMBD, N_EMBD));
        w.add_f32(&n("attn_k.weight"), &[N_EMBD, kv_dim], &rng.matrix(N_EMBD, kv_dim));
        w.add_f32(&n("attn_v.weight"), &[N_EMBD, kv_dim], &rng.matrix(N_EMBD, kv_dim));
        w.add_f32(&n("attn_output.weight"), &[N_EMBD, N_EMBD], &rng.matrix(N_EMBD, N_EMBD));
        w.add_f32(&n("ffn_norm.weight"), &[N_EMBD], &rng.around_one(N_EMBD));
        w.add_f32(&n("ffn_gate.weight"), &[N_EMBD, N_FF], &rng.matrix(N_EMBD, N_FF));
        w.add_f32(&n("ffn_up.weight"), &[N_EMBD, N_FF], &rng.matrix(N_EMBD, N_FF));
        w.add_f32(&n("ffn_down.weight"), &[N_FF, N_EMBD], &rng.matrix(N_FF, N_EMBD));
    }
    w.add_f32("output_norm.weight", &[N_EMBD], &rng.around_one(N_EMBD));
    w.add_f32("output.weight", &[N_EMBD, N_VOCAB], &rng.matrix(N_EMBD, N_VOCAB));
    w.to_bytes()
}

/// A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then
/// printable pieces (single characters and a few words) to fill 512.
fn set_vocab(w: &mut GgufWriter) {
    const NORMAL: i32 = 1;
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const BYTE: i32 = 6;
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![UNKNOWN, CONTROL, CONTROL];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(BYTE);
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
        if tokens.len() as u64 == N_VOCAB {
            break;
        }
        if tokens.contains(&piece) {
            continue;
        }
        tokens.push(piece);
        types.push(NORMAL);
    }
    let mut i = 0;
    while (tokens.len() as u64) < N_VOCAB {
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
