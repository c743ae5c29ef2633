//! Compiles ggml's base library and CPU backend from `vendor/ggml` with `cc`,
//! with the flags ggml's own CMake uses on Linux (so the arithmetic, FMA
//! contraction included, is the reference's), and generates bindings with
//! `bindgen`.
//!
//! Environment:
//! - `ELELEM_GGML_DIR`: where the vendored ggml lives (default `<workspace>/vendor/ggml`).
//! - `ELELEM_PORTABLE=1`: no `-march=native` (`-mcpu=native` on aarch64); a build that runs
//!   on any x86-64 / aarch64.
//! - `ELELEM_CPU_FLAGS="-march=x86-64-v3 ..."`: these flags instead of the native ones for the
//!   CPU backend (a fixed, named ISA level whose bits do not depend on the build machine).
//! - `ELELEM_CPU_VARIANTS=default|all|<names>`: llama.cpp's release layout instead, one CPU
//!   backend library per ISA level of its list for the target architecture (`src/variants.rs`).
//!
//! It also works out the build's *ISA profile*: the instruction-set macros the
//! compiler defines under the CPU backend's flags that ggml's CPU sources branch on.
//! Two builds with the same profile, compiler and ggml compile the same kernels, so
//! they give the same bits on any CPU; the goldens are recorded per profile.
//! - `ELELEM_OPENMP=1`: thread with OpenMP instead of ggml's own pool (not fork-safe).
//! - `ELELEM_VULKAN`: ggml's Vulkan backend too (`build_vulkan.rs`) when its pieces are there
//!   (unset), or always (`1`, failing without them), or never (`0`); never in a build with CPU
//!   variants.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

#[path = "build_vulkan.rs"]
mod vulkan;

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

include!("src/variants.rs");
include!("cpu_patches.rs");

fn main() {
    let ggml = ggml_dir();
    let src = ggml.join("src");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    patch_cpu_backend(&ggml, &out);
    let cpu = patched_cpu_dir(&out);
    let target_arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let isa_list = variant_isa(&target_arch)
        .unwrap_or_else(|| panic!("ggml-sys: no CPU backend sources wired up for target arch {target_arch}"));
    let arch_dir = isa_list.dir;

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
        // As ggml's native build: GCC on aarch64 tunes and enables features with -mcpu.
        _ if target_arch == "aarch64" => vec!["-mcpu=native".to_string()],
        _ => vec!["-march=native".to_string()],
    };

    let base: Vec<PathBuf> = BASE_SOURCES.iter().map(|f| src.join(f)).collect();
    let mut backend: Vec<PathBuf> = CPU_SOURCES.iter().map(|f| cpu.join(f)).collect();
    backend.push(cpu.join("arch").join(arch_dir).join("quants.c"));
    backend.push(cpu.join("arch").join(arch_dir).join("repack.cpp"));

    let variants = requested_variants(isa_list);
    let (compiler_version, isa, vulkan) = if variants.is_empty() {
        let vulkan = vulkan::build(&ggml, &out, || compiler(&ggml, &out, true, &[], openmp));
        build_static(&ggml, &out, &base, &backend, &cpu_flags, openmp, &vulkan);
        let (compiler_version, isa) = isa_profile(&cpu, &cpu_flags);
        write_built_variants(&out, &[]);
        (compiler_version, isa, vulkan)
    } else {
        let built = build_variants(&ggml, &out, &base, &backend, isa_list, &variants, openmp);
        write_built_variants(&out, &built);
        let off = vulkan::Vulkan::Off("not built; not in a build with CPU variants".to_string());
        (built[0].compiler.clone(), Vec::new(), off)
    };
    match &vulkan {
        vulkan::Vulkan::On(_) => println!("cargo:rustc-env=ELELEM_GGML_VULKAN=on"),
        vulkan::Vulkan::Off(why) => println!("cargo:rustc-env=ELELEM_GGML_VULKAN=off: {why}"),
    }
    println!("cargo:rustc-link-lib=dylib=m");
    println!("cargo:rustc-link-lib=dylib=pthread");
    println!("cargo:rustc-link-lib=dylib=dl");
    if openmp {
        println!("cargo:rustc-link-lib=dylib=gomp");
    }

    generate_bindings(&ggml, &out);
    generate_block_layouts(&ggml, &out);

    let cpu_flags = if variants.is_empty() {
        cpu_flags.join(" ")
    } else {
        String::new()
    };
    println!("cargo:rustc-env=ELELEM_GGML_VERSION={version}");
    println!("cargo:rustc-env=ELELEM_GGML_SOURCE_DIR={}", ggml.display());
    println!("cargo:rustc-env=ELELEM_GGML_CPU_FLAGS={cpu_flags}");
    println!("cargo:rustc-env=ELELEM_GGML_FORCED_INCLUDE={}", forced_include());
    println!("cargo:rustc-env=ELELEM_GGML_COMPILER={compiler_version}");
    println!("cargo:rustc-env=ELELEM_GGML_ISA={}", isa.join(" "));
    println!("cargo:rustc-check-cfg=cfg(ggml_backend_dl)");
    if !variants.is_empty() {
        println!("cargo:rustc-cfg=ggml_backend_dl");
    }
    println!("cargo:rerun-if-changed={}", ggml.display());
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=layouts.hpp");
    println!("cargo:rerun-if-changed=include/elelem_amx.h");
    println!("cargo:rerun-if-changed=include/elelem_rpc.h");
    println!("cargo:rerun-if-changed=native/rpc_client.cpp");
    println!("cargo:rerun-if-changed=native/stb_jpeg.c");
    println!("cargo:rerun-if-changed=native/miniaudio_decode.c");
    println!("cargo:rerun-if-changed=include/elelem_rpc_client.h");
    println!("cargo:rerun-if-changed=src/variants.rs");
    println!("cargo:rerun-if-changed=cpu_patches.rs");
    println!("cargo:rerun-if-changed=build_vulkan.rs");
    for var in [
        "ELELEM_GGML_DIR",
        "ELELEM_PORTABLE",
        "ELELEM_OPENMP",
        "ELELEM_CPU_FLAGS",
        "ELELEM_CPU_VARIANTS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
}

/// The default build: ggml-base and one CPU backend, compiled for `cpu_flags`, in one
/// static archive linked into the crate.
fn build_static(
    ggml: &Path,
    out: &Path,
    base: &[PathBuf],
    backend: &[PathBuf],
    cpu_flags: &[String],
    openmp: bool,
    vulkan: &vulkan::Vulkan,
) {
    // As in ggml's CMake, only the CPU backend gets the architecture flags: ggml-base
    // (dequantization for get_rows among it) is compiled for the baseline ISA, so no FMA
    // contraction changes its bits relative to the reference build.
    let mut objects = rpc_objects(ggml, out, openmp);
    objects.extend(media_decoder_objects(ggml, out));
    if let vulkan::Vulkan::On(vk) = vulkan {
        objects.extend(vk.iter().cloned());
    }
    let groups = [(base, false), (backend, true)];
    for (i, (files, arch_flags)) in groups.iter().enumerate() {
        let (c_files, cpp_files): (Vec<&PathBuf>, Vec<&PathBuf>) =
            files.iter().partition(|p| p.extension().is_some_and(|e| e == "c"));
        for (cpp, lang_files) in [(false, c_files), (true, cpp_files)] {
            let flags: &[String] = if *arch_flags { cpu_flags } else { &[] };
            let mut build = compiler(ggml, out, cpp, flags, openmp);
            build.define("GGML_USE_CPU", None);
            if matches!(vulkan, vulkan::Vulkan::On(_)) {
                // ggml-backend-reg.cpp registers the backend.
                build.define("GGML_USE_VULKAN", None);
            }
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
}

/// ggml's RPC backend (the client of `rpc-server` workers, and the server itself), with
/// `include/elelem_rpc.h` forced into its two sources so that a failed worker is an error
/// and not an abort, and no network wait lasts forever; and `native/rpc_client.cpp`, the
/// other half of that. Baseline ISA, as ggml-base.
fn rpc_objects(ggml: &Path, out: &Path, openmp: bool) -> Vec<PathBuf> {
    let rpc = ggml.join("src").join("ggml-rpc");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let mut build = compiler(ggml, out, true, &[], openmp);
    build
        .out_dir(out.join("obj-rpc"))
        .flag("-include")
        .flag(manifest.join("include/elelem_rpc.h").to_str().unwrap())
        .files([rpc.join("ggml-rpc.cpp"), rpc.join("transport.cpp")]);
    let mut objects = build.compile_intermediates();
    let mut client = compiler(ggml, out, true, &[], openmp);
    client
        .out_dir(out.join("obj-rpc-client"))
        .include(manifest.join("include"))
        .file(manifest.join("native/rpc_client.cpp"));
    objects.extend(client.compile_intermediates());
    objects
}

/// The media decoders mtmd-helper links, over llama.cpp's own single-header libraries and
/// compiled as mtmd-helper compiles them, with no architecture flags, so that no fused
/// multiply-add changes a decoded pixel or sample: stb_image's JPEG decoder
/// (`native/stb_jpeg.c`, over `stb/stb_image.h`) and miniaudio's MP3 and FLAC decoders
/// (`native/miniaudio_decode.c`, over `miniaudio/miniaudio.h`).
fn media_decoder_objects(ggml: &Path, out: &Path) -> Vec<PathBuf> {
    let native = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("native");
    [("stb", "stb_jpeg.c"), ("miniaudio", "miniaudio_decode.c")]
        .into_iter()
        .flat_map(|(header_dir, source)| {
            cc::Build::new()
                .out_dir(out.join(format!("obj-{header_dir}")))
                .include(ggml.join(header_dir))
                .opt_level(3)
                .warnings(false)
                .file(native.join(source))
                .compile_intermediates()
        })
        .collect()
}

/// The variants `ELELEM_CPU_VARIANTS` asks for: `default` (the platform gem's set), `all`
/// (llama.cpp's whole list for the target's architecture) or names separated by commas;
/// none when it is unset.
fn requested_variants(isa: &'static VariantIsa) -> Vec<&'static VariantSpec> {
    let Ok(value) = env::var("ELELEM_CPU_VARIANTS") else {
        return Vec::new();
    };
    let value = value.trim();
    if value.is_empty() || value == "0" {
        return Vec::new();
    }
    let names: Vec<&str> = match value {
        "default" | "1" => isa.default.to_vec(),
        "all" => isa.variants.iter().map(|v| v.name).collect(),
        list => list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect(),
    };
    names
        .into_iter()
        .map(|name| {
            isa.spec(name).unwrap_or_else(|| {
                let known: Vec<&str> = isa.variants.iter().map(|v| v.name).collect();
                panic!(
                    "ggml-sys: ELELEM_CPU_VARIANTS names {name:?}, not one of llama.cpp's {} variants: {}",
                    isa.arch,
                    known.join(", ")
                )
            })
        })
        .collect()
}

/// A variant as built: what `BUILT_VARIANTS` (generated) records of it.
struct Built {
    name: &'static str,
    features: &'static [&'static str],
    flags: String,
    compiler: String,
    isa: Vec<String>,
}

/// llama.cpp's release layout (`GGML_BACKEND_DL`): ggml-base and the backend registry in
/// one shared library (`libelelem-ggml.so`, which the crate links), and each CPU variant a
/// shared library of its own (`libggml-cpu-<name>.so`, linked to it) exporting
/// `ggml_backend_init` and `ggml_backend_score`, compiled with the flags and definitions
/// ggml's CMake gives that variant. They are written to `OUT_DIR/lib` and copied beside
/// the crate's artifacts (`target/<profile>/`), where the gem's build picks them up.
fn build_variants(
    ggml: &Path,
    out: &Path,
    base: &[PathBuf],
    backend: &[PathBuf],
    isa_list: &VariantIsa,
    variants: &[&'static VariantSpec],
    openmp: bool,
) -> Vec<Built> {
    let lib_dir = out.join("lib");
    fs::create_dir_all(&lib_dir).unwrap();
    for entry in fs::read_dir(&lib_dir).unwrap().flatten() {
        fs::remove_file(entry.path()).unwrap();
    }

    // ggml-base + ggml (the registry) and the RPC backend, baseline ISA, as one shared library.
    let mut objects = rpc_objects(ggml, out, openmp);
    objects.extend(media_decoder_objects(ggml, out));
    for (cpp, files) in split_by_language(base) {
        let mut build = compiler(ggml, out, cpp, &[], openmp);
        build
            .out_dir(out.join("obj-base"))
            .define("GGML_BACKEND_DL", None)
            .define("GGML_SHARED", None)
            .define("GGML_BUILD", None)
            .files(files);
        objects.extend(build.compile_intermediates());
    }
    link_shared(&lib_dir, BASE_LIBRARY, &objects, &[], openmp);

    let cpu = patched_cpu_dir(out);
    let mut built = Vec::new();
    for spec in variants {
        let (flags, defines) = isa_list.flags(spec);
        let obj_dir = out.join(format!("obj-{}", spec.name));
        let mut objects = Vec::new();
        for (cpp, files) in split_by_language(backend) {
            let mut build = compiler(ggml, out, cpp, &flags, openmp);
            build.out_dir(&obj_dir).files(files);
            backend_defines(&mut build, &defines);
            objects.extend(build.compile_intermediates());
        }
        // The feature check is compiled without the variant's flags (ggml's
        // `ggml_add_cpu_backend_features`), so scoring never runs an instruction the CPU lacks.
        let mut feats = compiler(ggml, out, true, &[], false);
        feats
            .out_dir(obj_dir.join("feats"))
            .file(cpu.join("arch").join(isa_list.dir).join("cpu-feats.cpp"));
        backend_defines(&mut feats, &defines);
        objects.extend(feats.compile_intermediates());
        let name = format!("libggml-cpu-{}.so", spec.name);
        link_shared(
            &lib_dir,
            &name,
            &objects,
            &["-L", lib_dir.to_str().unwrap(), "-lelelem-ggml"],
            openmp,
        );

        let (compiler_version, isa) = isa_profile(&cpu, &flags);
        built.push(Built {
            name: spec.name,
            features: spec.features,
            flags: flags.join(" "),
            compiler: compiler_version,
            isa,
        });
    }

    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=elelem-ggml");

    // Beside the crate's artifacts too (target/<profile>/), for the extension's Makefile;
    // a variant an earlier build made and this one did not goes.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let names: Vec<_> = fs::read_dir(&lib_dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        for entry in fs::read_dir(profile_dir).into_iter().flatten().flatten() {
            let file = entry.file_name().to_string_lossy().to_string();
            if file.starts_with("libggml-cpu-") && file.ends_with(".so") && !names.contains(&entry.file_name()) {
                let _ = fs::remove_file(entry.path());
            }
        }
        for name in names {
            install(&lib_dir.join(&name), &profile_dir.join(&name)).unwrap();
        }
    }
    built
}

/// Puts `source` at `dest` as ext/elelem/atomic_install.rb does for the Makefile (see there
/// why): unless `dest` holds the same bytes already, a copy beside it renamed over it, so a
/// process that has the old library loaded (a test, a Ruby) keeps its pages.
fn install(source: &Path, dest: &Path) -> std::io::Result<()> {
    let bytes = fs::read(source)?;
    if fs::read(dest).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let mut temp = dest.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", std::process::id()));
    fs::write(&temp, &bytes)?;
    fs::set_permissions(&temp, fs::metadata(source)?.permissions())?;
    fs::rename(&temp, dest).inspect_err(|_| {
        let _ = fs::remove_file(&temp);
    })
}

/// The shared library holding ggml-base and the backend registry in a variants build.
const BASE_LIBRARY: &str = "libelelem-ggml.so";

/// What ggml's CMake defines for a dynamically loaded backend (`ggml_add_backend_library`,
/// `ggml_add_cpu_backend_variant_impl`) besides the common definitions.
fn backend_defines(build: &mut cc::Build, defines: &[String]) {
    build
        .define("GGML_BACKEND_DL", None)
        .define("GGML_BACKEND_BUILD", None)
        .define("GGML_BACKEND_SHARED", None)
        .define("GGML_SHARED", None);
    for define in defines {
        build.define(define, None);
    }
}

fn split_by_language(files: &[PathBuf]) -> [(bool, Vec<&PathBuf>); 2] {
    let (c, cpp): (Vec<&PathBuf>, Vec<&PathBuf>) = files.iter().partition(|p| p.extension().is_some_and(|e| e == "c"));
    [(false, c), (true, cpp)]
}

/// Links `objects` into the shared library `dir/name`. The C++ runtime is linked in
/// statically (its symbols hidden), so the libraries need nothing beyond glibc and
/// libgcc_s; `$ORIGIN` finds `libelelem-ggml.so` beside them.
fn link_shared(dir: &Path, name: &str, objects: &[PathBuf], extra: &[&str], openmp: bool) {
    let linker = cc::Build::new().cpp(true).get_compiler();
    let mut cmd = linker.to_command();
    cmd.arg("-shared")
        .arg("-o")
        .arg(dir.join(name))
        .arg(format!("-Wl,-soname,{name}"))
        .args(objects)
        .args(extra)
        .args([
            "-Wl,-rpath,$ORIGIN",
            "-static-libstdc++",
            "-Wl,--exclude-libs,ALL",
            "-Wl,--gc-sections",
            "-Wl,--as-needed",
            "-lm",
            "-lpthread",
            "-ldl",
        ]);
    if openmp {
        cmd.arg("-fopenmp");
    }
    let status = cmd.status().expect("ggml-sys: could not run the linker");
    assert!(status.success(), "ggml-sys: linking {name} failed: {cmd:?}");
}

/// `OUT_DIR/built_variants.rs`: the variants this build made, for the crate to load and
/// for the build profile to name (empty in the default build).
fn write_built_variants(out: &Path, built: &[Built]) {
    let mut text = String::from("/// The CPU variants this build compiled (none: one CPU backend, linked in).\n");
    text.push_str("pub const BUILT_VARIANTS: &[BuiltVariant] = &[\n");
    for b in built {
        text.push_str(&format!(
            "    BuiltVariant {{ name: {:?}, features: &{:?}, flags: {:?}, compiler: {:?}, isa: &{:?} }},\n",
            b.name, b.features, b.flags, b.compiler, b.isa
        ));
    }
    text.push_str("];\n");
    fs::write(out.join("built_variants.rs"), text).unwrap();
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
/// GNU dialects (which let GCC contract `a*b+c` into FMA, as the reference does), -O3, NDEBUG,
/// and `include/elelem_amx.h` forced into every source (GCC 12 miscompiles ggml's AMX tile
/// configuration without it; the reference's CMake forces it in too, so both compile the same).
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
        .include(patched_cpu_dir(out))
        .include(out)
        .define("NDEBUG", None)
        .define("_XOPEN_SOURCE", "600")
        .define("_GNU_SOURCE", None)
        .define("GGML_SCHED_MAX_COPIES", "4")
        .define("GGML_USE_CPU_REPACK", None)
        .define("GGML_USE_LLAMAFILE", None)
        .flag(forced_include());
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
/// tests (x86's `__AVX2__` kind, and aarch64's `__ARM_FEATURE_*`, which has no trailing
/// underscores). `__AVXVNNI__` is left out when `__AVX512VNNI__` and `__AVX512VL__` are in:
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
        .filter(|name| {
            (name.starts_with("__") && name.ends_with("__") || name.starts_with("__ARM_FEATURE_"))
                && tested.contains(name.as_str())
        })
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

/// `-include` of `include/elelem_amx.h`, the header that makes ggml's AMX code correct
/// under every compiler (see its comment), as every ggml source is compiled (the AMX check,
/// tests/amx_tile_config.rs, compiles with it too: `ELELEM_GGML_FORCED_INCLUDE`).
fn forced_include() -> String {
    let header = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap()).join("include/elelem_amx.h");
    format!("-include{}", header.display())
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
        .clang_arg(format!("-I{}/include", env::var("CARGO_MANIFEST_DIR").unwrap()))
        .allowlist_function("ggml_.*|gguf_.*|elelem_rpc_.*")
        .allowlist_type("ggml_.*|gguf_.*")
        .allowlist_var("GGML_.*|GGUF_.*")
        // `ggml_fopen` returns a FILE *, whose fields nothing here reads: opaque, the bindings
        // do not depend on the C library's `struct _IO_FILE` (glibc 2.43's has a bitfield,
        // whose accessors newer rustc warns about).
        .opaque_type("_IO_FILE")
        .prepend_enum_name(false)
        .layout_tests(false)
        .derive_default(true)
        .generate()
        .expect("bindgen failed on ggml's headers")
        .write_to_file(out.join("bindings.rs"))
        .unwrap();
}

/// ggml's quantized block types (`ggml-common.h`, and `repack.h`'s interleaved ones) as
/// Rust structs with ggml's layout, for elelem's kernels to check their own against at
/// compile time: a ggml that moves a field fails the build, not the bits.
fn generate_block_layouts(ggml: &Path, out: &Path) {
    bindgen::Builder::default()
        .header("layouts.hpp")
        .clang_args(["-x", "c++", "-std=c++17"])
        .clang_arg(format!("-I{}", ggml.join("include").display()))
        .clang_arg(format!("-I{}", ggml.join("src").display()))
        .clang_arg(format!("-I{}", ggml.join("src/ggml-cpu").display()))
        .allowlist_type("block_(q4_K|q6_K|q8_K|q5_0|q8_0|q4_Kx8)")
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on ggml's block types")
        .write_to_file(out.join("layouts.rs"))
        .unwrap();
}
