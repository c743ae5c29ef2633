//! Writes the small random-weight models whose goldens come from the reference
//! (`elelem_testkit::canary::synthetic()`, the tiny llama canary among them, and the
//! embedding models of `canary::embedding()`) into a directory, as `<name>.gguf`, and the
//! language models with projectors of `mmproj::pairs()` into its `vision/` folder, as
//! `<name>.gguf` and `<name>.mmproj.gguf` (apart: they are not text models' goldens), and
//! those with audio projectors of `audio::pairs()` and with both encoders of
//! `omni::pairs()` beside them:
//! `cargo run --release --example write_synthetic -- DIR`.
fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: write_synthetic DIR"));
    std::fs::create_dir_all(&dir).expect("cannot create the directory");
    let write = |name: &str, bytes: Vec<u8>| {
        std::fs::write(dir.join(format!("{name}.gguf")), bytes).expect("cannot write a model");
    };
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
        std::fs::write(vision.join(format!("{name}.gguf")), model.to_bytes()).expect("cannot write a model");
        std::fs::write(vision.join(format!("{name}.mmproj.gguf")), projector.to_bytes())
            .expect("cannot write a projector");
    }
}
