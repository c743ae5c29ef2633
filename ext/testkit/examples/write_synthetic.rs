//! Writes the small random-weight models whose goldens come from the reference
//! (`elelem_testkit::canary::synthetic()`, the tiny llama canary among them) into a
//! directory, as `<name>.gguf`: `cargo run --release --example write_synthetic -- DIR`.
fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: write_synthetic DIR"));
    std::fs::create_dir_all(&dir).expect("cannot create the directory");
    for (name, shape) in elelem_testkit::canary::synthetic() {
        let path = dir.join(format!("{name}.gguf"));
        std::fs::write(&path, elelem_testkit::canary::writer(&shape).to_bytes()).expect("cannot write a model");
    }
}
