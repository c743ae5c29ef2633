//! Audio in, as llama.cpp's `tools/mtmd` takes it for its whisper-style encoders
//! (ultravox, qwen2a, voxtral): a WAV, MP3 or FLAC file to mono 16 kHz samples
//! ([`decode_audio`], as mtmd-helper decodes one: WAV in Rust, MP3 and FLAC by miniaudio's
//! own decoders, other rates through miniaudio's linear resampler), then to the log-mel
//! spectrogram pieces the encoder reads ([`WhisperMel`], `tools/mtmd/mtmd-audio.cpp`'s
//! whisper preprocessor), float for float (`ext/testkit/tests/audio.rs` compares them with
//! mtmd's own code).
//!
//! Nothing else of the engine is used but `contract` (GCC's fused multiply-adds on aarch64).

mod compressed;
mod limits;
mod mel;
mod resample;
mod wav;

pub use compressed::{decode_compressed, is_flac, is_mp3};
pub use mel::{Mel, WhisperMel, FRAMES_PER_CHUNK, MAX_MEL_BANDS, SAMPLE_RATE};
pub use wav::{decode_wav, is_wav};

use crate::{Error, Result};
use limits::FORMATS;

/// Whether `bytes` are audio as mtmd-helper tells audio from images (`is_audio_file`): a
/// WAV, MP3 or FLAC file by its first bytes.
pub fn is_audio(bytes: &[u8]) -> bool {
    is_wav(bytes) || is_mp3(bytes) || is_flac(bytes)
}

/// The samples of a WAV, MP3 or FLAC file, told apart by their bytes: mixed down to mono,
/// resampled to 16 kHz, full scale ±1 ([`decode_wav`], [`decode_compressed`]).
///
/// # Errors
/// [`Error::Audio`] for bytes that are none of them (naming the formats read), and as
/// [`decode_wav`] and [`decode_compressed`].
pub fn decode_audio(bytes: &[u8]) -> Result<Vec<f32>> {
    if is_wav(bytes) {
        decode_wav(bytes)
    } else if is_mp3(bytes) || is_flac(bytes) {
        decode_compressed(bytes)
    } else {
        Err(Error::Audio(format!("not an audio file ({}): {FORMATS}", what(bytes))))
    }
}

/// What bytes that are none of the formats read look like, for a refusal.
fn what(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"OggS") {
        "an Ogg file: Vorbis, Opus"
    } else if bytes.len() >= 8 && &bytes[4..8] == b"ftyp" {
        "an MP4 file: AAC, ALAC"
    } else if bytes.starts_with(b"RIFF") || bytes.starts_with(b"RF64") || bytes.starts_with(b"FORM") {
        "a RIFF, RF64 or AIFF file that is not a WAV file"
    } else if bytes.len() < 12 {
        "fewer than 12 bytes"
    } else {
        "no WAV, MP3 or FLAC header"
    }
}
