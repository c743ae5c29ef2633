//! WAV files to the samples mtmd-helper hands mtmd (`decode_audio_from_buf`: miniaudio's
//! decoder asked for 32-bit float, mono, at the projector's rate). Decoding is the
//! `hound` crate's; the conversion is miniaudio's (dr_wav's `s16_to_f32`: `x * 2^-15`,
//! exact), so the samples are bit for bit those mtmd sees.
//!
//! Only what needs no resampling or channel mixing is taken: mono at 16 kHz, in 16-bit
//! integer PCM or 32-bit float. miniaudio would resample another rate (its linear
//! resampler with a low-pass filter) and mix other channel counts down; elelem refuses
//! them, naming what the file is, rather than feed the encoder other samples than mtmd's.

use std::io::Cursor;

use hound::{SampleFormat, WavReader};

use super::mel::SAMPLE_RATE;
use crate::{Error, Result};

/// miniaudio's (dr_wav's) scale from 16-bit integers to floats, 2^-15 (`-32768` to `-1.0`,
/// `32767` to `0.99997`).
const S16_SCALE: f32 = 1.0 / 32768.0;

/// The samples of a WAV file: mono, 16 kHz, full scale ±1.
///
/// # Errors
/// [`Error::Audio`] for bytes that are not a WAV file, a corrupt or truncated one (its
/// header's sample count beyond its bytes), or one of another sample rate, channel count or
/// sample format than those taken.
pub fn decode_wav(bytes: &[u8]) -> Result<Vec<f32>> {
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err(Error::Audio(
            "not a WAV file (elelem reads 16 kHz mono WAV: 16-bit PCM or 32-bit float)".into(),
        ));
    }
    let reader = WavReader::new(Cursor::new(bytes)).map_err(|e| Error::Audio(format!("invalid WAV file: {e}")))?;
    let spec = reader.spec();
    let what = format!(
        "{} Hz, {} channel{}, {}-bit {}",
        spec.sample_rate,
        spec.channels,
        if spec.channels == 1 { "" } else { "s" },
        spec.bits_per_sample,
        match spec.sample_format {
            SampleFormat::Int => "integer PCM",
            SampleFormat::Float => "float",
        }
    );
    if spec.sample_rate != SAMPLE_RATE || spec.channels != 1 {
        return Err(Error::Audio(format!(
            "a WAV file of {what}: elelem takes 16 kHz mono only for now (mtmd would resample or \
             mix it down; convert it first, e.g. `ffmpeg -i in.wav -ar 16000 -ac 1 out.wav`)"
        )));
    }
    let taken = matches!(
        (spec.sample_format, spec.bits_per_sample),
        (SampleFormat::Int, 16) | (SampleFormat::Float, 32)
    );
    // The header's count, checked against the bytes there are before anything of its size
    // is read (mtmd-helper would keep the missing samples as zeros).
    let declared = u64::from(reader.len()) * u64::from(spec.bits_per_sample / 8);
    if taken && declared > bytes.len() as u64 {
        return Err(Error::Audio(format!(
            "a truncated WAV file ({what}): {} samples declared in {} bytes",
            reader.len(),
            bytes.len()
        )));
    }
    let truncated = |e: hound::Error| Error::Audio(format!("invalid WAV file ({what}): {e}"));
    match (spec.sample_format, spec.bits_per_sample) {
        (SampleFormat::Int, 16) => reader
            .into_samples::<i16>()
            .map(|s| s.map(|x| f32::from(x) * S16_SCALE).map_err(truncated))
            .collect(),
        (SampleFormat::Float, 32) => reader.into_samples::<f32>().map(|s| s.map_err(truncated)).collect(),
        _ => Err(Error::Audio(format!(
            "a WAV file of {what}: elelem takes 16-bit integer PCM or 32-bit float samples only for now"
        ))),
    }
}
