//! Writes the small random-weight models whose goldens come from the reference
//! (`elelem_testkit::canary::synthetic()`, the tiny llama canary among them, and the
//! embedding models of `canary::embedding()`) into a directory, as `<name>.gguf`, and the
//! language models with projectors of `mmproj::pairs()` into its `vision/` folder, as
//! `<name>.gguf` and `<name>.mmproj.gguf` (apart: they are not text models' goldens), and
//! those with audio projectors of `audio::pairs()` and with both encoders of
//! `omni::pairs()` beside them:
//! `cargo run --release --example write_synthetic -- DIR`.
use std::path::{Path, PathBuf};

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: write_synthetic DIR"));
    std::fs::create_dir_all(&dir).expect("cannot create the directory");
    let write = |name: &str, bytes: Vec<u8>| write_model(&dir.join(format!("{name}.gguf")), &bytes);
    for (name, shape) in elelem_testkit::canary::synthetic() {
        write(&name, elelem_testkit::canary::writer(&shape).to_bytes());
    }
    for (name, model) in elelem_testkit::canary::embedding() {
        write(&name, model.writer().to_bytes());
    }
    let vision = dir.join("vision");
    std::fs::create_dir_all(&vision).expect("cannot create the directory");
    let audio = elelem_testkit::audio::pairs();
    let omni = elelem_testkit::omni::pairs();
    for (name, model, projector) in elelem_testkit::mmproj::pairs().into_iter().chain(audio).chain(omni) {
        write_model(&vision.join(format!("{name}.gguf")), &model.to_bytes());
        write_model(&vision.join(format!("{name}.mmproj.gguf")), &projector.to_bytes());
    }
}

/// Writes `bytes` to `path` unless it holds them already, as a new file renamed over the
/// old one: a process with the old file mapped (a golden check reading the model) keeps
/// its pages, where rewriting the file in place would truncate them under it (SIGBUS).
fn write_model(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return;
    }
    let fresh = path.with_extension("gguf.partial");
    std::fs::write(&fresh, bytes).expect("cannot write a model");
    std::fs::rename(&fresh, path).expect("cannot write a model");
}
