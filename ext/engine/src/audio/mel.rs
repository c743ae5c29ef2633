//! The log-mel spectrogram a whisper-style audio encoder reads, as
//! `tools/mtmd/mtmd-audio.cpp`'s `mtmd_audio_preprocessor_whisper` computes it (after
//! whisper.cpp), float for float: a periodic Hann window, mtmd's own radix-2 FFT over a
//! sine table (a plain DFT below the first odd length), Slaney mel filters with area
//! norm, `log10` of the power clamped at 2^-24, then whisper's normalisation (clamped at
//! the maximum less 8, `(x + 4) / 4`) over the whole padded spectrogram, cut into
//! 3000-frame (30 s) pieces, the encoder's input.
//!
//! What is particular, and kept as mtmd has it: the audio is padded with 30 s of silence
//! at the end (so the normalisation's maximum, and the last piece, see it), the trailing
//! incomplete piece is dropped (so 30 s of audio gives two pieces, the second almost all
//! silence), the front is reflected over 200 samples, audio shorter than 201 samples is
//! zero-padded to 201, and the sums and the normalisation mix `f32` and `f64` exactly where
//! mtmd's C++ does. The products GCC fuses with their sums on aarch64 (the FFT's and DFT's,
//! the power's `re²`, three of each group of four in a band's sum, the mel grid's) are fused
//! there too ([`crate::contract`]). `ext/testkit/tests/audio.rs` compares it with mtmd's code.

use crate::contract::{mul_add, mul_add_f64};
use crate::{Error, Result};

/// The frames (10 ms each) of one piece of the spectrogram: whisper's 30 s window, the
/// length of clip.cpp's encoder graph.
pub const FRAMES_PER_CHUNK: usize = 3000;

/// The most mel bands clip.cpp's loader takes (`n_mel_bins` in [1, 256]).
pub const MAX_MEL_BANDS: usize = 256;

/// The sample rate the whisper-style projectors take (clip.cpp's `audio_sample_rate`).
pub const SAMPLE_RATE: u32 = 16_000;

/// The FFT length, and the Hann window's (clip.cpp's `audio_n_fft`, `audio_window_len`).
const N_FFT: usize = 400;

/// The samples between two frames (clip.cpp's `audio_hop_len`).
const HOP: usize = 160;

/// mtmd's floor under a mel band's power before its `log10` (`filter_params::mel_floor`,
/// 2^-24).
const MEL_FLOOR: f32 = 5.960_464_5e-8;

/// One 3000-frame piece of a log-mel spectrogram: `n_mel` rows of [`FRAMES_PER_CHUNK`]
/// values, band after band (mtmd's `mtmd_audio_mel`, `data[mel * n_len + frame]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Mel {
    /// The mel bands (clip.cpp's `n_mel_bins`: 80 or 128).
    pub n_mel: usize,
    /// Frames in the piece, [`FRAMES_PER_CHUNK`].
    pub n_len: usize,
    /// `n_mel * n_len` values.
    pub data: Vec<f32>,
}

/// The whisper preprocessor for `n_mel` bands: its tables (mtmd's `mtmd_audio_cache`),
/// built once per projector.
#[derive(Debug, Clone)]
pub struct WhisperMel {
    n_mel: usize,
    sin: Vec<f32>,
    cos: Vec<f32>,
    hann: Vec<f32>,
    /// `n_mel` rows of `N_FFT / 2 + 1` weights.
    filters: Vec<f32>,
}

impl WhisperMel {
    /// The tables for `n_mel` bands (mtmd's `initialize`).
    ///
    /// # Errors
    /// [`Error::Audio`] for no band, or more than clip.cpp takes ([`MAX_MEL_BANDS`]).
    pub fn new(n_mel: usize) -> Result<Self> {
        if n_mel == 0 || n_mel > MAX_MEL_BANDS {
            return Err(Error::Audio(format!(
                "an audio projector of {n_mel} mel bands (clip.cpp takes 1 to {MAX_MEL_BANDS})"
            )));
        }
        let (sin, cos) = sin_cos_table(N_FFT);
        Ok(Self {
            n_mel,
            sin,
            cos,
            hann: hann_window(N_FFT),
            filters: mel_filters(n_mel, N_FFT, SAMPLE_RATE),
        })
    }

    /// The mel bands.
    pub fn n_mel(&self) -> usize {
        self.n_mel
    }

    /// The pieces of `samples` (16 kHz mono, full scale ±1), as mtmd's `preprocess`
    /// gives them to the encoder: `(samples.len() / 160 + 3001) / 3000` of them (the 30 s of
    /// silence mtmd appends counted, its last incomplete piece dropped).
    ///
    /// # Errors
    /// [`Error::Audio`] for fewer than 2 samples (mtmd refuses none, and aborts on one).
    pub fn preprocess(&self, samples: &[f32]) -> Result<Vec<Mel>> {
        if samples.len() < 2 {
            return Err(Error::Audio(format!(
                "audio of {} sample{} is too short (2 at least)",
                samples.len(),
                if samples.len() == 1 { "" } else { "s" }
            )));
        }
        // The reflection below needs one sample and half a window.
        let mut short = Vec::new();
        let samples = if samples.len() < N_FFT / 2 + 1 {
            short.extend_from_slice(samples);
            short.resize(N_FFT / 2 + 1, 0.0);
            &short[..]
        } else {
            samples
        };
        let full = self.spectrogram(samples);
        let n_len = full.len() / self.n_mel;
        Ok((0..n_len / FRAMES_PER_CHUNK)
            .map(|c| {
                let data = (0..self.n_mel)
                    .flat_map(|m| {
                        let row = m * n_len + c * FRAMES_PER_CHUNK;
                        full[row..row + FRAMES_PER_CHUNK].iter().copied()
                    })
                    .collect();
                Mel {
                    n_mel: self.n_mel,
                    n_len: FRAMES_PER_CHUNK,
                    data,
                }
            })
            .collect())
    }

    /// mtmd's `log_mel_spectrogram` with whisper's parameters: `n_mel` rows of every frame
    /// of the padded audio, normalised.
    fn spectrogram(&self, samples: &[f32]) -> Vec<f32> {
        let half = N_FFT / 2;
        // 200 reflected samples, the audio, then 30 s and 400 samples of silence.
        let mut padded = vec![0.0f32; samples.len() + SAMPLE_RATE as usize * 30 + 2 * half];
        for (i, p) in padded[..half].iter_mut().enumerate() {
            *p = samples[half - i];
        }
        padded[half..half + samples.len()].copy_from_slice(samples);

        let n_len = (padded.len() - N_FFT) / HOP + 1;
        let n_bins = N_FFT / 2 + 1;
        let mut out = vec![0.0f32; self.n_mel * n_len];
        let mut frame = vec![0.0f32; N_FFT];
        let mut spectrum = vec![0.0f32; 2 * N_FFT];
        let mut power = vec![0.0f32; n_bins];
        for i in 0..n_len {
            let offset = i * HOP;
            let valid = N_FFT.min(padded.len().saturating_sub(offset));
            for (j, f) in frame.iter_mut().enumerate() {
                *f = if j < valid {
                    self.hann[j] * padded[offset + j]
                } else {
                    0.0
                };
            }
            self.fft(&frame, &mut spectrum);
            for (j, p) in power.iter_mut().enumerate() {
                let (re, im) = (spectrum[2 * j], spectrum[2 * j + 1]);
                *p = mul_add(re, re, im * im);
            }
            for m in 0..self.n_mel {
                out[m * n_len + i] = self.band(&power, m) as f32;
            }
        }
        normalize(&mut out);
        out
    }

    /// `log10` of mel band `m`'s power: mtmd sums four products in `f32` (its unrolled
    /// loop, `p0 w0 + p1 w1 + p2 w2 + p3 w3`), each group into an `f64`.
    fn band(&self, power: &[f32], m: usize) -> f64 {
        let n_bins = power.len();
        let weights = &self.filters[m * n_bins..(m + 1) * n_bins];
        let mut sum = 0.0f64;
        let mut k = 0;
        while k + 3 < n_bins {
            let p01 = mul_add(power[k], weights[k], power[k + 1] * weights[k + 1]);
            let p012 = mul_add(power[k + 2], weights[k + 2], p01);
            sum += f64::from(mul_add(power[k + 3], weights[k + 3], p012));
            k += 4;
        }
        for k in k..n_bins {
            sum += f64::from(power[k] * weights[k]);
        }
        // `std::max(sum, floor)`: a NaN stays NaN.
        let floor = f64::from(MEL_FLOOR);
        if sum < floor { floor } else { sum }.log10()
    }

    /// mtmd's forward FFT of `input` (real, `n` values) into `out` (`n` complex values,
    /// re and im interleaved): radix 2, its twiddles read from the sine table.
    fn fft(&self, input: &[f32], out: &mut [f32]) {
        let n = input.len();
        if n == 1 {
            out[0] = input[0];
            out[1] = 0.0;
            return;
        }
        if n % 2 == 1 {
            self.dft(input, out);
            return;
        }
        let half = n / 2;
        let even: Vec<f32> = input.iter().step_by(2).copied().collect();
        let odd: Vec<f32> = input.iter().skip(1).step_by(2).copied().collect();
        let mut even_fft = vec![0.0f32; n];
        let mut odd_fft = vec![0.0f32; n];
        self.fft(&even, &mut even_fft);
        self.fft(&odd, &mut odd_fft);
        let step = self.sin.len() / n;
        for k in 0..half {
            let re = self.cos[k * step];
            let im = -self.sin[k * step];
            let (re_odd, im_odd) = (odd_fft[2 * k], odd_fft[2 * k + 1]);
            let (re_even, im_even) = (even_fft[2 * k], even_fft[2 * k + 1]);
            // `re_even + re re_odd - im im_odd`, `im_even + re im_odd + im re_odd`,
            // `re_even - re re_odd + im im_odd`, `im_even - re im_odd - im re_odd`.
            out[2 * k] = mul_add(-im, im_odd, mul_add(re, re_odd, re_even));
            out[2 * k + 1] = mul_add(im, re_odd, mul_add(re, im_odd, im_even));
            out[2 * (k + half)] = mul_add(im, im_odd, mul_add(-re, re_odd, re_even));
            out[2 * (k + half) + 1] = mul_add(-im, re_odd, mul_add(-re, im_odd, im_even));
        }
    }

    /// mtmd's DFT of a real input of odd length.
    fn dft(&self, input: &[f32], out: &mut [f32]) {
        let n = input.len();
        let step = self.sin.len() / n;
        for k in 0..n {
            let (mut re, mut im) = (0.0f32, 0.0f32);
            for (j, &x) in input.iter().enumerate() {
                let idx = (k * j * step) % self.sin.len();
                re = mul_add(x, self.cos[idx], re);
                im = mul_add(-x, self.sin[idx], im);
            }
            out[2 * k] = re;
            out[2 * k + 1] = im;
        }
    }
}

/// Whisper's normalisation over the whole spectrogram: each value clamped from below at
/// the maximum less 8 (in `f64`, stored as `f32`), then `(x + 4) / 4`.
fn normalize(values: &mut [f32]) {
    let max = values
        .iter()
        .fold(-1e20f64, |m, &v| if f64::from(v) > m { f64::from(v) } else { m })
        - 8.0;
    for v in values {
        if f64::from(*v) < max {
            *v = max as f32;
        }
        *v = ((f64::from(*v) + 4.0) / 4.0) as f32;
    }
}

/// `sinf` and `cosf` of `2 pi i / n` (the angle in `f64`, rounded to `f32` for the call).
fn sin_cos_table(n: usize) -> (Vec<f32>, Vec<f32>) {
    (0..n)
        .map(|i| {
            let theta = (2.0 * std::f64::consts::PI * i as f64) / n as f64;
            ((theta as f32).sin(), (theta as f32).cos())
        })
        .unzip()
}

/// The periodic Hann window of `n` samples.
fn hann_window(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let c = ((2.0 * std::f64::consts::PI * i as f64) / n as f64) as f32;
            (0.5 * (1.0 - f64::from(c.cos()))) as f32
        })
        .collect()
}

/// librosa's (Slaney) mel filter bank with area normalisation, from 0 Hz to Nyquist, in
/// `f64` and rounded once: `n_mel` rows of `n_fft / 2 + 1` weights (mtmd's
/// `fill_mel_filterbank_matrix` with its defaults).
fn mel_filters(n_mel: usize, n_fft: usize, sample_rate: u32) -> Vec<f32> {
    const MIN_LOG_HZ: f64 = 1000.0;
    const LIN_SLOPE: f64 = 3.0 / 200.0;
    const MIN_LOG_MEL: f64 = MIN_LOG_HZ * LIN_SLOPE;
    let log_step = 6.4f64.ln() / 27.0;
    let hz_to_mel = |f: f64| {
        if f < MIN_LOG_HZ {
            f * LIN_SLOPE
        } else {
            MIN_LOG_MEL + (f / MIN_LOG_HZ).ln() / log_step
        }
    };
    let mel_to_hz = |m: f64| {
        if m < MIN_LOG_MEL {
            m / LIN_SLOPE
        } else {
            MIN_LOG_HZ * ((m - MIN_LOG_MEL) * log_step).exp()
        }
    };

    let bin_hz = f64::from(sample_rate) / n_fft as f64;
    let (lo, hi) = (hz_to_mel(0.0), hz_to_mel(f64::from(0.5f32 * sample_rate as f32)));
    let hz: Vec<f64> = (0..n_mel + 2)
        .map(|i| mel_to_hz(mul_add_f64(hi - lo, i as f64 / (n_mel + 1) as f64, lo)))
        .collect();
    let n_bins = n_fft / 2 + 1;
    let mut out = vec![0.0f32; n_mel * n_bins];
    for m in 0..n_mel {
        let (left, center, right) = (hz[m], hz[m + 1], hz[m + 2]);
        let denom_l = (center - left).max(1e-30);
        let denom_r = (right - center).max(1e-30);
        let enorm = 2.0 / (right - left).max(1e-30);
        for k in 0..n_bins {
            let f = k as f64 * bin_hz;
            let w = if f >= left && f <= center {
                (f - left) / denom_l
            } else if f > center && f <= right {
                (right - f) / denom_r
            } else {
                0.0
            };
            out[m * n_bins + k] = (w * enorm) as f32;
        }
    }
    out
}
