//! WordPiece as llama.cpp's `llm_tokenizer_wpm_session` runs it (BERT):
//! normalize and cut the text into words, then take the longest tokens from
//! the left of `▁` + word; a word with a gap becomes one unknown token.

use crate::unicode::{code_points, nfd_first, push_utf8, to_lower, Flags};
use crate::vocab::Vocab;

/// Put before every word, as a SentencePiece-style word start.
const PHANTOM_SPACE: &str = "\u{2581}";

/// Tokenizes one text fragment into `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) {
    let unk = vocab.unk.expect("checked when the tokenizer was built");
    for word in preprocess(&code_points(text), vocab.lowercase, vocab.strip_accents) {
        let word = [PHANTOM_SPACE.as_bytes(), &word].concat();
        let start = out.len();
        let mut i = 0;
        while i < word.len() {
            let longest = (i + 1..=word.len().min(i + vocab.max_token_len + 1))
                .rev()
                .find_map(|j| vocab.id(&word[i..j]).map(|id| (id, j)));
            match longest {
                Some((id, end)) => {
                    out.push(id);
                    i = end;
                }
                // A gap: the whole word is unknown.
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.push(unk);
        }
    }
}

/// `llm_tokenizer_wpm_session::preprocess`: BERT's normalizer (accents
/// stripped through llama.cpp's one-code-point "NFD", lowercased, controls
/// dropped) and its splitting: whitespace separates words, and punctuation,
/// ASCII symbols and CJK ideographs are words of their own.
fn preprocess(cpts: &[u32], lowercase: bool, strip_accents: bool) -> Vec<Vec<u8>> {
    let mut words = vec![Vec::new()];
    for &cpt in cpts {
        let cpt = if strip_accents { nfd_first(cpt) } else { cpt };
        let flags = Flags::of_code_point(cpt);
        if flags.is_whitespace() {
            if !words.last().expect("never empty").is_empty() {
                words.push(Vec::new());
            }
            continue;
        }
        if cpt == 0 || cpt == 0xFFFD || flags.is_control() || (strip_accents && flags.is_accent_mark()) {
            continue;
        }
        let shown = if lowercase { to_lower(cpt) } else { cpt };
        let last = words.last_mut().expect("never empty");
        if flags.is_punctuation() || (cpt < 0x7F && flags.is_symbol()) || is_chinese_char(cpt) {
            if !last.is_empty() {
                words.push(Vec::new());
            }
            push_utf8(shown, words.last_mut().expect("never empty"));
            words.push(Vec::new());
        } else {
            push_utf8(shown, last);
        }
    }
    if words.last().is_some_and(Vec::is_empty) {
        words.pop();
    }
    words
}

/// `is_chinese_char`, with llama.cpp's (and Hugging Face's) 0x2B920.
fn is_chinese_char(cpt: u32) -> bool {
    matches!(cpt,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::preprocess;

    fn words(text: &str, lowercase: bool, strip_accents: bool) -> Vec<String> {
        let cpts: Vec<u32> = text.chars().map(u32::from).collect();
        preprocess(&cpts, lowercase, strip_accents)
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect()
    }

    #[test]
    fn preprocess_splits_like_bert() {
        assert_eq!(
            words("Héllo, WORLD!  a$b 中文", true, true),
            ["hello", ",", "world", "!", "a", "$", "b", "中", "文"]
        );
        assert_eq!(words("Héllo", false, false), ["Héllo"]);
    }
}
