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

/// The instruction set our kernels run with here, if any: what this CPU runs, but never
/// more than ggml's CPU backend in use was compiled for (see [`isa_for`]).
pub fn isa() -> Option<Isa> {
    static ISA: OnceLock<Option<Isa>> = OnceLock::new();
    *ISA.get_or_init(|| {
        let ggml = crate::ggml::BuildProfile::current().ok()?;
        isa_for(cpu_isa(), &ggml.isa)
    })
}

/// Our kernels take ggml's float steps for AVX2 and up; ggml compiled without AVX2 (the
/// gem's `sandybridge`, `sse42` or `x64` variant, forced on a newer CPU, or a source build
/// with `ELELEM_CPU_FLAGS=-march=x86-64-v2`) takes others, so there ours stay off and the
/// bits are that build's. `ggml_isa` is its instruction-set macros (`BuildProfile::isa`).
fn isa_for(cpu: Option<Isa>, ggml_isa: &[&str]) -> Option<Isa> {
    let compiled = |macros: &[&str]| macros.iter().all(|m| ggml_isa.contains(m));
    let avx2 = compiled(&["AVX2", "FMA", "F16C"]);
    let avx512_vnni = avx2 && compiled(&["AVX512F", "AVX512BW", "AVX512VL", "AVX512VNNI"]);
    match cpu {
        Some(Isa::Avx512Vnni) if avx512_vnni => Some(Isa::Avx512Vnni),
        Some(_) if avx2 => Some(Isa::Avx2),
        _ => None,
    }
}

/// The instruction set this CPU runs our kernels with, if any.
fn cpu_isa() -> Option<Isa> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const SANDYBRIDGE: &[&str] = &["AVX", "SSE3", "SSSE3"];
    const HASWELL: &[&str] = &["AVX", "AVX2", "BMI2", "F16C", "FMA", "SSE3", "SSSE3"];
    const ZEN4: &[&str] = &[
        "AVX",
        "AVX2",
        "AVX512BF16",
        "AVX512BW",
        "AVX512DQ",
        "AVX512F",
        "AVX512VBMI",
        "AVX512VL",
        "AVX512VNNI",
        "BMI2",
        "F16C",
        "FMA",
        "SSE3",
        "SSSE3",
    ];

    #[test]
    fn ours_run_no_more_than_ggml_was_compiled_for() {
        let avx512 = Some(Isa::Avx512Vnni);
        assert_eq!(isa_for(avx512, ZEN4), avx512);
        assert_eq!(isa_for(avx512, HASWELL), Some(Isa::Avx2));
        assert_eq!(
            isa_for(avx512, SANDYBRIDGE),
            None,
            "ggml without AVX2 takes other float steps"
        );
        assert_eq!(isa_for(Some(Isa::Avx2), ZEN4), Some(Isa::Avx2));
        assert_eq!(isa_for(None, ZEN4), None);
    }
}
