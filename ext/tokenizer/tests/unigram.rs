//! Unigram (`tokenizer.ggml.model = "t5"`) on hand-made vocabularies, written
//! with our GGUF writer and read back as a model file is: the behaviour of
//! llama.cpp's `llm_tokenizer_ugm`, case by case.

use elelem_gguf::{Gguf, GgufWriter, Value};
use elelem_tokenizer::Tokenizer;

const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// A T5-shaped vocabulary: `<pad> </s> <unk>` (ids 0, 1, 2, llama.cpp's
/// defaults for t5), then `entries`, then any extra metadata.
fn unigram(entries: &[(&str, f32, i32)], extra: &[(&str, Value)]) -> Tokenizer {
    let mut tokens = vec!["<pad>", "</s>", "<unk>"];
    let mut scores = vec![0.0; 3];
    let mut types = vec![CONTROL, CONTROL, UNKNOWN];
    for &(text, score, ty) in entries {
        tokens.push(text);
        scores.push(score);
        types.push(ty);
    }
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", Value::String("t5".into()));
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(tokens.iter().map(|t| Value::String(t.to_string())).collect()),
    );
    w.set(
        "tokenizer.ggml.scores",
        Value::Array(scores.into_iter().map(Value::F32).collect()),
    );
    w.set(
        "tokenizer.ggml.token_type",
        Value::Array(types.into_iter().map(Value::I32).collect()),
    );
    for (key, value) in extra {
        w.set(key, value.clone());
    }
    Tokenizer::from_gguf(&Gguf::from_bytes(w.to_bytes()).unwrap()).unwrap()
}

const PREFIX: (&str, Value) = ("tokenizer.ggml.add_space_prefix", Value::Bool(true));

/// The ids of `texts` in a vocabulary built from `entries` (after the three
/// specials).
fn ids(entries: &[(&str, f32, i32)], texts: &[&str]) -> Vec<u32> {
    texts
        .iter()
        .map(|t| match *t {
            "</s>" => 1,
            "<unk>" => 2,
            t => 3 + entries.iter().position(|e| e.0 == t).unwrap() as u32,
        })
        .collect()
}

#[test]
fn the_best_total_score_wins() {
    let mut entries = vec![
        ("▁a", -1.0, NORMAL),
        ("b", -3.0, NORMAL),
        ("▁ab", -5.0, NORMAL),
        ("▁", -2.0, NORMAL),
        ("a", -2.0, NORMAL),
    ];
    // -1 + -3 beats -5.
    let t = unigram(&entries, &[PREFIX]);
    assert_eq!(t.tokenize("ab", false, false), ids(&entries, &["▁a", "b"]));
    // -3.5 beats -1 + -3.
    entries[2].1 = -3.5;
    let t = unigram(&entries, &[PREFIX]);
    assert_eq!(t.tokenize("ab", false, false), ids(&entries, &["▁ab"]));
}

#[test]
fn eos_is_added_and_bos_is_not_by_default() {
    let entries = [("▁a", -1.0, NORMAL)];
    let t = unigram(&entries, &[PREFIX]);
    assert_eq!(
        (t.bos(), t.eos(), t.add_bos(), t.add_eos()),
        (None, Some(1), false, true)
    );
    assert_eq!(t.tokenize("a", true, false), ids(&entries, &["▁a", "</s>"]));
}

#[test]
fn spaces_become_escaped_and_the_prefix_is_optional() {
    let entries = [("a", -1.0, NORMAL), ("▁", -1.0, NORMAL), ("▁a", -1.5, NORMAL)];
    // No add_space_prefix key: llama.cpp's default is no prefix.
    let t = unigram(&entries, &[]);
    assert_eq!(t.tokenize("a a", false, false), ids(&entries, &["a", "▁a"]));
    let t = unigram(&entries, &[PREFIX]);
    assert_eq!(t.tokenize("a a", false, false), ids(&entries, &["▁a", "▁a"]));
    // Whitespace runs are kept, one ▁ per space.
    assert_eq!(
        t.tokenize("a  a ", false, false),
        ids(&entries, &["▁a", "▁", "▁a", "▁"])
    );
    // With remove_extra_whitespaces every word gets exactly one ▁ before it.
    let t = unigram(
        &entries,
        &[PREFIX, ("tokenizer.ggml.remove_extra_whitespaces", Value::Bool(true))],
    );
    assert_eq!(t.tokenize("  a   a  ", false, false), ids(&entries, &["▁a", "▁a"]));
}

#[test]
fn uncovered_code_points_are_unknown_and_runs_of_them_one_unknown() {
    let entries = [("▁a", -1.0, NORMAL), ("b", -1.0, NORMAL)];
    let t = unigram(&entries, &[PREFIX]);
    assert_eq!(t.tokenize("axyb", false, false), ids(&entries, &["▁a", "<unk>", "b"]));
    assert_eq!(t.tokenize("aé", false, false), ids(&entries, &["▁a", "<unk>"]));
    // An unknown code point scores the lowest normal score less 10 (here
    // -60): more tokens win when their scores add up higher.
    let entries = [("▁", -1.0, NORMAL), ("x", -30.0, NORMAL), ("▁x", -50.0, NORMAL)];
    let t = unigram(&entries, &[PREFIX]);
    assert_eq!(t.tokenize("x", false, false), ids(&entries, &["▁", "x"]));
    assert_eq!(t.tokenize("xz", false, false), ids(&entries, &["▁", "x", "<unk>"]));
}

#[test]
fn unused_tokens_are_matched_but_control_tokens_are_not() {
    let entries = [
        ("<u>", -1.0, UNUSED),
        ("<unused0>", -1.0, CONTROL),
        ("<", -1.0, NORMAL),
        (">", -1.0, NORMAL),
    ];
    let t = unigram(&entries, &[]);
    // parse_special false leaves control text in the text. llama.cpp builds
    // this tokenizer before it marks control tokens named "unused" UNUSED, so
    // only a token typed unused is matched.
    assert_eq!(t.tokenize("<u>", false, false), ids(&entries, &["<u>"]));
    assert_eq!(
        t.tokenize("<unused0>", false, false),
        ids(&entries, &["<", "<unk>", ">"])
    );
}

/// A precompiled charsmap that replaces "A" with "a": the blob is the double
/// array's size in bytes, the array, then NUL-terminated replacements.
/// Array entries pack BASE in bits 10-30, LEAF in bit 8 and LCHECK in bits
/// 0-7; a leaf's BASE leads to an entry whose bit 31 is set and whose low
/// bits index the replacement.
fn charsmap_a_to_lowercase() -> Value {
    // 256 entries: every byte's first step stays inside (llama.cpp throws
    // on an index past the end).
    let mut xcda = vec![0u32; 256];
    xcda[0] = 1 << 10; // the root: BASE 1
    xcda[1 ^ 0x41] = (1 << 10) | (1 << 8) | 0x41; // "A": a leaf, BASE 1
    xcda[(1 ^ 0x41) ^ 1] = 1 << 31; // replacement at offset 0
    let mut blob = ((xcda.len() * 4) as u32).to_le_bytes().to_vec();
    blob.extend(xcda.iter().flat_map(|e| e.to_le_bytes()));
    blob.extend(b"a\0");
    Value::Array(blob.into_iter().map(Value::U8).collect())
}

#[test]
fn the_precompiled_charsmap_replaces_what_it_matches() {
    let entries = [("a", -1.0, NORMAL), ("B", -1.0, NORMAL), ("aB", -1.5, NORMAL)];
    let t = unigram(
        &entries,
        &[("tokenizer.ggml.precompiled_charsmap", charsmap_a_to_lowercase())],
    );
    assert_eq!(t.tokenize("AB", false, false), ids(&entries, &["aB"]));
    assert_eq!(t.tokenize("BA", false, false), ids(&entries, &["B", "a"]));
    // Without it, "A" is unknown.
    let t = unigram(&entries, &[]);
    assert_eq!(t.tokenize("AB", false, false), ids(&entries, &["<unk>", "B"]));
}

#[test]
fn user_defined_tokens_are_split_out_and_shield_their_prefixes_from_the_charsmap() {
    let entries = [
        ("AZ", -1.0, USER_DEFINED),
        ("A", -1.0, NORMAL),
        ("a", -1.0, NORMAL),
        ("B", -1.0, NORMAL),
        ("aB", -1.5, NORMAL),
    ];
    let t = unigram(
        &entries,
        &[("tokenizer.ggml.precompiled_charsmap", charsmap_a_to_lowercase())],
    );
    assert_eq!(t.tokenize("AZAZ", false, false), ids(&entries, &["AZ", "AZ"]));
    // llama.cpp's normalizer passes through as much of the input as follows
    // some user-defined token's text, whole token or not: "A" starts "AZ", so
    // it is not lowercased.
    assert_eq!(t.tokenize("AB", false, false), ids(&entries, &["A", "B"]));
}

#[test]
fn a_malformed_charsmap_is_refused_as_llama_cpp_refuses_it() {
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", Value::String("t5".into()));
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(["<pad>", "</s>", "<unk>"].map(|t| Value::String(t.into())).to_vec()),
    );
    // The array claims 400 bytes; the blob has 8.
    let blob = [400u32.to_le_bytes(), [0; 4]].concat();
    w.set(
        "tokenizer.ggml.precompiled_charsmap",
        Value::Array(blob.into_iter().map(Value::U8).collect()),
    );
    let gguf = Gguf::from_bytes(w.to_bytes()).unwrap();
    assert!(matches!(
        Tokenizer::from_gguf(&gguf),
        Err(elelem_tokenizer::TokenizerError::Charsmap(_))
    ));
}
