//! What decides the bits of a forward pass besides the model and the inputs: the
//! kernels ggml's CPU backend was compiled with. `-march=native` compiles other
//! kernels on other CPUs (AVX512-FP16 makes flash attention accumulate V in half
//! precision, for one), so "identical to llama.cpp" holds between builds of the same
//! profile: the same ggml, compiler and instruction-set macros. Goldens are recorded
//! per profile.

/// The build's profile; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildProfile {
    /// `std::env::consts::ARCH`, e.g. `x86_64`.
    pub arch: &'static str,
    pub ggml_version: &'static str,
    /// The C compiler's family and version, e.g. `gcc 12.2.0`.
    pub compiler: &'static str,
    /// The instruction-set macros the CPU backend was compiled under (e.g. `AVX512FP16`).
    pub isa: Vec<&'static str>,
    /// The flags that chose them (informative: the profile is what they chose).
    pub cpu_flags: &'static str,
}

impl BuildProfile {
    /// This build's profile.
    pub fn current() -> BuildProfile {
        BuildProfile {
            arch: std::env::consts::ARCH,
            ggml_version: ggml_sys::GGML_VERSION,
            compiler: ggml_sys::GGML_COMPILER,
            isa: ggml_sys::GGML_ISA.split_whitespace().collect(),
            cpu_flags: ggml_sys::GGML_CPU_FLAGS,
        }
    }

    /// A short stable name, `<arch>-<12 hex digits>`: a digest of everything that
    /// decides the kernels (the flags are left out: only what they chose counts).
    pub fn id(&self) -> String {
        let text = format!(
            "{}|ggml {}|{}|{}",
            self.arch,
            self.ggml_version,
            self.compiler,
            self.isa.join(" ")
        );
        format!("{}-{:012x}", self.arch, fnv1a64(text.as_bytes()) >> 16)
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
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_id_names_the_arch_and_follows_the_isa() {
        let profile = BuildProfile::current();
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
    }
}
