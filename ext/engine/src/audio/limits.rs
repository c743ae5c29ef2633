//! What the audio decoders take, in one place for WAV, MP3 and FLAC alike.

use super::mel::SAMPLE_RATE;

/// The highest sample rate taken (miniaudio's `ma_standard_sample_rate_max`, the highest
/// it names).
pub(super) const MAX_SAMPLE_RATE: u32 = 384_000;

/// The most samples a file may give: two hours at 16 kHz. A WAV file's bytes bound what it
/// gives at its own rate or lower, but not up-sampled (a 1 Hz file gives 16000 samples a
/// frame), and an MP3's or FLAC's bytes bound nothing (a FLAC frame of a constant subframe
/// is a few bytes for 65,535 samples), so the length is checked before anything of its
/// size is allocated.
pub(super) const MAX_SAMPLES: u64 = 2 * 60 * 60 * SAMPLE_RATE as u64;

/// The formats [`super::decode_audio`] reads, as its refusals name them.
pub(super) const FORMATS: &str = "elelem reads WAV, MP3 and FLAC";
