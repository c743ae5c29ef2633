//! `cargo run --release -p elelem-convert --example convert -- DIR [OUT.gguf] [f32]`:
//! the converter without Ruby (the `elelem convert` command is the same call).

use std::path::Path;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        eprintln!("usage: convert DIR [OUT.gguf] [f32]");
        std::process::exit(2);
    };
    let out_type = if args.iter().any(|a| a == "f32") {
        elelem_convert::OutType::F32
    } else {
        elelem_convert::OutType::F16
    };
    let out = args.get(1).filter(|a| *a != "f32").map(Path::new);
    let start = Instant::now();
    let options = elelem_convert::Options {
        out_type,
        pre_tokenizer: None,
    };
    match elelem_convert::convert(Path::new(dir), out, &options) {
        Ok(r) => {
            for note in &r.notes {
                eprintln!("note: {note}");
            }
            println!(
                "{}: {} tensors, {} parameters, {} bytes, {:.2} s",
                r.path.display(),
                r.tensors,
                r.parameters,
                r.bytes,
                start.elapsed().as_secs_f64()
            );
        }
        Err(e) => {
            eprintln!("convert: {e}");
            std::process::exit(1);
        }
    }
}
