// The x86-64 CPU variants of ggml's CPU backend, as llama.cpp's release builds make them
// (`GGML_BACKEND_DL` + `GGML_CPU_ALL_VARIANTS`, `ggml/src/CMakeLists.txt`): each one a shared
// library compiled for a set of instruction-set features, loaded and scored at run time.
// Included by build.rs (which compiles them) and by the crate (which loads them), so this
// file holds plain items only.

/// A variant: its name (the library is `libggml-cpu-<name>.so`) and the features ggml's
/// CMake turns on for it, in its order.
pub struct VariantSpec {
    pub name: &'static str,
    pub features: &'static [&'static str],
}

/// llama.cpp's x86-64 list (`GGML_CPU_ALL_VARIANTS`, non-MSVC), in its order.
pub const X86_VARIANTS: &[VariantSpec] = &[
    VariantSpec { name: "x64", features: &[] },
    VariantSpec { name: "sse42", features: &["SSE42"] },
    VariantSpec { name: "sandybridge", features: &["SSE42", "AVX"] },
    VariantSpec { name: "ivybridge", features: &["SSE42", "AVX", "F16C"] },
    VariantSpec { name: "piledriver", features: &["SSE42", "AVX", "F16C", "FMA"] },
    VariantSpec { name: "haswell", features: &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"] },
    VariantSpec { name: "skylakex", features: &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512"] },
    VariantSpec {
        name: "cannonlake",
        features: &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI"],
    },
    VariantSpec {
        name: "cascadelake",
        features: &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI"],
    },
    VariantSpec {
        name: "icelake",
        features: &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI"],
    },
    VariantSpec {
        name: "cooperlake",
        features: &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI", "AVX512_BF16"],
    },
    VariantSpec {
        name: "zen4",
        features: &[
            "SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16",
        ],
    },
    VariantSpec { name: "alderlake", features: &["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX_VNNI"] },
    VariantSpec {
        name: "sapphirerapids",
        features: &[
            "SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16",
            "AMX_TILE", "AMX_INT8",
        ],
    },
];

/// The variants the platform gem ships (`ELELEM_CPU_VARIANTS=default`): every x86-64 CPU
/// runs one, and each family of kernels worth telling apart has its own (see the README:
/// the rare in-between levels of llama.cpp's list, ivybridge, piledriver, cannonlake and
/// cooperlake, fall back to the level below them).
pub const DEFAULT_VARIANTS: &[&str] = &[
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
];

/// The compiler flags ggml's CMake adds for each feature (`ggml-cpu/CMakeLists.txt`, the
/// non-MSVC, non-native branch), in its order; a variant's flags are those of its
/// features taken in this order.
pub const FEATURE_FLAGS: &[(&str, &[&str])] = &[
    ("SSE42", &["-msse4.2"]),
    ("F16C", &["-mf16c"]),
    ("FMA", &["-mfma"]),
    ("BMI2", &["-mbmi2"]),
    ("AVX", &["-mavx"]),
    ("AVX2", &["-mavx2"]),
    ("AVX_VNNI", &["-mavxvnni"]),
    ("AVX512", &["-mavx512f", "-mavx512cd", "-mavx512vl", "-mavx512dq", "-mavx512bw"]),
    ("AVX512_VBMI", &["-mavx512vbmi"]),
    ("AVX512_VNNI", &["-mavx512vnni"]),
    ("AVX512_BF16", &["-mavx512bf16"]),
    ("AMX_TILE", &["-mamx-tile"]),
    ("AMX_INT8", &["-mamx-int8"]),
    ("AMX_BF16", &["-mamx-bf16"]),
];

/// The variant named `name`, if llama.cpp's list has it.
pub fn variant_spec(name: &str) -> Option<&'static VariantSpec> {
    X86_VARIANTS.iter().find(|v| v.name == name)
}

/// A variant's compiler flags and its `GGML_<FEATURE>` definitions, as ggml's CMake makes them.
pub fn variant_flags(spec: &VariantSpec) -> (Vec<&'static str>, Vec<String>) {
    let mut flags = Vec::new();
    let mut defines = Vec::new();
    for (feature, feature_flags) in FEATURE_FLAGS {
        if spec.features.contains(feature) {
            flags.extend_from_slice(feature_flags);
            defines.push(format!("GGML_{feature}"));
        }
    }
    (flags, defines)
}
