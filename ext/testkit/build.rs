//! Compiles the pinned llama.cpp's image path for `tests/vision.rs` to compare with:
//! `tools/mtmd/mtmd-image.cpp` (mtmd's preprocessors) and `vendor/stb/stb_image.h` (how
//! mtmd-helper decodes a file), with `native/mtmd_image.cpp` standing in for clip; and
//! `tools/mtmd/clip.cpp` with its graph builders (`tools/mtmd/models`), the vision encoders
//! for `tests/vision_encoder.rs`, through `native/clip_encode.cpp`; and
//! `tools/mtmd/mtmd-audio.cpp` (the audio preprocessors) with `vendor/miniaudio` (how
//! mtmd-helper decodes an audio file) for `tests/audio.rs`, through `native/mtmd_audio.cpp`.
//! The sources come from the llama-cpp-sys-2 package that `vendor/fetch` pins (cargo has
//! unpacked it for `rake vendor`); none is copied here. The test kit is never linked into
//! the gem.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let fetch = manifest.join("../../vendor/fetch/Cargo.toml");
    let llama = llama_cpp_dir(&fetch);
    let mtmd = llama.join("tools/mtmd");
    let shim = manifest.join("native/mtmd_image.cpp");
    // The preprocessors' stand-ins for clip's three symbols are renamed, so that the real
    // ones of clip.cpp, compiled below for the encoder, link beside them.
    cc::Build::new()
        .cpp(true)
        .std("gnu++17")
        .opt_level(3)
        .debug(false)
        .warnings(false)
        .pic(true)
        .define("NDEBUG", None)
        .define("clip_get_hparams", "elelem_shim_clip_get_hparams")
        .define("clip_get_projector_type", "elelem_shim_clip_get_projector_type")
        .define("g_logger_state", "elelem_shim_logger_state")
        .include(&mtmd)
        .include(llama.join("ggml/include"))
        .include(llama.join("include"))
        .include(llama.join("vendor"))
        .file(mtmd.join("mtmd-image.cpp"))
        .file(&shim)
        .compile("elelem_mtmd_image");
    // clip.cpp and its graph builders, unmodified, for the encoder's comparison: they only
    // build graphs (ggml-sys's ggml computes them), so they are compiled without
    // optimization, which is quicker.
    let encoder_shim = manifest.join("native/clip_encode.cpp");
    let mut models: Vec<PathBuf> = std::fs::read_dir(mtmd.join("models"))
        .expect("tools/mtmd/models")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cpp"))
        .collect();
    models.sort();
    cc::Build::new()
        .cpp(true)
        .std("gnu++17")
        .opt_level(0)
        .debug(false)
        .warnings(false)
        .pic(true)
        .define("NDEBUG", None)
        .include(&mtmd)
        .include(llama.join("ggml/include"))
        .include(llama.join("include"))
        .include(llama.join("vendor"))
        .file(mtmd.join("clip.cpp"))
        .files(&models)
        .file(&encoder_shim)
        .compile("elelem_clip");
    // mtmd's audio preprocessing and miniaudio's decoder, for tests/audio.rs, through
    // native/mtmd_audio.cpp (clip's hyper-parameters are what it passes for a context).
    let audio_shim = manifest.join("native/mtmd_audio.cpp");
    cc::Build::new()
        .cpp(true)
        .std("gnu++17")
        .opt_level(3)
        .debug(false)
        .warnings(false)
        .pic(true)
        .define("NDEBUG", None)
        .define("clip_get_hparams", "elelem_audio_clip_get_hparams")
        .define("g_logger_state", "elelem_audio_logger_state")
        .include(&mtmd)
        .include(llama.join("ggml/include"))
        .include(llama.join("include"))
        .include(llama.join("vendor"))
        .file(mtmd.join("mtmd-audio.cpp"))
        .file(&audio_shim)
        .compile("elelem_mtmd_audio");
    println!("cargo:rerun-if-changed={}", audio_shim.display());
    println!("cargo:rerun-if-changed={}", encoder_shim.display());
    println!("cargo:rerun-if-changed={}", shim.display());
    println!("cargo:rerun-if-changed={}", fetch.display());
    println!("cargo:rerun-if-changed={}", mtmd.join("mtmd-image.cpp").display());
    println!("cargo:rerun-if-changed={}", mtmd.join("mtmd-audio.cpp").display());
}

/// The pinned llama-cpp-sys-2 package's llama.cpp tree, as `cargo metadata` on
/// `vendor/fetch` names it (the way `tests/registry.rs` and `rake vendor` find it).
fn llama_cpp_dir(fetch: &PathBuf) -> PathBuf {
    let out = Command::new(env::var("CARGO").unwrap())
        .args([
            "metadata",
            "--offline",
            "--locked",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(fetch)
        .output()
        .expect("cargo runs");
    if !out.status.success() {
        panic!(
            "\n\nelelem-testkit: cannot find the pinned llama.cpp sources ({}).\n\
             Run `rake vendor` (or `script/setup`) in the repository root: it fetches the \
             llama-cpp-sys-2 package that vendor/fetch pins.\n\n",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "llama-cpp-sys-2")
        .expect("vendor/fetch depends on llama-cpp-sys-2");
    let dir = PathBuf::from(package["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .join("llama.cpp");
    assert!(
        dir.join("tools/mtmd/mtmd-image.cpp").exists(),
        "elelem-testkit: {} has no tools/mtmd/mtmd-image.cpp",
        dir.display()
    );
    dir
}
