//! Audio in, as llama.cpp's `tools/mtmd` takes it for its whisper-style encoders
//! (ultravox, qwen2a, voxtral): a WAV file to mono 16 kHz samples ([`decode_wav`], as
//! mtmd-helper decodes one, other rates through miniaudio's linear resampler), then to the
//! log-mel spectrogram pieces the encoder reads ([`WhisperMel`], `tools/mtmd/mtmd-audio.cpp`'s
//! whisper preprocessor), float for float (`ext/testkit/tests/audio.rs` compares them with
//! mtmd's own code).
//!
//! Nothing else of the engine is used but `contract` (GCC's fused multiply-adds on aarch64).

mod mel;
mod resample;
mod wav;

pub use mel::{Mel, WhisperMel, FRAMES_PER_CHUNK, MAX_MEL_BANDS, SAMPLE_RATE};
pub use wav::{decode_wav, is_wav};
