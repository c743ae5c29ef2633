//! The synthetic Qwen2.5-Omni projector: both encoders in one GGUF, as Qwen2.5-Omni's
//! converted `mmproj` holds them (`clip.projector_type` `qwen2.5o`, `clip.has_vision_encoder`
//! and `clip.has_audio_encoder` both true, the `clip.vision.*` keys and `v.*`/`mm.*` tensors
//! of a Qwen2.5-VL encoder beside the `clip.audio.*` keys and `a.*`/`mm.a.*` tensors of a
//! Qwen2-Audio one), which clip.cpp loads twice: as `qwen2.5vl_merger` for images, as
//! `qwen2a` for audio. Written from the two writers' files ([`crate::mmproj::writer`],
//! [`crate::audio::writer`]) appended, whose own files stay as they are.

use elelem_gguf::{GgufWriter, Value};

use crate::{audio, canary, mmproj};

/// The language model with a `qwen2.5o` projector whose goldens come from the reference
/// (`rake vision_golden`), written by `write_synthetic` beside [`crate::mmproj::pairs`] into
/// its `vision/` folder as `<name>.gguf` and `<name>.mmproj.gguf`:
///
/// - `tiny-qwen25o-omni`: the `tiny-qwen2vl-vision` language model's shape (Qwen2's block
///   under M-RoPE, 128 wide), whose vocabulary ends with the control tokens
///   `<|vision_start|>` and `<|vision_end|>` that mtmd frames each image with and
///   `<|audio_bos|>` and `<|audio_eos|>` that it frames each audio file with; its projector
///   is [`writer`]'s, projecting both encoders to 128.
pub fn pairs() -> Vec<(String, GgufWriter, GgufWriter)> {
    let lm = canary::Shape {
        family: canary::QWEN2VL,
        ..canary::LLAMA3
    };
    let mut model = canary::writer(&lm);
    canary::set_vocab_with(
        &mut model,
        lm.n_vocab,
        &[],
        &["<|vision_start|>", "<|vision_end|>", "<|audio_bos|>", "<|audio_eos|>"],
    );
    vec![("tiny-qwen25o-omni".to_string(), model, writer(lm.n_embd))]
}

/// A seeded `qwen2.5o` projector: [`mmproj::Shape::QWEN25VL`]'s vision encoder and
/// [`audio::Shape::QWEN2A`]'s audio encoder (each of its own seed), both projecting to
/// `n_text_embd`.
pub fn writer(n_text_embd: u64) -> GgufWriter {
    let mut w = mmproj::writer(&mmproj::Shape {
        n_text_embd,
        seed: 0x9e25_0a01,
        ..mmproj::Shape::QWEN25VL
    });
    w.append(audio::writer(&audio::Shape {
        n_text_embd,
        seed: 0x0a0d_25a0,
        ..audio::Shape::QWEN2A
    }));
    // The keys the two files share, as Qwen2.5-Omni's has them.
    let s = |v: &str| Value::String(v.to_string());
    w.set("general.name", s("elelem synthetic omni mmproj"))
        .set("clip.projector_type", s("qwen2.5o"))
        .set("clip.has_vision_encoder", Value::Bool(true))
        .set("clip.has_audio_encoder", Value::Bool(true));
    w
}
