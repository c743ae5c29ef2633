//! What decides the bits of a forward pass besides the model and the inputs: the
//! kernels ggml's CPU backend was compiled with. `-march=native` compiles other
//! kernels on other CPUs (AVX512-FP16 makes flash attention accumulate V in half
//! precision, for one), so "identical to llama.cpp" holds between builds of the same
//! profile: the same ggml, compiler and instruction-set macros. Goldens are recorded
//! per profile. In a build with CPU variants (the platform gem), the variant loaded at
//! run time decides the kernels: the profile is that variant's, and names it.
//!
//! The C math library the process runs with decides bits too: ggml's kernels call its
//! `tanhf` (GELU, and the table GELU reads), `erff`, `expm1f`, `expf`... and C libraries
//! answer differently. Debian 13's glibc 2.41 rounds `tanhf`, `erff` and `expm1f`
//! correctly where Debian 12's 2.36 answers otherwise, by one or two ulps, on 1–7 % of
//! inputs, so llama.cpp itself picks other greedy ids on gemma3n under one than under
//! the other. The profile holds a fingerprint of those answers ([`libm_fingerprint`]).

/// The build's profile; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildProfile {
    /// `std::env::consts::ARCH`, e.g. `x86_64`.
    pub arch: &'static str,
    pub ggml_version: &'static str,
    /// The C compiler's family and version, e.g. `gcc 12.2.0`.
    pub compiler: &'static str,
    /// The instruction-set macros the CPU backend was compiled under (e.g. `AVX512FP16`);
    /// `AMX_*` only while ggml's AMX kernels are in use; with SVE, the vector length in use
    /// (`SVE_BITS_256`).
    pub isa: Vec<&'static str>,
    /// The flags that chose them (informative: the profile is what they chose).
    pub cpu_flags: &'static str,
    /// The CPU variant in use (`haswell`, `zen4`, ...) in a build with variants; `None`
    /// when the CPU backend is linked in.
    pub variant: Option<&'static str>,
    /// The C math library's fingerprint ([`libm_fingerprint`]).
    pub libm: &'static str,
}

impl BuildProfile {
    /// This build's profile: in a build with CPU variants, the profile of the variant in
    /// use (which loads the CPU backend if it is not yet).
    ///
    /// # Errors
    /// [`crate::Error::Cpu`] when the CPU backend cannot be loaded.
    pub fn current() -> crate::Result<BuildProfile> {
        let mut profile = match super::device::cpu_variant()? {
            None => BuildProfile {
                arch: std::env::consts::ARCH,
                ggml_version: ggml_sys::GGML_VERSION,
                compiler: ggml_sys::GGML_COMPILER,
                isa: ggml_sys::GGML_ISA.split_whitespace().collect(),
                cpu_flags: ggml_sys::GGML_CPU_FLAGS,
                variant: None,
                libm: libm_fingerprint(),
            },
            Some(v) => BuildProfile {
                arch: std::env::consts::ARCH,
                ggml_version: ggml_sys::GGML_VERSION,
                compiler: v.compiler,
                isa: v.isa.to_vec(),
                cpu_flags: v.flags,
                variant: Some(v.name),
                libm: libm_fingerprint(),
            },
        };
        // ggml's SVE kernels pick their code by this CPU's vector length.
        if profile.isa.contains(&"ARM_FEATURE_SVE") {
            profile.isa.extend(ggml_sys::cpu::sve_bits_tag());
        }
        // AMX compiled in but off here runs the code of a build without it (ggml tests
        // `__AMX_INT8__` only to offer the AMX buffer), so it gives that build's bits.
        if *super::device::amx()? != super::device::Amx::InUse {
            profile.isa.retain(|f| !f.starts_with("AMX"));
        }
        Ok(profile)
    }

    /// A short stable name, `<arch>-<12 hex digits>`: a digest of everything that
    /// decides the kernels (the flags are left out: only what they chose counts), and of
    /// the CPU variant's name where there is one (a variant is compiled from ggml's own
    /// feature flags, not `-march`, so two builds with the same macros may still differ),
    /// and of the C math library's fingerprint.
    pub fn id(&self) -> String {
        let mut text = format!(
            "{}|ggml {}|{}|{}",
            self.arch,
            self.ggml_version,
            self.compiler,
            self.isa.join(" ")
        );
        if let Some(variant) = self.variant {
            text.push_str(&format!("|variant {variant}"));
        }
        text.push_str(&format!("|libm {}", self.libm));
        format!("{}-{:012x}", self.arch, fnv1a64(text.as_bytes()) >> 16)
    }
}

/// The functions of the C math library that ggml's CPU kernels call (those of
/// `libggml-cpu`'s undefined symbols that compute values).
const LIBM_FUNCTIONS: [unsafe extern "C" fn(f32) -> f32; 8] = [
    c_math::expf,
    c_math::expm1f,
    c_math::logf_of_abs,
    c_math::sinf,
    c_math::cosf,
    c_math::tanhf,
    c_math::erff,
    c_math::powf_of_abs,
];

/// How many inputs each function answers for the fingerprint: spread over [-8, 8),
/// where activations live. Where two libraries differ on 1 % of such inputs, 4096
/// of them tell the two apart but for a chance of about 1e-18.
const LIBM_SAMPLES: u32 = 4096;

/// 12 hex digits that change when the C math library answers otherwise: a digest of
/// the bits of each of [`LIBM_FUNCTIONS`] on [`LIBM_SAMPLES`] inputs, computed once per
/// process (in a few hundred microseconds) through the library this process loaded.
pub fn libm_fingerprint() -> &'static str {
    static FINGERPRINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FINGERPRINT.get_or_init(|| {
        let mut bits = Vec::with_capacity(LIBM_FUNCTIONS.len() * LIBM_SAMPLES as usize * 4);
        for function in LIBM_FUNCTIONS {
            for i in 0..LIBM_SAMPLES {
                // black_box: the answer must come from the library, not from the compiler
                // folding a call it knows.
                let x = std::hint::black_box(-8.0 + 16.0 * (i as f32 + 0.3) / LIBM_SAMPLES as f32);
                // SAFETY: the C library's pure functions of one float.
                bits.extend_from_slice(&unsafe { function(x) }.to_bits().to_le_bytes());
            }
        }
        format!("{:012x}", fnv1a64(&bits) >> 16)
    })
}

/// The C math library, by the names ggml's kernels link against.
mod c_math {
    extern "C" {
        pub fn expf(x: f32) -> f32;
        pub fn expm1f(x: f32) -> f32;
        fn logf(x: f32) -> f32;
        pub fn sinf(x: f32) -> f32;
        pub fn cosf(x: f32) -> f32;
        pub fn tanhf(x: f32) -> f32;
        pub fn erff(x: f32) -> f32;
        fn powf(x: f32, y: f32) -> f32;
    }

    /// `logf` where it is defined.
    pub unsafe extern "C" fn logf_of_abs(x: f32) -> f32 {
        // SAFETY: a pure function of one float.
        unsafe { logf(x.abs()) }
    }

    /// `powf` as RoPE's frequency scaling calls it: a positive base, a fractional exponent.
    pub unsafe extern "C" fn powf_of_abs(x: f32) -> f32 {
        // SAFETY: a pure function of two floats.
        unsafe { powf(x.abs(), 0.37) }
    }
}

/// The CPU's model name as the kernel reports it (`/proc/cpuinfo`), if known.
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|line| {
        line.strip_prefix("model name")?
            .split_once(':')
            .map(|(_, v)| v.trim().to_string())
    })
}

/// FNV-1a, 64 bits: stable across Rust versions and platforms (unlike `DefaultHasher`),
/// so Ruby and recorded goldens can rely on the ids.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_names_amx_only_while_it_is_in_use() {
        let profile = BuildProfile::current().unwrap();
        let in_use = *super::super::device::amx().unwrap() == super::super::device::Amx::InUse;
        assert_eq!(profile.isa.contains(&"AMX_INT8"), in_use, "{profile:?}");
    }

    #[test]
    fn the_math_library_is_fingerprinted_once_from_its_answers() {
        let fingerprint = libm_fingerprint();
        assert_eq!(fingerprint.len(), 12);
        assert!(fingerprint.bytes().all(|b| b.is_ascii_hexdigit()), "{fingerprint}");
        assert!(std::ptr::eq(fingerprint, libm_fingerprint()));
        assert_eq!(BuildProfile::current().unwrap().libm, fingerprint);
    }

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_id_names_the_arch_and_follows_the_isa() {
        let profile = BuildProfile::current().unwrap();
        let id = profile.id();
        assert!(id.starts_with(&format!("{}-", profile.arch)), "{id}");
        assert_eq!(id.len(), profile.arch.len() + 13);
        let mut other = profile.clone();
        other.isa.push("AVX512FP16");
        other.isa.push("SOMETHING_ELSE");
        assert_ne!(other.id(), id);
        other = profile.clone();
        other.cpu_flags = "-march=x86-64";
        assert_eq!(other.id(), id, "only what the flags chose counts");
        other.variant = Some(if profile.variant == Some("haswell") {
            "zen4"
        } else {
            "haswell"
        });
        assert_ne!(other.id(), id, "the variant counts");
    }

    #[test]
    fn an_id_digests_the_kernels_and_the_math_library() {
        // The committed goldens are keyed by these ids: the text must not change.
        let profile = BuildProfile {
            arch: "x86_64",
            ggml_version: "0.26.0",
            compiler: "gcc 12.2.0",
            isa: vec!["AVX", "AVX2", "F16C", "FMA"],
            cpu_flags: "-march=native",
            variant: None,
            libm: "0123456789ab",
        };
        let text = "x86_64|ggml 0.26.0|gcc 12.2.0|AVX AVX2 F16C FMA|libm 0123456789ab";
        assert_eq!(profile.id(), format!("x86_64-{:012x}", fnv1a64(text.as_bytes()) >> 16));
        let other = BuildProfile {
            libm: "0123456789ac",
            ..profile.clone()
        };
        assert_ne!(other.id(), profile.id(), "the math library counts");
    }
}
