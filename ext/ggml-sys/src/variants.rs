// The CPU variants of ggml's CPU backend, as llama.cpp's release builds make them
// (`GGML_BACKEND_DL` + `GGML_CPU_ALL_VARIANTS`, `ggml/src/CMakeLists.txt`): each one a shared
// library compiled for a set of instruction-set features, loaded and scored at run time.
// One list per architecture (x86-64, and aarch64 on Linux). Included by build.rs (which
// compiles them) and by the crate (which loads them), so this file holds plain items only.

/// A variant: its name (the library is `libggml-cpu-<name>.so`) and the features ggml's
/// CMake turns on for it, in its order.
pub struct VariantSpec {
    pub name: &'static str,
    pub features: &'static [&'static str],
}

/// A feature of a variant list: the compiler flags ggml's CMake adds for it (on aarch64,
/// the `+tag` it appends to `-march`) and, on aarch64, the architecture level it bumps
/// `-march` to.
pub struct Feature {
    pub name: &'static str,
    pub flags: &'static [&'static str],
    pub level: Option<&'static str>,
}

/// An architecture's variants, as ggml's CMake builds them there.
pub struct VariantIsa {
    /// Cargo's `target_arch`.
    pub arch: &'static str,
    /// ggml's source folder for it (`ggml-cpu/arch/<dir>`, where `cpu-feats.cpp` scores).
    pub dir: &'static str,
    /// llama.cpp's list, in its order.
    pub variants: &'static [VariantSpec],
    /// The variants the platform gem ships (`ELELEM_CPU_VARIANTS=default`).
    pub default: &'static [&'static str],
    /// The features, in the order ggml's CMake adds their flags.
    pub features: &'static [Feature],
    /// What a feature's definition is called: `GGML_<prefix><FEATURE>`.
    pub define_prefix: &'static str,
    /// aarch64: the `-march` level every variant starts from (features append `+tags`
    /// and may raise it); `None` where features add flags of their own (x86-64).
    pub base_level: Option<&'static str>,
}

const fn x86(name: &'static str, flags: &'static [&'static str]) -> Feature {
    Feature { name, flags, level: None }
}

const fn arm(name: &'static str, tag: &'static [&'static str], level: Option<&'static str>) -> Feature {
    Feature { name, flags: tag, level }
}

const fn v(name: &'static str, features: &'static [&'static str]) -> VariantSpec {
    VariantSpec { name, features }
}

/// x86-64: llama.cpp's list (`GGML_CPU_ALL_VARIANTS`, non-MSVC) and ggml's flags for each
/// feature (`ggml-cpu/CMakeLists.txt`, the non-MSVC, non-native branch).
pub const X86: VariantIsa = VariantIsa {
    arch: "x86_64",
    dir: "x86",
    variants: &[
        v("x64", &[]),
        v("sse42", &["SSE42"]),
        v("sandybridge", &["SSE42", "AVX"]),
        v("ivybridge", &["SSE42", "AVX", "F16C"]),
        v("piledriver", &["SSE42", "AVX", "F16C", "FMA"]),
        v("haswell", &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"]),
        v("skylakex", &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512"]),
        v("cannonlake", &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI"]),
        v("cascadelake", &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI"]),
        v(
            "icelake",
            &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI"],
        ),
        v(
            "cooperlake",
            &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI", "AVX512_BF16"],
        ),
        v(
            "zen4",
            &[
                "SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16",
            ],
        ),
        v("alderlake", &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX_VNNI"]),
        v(
            "sapphirerapids",
            &[
                "SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16",
                "AMX_TILE", "AMX_INT8",
            ],
        ),
    ],
    // Every x86-64 CPU runs one, and each family of kernels worth telling apart has its own
    // (see docs/PLATFORMS.md: the rare in-between levels of llama.cpp's list, ivybridge,
    // piledriver, cannonlake and cooperlake, fall back to the level below them).
    default: &[
        "x64",
        "sse42",
        "sandybridge",
        "haswell",
        "alderlake",
        "skylakex",
        "cascadelake",
        "icelake",
        "zen4",
        "sapphirerapids",
    ],
    features: &[
        x86("SSE42", &["-msse4.2"]),
        x86("F16C", &["-mf16c"]),
        x86("FMA", &["-mfma"]),
        x86("BMI2", &["-mbmi2"]),
        x86("AVX", &["-mavx"]),
        x86("AVX2", &["-mavx2"]),
        x86("AVX_VNNI", &["-mavxvnni"]),
        x86("AVX512", &["-mavx512f", "-mavx512cd", "-mavx512vl", "-mavx512dq", "-mavx512bw"]),
        x86("AVX512_VBMI", &["-mavx512vbmi"]),
        x86("AVX512_VNNI", &["-mavx512vnni"]),
        x86("AVX512_BF16", &["-mavx512bf16"]),
        x86("AMX_TILE", &["-mamx-tile"]),
        x86("AMX_INT8", &["-mamx-int8"]),
        x86("AMX_BF16", &["-mamx-bf16"]),
    ],
    define_prefix: "",
    base_level: None,
};

/// aarch64 Linux: llama.cpp's list, named after the architecture version that first had
/// each set, and ggml's `-march` for each (`armv8-a`, raised by each feature and given its
/// `+tag`, in CMake's order).
pub const AARCH64: VariantIsa = VariantIsa {
    arch: "aarch64",
    dir: "arm",
    variants: &[
        v("armv8.0_1", &[]),
        v("armv8.2_1", &["DOTPROD"]),
        v("armv8.2_2", &["DOTPROD", "FP16_VECTOR_ARITHMETIC"]),
        v("armv8.2_3", &["DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE"]),
        v("armv8.6_1", &["DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8"]),
        v("armv8.6_2", &["DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2"]),
        v("armv9.2_1", &["DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SME"]),
        v("armv9.2_2", &["DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2", "SME"]),
    ],
    // All but the two SME ones: GCC 12 (Debian 12's, the gem's compiler) knows neither
    // `armv9.2-a` nor `+sme`, so it cannot compile them; an SME CPU runs armv8.6_2 (or
    // armv8.6_1 without SVE2).
    default: &["armv8.0_1", "armv8.2_1", "armv8.2_2", "armv8.2_3", "armv8.6_1", "armv8.6_2"],
    features: &[
        arm("DOTPROD", &["+dotprod"], Some("armv8.2-a")),
        arm("FP16_VECTOR_ARITHMETIC", &["+fp16"], Some("armv8.2-a")),
        arm("SVE", &["+sve"], Some("armv8.2-a")),
        arm("MATMUL_INT8", &["+i8mm"], Some("armv8.6-a")),
        arm("SVE2", &["+sve2"], Some("armv8.6-a")),
        arm("SME", &["+sme"], Some("armv9.2-a")),
    ],
    define_prefix: "USE_",
    base_level: Some("armv8-a"),
};

/// The variant list of Cargo's `target_arch`, where ggml has one we build.
pub fn variant_isa(target_arch: &str) -> Option<&'static VariantIsa> {
    [&X86, &AARCH64].into_iter().find(|isa| isa.arch == target_arch)
}

impl VariantIsa {
    /// The variant named `name`, if llama.cpp's list has it.
    pub fn spec(&self, name: &str) -> Option<&'static VariantSpec> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// A variant's compiler flags and its `GGML_*` definitions, as ggml's CMake makes them.
    pub fn flags(&self, spec: &VariantSpec) -> (Vec<String>, Vec<String>) {
        let on: Vec<&Feature> = self.features.iter().filter(|f| spec.features.contains(&f.name)).collect();
        let defines = on.iter().map(|f| format!("GGML_{}{}", self.define_prefix, f.name)).collect();
        let tags = on.iter().flat_map(|f| f.flags.iter().copied());
        let flags = match self.base_level {
            None => tags.map(String::from).collect(),
            Some(base) => {
                let level = on.iter().filter_map(|f| f.level).next_back().unwrap_or(base);
                vec![format!("-march={level}{}", tags.collect::<String>())]
            }
        };
        (flags, defines)
    }
}
