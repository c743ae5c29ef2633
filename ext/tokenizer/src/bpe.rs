//! Byte-level BPE as llama.cpp's `llm_tokenizer_bpe_session` runs it for the
//! `qwen2` and `llama3` pre-tokenizers.
//!
//! The split is a port of llama.cpp's `unicode_regex_split_custom_qwen2` (and
//! `_llama3`, the same matcher with digits in runs of up to three), not a regex: llama.cpp itself does not run the pattern through a regex engine
//! for this pre-tokenizer but through that hand-written matcher, over its own
//! Unicode tables (`unicode_data.rs`), and a regex crate classifies code
//! points by a different Unicode version.

use std::cmp::Reverse;
use std::collections::HashMap;

use crate::merge::merge;
use crate::unicode::{ByteLevel, Flags};
use crate::vocab::Vocab;

/// The pre-tokenizers elelem has, by the `tokenizer.ggml.pre` names llama.cpp maps to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pre {
    Qwen2,
    Llama3,
}

impl Pre {
    pub fn from_name(name: &str) -> Option<Pre> {
        match name {
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => Some(Pre::Qwen2),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
            | "jina-v5-nano" => Some(Pre::Llama3),
            _ => None,
        }
    }

    /// The longest run of digits one word holds.
    fn max_digits(self) -> usize {
        match self {
            Pre::Qwen2 => 1,
            Pre::Llama3 => 3,
        }
    }

    /// llama.cpp's `ignore_merges`: a word that is a token is that token, unmerged.
    fn ignore_merges(self) -> bool {
        self == Pre::Llama3
    }

    /// Whether BOS is added unless `tokenizer.ggml.add_bos_token` says otherwise.
    pub(crate) fn adds_bos(self) -> bool {
        self == Pre::Llama3
    }
}

pub(crate) struct Bpe {
    pre: Pre,
    /// Every string that appears on either side of a merge, interned.
    pieces: HashMap<String, u32>,
    /// `(left, right)` interned → rank (the merge's line number).
    ranks: HashMap<(u32, u32), u32>,
    byte_level: ByteLevel,
}

impl Bpe {
    pub(crate) fn new(pre: Pre, merges: &[String]) -> Bpe {
        let mut pieces = HashMap::new();
        let mut ranks = HashMap::with_capacity(merges.len());
        for (rank, merge) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte; a line
            // without one maps ("", "") and so can never apply.
            let Some(space) = merge.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let mut intern = |s: &str| {
                let next = pieces.len() as u32;
                *pieces.entry(s.to_owned()).or_insert(next)
            };
            let pair = (intern(&merge[..space]), intern(&merge[space + 1..]));
            // The first rank wins, as with llama.cpp's unordered_map::emplace.
            ranks.entry(pair).or_insert(rank as u32);
        }
        Bpe {
            pre,
            pieces,
            ranks,
            byte_level: ByteLevel::new(),
        }
    }

    pub(crate) fn byte_level(&self) -> &ByteLevel {
        &self.byte_level
    }

    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut encoded = String::new();
        for word in split(text, self.pre.max_digits()) {
            encoded.clear();
            self.byte_level.encode(word.as_bytes(), &mut encoded);
            self.merge_word(vocab, &encoded, out);
        }
    }

    fn rank(&self, left: &str, right: &str) -> Option<u32> {
        let pair = (*self.pieces.get(left)?, *self.pieces.get(right)?);
        self.ranks.get(&pair).copied()
    }

    fn merge_word(&self, vocab: &Vocab, word: &str, out: &mut Vec<u32>) {
        if self.pre.ignore_merges() {
            if let Some(id) = vocab.id(word) {
                out.push(id);
                return;
            }
        }
        // Lower ranks merge first.
        let symbols = merge(word, |left, right, _| self.rank(left, right).map(Reverse));
        for range in symbols {
            let text = &word[range];
            match vocab.id(text) {
                Some(id) => out.push(id),
                // Only when the vocabulary lacks a byte char or a merge's
                // result; llama.cpp then looks up each byte alone and drops
                // the ones it lacks.
                None => out.extend(
                    text.bytes()
                        .filter_map(|b| std::str::from_utf8(&[b]).ok().and_then(|s| vocab.id(s))),
                ),
            }
        }
    }
}

/// `unicode_regex_split_custom_qwen2` (`max_digits` 1) and `_llama3` (3): the words
/// of the pattern
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
/// matched the way llama.cpp's matcher does.
pub(crate) fn split(text: &str, max_digits: usize) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let flags: Vec<Flags> = chars.iter().map(|&(_, c)| Flags::of(c)).collect();
    let n = chars.len();
    let cpt = |pos: usize| chars.get(pos).map(|&(_, c)| c);
    let flag = |pos: usize| flags.get(pos).copied().unwrap_or_default();
    let byte_at = |pos: usize| chars.get(pos).map_or(text.len(), |&(b, _)| b);
    let is_newline = |c: Option<char>| matches!(c, Some('\r' | '\n'));

    let mut words = Vec::new();
    let mut pos = 0;
    while pos < n {
        let start = pos;
        let c = chars[pos].1;
        let f = flags[pos];
        pos = 'matched: {
            if c == '\'' && pos + 1 < n {
                let next = contraction_letter(cpt(pos + 1));
                if matches!(next, Some('s' | 't' | 'm' | 'd')) {
                    break 'matched pos + 2;
                }
                if pos + 2 < n {
                    let next_next = contraction_letter(cpt(pos + 2));
                    if matches!(
                        (next, next_next),
                        (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
                    ) {
                        break 'matched pos + 3;
                    }
                }
            }

            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(c == '\r' || c == '\n' || f.is_number()) && (f.is_letter() || flag(pos + 1).is_letter()) {
                let mut end = pos + 1;
                while flag(end).is_letter() {
                    end += 1;
                }
                break 'matched end;
            }

            // \p{N}{1,max_digits}
            if f.is_number() {
                let mut end = pos + 1;
                while end - pos < max_digits && flag(end).is_number() {
                    end += 1;
                }
                break 'matched end;
            }

            // <space>?[^\s\p{L}\p{N}]+[\r\n]*
            let mut f2 = if c == ' ' { flag(pos + 1) } else { f };
            let other = |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.is_set();
            if !(f2.is_whitespace() || f2.is_letter() || f2.is_number()) && f.is_set() {
                let mut end = pos + usize::from(c == ' ');
                while other(f2) {
                    end += 1;
                    f2 = flag(end);
                }
                while is_newline(cpt(end)) {
                    end += 1;
                }
                break 'matched end;
            }

            let mut spaces = 0;
            let mut last_newline_end = None;
            while flag(pos + spaces).is_whitespace() {
                if is_newline(cpt(pos + spaces)) {
                    last_newline_end = Some(pos + spaces + 1);
                }
                spaces += 1;
            }
            // \s*[\r\n]+
            if let Some(end) = last_newline_end {
                break 'matched end;
            }
            // \s+(?!\S)
            if spaces > 1 && pos + spaces < n {
                break 'matched pos + spaces - 1;
            }
            // \s+
            if spaces > 0 {
                break 'matched pos + spaces;
            }
            pos + 1
        };
        words.push(&text[byte_at(start)..byte_at(pos)]);
    }
    words
}

/// `unicode_tolower` as the contraction test uses it: in llama.cpp's table
/// only A–Z lower to the letters it compares with (the table generator
/// checks), so ASCII lowering gives the same answers.
fn contraction_letter(c: Option<char>) -> Option<char> {
    c.map(|c| c.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_follows_llama_cpp() {
        assert_eq!(split("Hello world", 1), ["Hello", " world"]);
        assert_eq!(split("I'M here, they'Ll", 1), ["I", "'M", " here", ",", " they", "'Ll"]);
        assert_eq!(split("x  = 12", 1), ["x", " ", " =", " ", "1", "2"]);
        assert_eq!(split("a \n\n b", 1), ["a", " \n\n", " b"]);
        assert_eq!(split("end   ", 1), ["end", "   "]);
        assert_eq!(split("\tif", 1), ["\tif"]);
        assert_eq!(split("e\u{301}t", 1), ["e", "\u{301}t"]);
        assert_eq!(split("e\u{301}\u{302} x", 1), ["e", "\u{301}\u{302}", " x"]);
        assert_eq!(split("'", 1), ["'"]);
        assert_eq!(split("?!\r\nok", 1), ["?!\r\n", "ok"]);
        assert_eq!(split("", 1), Vec::<&str>::new());
    }
}
