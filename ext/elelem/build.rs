//! In a variants build (`ELELEM_CPU_VARIANTS`), the extension finds `libelelem-ggml.so`
//! beside itself: the platform gem ships them together in `lib/elelem/`.

fn main() {
    println!("cargo:rerun-if-env-changed=ELELEM_CPU_VARIANTS");
    let variants = std::env::var("ELELEM_CPU_VARIANTS").unwrap_or_default();
    if !variants.trim().is_empty() && variants.trim() != "0" {
        println!("cargo:rustc-link-arg-cdylib=-Wl,-rpath,$ORIGIN");
    }
}
