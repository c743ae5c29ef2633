//! Compiles ggml's base library and CPU backend from `vendor/ggml` with `cc`,
//! with the flags ggml's own CMake uses on Linux (so the arithmetic, FMA
//! contraction included, is the reference's), and generates bindings with
//! `bindgen`.
//!
//! Environment:
//! - `ELELEM_GGML_DIR`: where the vendored ggml lives (default `<workspace>/vendor/ggml`).
//! - `ELELEM_PORTABLE=1`: no `-march=native`; a build that runs on any x86-64 / aarch64.
//! - `ELELEM_CPU_FLAGS="-march=x86-64-v3 ..."`: these flags instead of `-march=native` for the
//!   CPU backend (a fixed, named ISA level whose bits do not depend on the build machine).
//!
//! It also works out the build's *ISA profile*: the instruction-set macros the
//! compiler defines under the CPU backend's flags that ggml's CPU sources branch on.
//! Two builds with the same profile, compiler and ggml compile the same kernels, so
//! they give the same bits on any CPU; the goldens are recorded per profile.
//! - `ELELEM_OPENMP=1`: thread with OpenMP instead of ggml's own pool (not fork-safe).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const BASE_SOURCES: &[&str] = &[
    "ggml.c",
    "ggml.cpp",
    "ggml-alloc.c",
    "ggml-backend.cpp",
    "ggml-backend-meta.cpp",
    "ggml-backend-reg.cpp",
    "ggml-backend-dl.cpp",
    "ggml-opt.cpp",
    "ggml-quants.c",
    "ggml-threading.cpp",
    "gguf.cpp",
];

const CPU_SOURCES: &[&str] = &[
    "ggml-cpu.c",
    "ggml-cpu.cpp",
    "ops.cpp",
    "vec.cpp",
    "binary-ops.cpp",
    "unary-ops.cpp",
    "quants.c",
    "repack.cpp",
    "traits.cpp",
    "hbm.cpp",
    "amx/amx.cpp",
    "amx/mmq.cpp",
    "tiled/tiled.cpp",
    "tiled/tiled-kernel.cpp",
    "llamafile/sgemm.cpp",
];

fn main() {
    let ggml = ggml_dir();
    let src = ggml.join("src");
    let cpu = src.join("ggml-cpu");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let target_arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let arch_dir = match target_arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm",
        other => panic!("ggml-sys: no CPU backend sources wired up for target arch {other}"),
    };

    let version = fs::read_to_string(ggml.join("VERSION"))
        .expect("vendor/ggml/VERSION is missing: run `rake vendor` again")
        .trim()
        .to_string();
    write_version_header(&out, &version);

    let portable = env_flag("ELELEM_PORTABLE");
    let openmp = env_flag("ELELEM_OPENMP");
    let cpu_flags: Vec<String> = match env::var("ELELEM_CPU_FLAGS") {
        Ok(flags) if !flags.trim().is_empty() => flags.split_whitespace().map(String::from).collect(),
        _ if portable => Vec::new(),
        _ => vec!["-march=native".to_string()],
    };

    let base: Vec<PathBuf> = BASE_SOURCES.iter().map(|f| src.join(f)).collect();
    let mut backend: Vec<PathBuf> = CPU_SOURCES.iter().map(|f| cpu.join(f)).collect();
    backend.push(cpu.join("arch").join(arch_dir).join("quants.c"));
    backend.push(cpu.join("arch").join(arch_dir).join("repack.cpp"));

    // As in ggml's CMake, only the CPU backend gets the architecture flags: ggml-base
    // (dequantization for get_rows among it) is compiled for the baseline ISA, so no FMA
    // contraction changes its bits relative to the reference build.
    let mut objects = Vec::new();
    let groups = [(&base, false), (&backend, true)];
    for (i, (files, arch_flags)) in groups.iter().enumerate() {
        let (c_files, cpp_files): (Vec<&PathBuf>, Vec<&PathBuf>) =
            files.iter().partition(|p| p.extension().is_some_and(|e| e == "c"));
        for (cpp, lang_files) in [(false, c_files), (true, cpp_files)] {
            let flags: &[String] = if *arch_flags { &cpu_flags } else { &[] };
            let mut build = compiler(&ggml, &out, cpp, flags, openmp);
            build.files(lang_files);
            let last = i == groups.len() - 1 && cpp;
            if last {
                // One archive: ggml's C and C++ halves call each other.
                build.objects(&objects).compile("ggml");
            } else {
                objects.extend(build.compile_intermediates());
            }
        }
    }
    println!("cargo:rustc-link-lib=dylib=m");
    println!("cargo:rustc-link-lib=dylib=pthread");
    if openmp {
        println!("cargo:rustc-link-lib=dylib=gomp");
    }

    generate_bindings(&ggml, &out);

    let (compiler_version, isa) = isa_profile(&cpu, &cpu_flags);
    println!("cargo:rustc-env=ELELEM_GGML_VERSION={version}");
    println!("cargo:rustc-env=ELELEM_GGML_CPU_FLAGS={}", cpu_flags.join(" "));
    println!("cargo:rustc-env=ELELEM_GGML_COMPILER={compiler_version}");
    println!("cargo:rustc-env=ELELEM_GGML_ISA={}", isa.join(" "));
    println!("cargo:rerun-if-changed={}", ggml.display());
    println!("cargo:rerun-if-changed=wrapper.h");
    for var in [
        "ELELEM_GGML_DIR",
        "ELELEM_PORTABLE",
        "ELELEM_OPENMP",
        "ELELEM_CPU_FLAGS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
}

fn ggml_dir() -> PathBuf {
    let dir = env::var_os("ELELEM_GGML_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../vendor/ggml"));
    if !dir.join("include/ggml.h").exists() {
        panic!(
            "\n\nggml-sys: no ggml sources at {}.\n\
             ggml is fetched, never committed: run `rake vendor` (or `script/setup`) in the \
             repository root, which downloads the pinned llama-cpp-sys-2 =0.1.161 package with \
             cargo and copies its ggml into vendor/ggml. Or point ELELEM_GGML_DIR at a ggml tree.\n\n",
            dir.display()
        );
    }
    dir
}

/// A compiler configured as ggml's CMake configures it for a Release build on Linux:
/// GNU dialects (which let GCC contract `a*b+c` into FMA, as the reference does), -O3, NDEBUG.
fn compiler(ggml: &Path, out: &Path, cpp: bool, cpu_flags: &[String], openmp: bool) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .cpp(cpp)
        .std(if cpp { "gnu++17" } else { "gnu11" })
        .opt_level(3)
        .debug(false)
        .warnings(false)
        .pic(true)
        .include(ggml.join("include"))
        .include(ggml.join("src"))
        .include(ggml.join("src/ggml-cpu"))
        .include(out)
        .define("NDEBUG", None)
        .define("_XOPEN_SOURCE", "600")
        .define("_GNU_SOURCE", None)
        .define("GGML_SCHED_MAX_COPIES", "4")
        .define("GGML_USE_CPU", None)
        .define("GGML_USE_CPU_REPACK", None)
        .define("GGML_USE_LLAMAFILE", None);
    for flag in cpu_flags {
        build.flag(flag);
    }
    if openmp {
        build.define("GGML_USE_OPENMP", None).flag("-fopenmp");
    }
    build
}

/// The compiler's name and version, and the ISA profile: the macros that `cpu_flags`
/// make the compiler define (beyond its baseline) and that some file under `cpu_dir`
/// tests. `__AVXVNNI__` is left out when `__AVX512VNNI__` and `__AVX512VL__` are in:
/// each test of it that picks code is an `#elif` after those two (the other one only
/// reports the feature), so it then changes nothing that is compiled.
fn isa_profile(cpu_dir: &Path, cpu_flags: &[String]) -> (String, Vec<String>) {
    let compiler = cc::Build::new().get_compiler();
    let predefined = |flags: &[String]| -> Vec<(String, String)> {
        let output = compiler
            .to_command()
            .args(flags)
            .args(["-dM", "-E", "-x", "c", "/dev/null"])
            .output()
            .expect("ggml-sys: could not run the C compiler to list its predefined macros");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| {
                let mut parts = line.strip_prefix("#define ")?.splitn(2, ' ');
                Some((parts.next()?.to_string(), parts.next().unwrap_or("").to_string()))
            })
            .collect()
    };
    let baseline = predefined(&[]);
    let version = baseline
        .iter()
        .find(|(name, _)| name == "__VERSION__")
        .map(|(_, value)| value.trim_matches('"').to_string())
        .unwrap_or_default();
    let family = if baseline.iter().any(|(name, _)| name == "__clang__") {
        "clang"
    } else {
        "gcc"
    };

    let mut tested = String::new();
    collect_sources(cpu_dir, &mut tested);
    let mut isa: Vec<String> = predefined(cpu_flags)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !baseline.iter().any(|(b, _)| b == name))
        .filter(|name| name.starts_with("__") && name.ends_with("__") && tested.contains(name.as_str()))
        .map(|name| name.trim_matches('_').to_string())
        .collect();
    isa.sort();
    isa.dedup();
    if isa.iter().any(|f| f == "AVX512VNNI") && isa.iter().any(|f| f == "AVX512VL") {
        isa.retain(|f| f != "AVXVNNI");
    }
    (format!("{family} {version}"), isa)
}

/// Appends the text of every C/C++ source and header under `dir`.
fn collect_sources(dir: &Path, text: &mut String) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_sources(&path, text);
        } else if path
            .extension()
            .is_some_and(|e| ["c", "cpp", "h"].iter().any(|x| e == *x))
        {
            text.push_str(&fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

fn env_flag(name: &str) -> bool {
    env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn write_version_header(out: &Path, version: &str) {
    let header =
        format!("#pragma once\n#define GGML_VERSION \"{version}\"\n#define GGML_COMMIT \"llama-cpp-sys-2-0.1.161\"\n");
    fs::write(out.join("ggml-version.h"), header).unwrap();
}

fn generate_bindings(ggml: &Path, out: &Path) {
    bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{}", ggml.join("include").display()))
        .allowlist_function("ggml_.*|gguf_.*")
        .allowlist_type("ggml_.*|gguf_.*")
        .allowlist_var("GGML_.*|GGUF_.*")
        .prepend_enum_name(false)
        .layout_tests(false)
        .derive_default(true)
        .generate()
        .expect("bindgen failed on ggml's headers")
        .write_to_file(out.join("bindings.rs"))
        .unwrap();
}
