//! llama.cpp's tokenizer rules on vocabularies small enough to reason about.

use elelem_gguf::{Gguf, GgufWriter, Value};
use elelem_tokenizer::{SpecialIds, Tokenizer, TokenizerError, VocabKind, VocabSpec};

const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const BYTE: i32 = 6;

/// An SPM vocabulary: `<unk> <s> </s>`, then `entries`, then the 256 byte tokens.
fn spm(entries: &[(&str, f32, i32)]) -> VocabSpec {
    let mut tokens = vec!["<unk>".to_owned(), "<s>".to_owned(), "</s>".to_owned()];
    let mut scores = vec![0.0; 3];
    let mut types = vec![2, CONTROL, CONTROL];
    for &(text, score, ty) in entries {
        tokens.push(text.to_owned());
        scores.push(score);
        types.push(ty);
    }
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        scores.push(0.0);
        types.push(BYTE);
    }
    VocabSpec {
        kind: VocabKind::Spm,
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        ..VocabSpec::default()
    }
}

fn id(spec: &VocabSpec, text: &str) -> u32 {
    spec.tokens.iter().position(|t| t == text).unwrap() as u32
}

fn ids(spec: &VocabSpec, texts: &[&str]) -> Vec<u32> {
    texts.iter().map(|t| id(spec, t)).collect()
}

#[test]
fn spm_merges_the_best_scoring_pair_first() {
    let spec = spm(&[
        ("a", -1.0, NORMAL),
        ("b", -1.0, NORMAL),
        ("c", -1.0, NORMAL),
        ("ab", -2.0, NORMAL),
        ("bc", -1.5, NORMAL),
    ]);
    let t = Tokenizer::new(&VocabSpec {
        add_space_prefix: Some(false),
        ..spec.clone()
    })
    .unwrap();
    assert_eq!(t.tokenize("abc", false, false), ids(&spec, &["a", "bc"]));
}

#[test]
fn spm_ties_go_to_the_leftmost_pair() {
    let spec = spm(&[
        ("a", -1.0, NORMAL),
        ("b", -1.0, NORMAL),
        ("c", -1.0, NORMAL),
        ("ab", -2.0, NORMAL),
        ("bc", -2.0, NORMAL),
    ]);
    let t = Tokenizer::new(&VocabSpec {
        add_space_prefix: Some(false),
        ..spec.clone()
    })
    .unwrap();
    assert_eq!(t.tokenize("abc", false, false), ids(&spec, &["ab", "c"]));
}

#[test]
fn spm_falls_back_to_bytes() {
    let spec = spm(&[("▁", -1.0, NORMAL)]);
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.tokenize("é", false, false), ids(&spec, &["▁", "<0xC3>", "<0xA9>"]));
    assert_eq!(t.detokenize(&t.tokenize("é", false, false), false), "é".as_bytes());
}

#[test]
fn spm_space_prefix_follows_llama_cpp() {
    let spec = spm(&[
        ("▁hi", -1.0, NORMAL),
        ("▁", -2.0, NORMAL),
        ("h", -3.0, NORMAL),
        ("i", -3.0, NORMAL),
        ("▁h", -2.5, NORMAL),
    ]);
    let t = Tokenizer::new(&spec).unwrap();
    assert!(t.add_bos());
    let with_bos = t.tokenize("hi", true, false);
    assert_eq!(with_bos, ids(&spec, &["<s>", "▁hi"]));
    // The prefix comes back after every special token, too.
    assert_eq!(t.tokenize("hi</s>hi", false, true), ids(&spec, &["▁hi", "</s>", "▁hi"]));
    // llama_detokenize drops the first piece's leading space, and only the
    // first piece's: a BOS that renders as nothing still uses up the strip.
    assert_eq!(t.detokenize(&with_bos[1..], false), b"hi");
    assert_eq!(t.detokenize(&with_bos, false), b" hi");
    assert_eq!(t.detokenize(&with_bos, true), b"<s> hi");
}

#[test]
fn special_text_is_parsed_only_when_asked_but_user_defined_always() {
    let spec = spm(&[
        ("<b>", 0.0, USER_DEFINED),
        ("<", -1.0, NORMAL),
        ("s", -1.0, NORMAL),
        (">", -1.0, NORMAL),
    ]);
    let t = Tokenizer::new(&VocabSpec {
        add_space_prefix: Some(false),
        ..spec.clone()
    })
    .unwrap();
    assert_eq!(t.tokenize("<s><b>", false, true), ids(&spec, &["<s>", "<b>"]));
    assert_eq!(t.tokenize("<s><b>", false, false), ids(&spec, &["<", "s", ">", "<b>"]));
    assert_eq!(t.token_to_piece(id(&spec, "<s>"), false), b"");
    assert_eq!(t.token_to_piece(id(&spec, "<s>"), true), b"<s>");
    assert_eq!(t.token_to_piece(id(&spec, "<b>"), false), b"<b>");
    assert_eq!(t.token_to_piece(u32::MAX, true), b"");
}

#[test]
fn longer_special_tokens_split_first() {
    let spec = spm(&[("<|a|>", 0.0, CONTROL), ("<|a|><|a|>", 0.0, CONTROL)]);
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(
        t.tokenize("<|a|><|a|><|a|>", false, true),
        ids(&spec, &["<|a|><|a|>", "<|a|>"])
    );
}

#[test]
fn eog_follows_llama_cpp_rules() {
    // "</s>" (id 2, control), "<end_of_turn>" (typed normal!) and "<|im_end|>"
    // end generation by their text; EOS (id 2) does anyway.
    let spec = spm(&[
        ("<end_of_turn>", 0.0, NORMAL),
        ("<|im_end|>", 0.0, CONTROL),
        ("<|end|>", 0.0, CONTROL),
    ]);
    let t = Tokenizer::new(&spec).unwrap();
    let eot = id(&spec, "<end_of_turn>");
    assert!(t.is_eog(2) && t.is_eog(eot) && t.is_eog(id(&spec, "<|im_end|>")) && t.is_eog(id(&spec, "<|end|>")));
    assert!(!t.is_eog(1) && !t.is_eog(0));
    // Being EOG made it a control token: parsed, and hidden unless special.
    assert_eq!(t.tokenize("<end_of_turn>", false, true), [eot]);
    assert_eq!(t.token_to_piece(eot, false), b"");

    // With "<|return|>" and "<|call|>" present, "<|end|>" only ends a message.
    let spec = spm(&[
        ("<|end|>", 0.0, CONTROL),
        ("<|return|>", 0.0, CONTROL),
        ("<|call|>", 0.0, CONTROL),
    ]);
    let t = Tokenizer::new(&spec).unwrap();
    let end = id(&spec, "<|end|>");
    assert!(!t.is_eog(end) && t.is_eog(id(&spec, "<|call|>")));
    assert_eq!(t.token_to_piece(end, false), b"<|end|>");

    // FIM pad/repo/sep tokens end generation too, found by text or by id.
    let spec = spm(&[("<|fim_pad|>", 0.0, CONTROL), ("<X>", 0.0, CONTROL)]);
    let mut with_sep = spec.clone();
    with_sep.ids = SpecialIds {
        fim_sep: Some(id(&spec, "<X>")),
        ..SpecialIds::default()
    };
    let t = Tokenizer::new(&with_sep).unwrap();
    assert!(t.is_eog(id(&spec, "<|fim_pad|>")) && t.is_eog(id(&spec, "<X>")));
}

#[test]
fn special_ids_fall_back_to_llama_cpp_defaults() {
    let mut spec = spm(&[]);
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!((t.bos(), t.eos()), (Some(1), Some(2)));
    spec.ids.bos = Some(7);
    spec.ids.eos = Some(1_000_000);
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!((t.bos(), t.eos()), (Some(7), Some(2)));
}

/// A byte-level BPE vocabulary: the 256 byte chars, then `extra`.
fn bpe(extra: &[&str], merges: &[&str]) -> VocabSpec {
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| {
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let below = (0..b)
                .filter(|&x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
                .count() as u32;
            char::from_u32(if printable { u32::from(b) } else { 256 + below })
                .unwrap()
                .to_string()
        })
        .collect();
    tokens.extend(extra.iter().map(|t| t.to_string()));
    VocabSpec {
        kind: VocabKind::Bpe {
            pre: "qwen2".to_owned(),
            merges: merges.iter().map(|m| m.to_string()).collect(),
        },
        tokens,
        ..VocabSpec::default()
    }
}

#[test]
fn bpe_merges_by_rank_within_words() {
    let spec = bpe(
        &["ab", "bc", "Ġt", "he", "Ġthe"],
        &["b c", "a b", "Ġ t", "h e", "Ġt he"],
    );
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.tokenize("abc", false, false), ids(&spec, &["a", "bc"]));
    assert_eq!(t.tokenize("abc the", false, false), ids(&spec, &["a", "bc", "Ġthe"]));
    assert_eq!(
        t.detokenize(&t.tokenize("abc the\n", false, false), false),
        b"abc the\n"
    );
    assert_eq!((t.bos(), t.add_bos()), (Some(11), false));
}

/// llama3's pre-tokenizer: digits in runs of up to three, a word that is a token
/// taken whole without merges (llama.cpp's `ignore_merges`), BOS added by default.
#[test]
fn llama3_splits_digits_in_threes_and_takes_whole_words() {
    let mut spec = bpe(&["ab", "123"], &[]);
    spec.kind = VocabKind::Bpe {
        pre: "llama-bpe".to_owned(),
        merges: Vec::new(),
    };
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.tokenize("ab", false, false), [256]);
    assert_eq!(
        t.tokenize("12345", false, false),
        [257, u32::from(b'4'), u32::from(b'5')]
    );
    assert!(t.add_bos());
}

#[test]
fn bpe_refuses_pre_tokenizers_llama_cpp_does_not_know() {
    let mut spec = bpe(&[], &[]);
    spec.kind = VocabKind::Bpe {
        pre: "nonesuch".to_owned(),
        merges: Vec::new(),
    };
    assert!(matches!(Tokenizer::new(&spec), Err(TokenizerError::UnsupportedPre(p)) if p == "nonesuch"));
}

/// The whitespace model (jina-embeddings-v2-base-zh): whitespace only
/// separates words, each merged on its raw UTF-8; the normalizer keeps case
/// unless the metadata asks otherwise.
#[test]
fn the_whitespace_model_merges_the_words_between_whitespace() {
    let mut spec = VocabSpec {
        kind: VocabKind::Bpe {
            pre: "whitespace".to_owned(),
            merges: vec!["a b".to_owned(), "ab c".to_owned()],
        },
        model: "whitespace".to_owned(),
        tokens: ["a", "b", "c", "ab", "abc", "A"].map(str::to_owned).to_vec(),
        ..VocabSpec::default()
    };
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.model_name(), "whitespace");
    assert_eq!(t.tokenize("abc \n ab\tc", false, false), [4, 3, 2]);
    assert_eq!(t.tokenize("Ab", false, false), [5, 1]);
    spec.normalizer_lowercase = Some(true);
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.tokenize("Ab", false, false), [3]);
}

fn gguf(entries: &[(&str, Value)]) -> Gguf {
    let mut w = GgufWriter::new();
    for (key, value) in entries {
        w.set(key, value.clone());
    }
    Gguf::from_bytes(w.to_bytes()).unwrap()
}

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
}

#[test]
fn from_gguf_reads_the_metadata() {
    let file = gguf(&[
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&["<pad>", "<eos>", "<bos>", "▁a"])),
        ("tokenizer.ggml.scores", Value::Array(vec![Value::F32(0.0); 4])),
        (
            "tokenizer.ggml.token_type",
            Value::Array([CONTROL, CONTROL, CONTROL, NORMAL].map(Value::I32).to_vec()),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(2)),
        ("tokenizer.ggml.eos_token_id", Value::U32(1)),
        ("tokenizer.ggml.add_space_prefix", Value::Bool(true)),
        ("tokenizer.ggml.add_eos_token", Value::Bool(true)),
    ]);
    let t = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(
        (t.n_vocab(), t.bos(), t.eos(), t.add_bos(), t.add_eos()),
        (4, Some(2), Some(1), true, true)
    );
    assert_eq!(t.tokenize("a", true, false), [2, 3, 1]);
    assert!(t.is_eog(1));
}

#[test]
fn from_gguf_refuses_what_llama_cpp_refuses_or_elelem_lacks() {
    let base = |model: &str| -> Vec<(&'static str, Value)> {
        vec![
            ("tokenizer.ggml.model", Value::String(model.into())),
            ("tokenizer.ggml.tokens", strings(&["a", "b"])),
            ("tokenizer.ggml.merges", strings(&["a b"])),
        ]
    };
    let err = |entries: &[(&str, Value)]| Tokenizer::from_gguf(&gguf(entries)).err().unwrap();

    assert!(matches!(err(&base("nonesuch")), TokenizerError::UnknownModel(m) if m == "nonesuch"));
    assert!(matches!(err(&base("rwkv")), TokenizerError::UnsupportedModel(m) if m == "rwkv"));
    let mut unknown_pre = base("gpt2");
    unknown_pre.push(("tokenizer.ggml.pre", Value::String("nonesuch".into())));
    assert!(matches!(err(&unknown_pre), TokenizerError::UnsupportedPre(p) if p == "nonesuch"));
    // llama.cpp patches phi-3's special tokens and fails without them.
    let mut phi3 = base("llama");
    phi3.push(("general.name", Value::String("Phi-3 Mini".into())));
    assert!(matches!(err(&phi3), TokenizerError::MissingToken("</s>")));
    assert!(matches!(
        err(&base("gpt2")[..2]),
        TokenizerError::MissingKey("tokenizer.ggml.merges")
    ));
    assert!(matches!(
        err(&[("tokenizer.ggml.model", Value::String("llama".into()))]),
        TokenizerError::MissingKey(_)
    ));
    let mut bad_type = base("llama");
    bad_type.push(("tokenizer.ggml.add_bos_token", Value::U8(1)));
    assert!(matches!(err(&bad_type), TokenizerError::WrongType(_)));
}
