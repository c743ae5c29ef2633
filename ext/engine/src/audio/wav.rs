//! WAV files to the samples mtmd-helper hands mtmd (`decode_audio_from_buf`: miniaudio's
//! decoder asked for 32-bit float, mono, at the projector's 16 kHz). Decoding is the
//! `hound` crate's; the conversions are miniaudio's, so the samples are bit for bit those
//! mtmd sees: dr_wav's `s16_to_f32` (`x * 2^-15`, exact), for more than one channel its
//! channel converter's mono path (each frame's channels summed in `f32` from 0, in order,
//! divided by their count), and for another rate than 16 kHz its linear resampler on the
//! mono stream ([`super::resample`]), into a buffer of the length miniaudio's decoder
//! reports.
//!
//! Taken: 16-bit integer PCM or 32-bit float, any rate from 1 Hz to 384 kHz.

use std::io::Cursor;

use hound::{SampleFormat, WavReader};

use super::limits::{MAX_SAMPLES, MAX_SAMPLE_RATE};
use super::mel::SAMPLE_RATE;
use super::resample::{resample, resampled_len};
use crate::{Error, Result};

/// miniaudio's (dr_wav's) scale from 16-bit integers to floats, 2^-15 (`-32768` to `-1.0`,
/// `32767` to `0.99997`).
const S16_SCALE: f32 = 1.0 / 32768.0;

/// The most channels miniaudio reads (`MA_MAX_CHANNELS`).
const MAX_CHANNELS: u16 = 254;

/// Whether `bytes` are a WAV file ("RIFF", a size, "WAVE"), as mtmd's helper tells audio
/// from images.
pub fn is_wav(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WAVE"
}

/// The samples of a WAV file: mixed down to mono, resampled to 16 kHz, full scale ±1.
///
/// # Errors
/// [`Error::Audio`] for bytes that are not a WAV file, a corrupt or truncated one (its
/// header's sample count beyond its bytes), one of a sample rate of 0 or above 384 kHz, of
/// more channels than miniaudio reads or another sample format than those taken, or one
/// whose up-sampling would give more than two hours at 16 kHz.
pub fn decode_wav(bytes: &[u8]) -> Result<Vec<f32>> {
    if !is_wav(bytes) {
        return Err(Error::Audio(
            "not a WAV file (elelem reads WAV: 16-bit PCM or 32-bit float)".into(),
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
    if spec.sample_rate == 0 || spec.sample_rate > MAX_SAMPLE_RATE {
        return Err(Error::Audio(format!(
            "a WAV file of {what}: elelem takes sample rates from 1 Hz to {MAX_SAMPLE_RATE} Hz"
        )));
    }
    if spec.channels > MAX_CHANNELS {
        return Err(Error::Audio(format!(
            "a WAV file of {what}: more channels than miniaudio reads ({MAX_CHANNELS})"
        )));
    }
    let frames = u64::from(reader.len()) / u64::from(spec.channels.max(1));
    let len = resampled_len(spec.sample_rate, frames);
    if spec.sample_rate < SAMPLE_RATE && len > MAX_SAMPLES {
        return Err(Error::Audio(format!(
            "a WAV file of {what}: {frames} frames up-sampled to 16 kHz would be {len} samples, \
             more than elelem takes ({MAX_SAMPLES}, two hours)"
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
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (SampleFormat::Int, 16) => reader
            .into_samples::<i16>()
            .map(|s| s.map(|x| f32::from(x) * S16_SCALE).map_err(truncated))
            .collect::<Result<_>>()?,
        (SampleFormat::Float, 32) => reader
            .into_samples::<f32>()
            .map(|s| s.map_err(truncated))
            .collect::<Result<_>>()?,
        _ => {
            return Err(Error::Audio(format!(
                "a WAV file of {what}: elelem takes 16-bit integer PCM or 32-bit float samples only for now"
            )))
        }
    };
    let mono = match spec.channels {
        1 => interleaved,
        n => mono(&interleaved, n),
    };
    Ok(if spec.sample_rate == SAMPLE_RATE {
        mono
    } else {
        resample(&mono, spec.sample_rate, len as usize)
    })
}

/// miniaudio's mix down to mono (`ma_channel_converter_process_pcm_frames__mono_out`, in
/// `f32`): each whole frame's `n` channels summed from 0, divided by `n`.
pub(super) fn mono(interleaved: &[f32], n: u16) -> Vec<f32> {
    interleaved
        .chunks_exact(usize::from(n))
        .map(|frame| frame.iter().fold(0.0f32, |t, &x| t + x) / f32::from(n))
        .collect()
}
