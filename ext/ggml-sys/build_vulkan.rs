//! ggml's Vulkan backend (`vendor/ggml/src/ggml-vulkan`), built as ggml's CMake builds it:
//! its `vulkan-shaders-gen` tool compiled for the host, run once per shader source to make
//! SPIR-V with `glslc` and embed it in generated C++, and the backend compiled against the
//! Vulkan headers and linked to the loader (`libvulkan`).
//!
//! Environment:
//! - `ELELEM_VULKAN` unset: built when every piece below is found (Debian's `libvulkan-dev`
//!   and `glslc`, headers recent enough), else not, and what is missing is the reason
//!   `Elelem.system_info` shows; `1`: built, and the build fails, saying what is missing, when a
//!   piece is not there; `0`: not built.
//! - `ELELEM_VULKAN_INCLUDE`: a folder holding `vulkan/vulkan.hpp` recent enough for ggml
//!   (`VK_EXT_layer_settings`, Vulkan-Headers 1.3.261 or later); else the first such of
//!   `~/.cache/elelem/vulkan-headers-*/usr/include` (where `script/setup` unpacks Debian 13's
//!   `libvulkan-dev` on Debian 12) and `/usr/include`.
//! - `ELELEM_GLSLC`: the `glslc` to use (default: the one on `PATH`).
//! - `ELELEM_VULKAN_SHADER_CACHE`: where compiled shaders are kept between builds (default
//!   `~/.cache/elelem/vulkan-shaders`), one folder per hash of the shader sources, the glslc
//!   version and the extensions it supports; a build whose hash is there skips the shaders
//!   (most of the backend's build time).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether and how the Vulkan backend is built.
pub enum Vulkan {
    /// Built: its objects, to go into ggml's library.
    On(Vec<PathBuf>),
    /// Not built, and why.
    Off(String),
}

/// The shader-language extensions ggml tests glslc for (`test_shader_extension_support` in
/// its CMakeLists.txt): the extension, its test shader and the definition it turns on.
const EXTENSIONS: &[(&str, &str, &str)] = &[
    (
        "GL_KHR_cooperative_matrix",
        "coopmat.comp",
        "GGML_VULKAN_COOPMAT_GLSLC_SUPPORT",
    ),
    (
        "GL_NV_cooperative_matrix2",
        "coopmat2.comp",
        "GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT",
    ),
    (
        "GL_NV_cooperative_matrix_decode_vector",
        "coopmat2_decode_vector.comp",
        "GGML_VULKAN_COOPMAT2_DECODE_VECTOR_GLSLC_SUPPORT",
    ),
    (
        "GL_EXT_integer_dot_product",
        "integer_dot.comp",
        "GGML_VULKAN_INTEGER_DOT_GLSLC_SUPPORT",
    ),
    ("GL_EXT_bfloat16", "bfloat16.comp", "GGML_VULKAN_BFLOAT16_GLSLC_SUPPORT"),
    (
        "GL_EXT_float_e2m1",
        "float_e2m1.comp",
        "GGML_VULKAN_FLOAT_E2M1_GLSLC_SUPPORT",
    ),
    (
        "GL_EXT_float_e4m3",
        "float_e4m3.comp",
        "GGML_VULKAN_FLOAT_E4M3_GLSLC_SUPPORT",
    ),
];

/// Builds the backend when its pieces are found, or `ELELEM_VULKAN=1` insists (`0` refuses);
/// `compiler` makes a C++ compiler configured as for ggml's other sources.
pub fn build(ggml: &Path, out: &Path, compiler: impl Fn() -> cc::Build) -> Vulkan {
    println!("cargo:rerun-if-env-changed=ELELEM_VULKAN");
    let asked = env::var("ELELEM_VULKAN").ok().filter(|v| !v.is_empty());
    if asked.as_deref() == Some("0") {
        return Vulkan::Off("not built; ELELEM_VULKAN=0".to_string());
    }
    for var in [
        "ELELEM_VULKAN_INCLUDE",
        "ELELEM_GLSLC",
        "ELELEM_VULKAN_SHADER_CACHE",
        "HOME",
        "PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let pieces = match Pieces::find(ggml) {
        Ok(pieces) => pieces,
        Err(missing) if asked.is_none() => {
            // Built again once Debian's packages change (script/setup installing the missing
            // ones; `rake vulkan_headers` touches this file when it unpacks headers), not on
            // every build as a watched path that is not there would make it.
            let packages = Path::new("/var/lib/dpkg/status");
            if packages.exists() {
                println!("cargo:rerun-if-changed={}", packages.display());
            }
            return Vulkan::Off(format!("not built; {missing}: script/setup installs it"));
        }
        Err(missing) => panic!(
            "\n\nggml-sys: ELELEM_VULKAN=1, but {missing}.\n\
             On Debian 12, `script/setup` installs what ggml's Vulkan backend needs: the packages \
             libvulkan-dev glslc spirv-headers mesa-vulkan-drivers vulkan-tools, and Debian 13's \
             Vulkan headers (1.4) unpacked under ~/.cache/elelem (Debian 12's are too old for it; \
             `rake vulkan_headers` alone fetches those). Or build with ELELEM_VULKAN=0.\n\n"
        ),
    };
    let shaders = pieces.shaders(out);
    let mut build = compiler();
    build
        .out_dir(out.join("obj-vulkan"))
        .include(&pieces.include)
        .include(&shaders)
        .include(ggml.join("src").join("ggml-vulkan"))
        .flag("-fvisibility=hidden")
        .flag("-fvisibility-inlines-hidden");
    for define in &pieces.defines {
        build.define(define, None);
    }
    let dir = ggml.join("src").join("ggml-vulkan");
    build.files(["ggml-vulkan.cpp", "ggml-vulkan-buffers.cpp", "ggml-vulkan-debug.cpp"].map(|f| dir.join(f)));
    let mut objects = build.compile_intermediates();
    objects.extend(unpack(
        &shaders.join("libggml-vulkan-shaders.a"),
        &out.join("obj-vulkan-shaders-x"),
    ));
    println!("cargo:rustc-link-lib=dylib=vulkan");
    Vulkan::On(objects)
}

/// What the build needs, found.
struct Pieces {
    /// A folder holding `vulkan/vulkan.hpp` with `VK_EXT_layer_settings`.
    include: PathBuf,
    glslc: PathBuf,
    /// ggml's `vulkan-shaders` folder.
    sources: PathBuf,
    /// The extensions glslc supports, as ggml's definitions.
    defines: Vec<&'static str>,
}

impl Pieces {
    fn find(ggml: &Path) -> Result<Pieces, String> {
        let sources = ggml.join("src").join("ggml-vulkan").join("vulkan-shaders");
        if !sources.join("vulkan-shaders-gen.cpp").exists() {
            return Err(format!(
                "{} lacks ggml's Vulkan backend (run `rake vendor` again)",
                ggml.display()
            ));
        }
        let include = headers()?;
        let glslc = env::var_os("ELELEM_GLSLC")
            .map(PathBuf::from)
            .or_else(|| which("glslc"))
            .ok_or("there is no glslc on PATH (Debian: the glslc package)")?;
        if !library_present("libvulkan.so") {
            return Err("the Vulkan loader's libvulkan.so is missing (Debian: libvulkan-dev)".into());
        }
        let mut defines = Vec::new();
        for (extension, test, define) in EXTENSIONS {
            let output = Command::new(&glslc)
                .args(["-o", "-", "-fshader-stage=compute", "--target-env=vulkan1.3"])
                .arg(sources.join("feature-tests").join(test))
                .output()
                .map_err(|e| format!("{} could not be run: {e}", glslc.display()))?;
            let stderr = String::from_utf8_lossy(&output.stderr);
            if !stderr.contains(&format!("extension not supported: {extension}")) {
                defines.push(*define);
            }
        }
        Ok(Pieces {
            include,
            glslc,
            sources,
            defines,
        })
    }

    /// The compiled shaders' folder (the generated header and a static library of their
    /// C++), from the cache or made now.
    fn shaders(&self, out: &Path) -> PathBuf {
        let version = Command::new(&self.glslc)
            .arg("--version")
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        let mut hash = Fnv::default();
        hash.feed(&version);
        hash.feed(self.defines.join(" ").as_bytes());
        hash.feed(
            cc::Build::new()
                .cpp(true)
                .get_compiler()
                .path()
                .to_string_lossy()
                .as_bytes(),
        );
        let mut files: Vec<PathBuf> = fs::read_dir(&self.sources)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for file in &files {
            hash.feed(file.file_name().unwrap().to_string_lossy().as_bytes());
            hash.feed(&fs::read(file).unwrap());
        }
        let cache = env::var_os("ELELEM_VULKAN_SHADER_CACHE")
            .map(PathBuf::from)
            .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cache/elelem/vulkan-shaders")))
            .unwrap_or_else(|| out.join("vulkan-shaders-cache"));
        let dir = cache.join(format!("{:016x}", hash.0));
        if dir.join("libggml-vulkan-shaders.a").exists() && dir.join("ggml-vulkan-shaders.hpp").exists() {
            println!(
                "cargo:warning=ggml-sys: Vulkan shaders from the cache {}",
                dir.display()
            );
            return dir;
        }
        let staging = cache.join(format!("{:016x}.{}.tmp", hash.0, std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging).unwrap();
        self.generate(out, &staging, &files);
        // Another build may have finished the same folder meanwhile: either is good.
        if fs::rename(&staging, &dir).is_err() {
            let _ = fs::remove_dir_all(&staging);
        }
        dir
    }

    /// Builds vulkan-shaders-gen and runs it as ggml's CMake does: once for the header, then
    /// once per shader source (each run compiles that source's variants with glslc), and
    /// compiles what it wrote into `dir/libggml-vulkan-shaders.a`.
    fn generate(&self, out: &Path, dir: &Path, files: &[PathBuf]) {
        let gen = out.join("vulkan-shaders-gen");
        let compiler = cc::Build::new().cpp(true).get_compiler();
        let mut cmd = compiler.to_command();
        cmd.args(["-O2", "-std=c++17", "-pthread", "-o"]).arg(&gen);
        for define in &self.defines {
            cmd.arg(format!("-D{define}"));
        }
        cmd.arg(self.sources.join("vulkan-shaders-gen.cpp"));
        run(&mut cmd, "compiling vulkan-shaders-gen");

        let spv = out.join("vulkan-shaders.spv");
        let hpp = dir.join("ggml-vulkan-shaders.hpp");
        run(
            Command::new(&gen)
                .arg("--output-dir")
                .arg(&spv)
                .arg("--target-hpp")
                .arg(&hpp),
            "vulkan-shaders-gen (header)",
        );
        let mut cpps = Vec::new();
        for source in files.iter().filter(|f| f.extension().is_some_and(|e| e == "comp")) {
            let cpp = dir.join(format!("{}.cpp", source.file_name().unwrap().to_string_lossy()));
            run(
                Command::new(&gen)
                    .arg("--glslc")
                    .arg(&self.glslc)
                    .arg("--source")
                    .arg(source)
                    .arg("--output-dir")
                    .arg(&spv)
                    .arg("--target-hpp")
                    .arg(&hpp)
                    .arg("--target-cpp")
                    .arg(&cpp),
                &format!("vulkan-shaders-gen {}", source.display()),
            );
            cpps.push(cpp);
        }
        // The generated sources are byte arrays: no optimisation to speak of.
        cc::Build::new()
            .cpp(true)
            .std("c++17")
            .opt_level(0)
            .debug(false)
            .pic(true)
            .warnings(false)
            .include(dir)
            .out_dir(out.join("obj-vulkan-shaders"))
            .files(&cpps)
            .cargo_metadata(false)
            .compile("ggml-vulkan-shaders");
        let archive = "libggml-vulkan-shaders.a";
        fs::copy(out.join("obj-vulkan-shaders").join(archive), dir.join(archive)).unwrap();
        for cpp in &cpps {
            let _ = fs::remove_file(cpp);
            let _ = fs::remove_file(format!("{}.d", cpp.display()));
        }
    }
}

/// The objects of `archive`, extracted into `dir` (they go into ggml's one archive, where an
/// archive inside would not be searched).
fn unpack(archive: &Path, dir: &Path) -> Vec<PathBuf> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    let archiver = cc::Build::new().get_archiver();
    run(
        Command::new(archiver.get_program())
            .arg("x")
            .arg(archive)
            .current_dir(dir),
        "extracting the Vulkan shaders' objects",
    );
    let mut objects: Vec<PathBuf> = fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    objects.sort();
    objects
}

fn run(cmd: &mut Command, what: &str) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("ggml-sys: {what}: could not run {cmd:?}: {e}"));
    assert!(status.success(), "ggml-sys: {what} failed: {cmd:?}");
}

/// The first folder of headers that has `vulkan/vulkan.hpp` with `VK_EXT_layer_settings`
/// (`vk::LayerSettingEXT`), which ggml-vulkan uses.
fn headers() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = env::var_os("ELELEM_VULKAN_INCLUDE") {
        candidates.push(dir.into());
    }
    if let Some(home) = env::var_os("HOME") {
        let cache = Path::new(&home).join(".cache/elelem");
        let mut unpacked: Vec<PathBuf> = fs::read_dir(&cache)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("vulkan-headers-"))
            .map(|e| e.path().join("usr/include"))
            .collect();
        unpacked.sort();
        unpacked.reverse();
        candidates.extend(unpacked);
    }
    candidates.push("/usr/include".into());
    let mut seen = Vec::new();
    for dir in candidates {
        let structs = dir.join("vulkan/vulkan_structs.hpp");
        match fs::read_to_string(&structs) {
            Ok(text) if text.contains("struct LayerSettingEXT") => return Ok(dir),
            Ok(_) => seen.push(format!("{} (too old: no VK_EXT_layer_settings)", dir.display())),
            Err(_) => seen.push(format!("{} (no vulkan/vulkan.hpp)", dir.display())),
        }
    }
    Err(format!(
        "no Vulkan C++ headers recent enough for ggml-vulkan (1.3.261 or later) were found; looked in {}",
        seen.join(", ")
    ))
}

fn which(program: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Whether the linker finds `name` (asked of the C compiler, as it would look for `-lvulkan`).
fn library_present(name: &str) -> bool {
    let compiler = cc::Build::new().get_compiler();
    compiler
        .to_command()
        .arg(format!("-print-file-name={name}"))
        .output()
        .is_ok_and(|o| Path::new(String::from_utf8_lossy(&o.stdout).trim()).is_absolute())
}

/// FNV-1a, 64 bits: a hash that stays the same from one toolchain to the next.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.0 = (self.0 ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    }
}
