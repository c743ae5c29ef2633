//! Writes the random-weight models of `rake bench`'s architecture rows
//! (`elelem_testkit::canary::bench_models()`) into a directory, as `<name>.gguf`, and the
//! language models with projectors of its image and audio rows
//! (`elelem_testkit::mmproj::bench_pairs()`, `elelem_testkit::audio::bench_pairs()`) into its
//! `vision/` folder, as `<name>.gguf` and `<name>.mmproj.gguf`, each only if it is
//! not there: `cargo run --release --example write_bench_models -- DIR`.
use std::path::Path;

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: write_bench_models DIR"));
    let vision = dir.join("vision");
    std::fs::create_dir_all(&vision).expect("cannot create the directory");
    for (name, shape) in elelem_testkit::canary::bench_models() {
        write_new(&dir.join(format!("{name}.gguf")), || {
            elelem_testkit::canary::writer(&shape).to_bytes()
        });
    }
    let pairs = elelem_testkit::mmproj::bench_pairs()
        .into_iter()
        .chain(elelem_testkit::audio::bench_pairs());
    for (name, model, projector) in pairs {
        write_new(&vision.join(format!("{name}.gguf")), || model.to_bytes());
        write_new(&vision.join(format!("{name}.mmproj.gguf")), || projector.to_bytes());
    }
}

/// Writes `bytes()` to `path` unless it is there, through a partial file moved into place.
fn write_new(path: &Path, bytes: impl FnOnce() -> Vec<u8>) {
    if path.exists() {
        return;
    }
    let partial = path.with_extension("gguf.partial");
    std::fs::write(&partial, bytes()).expect("cannot write a model");
    std::fs::rename(&partial, path).expect("cannot move the model into place");
}
