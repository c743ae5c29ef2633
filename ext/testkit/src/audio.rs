//! Synthetic audio projector GGUFs: seeded random weights of the shapes and keys clip.cpp
//! reads for its whisper-style encoders (`tools/mtmd/models/whisper-enc.cpp`: two
//! convolutions, learned positions, a pre-LayerNorm transformer with a post-LayerNorm, then
//! the projector of the type), written by our GGUF writer, for the audio encoder's
//! comparison with clip.cpp (`tests/audio.rs`). Their own file: the vision writers'
//! bytes ([`crate::mmproj`]) stay as they are.

use elelem_gguf::{GgufWriter, TensorType, Value};

use crate::canary::{add_weights, Rng};

/// The projector types written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Ultravox: frames stacked by `stack_factor`, an RMS norm, a SwiGLU (its halves
    /// swapped), an RMS norm, a matrix; no biases.
    Ultravox,
    /// Qwen2-Audio: positions average-pooled in pairs before the post-LayerNorm, then one
    /// matrix with a bias.
    Qwen2a,
    /// Voxtral: Qwen2-Audio's pooling, Ultravox's stacking, then a GELU MLP without biases.
    Voxtral,
}

/// A synthetic whisper-style projector's type and sizes.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub kind: Kind,
    /// `clip.audio.num_mel_bins`: 80 (Whisper's), 128 (large-v3's).
    pub n_mel: u64,
    pub n_embd: u64,
    pub n_head: u64,
    pub n_ff: u64,
    pub n_layer: u64,
    /// Rows of `a.position_embd.weight` (Whisper's 1500, the positions of 30 s).
    pub n_pos: u64,
    /// `clip.audio.projector.stack_factor` (Ultravox and Voxtral).
    pub stack_factor: u32,
    /// The projector's hidden width (Ultravox's SwiGLU output, Voxtral's MLP).
    pub n_proj_ff: u64,
    /// The language model's width.
    pub n_text_embd: u64,
    /// The matrices' type (Q, K, V, output, feed-forward, convolution kernels, the
    /// projector's); norms, biases and position embeddings are F32 as in real files.
    pub matrix_type: TensorType,
    pub seed: u64,
}

impl Shape {
    /// Qwen2-Audio, small: 80 mel bands, two layers of 64 wide, 750 tokens of 96 out of a
    /// 30 s piece.
    pub const QWEN2A: Shape = Shape {
        kind: Kind::Qwen2a,
        n_mel: 80,
        n_embd: 64,
        n_head: 4,
        n_ff: 128,
        n_layer: 2,
        n_pos: 1500,
        stack_factor: 1,
        n_proj_ff: 128,
        n_text_embd: 96,
        matrix_type: TensorType::F16,
        seed: 0x0a0d_102a,
    };

    /// Ultravox, small: the same encoder with 128 mel bands, 8 frames stacked.
    pub const ULTRAVOX: Shape = Shape {
        kind: Kind::Ultravox,
        n_mel: 128,
        stack_factor: 8,
        seed: 0x017a_7055,
        ..Shape::QWEN2A
    };

    /// Voxtral, small: the same encoder with 128 mel bands, 4 frames stacked.
    pub const VOXTRAL: Shape = Shape {
        kind: Kind::Voxtral,
        n_mel: 128,
        stack_factor: 4,
        seed: 0x070c_7a10,
        ..Shape::QWEN2A
    };
}

/// A seeded whisper-style projector of `shape`.
pub fn writer(shape: &Shape) -> GgufWriter {
    let mut rng = Rng(shape.seed);
    let mut w = GgufWriter::new();
    let (embd, ff, ty) = (shape.n_embd, shape.n_ff, shape.matrix_type);
    let s = |v: &str| Value::String(v.to_string());
    let projector_type = match shape.kind {
        Kind::Ultravox => "ultravox",
        Kind::Qwen2a => "qwen2a",
        Kind::Voxtral => "voxtral",
    };
    w.set("general.architecture", s("clip"))
        .set("general.name", s("elelem synthetic audio mmproj"))
        .set("general.file_type", Value::U32(1))
        .set("clip.projector_type", s(projector_type))
        .set("clip.has_audio_encoder", Value::Bool(true))
        .set("clip.has_vision_encoder", Value::Bool(false))
        .set("clip.audio.embedding_length", Value::U32(embd as u32))
        .set("clip.audio.feed_forward_length", Value::U32(ff as u32))
        .set("clip.audio.block_count", Value::U32(shape.n_layer as u32))
        .set("clip.audio.projection_dim", Value::U32(shape.n_text_embd as u32))
        .set("clip.audio.attention.head_count", Value::U32(shape.n_head as u32))
        .set("clip.audio.attention.layer_norm_epsilon", Value::F32(1e-5))
        .set("clip.audio.num_mel_bins", Value::U32(shape.n_mel as u32));
    if shape.kind != Kind::Qwen2a {
        w.set("clip.audio.projector.stack_factor", Value::U32(shape.stack_factor));
    }

    // The convolutions: kernels of 3 over the mel bands, then over the width (stride 2).
    add_weights(&mut w, &mut rng, "a.conv1d.1.weight", ty, &[3, shape.n_mel, embd]);
    w.add_f32("a.conv1d.1.bias", &[1, embd], &rng.small(embd));
    add_weights(&mut w, &mut rng, "a.conv1d.2.weight", ty, &[3, embd, embd]);
    w.add_f32("a.conv1d.2.bias", &[1, embd], &rng.small(embd));
    w.add_f32(
        "a.position_embd.weight",
        &[embd, shape.n_pos],
        &rng.small(embd * shape.n_pos),
    );
    for il in 0..shape.n_layer {
        let n = |t: &str| format!("a.blk.{il}.{t}");
        w.add_f32(&n("ln1.weight"), &[embd], &rng.around_one(embd));
        w.add_f32(&n("ln1.bias"), &[embd], &rng.small(embd));
        // Whisper's K has no bias.
        for (t, bias) in [
            ("attn_q", true),
            ("attn_k", false),
            ("attn_v", true),
            ("attn_out", true),
        ] {
            add_weights(&mut w, &mut rng, &n(&format!("{t}.weight")), ty, &[embd, embd]);
            if bias {
                w.add_f32(&n(&format!("{t}.bias")), &[embd], &rng.small(embd));
            }
        }
        w.add_f32(&n("ln2.weight"), &[embd], &rng.around_one(embd));
        w.add_f32(&n("ln2.bias"), &[embd], &rng.small(embd));
        add_weights(&mut w, &mut rng, &n("ffn_up.weight"), ty, &[embd, ff]);
        w.add_f32(&n("ffn_up.bias"), &[ff], &rng.small(ff));
        add_weights(&mut w, &mut rng, &n("ffn_down.weight"), ty, &[ff, embd]);
        w.add_f32(&n("ffn_down.bias"), &[embd], &rng.small(embd));
    }
    w.add_f32("a.post_ln.weight", &[embd], &rng.around_one(embd));
    w.add_f32("a.post_ln.bias", &[embd], &rng.small(embd));

    let (hidden, text) = (shape.n_proj_ff, shape.n_text_embd);
    let stacked = embd * u64::from(shape.stack_factor);
    match shape.kind {
        Kind::Ultravox => {
            w.add_f32("mm.a.norm_pre.weight", &[stacked], &rng.around_one(stacked));
            add_weights(&mut w, &mut rng, "mm.a.mlp.1.weight", ty, &[stacked, 2 * hidden]);
            w.add_f32("mm.a.norm_mid.weight", &[hidden], &rng.around_one(hidden));
            add_weights(&mut w, &mut rng, "mm.a.mlp.2.weight", ty, &[hidden, text]);
        }
        Kind::Qwen2a => {
            add_weights(&mut w, &mut rng, "mm.a.fc.weight", ty, &[embd, text]);
            w.add_f32("mm.a.fc.bias", &[text], &rng.small(text));
        }
        Kind::Voxtral => {
            add_weights(&mut w, &mut rng, "mm.a.mlp.1.weight", ty, &[stacked, hidden]);
            add_weights(&mut w, &mut rng, "mm.a.mlp.2.weight", ty, &[hidden, text]);
        }
    }
    w
}

/// The language models with an audio projector whose goldens come from the reference
/// (`rake vision_golden`), written by `write_synthetic` beside [`crate::mmproj::pairs`]
/// into its `vision/` folder as `<name>.gguf` and `<name>.mmproj.gguf`:
///
/// - `tiny-qwen2a-audio`: a Qwen2 language model of the `tiny-internvl-vision` shape (128
///   wide), whose vocabulary ends with the control tokens `<|audio_bos|>` and
///   `<|audio_eos|>` that mtmd frames each audio file with; its projector is
///   [`Shape::QWEN2A`] projecting to 128 (750 tokens a 30 s piece, a position each).
/// - `tiny-qwen2a-mrope-audio`: the same with a Qwen2-VL language model, under M-RoPE:
///   mtmd's helper gives an audio chunk's tokens a position each on every axis
///   (`set_position_mrope_1d`), not a grid.
pub fn pairs() -> Vec<(String, GgufWriter, GgufWriter)> {
    use crate::canary;
    let qwen2 = canary::Shape {
        family: canary::QWEN2,
        ..canary::LLAMA3
    };
    let qwen2vl = canary::Shape {
        family: canary::QWEN2VL,
        ..canary::LLAMA3
    };
    [("tiny-qwen2a-audio", qwen2), ("tiny-qwen2a-mrope-audio", qwen2vl)]
        .into_iter()
        .map(|(name, lm)| pair(name, &lm, Shape::QWEN2A))
        .collect()
}

/// `rake bench`'s audio rows' pair (`tasks/bench_vision.rb`), not a golden's: written by
/// `write_bench_models` into its directory's `vision/` folder as `<name>.gguf` and
/// `<name>.mmproj.gguf`.
///
/// - `bench-qwen2-audio`: Qwen2-Audio-7B's encoder (Whisper-large-v3's: 128 mel bands, 32
///   layers 1280 wide, 20 heads, a feed-forward 5120 wide, 1500 positions, 750 tokens a
///   30 s piece) in F16 as converted projectors are, before a Qwen2 language model of
///   Qwen2.5-0.5B's shape (24 layers 896 wide, 14 heads, 2 KV heads, a feed-forward 4864
///   wide, 151,936 tokens, the head tied to the embeddings) in Q8_0, where Qwen2-Audio's is
///   a 7B.
pub fn bench_pairs() -> Vec<(String, GgufWriter, GgufWriter)> {
    use crate::canary;
    let qwen2 = canary::qwen25_05b_q8_0(canary::Family {
        name: "elelem bench qwen2 (Qwen2.5-0.5B's shape)",
        tied_head: true,
        ..canary::QWEN2
    });
    let whisper_large = Shape {
        n_mel: 128,
        n_embd: 1280,
        n_head: 20,
        n_ff: 5120,
        n_layer: 32,
        seed: 0x0a0d_7b00,
        ..Shape::QWEN2A
    };
    vec![pair("bench-qwen2-audio", &qwen2, whisper_large)]
}

/// A language model whose vocabulary ends with Qwen2-Audio's framing tokens, and a
/// projector of `projector`'s shape to its width.
fn pair(name: &str, lm: &crate::canary::Shape, projector: Shape) -> (String, GgufWriter, GgufWriter) {
    let mut model = crate::canary::writer(lm);
    crate::canary::set_vocab_with(&mut model, lm.n_vocab, &[], &["<|audio_bos|>", "<|audio_eos|>"]);
    let projector = writer(&Shape {
        n_text_embd: lm.n_embd,
        ..projector
    });
    (name.to_string(), model, projector)
}
