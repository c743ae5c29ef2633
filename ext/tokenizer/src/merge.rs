//! The merge loop byte-level BPE and SentencePiece share (llama.cpp runs the
//! same one in both tokenizer sessions): start from single characters (as
//! `unicode_len_utf8` delimits them, so any bytes will do), repeatedly merge
//! the adjacent pair of best priority (ties: the leftmost), and return the
//! final symbols as byte ranges of the text.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Range;

use crate::unicode::utf8_len;

struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram<P> {
    priority: P,
    left: usize,
    right: usize,
    size: usize,
}

impl<P: PartialOrd> Ord for Bigram<P> {
    /// The heap pops the best priority, then the leftmost pair; priorities that
    /// do not compare (NaN scores) tie, as under llama.cpp's `<` comparators.
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .partial_cmp(&other.priority)
            .unwrap_or(Ordering::Equal)
            .then(other.left.cmp(&self.left))
    }
}

impl<P: PartialOrd> PartialOrd for Bigram<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<P: PartialOrd> PartialEq for Bigram<P> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<P: PartialOrd> Eq for Bigram<P> {}

/// Merges `text`'s characters. `priority(left, right, joined)` says how good
/// merging two adjacent symbols is (greater is better), or `None` if they may
/// not merge.
pub(crate) fn merge<P: PartialOrd>(
    text: &[u8],
    priority: impl Fn(&[u8], &[u8], &[u8]) -> Option<P>,
) -> Vec<Range<usize>> {
    let mut symbols = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let len = utf8_len(text[start]).min(text.len() - start);
        symbols.push(Symbol {
            start,
            len,
            prev: symbols.len().checked_sub(1),
            next: None,
        });
        start += len;
    }
    let count = symbols.len();
    for (i, s) in symbols.iter_mut().enumerate() {
        s.next = (i + 1 < count).then_some(i + 1);
    }

    let mut queue = BinaryHeap::new();
    let push = |queue: &mut BinaryHeap<Bigram<P>>, symbols: &[Symbol], left: usize, right: usize| {
        let (l, r) = (&symbols[left], &symbols[right]);
        let size = l.len + r.len;
        let slice = |start: usize, len: usize| &text[start..start + len];
        if let Some(priority) = priority(slice(l.start, l.len), slice(r.start, r.len), slice(l.start, size)) {
            queue.push(Bigram {
                priority,
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
        // A merge elsewhere invalidated this pair. Symbols only grow, so
        // comparing the size is the same test as llama.cpp's text compare.
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
    symbols
        .iter()
        .filter(|s| s.len > 0)
        .map(|s| s.start..s.start + s.len)
        .collect()
}
