//! Writes the random-weight models of `rake bench`'s architecture rows
//! (`elelem_testkit::canary::bench_models()`) into a directory, as `<name>.gguf`, each
//! only if it is not there: `cargo run --release --example write_bench_models -- DIR`.
fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: write_bench_models DIR"));
    std::fs::create_dir_all(&dir).expect("cannot create the directory");
    for (name, shape) in elelem_testkit::canary::bench_models() {
        let path = dir.join(format!("{name}.gguf"));
        if !path.exists() {
            let partial = dir.join(format!("{name}.gguf.partial"));
            std::fs::write(&partial, elelem_testkit::canary::writer(&shape).to_bytes()).expect("cannot write a model");
            std::fs::rename(&partial, &path).expect("cannot move the model into place");
        }
    }
}
