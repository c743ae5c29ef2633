//! miniaudio's linear resampler (`ma_linear_resampler`, f32, one channel) as mtmd-helper's
//! decoder runs it: `ma_decoder_config_init(ma_format_f32, 1, 16000)` builds a data converter
//! that mixes the channels down first and then resamples the mono stream (channels first,
//! since the output has fewer), with the resampler's defaults: its low-pass filter of order
//! 4 (two biquad sections, `MA_DEFAULT_RESAMPLER_LPF_ORDER`) cutting at the lower rate's
//! Nyquist frequency. What is special, and kept bit for bit:
//!
//! - the rates are reduced by their greatest common divisor first, and the filter is
//!   designed on the reduced ones (`w = 2π·(min/2)/max` in `f64`), its coefficients
//!   normalized in `f64` and rounded to `f32`; it runs in `f32` (transposed direct form II);
//! - down-sampling filters each input frame as it is loaded, up-sampling each output frame
//!   after interpolating it;
//! - time advances in whole input frames plus a fraction counted in output-rate units
//!   (integers, exact); the first output frame interpolates from a zero frame before the
//!   input (the resampler starts one frame behind), by `x0 + (x1 - x0)·a` with
//!   `a = frac / rate_out` in `f32` (`ma_mix_f32_fast`);
//! - the decoder's length (`ma_decoder_get_length_in_pcm_frames`, which sizes
//!   mtmd-helper's buffer) is `ma_calculate_frame_count_after_resampling` on the unreduced
//!   rates, which can be one frame more than the resampler gives before its input runs out
//!   (that frame stays 0 in mtmd-helper's buffer) or one less (the last is never read).
//!
//! The operations are miniaudio's, in `f32` and in its order; the products that GCC fuses
//! with their sums on aarch64 (the interpolation's, and in each biquad `b0·x + r1`,
//! `b1·x - a1·y` and `b2·x - a2·y`, but not `a1·y` or `a2·y`) are fused there too
//! ([`crate::contract`]).

use std::f64::consts::PI;

// The rate everything is resampled to (mtmd's whisper preprocessor's).
use super::mel::SAMPLE_RATE;
use crate::contract::mul_add;

/// miniaudio's default order of the resampler's low-pass filter
/// (`MA_DEFAULT_RESAMPLER_LPF_ORDER`): two second-order sections, no first-order one.
const LPF_ORDER: u32 = 4;

/// The length mtmd-helper's buffer is given for `frames` frames at `rate_in`:
/// `ma_calculate_frame_count_after_resampling(16000, rate_in, frames)`, on the unreduced
/// rates, as miniaudio writes it: its count of the whole input frames the last frame needs
/// takes the rates' remainder for their quotient, so whether it adds that frame is not what
/// the resampler gives (`resample` pads or cuts to it).
pub(super) fn resampled_len(rate_in: u32, frames: u64) -> u64 {
    let (rate_in, rate_out) = (u64::from(rate_in), u64::from(SAMPLE_RATE));
    if rate_in == 0 || frames == 0 {
        return 0;
    }
    if rate_in == rate_out {
        return frames;
    }
    let len = frames * rate_out / rate_in;
    let from_frac = len * (rate_in / rate_out) / rate_out;
    let whole = len * (rate_in % rate_out) + from_frac;
    if whole <= frames {
        len + 1
    } else {
        len
    }
}

/// `mono` (one channel at `rate_in`, not 16 kHz) resampled to 16 kHz as miniaudio's decoder
/// reads it into a buffer of `len` frames ([`resampled_len`]): the frames the resampler gives
/// before its input runs out, then zeros to `len`.
pub(super) fn resample(mono: &[f32], rate_in: u32, len: usize) -> Vec<f32> {
    let mut resampler = Resampler::new(rate_in, len);
    resampler.push(mono);
    resampler.finish()
}

/// [`resample`] a piece of the input at a time, for decoders that give their frames in
/// pieces: the output is the same whatever the pieces, and only it is kept.
pub(super) struct Resampler {
    lpf: LowPass,
    down: bool,
    rate_out: u32,
    advance_int: u32,
    advance_frac: u32,
    // The last two frames loaded (filtered when down-sampling), and the time of the next
    // output frame: `time_int` frames still to load before it, `time_frac / rate_out` of the
    // way from x0 to x1.
    x0: f32,
    x1: f32,
    time_int: u32,
    time_frac: u32,
    out: Vec<f32>,
    len: usize,
}

impl Resampler {
    /// A resampler from `rate_in` (not 16 kHz) to 16 kHz into a buffer of `len` frames.
    pub(super) fn new(rate_in: u32, len: usize) -> Resampler {
        let gcd = gcd(rate_in, SAMPLE_RATE);
        let (rate_in, rate_out) = (rate_in / gcd, SAMPLE_RATE / gcd);
        Resampler {
            // The cutoff: the lower rate's Nyquist frequency (`lpfNyquistFactor` 1).
            lpf: LowPass::new(rate_in.max(rate_out), f64::from(rate_in.min(rate_out)) * 0.5),
            down: rate_in > rate_out,
            rate_out,
            advance_int: rate_in / rate_out,
            advance_frac: rate_in % rate_out,
            x0: 0.0,
            x1: 0.0,
            time_int: 1,
            time_frac: 0,
            // Grown as frames come: `len` may be a file's unchecked claim.
            out: Vec::new(),
            len,
        }
    }

    /// Whether the buffer is full (more input would not be read).
    pub(super) fn is_full(&self) -> bool {
        self.out.len() >= self.len
    }

    /// Runs the resampler over the next frames of its input.
    pub(super) fn push(&mut self, mono: &[f32]) {
        let mut input = mono.iter();
        while self.out.len() < self.len {
            while self.time_int > 0 {
                let Some(&x) = input.next() else { return };
                self.x0 = self.x1;
                self.x1 = if self.down { self.lpf.process(x) } else { x };
                self.time_int -= 1;
            }
            let a = self.time_frac as f32 / self.rate_out as f32;
            let y = mul_add(self.x1 - self.x0, a, self.x0);
            let y = if self.down { y } else { self.lpf.process(y) };
            self.out.push(y);
            self.time_int += self.advance_int;
            self.time_frac += self.advance_frac;
            if self.time_frac >= self.rate_out {
                self.time_frac -= self.rate_out;
                self.time_int += 1;
            }
        }
    }

    /// The buffer: what the resampler gave, then zeros to its length.
    pub(super) fn finish(mut self) -> Vec<f32> {
        self.out.resize(self.len, 0.0);
        self.out
    }
}

/// `ma_gcf_u32`.
fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `ma_lpf` of [`LPF_ORDER`] in `f32`: its Butterworth second-order sections in turn.
struct LowPass([Biquad; (LPF_ORDER / 2) as usize]);

impl LowPass {
    /// `ma_lpf_init` at `sample_rate` (Hz) cutting at `cutoff`: section `i`'s Q is
    /// `1 / (2 cos((1 + 2i) π / (2·order)))`.
    fn new(sample_rate: u32, cutoff: f64) -> LowPass {
        LowPass(std::array::from_fn(|i| {
            let angle = f64::from(1 + i as u32 * 2) * (PI / f64::from(LPF_ORDER * 2));
            let q = 1.0 / (2.0 * cos(angle));
            Biquad::low_pass(sample_rate, cutoff, q)
        }))
    }

    fn process(&mut self, x: f32) -> f32 {
        self.0.iter_mut().fold(x, |x, section| section.process(x))
    }
}

/// `ma_biquad` in `f32`, with `ma_lpf2`'s coefficients.
struct Biquad {
    b0: f32,
    b1: f32,
    b2: f32,
    a1: f32,
    a2: f32,
    r1: f32,
    r2: f32,
}

impl Biquad {
    /// `ma_lpf2__get_biquad_config` then `ma_biquad_reinit`: designed in `f64`, divided by
    /// `a0` and rounded to `f32`.
    fn low_pass(sample_rate: u32, cutoff: f64, q: f64) -> Biquad {
        let w = 2.0 * PI * cutoff / f64::from(sample_rate);
        let (s, c) = (w.sin(), cos(w));
        let a = s / (2.0 * q);
        let (b0, b1, b2) = ((1.0 - c) / 2.0, 1.0 - c, (1.0 - c) / 2.0);
        let (a0, a1, a2) = (1.0 + a, -2.0 * c, 1.0 - a);
        Biquad {
            b0: (b0 / a0) as f32,
            b1: (b1 / a0) as f32,
            b2: (b2 / a0) as f32,
            a1: (a1 / a0) as f32,
            a2: (a2 / a0) as f32,
            r1: 0.0,
            r2: 0.0,
        }
    }

    /// `ma_biquad_process_pcm_frame_f32__direct_form_2_transposed`.
    fn process(&mut self, x: f32) -> f32 {
        // `y = b0·x + r1; r1 = b1·x - a1·y + r2; r2 = b2·x - a2·y`.
        let y = mul_add(self.b0, x, self.r1);
        self.r1 = mul_add(self.b1, x, -(self.a1 * y)) + self.r2;
        self.r2 = mul_add(self.b2, x, -(self.a2 * y));
        y
    }
}

/// miniaudio's `ma_cosd`: `sin(π/2 - x)`, which is not always `cos(x)`'s bits.
fn cos(x: f64) -> f64 {
    (PI * 0.5 - x).sin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_miniaudios() {
        // 44.1 kHz: floor(n·160/441), the extra frame never added but to an empty result.
        assert_eq!(resampled_len(44_100, 441), 160);
        assert_eq!(resampled_len(44_100, 1), 1);
        // 48 kHz (a multiple of 16 kHz): the extra frame always added.
        assert_eq!(resampled_len(48_000, 3), 2);
        // 8 kHz: twice as many.
        assert_eq!(resampled_len(8_000, 5), 10);
        assert_eq!(resampled_len(8_000, 0), 0);
    }

    #[test]
    fn the_tail_past_the_input_stays_zero() {
        // 48 kHz, 3 frames: the second frame would need a fourth input frame.
        let out = resample(&[0.5, 0.5, 0.5], 48_000, 2);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], 0.0);
        assert_eq!(out[1], 0.0);
    }
}
