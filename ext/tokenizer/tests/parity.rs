//! Parity with the reference llama.cpp on the real vocabularies: token ids,
//! detokenized bytes and per-token facts, against goldens that
//! tools/reference/tokenizer_goldens.rb made with llama.cpp itself.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use elelem_gguf::Gguf;
use elelem_tokenizer::{Tokenizer, VocabSpec};
use serde_json::Value;

const MODELS: [(&str, &str); 2] = [
    ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ("gemma-3-270m", "gemma-3-270m-q4_k_m.gguf"),
];

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/fixtures/tokenizer")
}

fn jsonl(name: &str) -> Vec<Value> {
    let path = fixtures().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

fn corpus() -> Vec<String> {
    jsonl("corpus.jsonl")
        .into_iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|id| id.as_u64().expect("an id") as u32)
        .collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Each vocabulary is built once and shared by the tests.
fn tokenizer(model: usize) -> &'static Tokenizer {
    static CACHE: [OnceLock<Tokenizer>; 2] = [OnceLock::new(), OnceLock::new()];
    CACHE[model].get_or_init(|| {
        let spec = spec(MODELS[model].1);
        let start = Instant::now();
        let tokenizer = Tokenizer::new(&spec).expect("a supported vocabulary");
        eprintln!("{}: tokenizer built in {:?}", MODELS[model].0, start.elapsed());
        tokenizer
    })
}

fn spec(file: &str) -> VocabSpec {
    let dir = std::env::var_os("ELELEM_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/elelem/models"));
    let path = dir.join(file);
    assert!(
        path.exists(),
        "{} is missing: run `rake models` (or set ELELEM_MODEL_DIR)",
        path.display()
    );
    let gguf = Gguf::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    VocabSpec::from_gguf(&gguf).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Asserts `got == want` for every corpus line, naming the first line that differs.
fn assert_all_equal<T: PartialEq + std::fmt::Debug>(what: &str, corpus: &[String], got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: line counts differ");
    let mismatches: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    if let Some(&i) = mismatches.first() {
        panic!(
            "{what}: {} of {} lines differ; first is line {} {:?}\n  llama.cpp: {:?}\n  elelem:    {:?}",
            mismatches.len(),
            got.len(),
            i + 1,
            corpus[i],
            want[i],
            got[i]
        );
    }
}

fn check_tokenize(name: &str, tokenizer: &Tokenizer, corpus: &[String]) {
    for (suffix, add_special, parse_special) in [("", true, true), (".raw", false, false)] {
        let want: Vec<Vec<u32>> = jsonl(&format!("{name}{suffix}.jsonl")).iter().map(ids).collect();
        let start = Instant::now();
        let got: Vec<Vec<u32>> = corpus
            .iter()
            .map(|s| tokenizer.tokenize(s, add_special, parse_special))
            .collect();
        eprintln!(
            "{name}: tokenized {} strings ({} bytes, add_special={add_special}, parse_special={parse_special}) in {:?}",
            corpus.len(),
            corpus.iter().map(String::len).sum::<usize>(),
            start.elapsed()
        );
        assert_all_equal(
            &format!("{name} tokenize({add_special}, {parse_special})"),
            corpus,
            &got,
            &want,
        );
    }
}

#[test]
fn qwen_token_ids_match_llama_cpp() {
    check_tokenize(MODELS[0].0, tokenizer(0), &corpus());
}

#[test]
fn gemma_token_ids_match_llama_cpp() {
    check_tokenize(MODELS[1].0, tokenizer(1), &corpus());
}

/// `stem.detok.jsonl` holds llama.cpp's detokenization of the ids in `stem.jsonl`.
fn check_detokenize(name: &str, tokenizer: &Tokenizer, corpus: &[String]) {
    let ids: Vec<Vec<u32>> = jsonl(&format!("{name}.jsonl")).iter().map(ids).collect();
    let want = jsonl(&format!("{name}.detok.jsonl"));
    for (column, special) in [(0, false), (1, true)] {
        let want: Vec<Vec<u8>> = want
            .iter()
            .map(|row| unhex(row[column].as_str().expect("hex")))
            .collect();
        let got: Vec<Vec<u8>> = ids.iter().map(|ids| tokenizer.detokenize(ids, special)).collect();
        assert_all_equal(&format!("{name} detokenize(special={special})"), corpus, &got, &want);
    }
}

#[test]
fn qwen_detokenize_matches_llama_cpp() {
    check_detokenize(MODELS[0].0, tokenizer(0), &corpus());
}

#[test]
fn gemma_detokenize_matches_llama_cpp() {
    check_detokenize(MODELS[1].0, tokenizer(1), &corpus());
}

/// FNV-1a 64 over (u32 LE length, bytes) of each piece, as the probe computes it.
fn digest(pieces: impl Iterator<Item = Vec<u8>>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for piece in pieces {
        for &b in (piece.len() as u32).to_le_bytes().iter().chain(&piece) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn check_vocab(name: &str, tokenizer: &Tokenizer) {
    let path = fixtures().join(format!("{name}.vocab.json"));
    let want: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("vocab facts")).expect("JSON");
    let n = tokenizer.n_vocab();
    assert_eq!(n as u64, want["n_vocab"].as_u64().unwrap(), "{name}: n_vocab");
    assert_eq!(
        tokenizer.bos().map(i64::from),
        want["bos"].as_i64().filter(|&id| id >= 0),
        "{name}: bos"
    );
    assert_eq!(
        tokenizer.eos().map(i64::from),
        want["eos"].as_i64().filter(|&id| id >= 0),
        "{name}: eos"
    );
    assert_eq!(
        tokenizer.add_bos(),
        want["add_bos"].as_bool().unwrap(),
        "{name}: add_bos"
    );
    assert_eq!(
        tokenizer.add_eos(),
        want["add_eos"].as_bool().unwrap(),
        "{name}: add_eos"
    );
    let eog: Vec<u32> = (0..n as u32).filter(|&id| tokenizer.is_eog(id)).collect();
    assert_eq!(eog, ids(&want["eog"]), "{name}: EOG ids");

    let block = want["piece_block"].as_u64().unwrap() as usize;
    for special in [false, true] {
        let key = format!("pieces_special_{}", u8::from(special));
        let want: Vec<&str> = want[&key]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        let got: Vec<String> = (0..n)
            .step_by(block)
            .map(|start| {
                digest((start..n.min(start + block)).map(|id| tokenizer.token_to_piece(id as u32, special).to_vec()))
            })
            .collect();
        let bad: Vec<String> = (0..want.len())
            .filter(|&i| got.get(i).map(String::as_str) != Some(want[i]))
            .map(|i| format!("{}..{}", i * block, (i + 1) * block))
            .collect();
        assert!(
            bad.is_empty(),
            "{name}: token_to_piece(special={special}) differs in id blocks {bad:?}"
        );
    }
}

#[test]
fn qwen_vocab_facts_match_llama_cpp() {
    check_vocab(MODELS[0].0, tokenizer(0));
}

#[test]
fn gemma_vocab_facts_match_llama_cpp() {
    check_vocab(MODELS[1].0, tokenizer(1));
}

/// detokenize(tokenize(s)) == s with special tokens parsed and rendered.
/// The one loss: SentencePiece vocabularies store spaces as U+2581, so a
/// U+2581 in the input comes back as a space (llama.cpp does the same, as
/// the detokenize goldens check).
fn check_round_trip(tokenizer: &Tokenizer, corpus: &[String], spm: bool) {
    let mut checked = 0;
    for s in corpus {
        let back = tokenizer.detokenize(&tokenizer.tokenize(s, false, true), true);
        if spm && s.contains('\u{2581}') {
            assert_eq!(back, s.replace('\u{2581}', " ").as_bytes(), "{s:?}");
            continue;
        }
        assert_eq!(String::from_utf8_lossy(&back), s.as_str());
        checked += 1;
    }
    assert!(checked > 200);
}

#[test]
fn qwen_round_trips() {
    check_round_trip(tokenizer(0), &corpus(), false);
}

#[test]
fn gemma_round_trips() {
    check_round_trip(tokenizer(1), &corpus(), true);
}

/// Metadata overridden as tools/reference/tokenizer_goldens.rb overrides it
/// for llama.cpp, so that paths the real vocabularies skip are checked too.
fn check_variant(model: usize, variant: &str, edit: impl FnOnce(&mut VocabSpec)) {
    let mut spec = spec(MODELS[model].1);
    edit(&mut spec);
    let tokenizer = Tokenizer::new(&spec).expect("a supported vocabulary");
    let corpus = corpus();
    let name = format!("{}.{variant}", MODELS[model].0);
    let want: Vec<Vec<u32>> = jsonl(&format!("{name}.jsonl")).iter().map(ids).collect();
    let got: Vec<Vec<u32>> = corpus.iter().map(|s| tokenizer.tokenize(s, true, true)).collect();
    assert_all_equal(&format!("{name} tokenize(true, true)"), &corpus, &got, &want);
    check_detokenize(&name, &tokenizer, &corpus);
}

#[test]
fn gemma_with_a_space_prefix_matches_llama_cpp() {
    check_variant(1, "space-prefix", |spec| spec.add_space_prefix = Some(true));
}

#[test]
fn qwen_with_bos_and_eos_matches_llama_cpp() {
    check_variant(0, "bos-eos", |spec| {
        spec.add_bos = Some(true);
        spec.add_eos = Some(true);
    });
}
