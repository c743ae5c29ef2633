//! Audio in, as llama.cpp's `tools/mtmd` takes it for its whisper-style encoders
//! (ultravox, qwen2a, voxtral): a 16 kHz WAV file to mono samples ([`decode_wav`], as
//! mtmd-helper decodes one), then to the log-mel spectrogram pieces the encoder reads
//! ([`WhisperMel`], `tools/mtmd/mtmd-audio.cpp`'s whisper preprocessor), float for float
//! (`ext/testkit/tests/audio.rs` compares them with mtmd's own code).
//!
//! Nothing else of the engine is used.

mod mel;
mod wav;

pub use mel::{Mel, WhisperMel, FRAMES_PER_CHUNK, MAX_MEL_BANDS, SAMPLE_RATE};
pub use wav::decode_wav;
