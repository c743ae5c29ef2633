//! `a * b + c` as GCC compiles llama.cpp's C++ for the target: GCC contracts a product and
//! the sum or difference it feeds into one fused multiply-add wherever the target's
//! baseline has the instruction (`-ffp-contract=fast`, its default for C++ and GNU C), so
//! on aarch64 it is rounded once, on x86-64 (no FMA in its baseline) twice. Rust never
//! contracts, so the spots of mtmd's image and audio paths (and of miniaudio's resampler)
//! that GCC fuses on aarch64 call these, in the order GCC fuses them (read off its
//! aarch64 code, `fmadd`/`fmsub`/`fmla`/`fmls`); each target is then identical to its own
//! llama.cpp build. A difference `c - a * b` is `mul_add(-a, b, c)` (negation is exact).

/// `a * b + c` in `f32`: one rounding on aarch64, two elsewhere.
#[inline(always)]
pub(crate) fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "aarch64")]
    {
        a.mul_add(b, c)
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        a * b + c
    }
}

/// `a * b + c` in `f64`: one rounding on aarch64, two elsewhere.
#[inline(always)]
pub(crate) fn mul_add_f64(a: f64, b: f64, c: f64) -> f64 {
    #[cfg(target_arch = "aarch64")]
    {
        a.mul_add(b, c)
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        a * b + c
    }
}
