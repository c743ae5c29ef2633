//! Writes the tiny llama canary: `cargo run --release --example write_canary -- PATH`.
fn main() {
    let path = std::env::args().nth(1).expect("usage: write_canary PATH");
    std::fs::write(&path, elelem_engine::canary::canary_gguf()).expect("cannot write the canary");
}
