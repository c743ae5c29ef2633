//! What elelem's tests are made of, in a crate of its own so that none of it is
//! linked into the gem:
//!
//! - [`canary`]: seeded random-weight models written by our GGUF writer, one per
//!   architecture and per weight type, whose goldens come from llama.cpp.
//! - [`hostile`]: the corpus of malformed and adversarial GGUF files, and what each
//!   must do (open and run, or be refused with a load error).
//! - [`model_path`]: the real models `rake models` downloads.
//! - [`mmproj`]: seeded random-weight projector GGUFs (`mmproj`) for the vision encoder.
//! - [`audio`]: seeded random-weight whisper-style audio projector GGUFs.
//! - [`omni`]: a projector GGUF with both encoders (Qwen2.5-Omni's `qwen2.5o`).
//! - [`mtmd`]: the pinned llama.cpp's image decoding and preprocessing, and its vision
//!   encoder (clip.cpp), compiled by `build.rs`, to compare the engine's `vision` with.
//! - [`preprocessors`]: mtmd's image preprocessor families with their models' parameters.

pub mod audio;
pub mod canary;
pub mod hostile;
pub mod mmproj;
pub mod mtmd;
pub mod omni;
pub mod preprocessors;
pub mod xorshift;

use std::path::PathBuf;

/// A real model's file in `$ELELEM_MODEL_DIR` (by default `~/.cache/elelem/models`,
/// where `rake models` puts them); panics naming the task when it is missing.
pub fn model_path(file: &str) -> PathBuf {
    let dir = std::env::var_os("ELELEM_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/elelem/models"));
    let path = dir.join(file);
    assert!(path.exists(), "{} is missing: run `rake models` first", path.display());
    path
}
