//! What `get_vocab_base_pre` needs of a Hugging Face WordPiece tokenizer: the ids
//! `tokenizer.encode(chktxt)` gives, as the `tokenizers` library computes them
//! (BertNormalizer, BertPreTokenizer, WordPiece, the post-processor's special
//! tokens), and their fingerprint. Only the fixed check text is ever tokenized,
//! so the Unicode properties come from a table of its characters.

use std::collections::HashMap;

use crate::tables::{CHKTXT, CHKTXT_CHARS, PRE_HASHES};

/// BertNormalizer's switches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BertNormalizer {
    pub clean_text: bool,
    pub handle_chinese_chars: bool,
    /// `None`: as `lowercase`.
    pub strip_accents: Option<bool>,
    pub lowercase: bool,
}

/// The Unicode properties of a character of the check text (see `CHKTXT_CHARS`).
fn flags(c: char) -> u8 {
    match CHKTXT_CHARS.binary_search_by_key(&c, |&(k, _)| k) {
        Ok(i) => CHKTXT_CHARS[i].1,
        Err(_) => panic!("{c:?} is not a character of the check text"),
    }
}

fn is_other(c: char) -> bool {
    flags(c) & 1 != 0
}

fn is_mark_nonspacing(c: char) -> bool {
    flags(c) & 2 != 0
}

fn is_punctuation(c: char) -> bool {
    flags(c) & 4 != 0
}

/// tokenizers' `is_chinese_char` (the CJK ideograph blocks BERT spaces out).
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

impl BertNormalizer {
    /// `BertNormalizer::normalize` on the check text.
    fn normalize(&self, text: &str) -> String {
        let mut s: String = text.to_string();
        if self.clean_text {
            s = s
                .chars()
                .filter(|&c| {
                    let control = !matches!(c, '\t' | '\n' | '\r') && is_other(c);
                    !(c == '\0' || c == '\u{fffd}' || control)
                })
                .map(|c| {
                    if matches!(c, '\t' | '\n' | '\r') || c.is_whitespace() {
                        ' '
                    } else {
                        c
                    }
                })
                .collect();
        }
        if self.handle_chinese_chars {
            let mut out = String::with_capacity(s.len());
            for c in s.chars() {
                if is_chinese_char(c) {
                    out.push(' ');
                    out.push(c);
                    out.push(' ');
                } else {
                    out.push(c);
                }
            }
            s = out;
        }
        if self.strip_accents.unwrap_or(self.lowercase) {
            // NFD leaves the check text as it is (tools/convert/gen_tables.py asserts it).
            s = s.chars().filter(|&c| !is_mark_nonspacing(c)).collect();
        }
        if self.lowercase {
            s = s.chars().flat_map(char::to_lowercase).collect();
        }
        s
    }
}

/// BertPreTokenizer: split on whitespace (dropped), then punctuation (kept alone).
fn pre_tokenize(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    for chunk in text.split(char::is_whitespace).filter(|w| !w.is_empty()) {
        let mut start = 0;
        for (i, c) in chunk.char_indices() {
            if c.is_ascii_punctuation() || is_punctuation(c) {
                if start < i {
                    words.push(&chunk[start..i]);
                }
                words.push(&chunk[i..i + c.len_utf8()]);
                start = i + c.len_utf8();
            }
        }
        if start < chunk.len() {
            words.push(&chunk[start..]);
        }
    }
    words
}

/// A WordPiece model as tokenizer.json describes it.
pub(crate) struct WordPiece<'a> {
    pub vocab: &'a HashMap<String, u32>,
    pub unk_token: &'a str,
    pub prefix: &'a str,
    pub max_input_chars_per_word: usize,
}

impl WordPiece<'_> {
    /// tokenizers' `WordPiece::tokenize`: greedy longest match; a word with a
    /// piece not in the vocabulary, or too long, is the unknown token.
    fn tokenize(&self, word: &str, out: &mut Vec<u32>) -> Result<(), String> {
        let unk = || {
            self.vocab
                .get(self.unk_token)
                .copied()
                .ok_or_else(|| format!("the unknown token {:?} is not in the vocabulary", self.unk_token))
        };
        if word.chars().count() > self.max_input_chars_per_word {
            out.push(unk()?);
            return Ok(());
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                let sub = &word[start..end];
                let key = if start > 0 {
                    format!("{}{sub}", self.prefix)
                } else {
                    sub.to_string()
                };
                if let Some(&id) = self.vocab.get(&key) {
                    found = Some(id);
                    break;
                }
                end -= sub.chars().next_back().map_or(1, char::len_utf8);
            }
            match found {
                Some(id) => pieces.push(id),
                None => {
                    out.push(unk()?);
                    return Ok(());
                }
            }
            start = end;
        }
        out.extend(pieces);
        Ok(())
    }
}

/// The ids `tokenizer.encode(CHKTXT)` gives: normalized, pre-tokenized, WordPiece'd,
/// then wrapped in the post-processor's special tokens (`prefix` and `suffix`).
pub(crate) fn encode_check_text(
    normalizer: &BertNormalizer,
    model: &WordPiece<'_>,
    prefix: &[u32],
    suffix: &[u32],
) -> Result<Vec<u32>, String> {
    let normalized = normalizer.normalize(CHKTXT);
    let mut ids = prefix.to_vec();
    for word in pre_tokenize(&normalized) {
        model.tokenize(word, &mut ids)?;
    }
    ids.extend_from_slice(suffix);
    Ok(ids)
}

/// `chkhsh`: the sha256 of the ids' Python `str()` (`[101, 1031, ...]`).
pub(crate) fn check_hash(ids: &[u32]) -> String {
    let repr = format!("[{}]", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "));
    crate::sha256::hex_digest(repr.as_bytes())
}

/// The pre-tokenizer name `get_vocab_base_pre` gives a fingerprint: its `if`s
/// are not `elif`s, so the last match wins.
pub(crate) fn pre_name(chkhsh: &str) -> Option<&'static str> {
    PRE_HASHES
        .iter()
        .rev()
        .find(|(h, _)| *h == chkhsh)
        .map(|&(_, name)| name)
}

/// The words the check text normalizes and pre-tokenizes to (for the tests).
#[cfg(test)]
pub(crate) fn check_words(normalizer: &BertNormalizer) -> Vec<String> {
    pre_tokenize(&normalizer.normalize(CHKTXT))
        .into_iter()
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNCASED: BertNormalizer = BertNormalizer {
        clean_text: true,
        handle_chinese_chars: true,
        strip_accents: None,
        lowercase: true,
    };

    #[test]
    fn check_text_is_the_scripts() {
        // sha256 of get_vocab_base_pre's chktxt, UTF-8 (computed with Python's hashlib).
        assert_eq!(
            crate::sha256::hex_digest(CHKTXT.as_bytes()),
            "a36179c1e2b1cfcfbfad1dc779addad2ffc778201e4cf0d538bddeafa2c526da"
        );
    }

    #[test]
    fn uncased_words_match_tokenizers() {
        // Printed by the `tokenizers` library (0.23.3) for all-MiniLM-L6-v2's tokenizer.json:
        // normalizer.normalize_str then pre_tokenizer.pre_tokenize_str of chktxt.
        let expected: Vec<String> =
            serde_json::from_str(include_str!("../tests/fixtures/chktxt_words_uncased.json")).expect("fixture is JSON");
        assert_eq!(check_words(&UNCASED), expected);
    }

    #[test]
    fn cased_words_keep_case_and_accents() {
        let cased = BertNormalizer {
            lowercase: false,
            ..UNCASED
        };
        let words = check_words(&cased);
        assert!(words.contains(&"I".to_string()));
        assert!(
            words.iter().any(|w| w.contains('\u{17cb}')),
            "Mn kept without strip_accents"
        );
    }

    #[test]
    fn wordpiece_greedy_longest_match() {
        let vocab: HashMap<String, u32> = [("[UNK]", 0), ("un", 1), ("##aff", 2), ("##able", 3), ("unaff", 4)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let wp = WordPiece {
            vocab: &vocab,
            unk_token: "[UNK]",
            prefix: "##",
            max_input_chars_per_word: 100,
        };
        let mut out = Vec::new();
        wp.tokenize("unaffable", &mut out).unwrap();
        assert_eq!(out, [4, 3]);
        out.clear();
        wp.tokenize("unknown", &mut out).unwrap();
        assert_eq!(out, [0]);
    }

    #[test]
    fn last_match_wins() {
        assert_eq!(
            pre_name("0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f"),
            Some("jina-v2-en")
        );
        assert_eq!(check_hash(&[101, 102]), crate::sha256::hex_digest(b"[101, 102]"));
    }
}
