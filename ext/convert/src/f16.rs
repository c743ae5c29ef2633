//! `numpy.ndarray.astype(np.float16)` on float32 values: numpy's
//! `npy_floatbits_to_halfbits`, bit for bit (round to nearest, ties to even;
//! overflow to infinity; NaN payloads truncated but kept NaN).

/// The IEEE half-precision bits nearest to the float32 with bits `f`.
pub(crate) fn f32_bits_to_f16_bits(f: u32) -> u16 {
    let h_sgn = ((f & 0x8000_0000) >> 16) as u16;
    let f_exp = f & 0x7f80_0000;

    // Exponent overflow, infinity or NaN.
    if f_exp >= 0x4780_0000 {
        if f_exp == 0x7f80_0000 {
            let f_sig = f & 0x007f_ffff;
            if f_sig != 0 {
                let mut ret = (0x7c00 + (f_sig >> 13)) as u16;
                if ret == 0x7c00 {
                    ret += 1;
                }
                return h_sgn + ret;
            }
            return h_sgn + 0x7c00;
        }
        return h_sgn + 0x7c00;
    }

    // Exponent underflow: a subnormal half or a signed zero.
    if f_exp <= 0x3800_0000 {
        if f_exp < 0x3300_0000 {
            return h_sgn;
        }
        let f_exp = f_exp >> 23;
        let mut f_sig = 0x0080_0000 + (f & 0x007f_ffff);
        f_sig >>= 113 - f_exp;
        // Round to nearest even; the shift above may have dropped up to 11 bits,
        // which the test on `f` itself restores.
        if (f_sig & 0x0000_3fff) != 0x0000_1000 || (f & 0x0000_07ff) != 0 {
            f_sig += 0x0000_1000;
        }
        return h_sgn + (f_sig >> 13) as u16;
    }

    // The normal case; a carry out of the significand bumps the exponent
    // (possibly to infinity), which is the right result.
    let h_exp = ((f_exp - 0x3800_0000) >> 13) as u16;
    let mut f_sig = f & 0x007f_ffff;
    if (f_sig & 0x0000_3fff) != 0x0000_1000 {
        f_sig += 0x0000_1000;
    }
    let h_sig = (f_sig >> 13) as u16;
    h_sgn + h_exp + h_sig
}

/// The float32 value of half-precision bits (exact).
pub(crate) fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = (h >> 10) & 0x1f;
    let sig = f32::from(h & 0x3ff);
    match exp {
        0 => sign * sig * 2f32.powi(-24),
        0x1f if sig == 0.0 => sign * f32::INFINITY,
        0x1f => f32::from_bits(0x7f80_0000 | (u32::from(h & 0x8000) << 16) | (u32::from(h & 0x3ff) << 13)),
        _ => sign * (1.0 + sig / 1024.0) * 2f32.powi(i32::from(exp) - 15),
    }
}

/// The float32 value of bfloat16 bits (exact).
pub(crate) fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The half nearest to `x` (ties to even), by binary search over the finite
    /// halves (monotonic in their bits), in f64 where halves and float32 are exact.
    fn nearest_half(x: f32) -> u16 {
        let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
        let a = f64::from(x).abs();
        // From max + half an ulp (65504 + 16) on, it is infinity.
        if a >= 65520.0 {
            return sign | 0x7c00;
        }
        let value = |h: u16| f64::from(f16_bits_to_f32(h));
        // The largest half <= a.
        let (mut lo, mut hi) = (0u16, 0x7bffu16);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if value(mid) <= a {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let below = lo;
        if value(below) == a || below == 0x7bff {
            return sign | below;
        }
        let (d_lo, d_hi) = (a - value(below), value(below + 1) - a);
        let pick = if d_lo < d_hi || (d_lo == d_hi && below & 1 == 0) {
            below
        } else {
            below + 1
        };
        sign | pick
    }

    #[test]
    fn halves_round_trip() {
        for h in 0u16..=0xffff {
            let f = f16_bits_to_f32(h);
            if f.is_nan() {
                assert!(f32_bits_to_f16_bits(f.to_bits()) & 0x7c00 == 0x7c00);
                continue;
            }
            assert_eq!(f32_bits_to_f16_bits(f.to_bits()), h, "half {h:#06x}");
        }
    }

    #[test]
    fn rounds_to_nearest_even() {
        // Every half's neighbourhood: the midpoints (ties), just above and below them,
        // and a spread of float32 values across the whole range, subnormals included.
        let mut values = Vec::new();
        for h in 0u16..0x7bff {
            let lo = f64::from(f16_bits_to_f32(h));
            let hi = f64::from(f16_bits_to_f32(h + 1));
            let mid = ((lo + hi) / 2.0) as f32;
            values.extend([
                mid,
                f32::from_bits(mid.to_bits() + 1),
                f32::from_bits(mid.to_bits() - 1),
            ]);
        }
        let mut bits = 0u32;
        while bits < 0x4800_0000 {
            values.push(f32::from_bits(bits));
            bits += 0x0001_3579;
        }
        values.extend([
            65504.0,
            65519.99,
            65520.0,
            1e9,
            5.960_464_5e-8,
            2.980_232_2e-8,
            2.980_233e-8,
        ]);
        for x in values {
            for v in [x, -x] {
                assert_eq!(f32_bits_to_f16_bits(v.to_bits()), nearest_half(v), "{v:e}");
            }
        }
    }

    #[test]
    fn specials() {
        assert_eq!(f32_bits_to_f16_bits(f32::INFINITY.to_bits()), 0x7c00);
        assert_eq!(f32_bits_to_f16_bits(f32::NEG_INFINITY.to_bits()), 0xfc00);
        assert_eq!(f32_bits_to_f16_bits(f32::NAN.to_bits()) & 0x7c00, 0x7c00);
        assert_ne!(f32_bits_to_f16_bits(f32::NAN.to_bits()) & 0x3ff, 0);
        assert_eq!(f32_bits_to_f16_bits((-0.0f32).to_bits()), 0x8000);
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
    }
}
