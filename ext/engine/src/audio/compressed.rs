//! MP3 and FLAC files to the samples mtmd-helper hands mtmd (`decode_audio_from_buf`:
//! miniaudio's decoder asked for 32-bit float, mono, at the projector's 16 kHz). A lossy
//! format's last bits are its decoder's, so the decoding is miniaudio's own (dr_mp3 and
//! dr_flac, compiled from the pinned llama.cpp by `ggml-sys`, `native/miniaudio_decode.c`),
//! asked for `f32` at the file's own channels and rate. Those backends decode to the `f32`
//! mtmd-helper's request gives them too, and its decoder then mixes down and resamples
//! exactly as it does a float WAV's frames, so that part is elelem's WAV path's
//! ([`super::wav::mono`], [`super::resample`]): one mixer, one resampler, and the samples
//! bit for bit mtmd's (`ext/testkit/tests/audio.rs` compares them with miniaudio's whole
//! path).
//!
//! Decoded a piece at a time, each mixed down and resampled as it comes, so that what is
//! kept is the 16 kHz output, never more than two hours of it: a file's claimed length is
//! checked against that limit first, and never trusted for an allocation.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

use super::limits::{FORMATS, MAX_SAMPLES, MAX_SAMPLE_RATE};
use super::mel::SAMPLE_RATE;
use super::resample::{resampled_len, Resampler};
use super::wav::mono;
use crate::{Error, Result};

/// Frames decoded at a time (at most 8 channels of `f32`: 128 KiB).
const PIECE_FRAMES: usize = 4096;

/// Whether `bytes` are an MP3 file as mtmd-helper tells one: an ID3v2 tag or an MPEG
/// frame sync (eleven set bits), in at least 12 bytes.
pub fn is_mp3(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && (bytes.starts_with(b"ID3") || (bytes[0] == 0xFF && bytes[1] & 0xE0 == 0xE0))
}

/// Whether `bytes` are a FLAC file ("fLaC"), in at least 12 bytes, as mtmd-helper tells one.
pub fn is_flac(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && bytes.starts_with(b"fLaC")
}

/// The samples of an MP3 or FLAC file (any file miniaudio's decoder takes as mtmd-helper
/// calls it, WAV aside): mixed down to mono, resampled to 16 kHz, full scale ±1, into a
/// buffer of the length miniaudio's decoder reports.
///
/// # Errors
/// [`Error::Audio`] for bytes no decoder takes, a file that does not say its length (mtmd-helper
/// reads nothing from one), a sample rate above 384 kHz, more than two hours at 16 kHz, a
/// decoding error, or fewer frames than the file claims (mtmd-helper would keep the missing
/// ones as zeros; elelem refuses a truncated WAV file too).
pub fn decode_compressed(bytes: &[u8]) -> Result<Vec<f32>> {
    let decoder = Decoder::open(bytes)?;
    let (channels, rate, length) = (decoder.channels, decoder.rate, decoder.length);
    let what = format!(
        "{} file of {rate} Hz, {channels} channel{}",
        if is_flac(bytes) { "a FLAC" } else { "an MP3" },
        if channels == 1 { "" } else { "s" }
    );
    if rate == 0 || rate > MAX_SAMPLE_RATE {
        return Err(Error::Audio(format!(
            "{what}: elelem takes sample rates from 1 Hz to {MAX_SAMPLE_RATE} Hz"
        )));
    }
    if length == 0 {
        return Err(Error::Audio(format!(
            "{what} that does not say its length: mtmd-helper reads no samples from one"
        )));
    }
    let len = resampled_len(rate, length);
    if len > MAX_SAMPLES {
        return Err(Error::Audio(format!(
            "{what}: {length} frames claimed, {len} samples at 16 kHz, more than elelem takes \
             ({MAX_SAMPLES}, two hours)"
        )));
    }
    // At 16 kHz mtmd-helper's decoder copies the first `length` frames; otherwise its
    // resampler reads what it needs for `len` frames out.
    let mut output = Output::new(rate, len);
    let mut piece = vec![0.0f32; PIECE_FRAMES * channels as usize];
    let mut frames = 0u64;
    while !output.is_full() {
        let n = decoder
            .read(&mut piece)
            .map_err(|e| Error::Audio(format!("a damaged {what}: {e}")))?;
        if n == 0 {
            break;
        }
        frames += n as u64;
        let interleaved = &piece[..n * channels as usize];
        match channels {
            1 => output.push(interleaved),
            n => output.push(&mono(interleaved, n as u16)),
        }
    }
    // The resampler may be full a frame or two before the last claimed one is read.
    if !output.is_full() && frames < length {
        return Err(Error::Audio(format!(
            "a truncated {what}: {length} frames claimed, {frames} decoded"
        )));
    }
    Ok(output.finish())
}

/// The 16 kHz buffer a file's frames go into: copied at 16 kHz, resampled otherwise.
enum Output {
    Copied(Vec<f32>, usize),
    Resampled(Resampler),
}

impl Output {
    fn new(rate: u32, len: u64) -> Output {
        // `len` is at most `MAX_SAMPLES`, which fits a `usize` on 64- and 32-bit targets.
        let len = len as usize;
        if rate == SAMPLE_RATE {
            Output::Copied(Vec::new(), len)
        } else {
            Output::Resampled(Resampler::new(rate, len))
        }
    }

    fn is_full(&self) -> bool {
        match self {
            Output::Copied(out, len) => out.len() >= *len,
            Output::Resampled(r) => r.is_full(),
        }
    }

    fn push(&mut self, mono: &[f32]) {
        match self {
            Output::Copied(out, len) => out.extend_from_slice(&mono[..mono.len().min(*len - out.len())]),
            Output::Resampled(r) => r.push(mono),
        }
    }

    fn finish(self) -> Vec<f32> {
        match self {
            Output::Copied(mut out, len) => {
                out.resize(len, 0.0);
                out
            }
            Output::Resampled(r) => r.finish(),
        }
    }
}

/// miniaudio's decoder over a file's bytes (`elelem_ma_open`), closed when dropped.
struct Decoder<'a> {
    raw: *mut c_void,
    channels: u32,
    rate: u32,
    length: u64,
    /// The bytes the decoder reads, borrowed for as long as it lives.
    _bytes: &'a [u8],
}

impl<'a> Decoder<'a> {
    fn open(bytes: &'a [u8]) -> Result<Decoder<'a>> {
        let (mut channels, mut rate, mut length, mut error) = (0u32, 0u32, 0u64, 0 as c_int);
        // SAFETY: miniaudio reads `bytes`, which outlive the decoder (`_bytes`), and writes
        // the four out-parameters.
        let raw = unsafe {
            ggml_sys::elelem_ma_open(
                bytes.as_ptr(),
                bytes.len(),
                &mut channels,
                &mut rate,
                &mut length,
                &mut error,
            )
        };
        if raw.is_null() {
            return Err(Error::Audio(format!(
                "not an audio file (neither miniaudio's FLAC nor its MP3 decoder takes it: {}): {FORMATS}",
                result(error)
            )));
        }
        let decoder = Decoder {
            raw,
            channels,
            rate,
            length,
            _bytes: bytes,
        };
        if !(1..=8).contains(&channels) {
            // FLAC has at most 8, MP3 2: what else miniaudio would say is no file of them.
            return Err(Error::Audio(format!("an audio file of {channels} channels: {FORMATS}")));
        }
        Ok(decoder)
    }

    /// The next frames into `piece` (whole frames of `channels`): how many, 0 at the end.
    fn read(&self, piece: &mut [f32]) -> std::result::Result<usize, String> {
        let frames = (piece.len() / self.channels as usize) as u64;
        // SAFETY: the decoder writes at most `frames` frames of `channels` floats to `piece`.
        let n = unsafe { ggml_sys::elelem_ma_read(self.raw, piece.as_mut_ptr(), frames) };
        if n < 0 {
            return Err(result(n as c_int));
        }
        Ok(n as usize)
    }
}

impl Drop for Decoder<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `elelem_ma_open` and is closed once.
        unsafe { ggml_sys::elelem_ma_close(self.raw) }
    }
}

/// miniaudio's words for one of its results.
fn result(code: c_int) -> String {
    // SAFETY: `elelem_ma_result` gives a static NUL-terminated string for any code.
    unsafe { CStr::from_ptr(ggml_sys::elelem_ma_result(code)) }
        .to_string_lossy()
        .into_owned()
}
