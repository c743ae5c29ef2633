//! SentencePiece-style merging as llama.cpp's `llm_tokenizer_spm_session` runs
//! it: start from single chars, repeatedly merge the adjacent pair whose
//! concatenation is the highest-scoring token, fall back to `<0xXX>` bytes.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::vocab::Vocab;

/// Tokenizes `text`, whose spaces the caller has already turned into `▁`.
/// `byte_tokens[b]` is the token for byte `b`, `None` where the vocabulary
/// lacks one (llama.cpp throws there; the byte is dropped here).
pub(crate) fn tokenize(vocab: &Vocab, byte_tokens: &[Option<u32>; 256], text: &str, out: &mut Vec<u32>) {
    let mut symbols: Vec<Symbol> = text
        .char_indices()
        .enumerate()
        .map(|(i, (start, c))| Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: None,
        })
        .collect();
    let count = symbols.len();
    for (i, s) in symbols.iter_mut().enumerate() {
        s.next = (i + 1 < count).then_some(i + 1);
    }

    let mut queue = BinaryHeap::new();
    let push = |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize, right: usize| {
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        if let Some(id) = vocab.id(&text[start..start + size]) {
            queue.push(Bigram {
                score: vocab.scores[id as usize],
                left,
                right,
                size,
            });
        }
    };
    for i in 1..count {
        push(&mut queue, &symbols, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        if symbols[b.left].len == 0 || symbols[b.right].len == 0 || symbols[b.left].len + symbols[b.right].len != b.size
        {
            continue;
        }
        symbols[b.left].len = b.size;
        symbols[b.right].len = 0;
        symbols[b.left].next = symbols[b.right].next;
        if let Some(next) = symbols[b.right].next {
            symbols[next].prev = Some(b.left);
        }
        if let Some(prev) = symbols[b.left].prev {
            push(&mut queue, &symbols, prev, b.left);
        }
        if let Some(next) = symbols[b.left].next {
            push(&mut queue, &symbols, b.left, next);
        }
    }

    // llama.cpp "resegments" each final symbol through its merge history, but
    // a merged symbol is always a token (that is what let it merge), and a
    // lone char never matches a recorded merge, so each symbol is either a
    // token or bytes.
    for s in symbols.iter().filter(|s| s.len > 0) {
        let piece = &text[s.start..s.start + s.len];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| byte_tokens[usize::from(b)])),
        }
    }
}

struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Ord for Bigram {
    /// The heap pops the highest score, then the leftmost pair; scores that
    /// compare equal under `<` (as in llama.cpp's comparator) tie.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}
