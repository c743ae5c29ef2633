//! llama.cpp's own tokenizer test suite over `models/ggml-vocab-*.gguf` (in
//! vendor/llama.cpp: `rake peer_suite` fetches them), in one pass per
//! vocabulary:
//!
//! * `tests/test-tokenizer-0.cpp`: every vocabulary that ships `.inp`/`.out`
//!   cases must give llama.cpp's ids for every case, tokenized as that test
//!   does (no special tokens added, none parsed);
//! * `tests/test-tokenizer-1-bpe.cpp` (BPE vocabularies) and
//!   `test-tokenizer-1-spm.cpp` (the others): every token's piece tokenized and
//!   detokenized again, then every code point, run to the end; the tokens and
//!   code points that do not come back must be exactly the ones that do not
//!   with llama.cpp (spec/fixtures/tokenizer/llama_cpp_round_trips.jsonl, from
//!   tools/reference/round_trip_goldens.rb), since many vocabularies do not
//!   round-trip there either.
//!
//! Every vocabulary must load. The table printed (`--nocapture`) says how each
//! fared.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use elelem_gguf::Gguf;
use elelem_tokenizer::Tokenizer;
use serde_json::Value;

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

/// What does not come back: how many, and an FNV-1a 64 digest of their ids
/// (u32 little-endian each), as `elelem-reference roundtrip` reports it.
#[derive(Debug, PartialEq, Eq)]
struct Failures {
    count: u64,
    digest: u64,
}

impl Failures {
    fn new() -> Failures {
        Failures {
            count: 0,
            digest: 0xcbf29ce484222325,
        }
    }

    fn add(&mut self, id: u32) {
        self.count += 1;
        for b in id.to_le_bytes() {
            self.digest = (self.digest ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
    }

    fn from_json(v: &Value) -> Failures {
        let count = v[0].as_u64().expect("a count");
        let digest = u64::from_str_radix(v[1].as_str().expect("a digest"), 16).expect("hex");
        Failures { count, digest }
    }
}

/// llama.cpp's round-trip results, by vocabulary file name.
fn llama_cpp_round_trips() -> BTreeMap<String, (Failures, Failures)> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/fixtures/tokenizer/llama_cpp_round_trips.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("JSON line");
            let vocab = v["vocab"].as_str().expect("a name").to_owned();
            (
                vocab,
                (
                    Failures::from_json(&v["tokens"]),
                    Failures::from_json(&v["code_points"]),
                ),
            )
        })
        .collect()
}

/// test-tokenizer-1-bpe / -spm, every failure counted: each token's piece
/// (`common_detokenize` of the one id) tokenized with special tokens parsed
/// and detokenized again; then each code point but surrogates and
/// U+40000..U+E0000 (U+2581 excepted from the check), parsed as special only
/// in the SentencePiece-style test.
fn round_trip(tokenizer: &Tokenizer) -> (Failures, Failures) {
    let bpe = matches!(tokenizer.model_name(), "gpt2" | "gemma4");
    let again =
        |text: &[u8], parse_special| tokenizer.detokenize(&tokenizer.tokenize_bytes(text, false, parse_special), true);
    let mut tokens = Failures::new();
    for id in 0..tokenizer.n_vocab() as u32 {
        let piece = tokenizer.detokenize(&[id], true);
        if again(&piece, true) != piece {
            tokens.add(id);
        }
    }
    let mut code_points = Failures::new();
    let surrogates = 0xD800..=0xDFFF;
    let unassigned = 0x40000..=0xE0000;
    for c in (0..0x110000).filter(|cp| !surrogates.contains(cp) && !unassigned.contains(cp)) {
        let text = char::from_u32(c).expect("a scalar value").to_string();
        if c != 0x2581 && again(text.as_bytes(), !bpe) != text.as_bytes() {
            code_points.add(c);
        }
    }
    (tokens, code_points)
}

#[test]
fn every_vocabulary_gives_llama_cpps_ids_and_round_trips() {
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
    let expected_round_trips = llama_cpp_round_trips();
    let mut failures = Vec::new();
    let mut with_cases = 0;
    println!("| vocabulary | cases passed | round trip: tokens / code points that do not come back | as llama.cpp | seconds |");
    println!("|---|---|---|---|---|");
    for vocab in &vocabs {
        let start = Instant::now();
        let gguf = Gguf::open(models().join(vocab)).unwrap();
        let cases = cases(vocab);
        let tokenizer = match Tokenizer::from_gguf(&gguf) {
            Ok(t) => t,
            Err(e) => {
                let n = cases.map_or("no cases".to_string(), |c| format!("0 / {}", c.len()));
                println!("| {vocab} | {n} | refused: {e} | | |");
                failures.push(format!("{vocab}: refused: {e}"));
                continue;
            }
        };

        let passed = match &cases {
            None => "no cases".to_string(),
            Some(cases) => {
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
                format!("{passed} / {}", cases.len())
            }
        };

        let (tokens, code_points) = round_trip(&tokenizer);
        let same = match expected_round_trips.get(vocab) {
            Some((want_tokens, want_code_points)) if *want_tokens == tokens && *want_code_points == code_points => {
                "yes"
            }
            Some(want) => {
                failures.push(format!(
                    "{vocab}: round trips differ from llama.cpp's: ours {:?}, llama.cpp's {want:?}",
                    (&tokens, &code_points)
                ));
                "NO"
            }
            None => {
                failures.push(format!("{vocab}: no llama.cpp round-trip golden"));
                "no golden"
            }
        };
        println!(
            "| {vocab} | {passed} | {} / {} | {same} | {:.1} |",
            tokens.count,
            code_points.count,
            start.elapsed().as_secs_f64()
        );
    }
    assert!(
        with_cases >= 15,
        "the suite ships cases for 15 vocabularies, found {with_cases}"
    );
    assert!(
        failures.is_empty(),
        "{} vocabularies, cases or round trips fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
