//! Synthetic projector GGUFs (`mmproj`): seeded random weights of the shapes and keys
//! clip.cpp reads, written by our GGUF writer, for the encoder's comparison with mtmd
//! (`tests/vision_encoder.rs`) and the refusals.

use elelem_gguf::{GgufWriter, TensorType, Value};

use crate::canary::{add_weights, Rng};

/// A synthetic Gemma 3 projector's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Gemma3Shape {
    pub n_embd: u64,
    pub n_head: u64,
    pub n_ff: u64,
    pub n_layer: u64,
    pub image_size: u64,
    pub patch_size: u64,
    /// The pooling kernel (`clip.vision.projector.scale_factor`; real files leave it out: 4).
    pub n_merge: Option<u32>,
    /// The language model's width.
    pub n_text_embd: u64,
    /// The matrices' type (Q, K, V, output, feed-forward, the patch kernel, the input
    /// projection); norms, biases and position embeddings are F32 as in real files.
    pub matrix_type: TensorType,
    /// The feed-forward's tensors under each other's names, as old conversions have them
    /// (clip.cpp swaps them back).
    pub swapped_ffn: bool,
    pub seed: u64,
}

impl Gemma3Shape {
    /// Small: 16 x 16 patches of 8 pixels, two layers of 64 wide, 16 tokens out.
    pub const SMALL: Gemma3Shape = Gemma3Shape {
        n_embd: 64,
        n_head: 4,
        n_ff: 128,
        n_layer: 2,
        image_size: 128,
        patch_size: 8,
        n_merge: None,
        n_text_embd: 96,
        matrix_type: TensorType::F16,
        swapped_ffn: false,
        seed: 0x5167_11b5,
    };
}

/// A seeded Gemma 3 projector of `shape`, ready to write or to alter first: SigLIP's
/// tensors (LayerNorms with biases, separate Q/K/V with biases, a GELU feed-forward with
/// biases, the post-LayerNorm), Gemma 3's soft-embedding norm and input projection, and
/// the keys of a converted Gemma 3 `mmproj`.
pub fn gemma3(shape: &Gemma3Shape) -> GgufWriter {
    let mut rng = Rng(shape.seed);
    let mut w = GgufWriter::new();
    let s = |v: &str| Value::String(v.to_string());
    let (embd, ff, p, ty) = (shape.n_embd, shape.n_ff, shape.patch_size, shape.matrix_type);
    let n_patches = (shape.image_size / p).pow(2);
    w.set("general.architecture", s("clip"))
        .set("general.name", s("elelem synthetic gemma3 mmproj"))
        .set("general.file_type", Value::U32(1))
        .set("clip.projector_type", s("gemma3"))
        .set("clip.has_vision_encoder", Value::Bool(true))
        .set("clip.has_text_encoder", Value::Bool(false))
        .set("clip.use_gelu", Value::Bool(true))
        .set("clip.vision.embedding_length", Value::U32(embd as u32))
        .set("clip.vision.feed_forward_length", Value::U32(ff as u32))
        .set("clip.vision.block_count", Value::U32(shape.n_layer as u32))
        .set("clip.vision.projection_dim", Value::U32(shape.n_text_embd as u32))
        .set("clip.vision.attention.head_count", Value::U32(shape.n_head as u32))
        .set("clip.vision.attention.layer_norm_epsilon", Value::F32(1e-6))
        .set("clip.vision.image_size", Value::U32(shape.image_size as u32))
        .set("clip.vision.patch_size", Value::U32(p as u32))
        .set(
            "clip.vision.image_mean",
            Value::Array(vec![Value::F32(0.5), Value::F32(0.5), Value::F32(0.5)]),
        )
        .set(
            "clip.vision.image_std",
            Value::Array(vec![Value::F32(0.5), Value::F32(0.5), Value::F32(0.5)]),
        );
    if let Some(k) = shape.n_merge {
        w.set("clip.vision.projector.scale_factor", Value::U32(k));
    }
    let norm = |w: &mut GgufWriter, rng: &mut Rng, name: &str, n: u64| {
        w.add_f32(&format!("{name}.weight"), &[n], &rng.around_one(n));
        w.add_f32(&format!("{name}.bias"), &[n], &rng.small(n));
    };
    add_weights(&mut w, &mut rng, "v.patch_embd.weight", ty, &[p, p, 3, embd]);
    w.add_f32("v.patch_embd.bias", &[embd], &rng.small(embd));
    w.add_f32(
        "v.position_embd.weight",
        &[embd, n_patches],
        &rng.small(embd * n_patches),
    );
    for il in 0..shape.n_layer {
        let n = |t: &str| format!("v.blk.{il}.{t}");
        norm(&mut w, &mut rng, &n("ln1"), embd);
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            add_weights(&mut w, &mut rng, &n(&format!("{t}.weight")), ty, &[embd, embd]);
            w.add_f32(&n(&format!("{t}.bias")), &[embd], &rng.small(embd));
        }
        norm(&mut w, &mut rng, &n("ln2"), embd);
        let (up, down) = if shape.swapped_ffn {
            ("ffn_down", "ffn_up")
        } else {
            ("ffn_up", "ffn_down")
        };
        add_weights(&mut w, &mut rng, &n(&format!("{up}.weight")), ty, &[embd, ff]);
        w.add_f32(&n(&format!("{up}.bias")), &[ff], &rng.small(ff));
        add_weights(&mut w, &mut rng, &n(&format!("{down}.weight")), ty, &[ff, embd]);
        w.add_f32(&n(&format!("{down}.bias")), &[embd], &rng.small(embd));
    }
    norm(&mut w, &mut rng, "v.post_ln", embd);
    w.add_f32("mm.soft_emb_norm.weight", &[embd], &rng.around_one(embd));
    add_weights(
        &mut w,
        &mut rng,
        "mm.input_projection.weight",
        ty,
        &[shape.n_text_embd, embd],
    );
    w
}
