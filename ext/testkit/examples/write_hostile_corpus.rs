//! Writes the hostile-file corpus for the Ruby spec:
//! `cargo run --release --example write_hostile_corpus -- DIR`. Every seed and
//! structured case, one in 40 of the byte-level mutants, and `DIR/manifest.tsv`
//! saying what each file must do (`runs`, `rejected` with the words of the
//! error, or `either`).
use std::fmt::Write;

use elelem_testkit::hostile::{self, Expect};

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: write_hostile_corpus DIR"));
    std::fs::create_dir_all(&dir).expect("cannot create the corpus directory");
    let mut manifest = String::new();
    let corpus = hostile::corpus(200);
    let (whole, mutants) = corpus.split_at(hostile::seeds().len() + hostile::structured().len());
    for (i, case) in whole.iter().chain(mutants.iter().step_by(40)).enumerate() {
        let file = format!("{i:04}-{}.gguf", case.name);
        std::fs::write(dir.join(&file), &case.bytes).expect("cannot write a corpus file");
        let (expect, words) = match case.expect {
            Expect::Runs => ("runs", ""),
            Expect::Rejected(words) => ("rejected", words),
            Expect::Either => ("either", ""),
        };
        writeln!(manifest, "{file}\t{expect}\t{words}").unwrap();
    }
    std::fs::write(dir.join("manifest.tsv"), manifest).expect("cannot write the manifest");
}
