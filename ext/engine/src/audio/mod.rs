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
mod mel;
mod resample;
mod wav;

pub use compressed::{decode_compressed, is_flac, is_mp3};
pub use mel::{Mel, WhisperMel, FRAMES_PER_CHUNK, MAX_MEL_BANDS, SAMPLE_RATE};
pub use wav::{decode_wav, is_wav};

use crate::{Error, Result};

/// The highest sample rate taken (miniaudio's `ma_standard_sample_rate_max`, the highest
/// it names).
const MAX_SAMPLE_RATE: u32 = 384_000;

/// The most samples a file may give: two hours at 16 kHz. A WAV file's bytes bound what it
/// gives at its own rate or lower, but not up-sampled (a 1 Hz file gives 16000 samples a
/// frame), and an MP3's or FLAC's bytes bound nothing (a FLAC frame of a constant subframe
/// is a few bytes for 65,535 samples), so the length is checked before anything of its
/// size is allocated.
const MAX_SAMPLES: u64 = 2 * 60 * 60 * SAMPLE_RATE as u64;

/// The formats [`decode_audio`] reads, as its refusals name them.
const FORMATS: &str = "elelem reads WAV, MP3 and FLAC";

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
