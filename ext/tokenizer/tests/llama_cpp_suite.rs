//! llama.cpp's own tokenizer test suite (`tests/test-tokenizer-0.cpp` over
//! `models/ggml-vocab-*.gguf` and their `.inp`/`.out` cases, in vendor/llama.cpp:
//! `rake peer_suite` fetches them): every vocabulary that ships cases must load
//! and give llama.cpp's ids for every case, tokenized as that test does (no
//! special tokens added, none parsed); the ones without cases must load too.
//! The table printed (`--nocapture`) says how each fared.

use std::collections::BTreeMap;
use std::path::PathBuf;

use elelem_gguf::Gguf;
use elelem_tokenizer::Tokenizer;

fn models() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../vendor/llama.cpp/models")
}

/// The cases of one vocabulary, as test-tokenizer-0 reads them: inputs separated
/// by `\n__ggml_vocab_test__\n`, one line of ids each; equal inputs count once.
fn cases(vocab: &str) -> Option<BTreeMap<String, Vec<u32>>> {
    let inp = std::fs::read_to_string(models().join(format!("{vocab}.inp"))).ok()?;
    let out = std::fs::read_to_string(models().join(format!("{vocab}.out"))).ok()?;
    // A separator at the very end ends the last case; it does not start another.
    let sep = "\n__ggml_vocab_test__\n";
    let inputs: Vec<&str> = inp.strip_suffix(sep).unwrap_or(&inp).split(sep).collect();
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|id| id.parse().unwrap()).collect())
        .collect();
    assert_eq!(inputs.len(), outputs.len(), "{vocab}: .inp and .out differ in length");
    Some(inputs.into_iter().map(str::to_string).zip(outputs).collect())
}

#[test]
fn every_vocabulary_loads_and_every_case_gives_llama_cpps_ids() {
    let mut vocabs: Vec<String> = std::fs::read_dir(models())
        .expect("vendor/llama.cpp/models is missing: run `rake peer_suite`")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("ggml-vocab-") && name.ends_with(".gguf"))
        .collect();
    vocabs.sort();
    assert!(
        vocabs.len() >= 19,
        "the suite has 19 vocabularies, found {}",
        vocabs.len()
    );
    let mut failures = Vec::new();
    let mut with_cases = 0;
    println!("| vocabulary | cases passed | note |\n|---|---|---|");
    for vocab in &vocabs {
        let gguf = Gguf::open(models().join(vocab)).unwrap();
        let cases = cases(vocab);
        let tokenizer = match Tokenizer::from_gguf(&gguf) {
            Ok(t) => t,
            Err(e) => {
                let n = cases.map_or("no cases".to_string(), |c| format!("0 / {}", c.len()));
                println!("| {vocab} | {n} | refused: {e} |");
                failures.push(format!("{vocab}: refused: {e}"));
                continue;
            }
        };
        let Some(cases) = cases else {
            println!("| {vocab} | no cases | loads |");
            continue;
        };
        with_cases += 1;
        let passed = cases
            .iter()
            .filter(|(text, ids)| {
                let ours = tokenizer.tokenize(text, false, false);
                let ok = &ours == *ids;
                if !ok {
                    failures.push(format!("{vocab} {text:?}: expected {ids:?}, got {ours:?}"));
                }
                ok
            })
            .count();
        println!("| {vocab} | {passed} / {} | |", cases.len());
    }
    assert!(
        with_cases >= 15,
        "the suite ships cases for 15 vocabularies, found {with_cases}"
    );
    assert!(
        failures.is_empty(),
        "{} vocabularies or cases fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
