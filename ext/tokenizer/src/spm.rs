//! SentencePiece-style merging as llama.cpp's `llm_tokenizer_spm_session` runs
//! it: start from single chars, repeatedly merge the adjacent pair whose
//! concatenation is the highest-scoring token, fall back to `<0xXX>` bytes.

use crate::merge::merge;
use crate::vocab::Vocab;

/// Tokenizes `text`, whose spaces the caller has already turned into `▁`.
/// `byte_tokens[b]` is the token for byte `b`, `None` where the vocabulary
/// lacks one (llama.cpp throws there; the byte is dropped here).
pub(crate) fn tokenize(vocab: &Vocab, byte_tokens: &[Option<u32>; 256], text: &[u8], out: &mut Vec<u32>) {
    let symbols = merge(text, |_, _, joined| {
        vocab.id(joined).map(|id| vocab.scores[id as usize])
    });

    // llama.cpp "resegments" each final symbol through its merge history, but
    // a merged symbol is always a token (that is what let it merge), and a
    // lone char never matches a recorded merge, so each symbol is either a
    // token or bytes.
    for range in symbols {
        let piece = &text[range];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.iter().filter_map(|&b| byte_tokens[usize::from(b)])),
        }
    }
}
