//! Which instruction set this CPU runs our kernels with.

use std::sync::OnceLock;

/// The instruction sets our kernels have code for. Each kernel forms the same
/// integer lanes with either, and takes the same float steps (ggml's, which are the
/// same on both), so the bits do not depend on which one runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Off x86-64 there are none.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub enum Isa {
    /// AVX-512 with VNNI, BW and VL (Intel from Ice Lake, AMD from Zen 4).
    Avx512Vnni,
    /// AVX2 with FMA and F16C (Intel from Haswell, AMD from Zen 1).
    Avx2,
}

/// The instruction set this CPU runs our kernels with, if any.
pub fn isa() -> Option<Isa> {
    static ISA: OnceLock<Option<Isa>> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
            let avx512_vnni = is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni");
            match (avx2, avx512_vnni) {
                (true, true) => Some(Isa::Avx512Vnni),
                (true, false) => Some(Isa::Avx2),
                _ => None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    })
}
