//! In a variants build (`ELELEM_CPU_VARIANTS`), the extension finds `libelelem-ggml.so`
//! beside itself (a source build installs them together) or one folder up: the platform
//! gem ships one extension per Ruby ABI in `lib/elelem/<major>.<minor>/`, all sharing the
//! ggml libraries in `lib/elelem/`.

fn main() {
    println!("cargo:rerun-if-env-changed=ELELEM_CPU_VARIANTS");
    let variants = std::env::var("ELELEM_CPU_VARIANTS").unwrap_or_default();
    if !variants.trim().is_empty() && variants.trim() != "0" {
        println!("cargo:rustc-link-arg-cdylib=-Wl,-rpath,$ORIGIN:$ORIGIN/..");
    }
}
