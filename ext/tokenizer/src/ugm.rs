//! Unigram (T5) as llama.cpp's `llm_tokenizer_ugm` runs it: normalize the
//! text through SentencePiece's precompiled charsmap, then pick the
//! tokenization of best total score with a Viterbi pass over byte offsets;
//! code points no token covers become unknown tokens (runs of them, one).

use std::collections::HashMap;

use crate::unicode::{code_point_at, utf8_len};
use crate::vocab::{Vocab, NORMAL, UNUSED, USER_DEFINED};
use crate::TokenizerError;

/// `naive_trie`: children by byte, an optional token at each node.
#[derive(Default)]
struct Trie {
    nodes: Vec<TrieNode>,
}

#[derive(Default)]
struct TrieNode {
    children: HashMap<u8, usize>,
    value: Option<u32>,
}

impl Trie {
    fn new() -> Trie {
        Trie {
            nodes: vec![TrieNode::default()],
        }
    }

    fn insert(&mut self, key: &[u8], value: u32) {
        let mut node = 0;
        for &b in key {
            node = match self.nodes[node].children.get(&b) {
                Some(&child) => child,
                None => {
                    self.nodes.push(TrieNode::default());
                    let child = self.nodes.len() - 1;
                    self.nodes[node].children.insert(b, child);
                    child
                }
            };
        }
        self.nodes[node].value = Some(value);
    }

    fn child(&self, node: usize, b: u8) -> Option<usize> {
        self.nodes[node].children.get(&b).copied()
    }

    /// `get_longest_prefix`: how far `key` follows the trie's paths, whether
    /// or not a token ends there.
    fn longest_path(&self, key: &[u8]) -> usize {
        let mut node = 0;
        let mut depth = 0;
        while let Some(child) = key.get(depth).and_then(|&b| self.child(node, b)) {
            node = child;
            depth += 1;
        }
        depth
    }
}

/// SentencePiece's precompiled normalizer: a XOR-compressed compact double
/// array over input bytes whose leaves index NUL-terminated replacements.
struct Charsmap {
    xcda: Vec<u32>,
    replacements: Vec<u8>,
}

impl Charsmap {
    /// The blob: its double array's size in bytes (u32, little-endian), the
    /// array, then the replacement strings. Checked as llama.cpp's `load` does.
    fn parse(blob: &[u8]) -> Result<Option<Charsmap>, TokenizerError> {
        if blob.is_empty() {
            return Ok(None);
        }
        let size = blob
            .get(..4)
            .ok_or(TokenizerError::Charsmap("too small for its size header"))?;
        let size = u32::from_le_bytes(size.try_into().expect("four bytes")) as usize;
        if size + 4 >= blob.len() {
            return Err(TokenizerError::Charsmap("its double array runs past the end"));
        }
        let xcda = blob[4..4 + size]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("four bytes")))
            .collect();
        Ok(Some(Charsmap {
            xcda,
            replacements: blob[4 + size..].to_vec(),
        }))
    }

    /// llama.cpp throws on an index past the array; here the walk stops.
    fn node(&self, index: usize) -> Option<u32> {
        self.xcda.get(index).copied()
    }

    /// The longest input prefix at `input` with a replacement: its length
    /// and the replacement (`normalize_prefix`'s XCDA walk).
    fn longest_match(&self, input: &[u8]) -> Option<(usize, &[u8])> {
        let base = |packed: u32| (packed >> 10) << ((packed & (1 << 9)) >> 6);
        let lcheck = |packed: u32| packed & ((1 << 31) | 0xFF);
        let leaf = |packed: u32| (packed >> 8) & 1 == 1;
        let value = |packed: u32| packed & ((1 << 31) - 1);

        let mut node_index = base(self.node(0)?) as usize;
        let mut found = None;
        for (offset, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            node_index ^= usize::from(c);
            let Some(packed) = self.node(node_index) else { break };
            if lcheck(packed) != u32::from(c) {
                break;
            }
            let is_leaf = leaf(packed);
            node_index ^= base(packed) as usize;
            if is_leaf {
                let Some(target) = self.node(node_index) else { break };
                found = Some((offset + 1, value(target) as usize));
            }
        }
        let (length, at) = found?;
        // llama.cpp throws on an offset or a string past the end; such a
        // replacement is taken as no match here.
        let tail = self.replacements.get(at..)?;
        let end = tail.iter().position(|&b| b == 0)?;
        Some((length, &tail[..end]))
    }
}

pub(crate) struct Unigram {
    charsmap: Option<Charsmap>,
    /// Normal, user-defined and unused tokens.
    tokens: Trie,
    user_defined: Trie,
    unk: u32,
    unknown_score: f64,
}

impl Unigram {
    /// `attrs` are the token types' attributes: llama.cpp builds this
    /// tokenizer before `load` patches any (so a control token named
    /// "unused" is not matched, one typed unused is).
    pub(crate) fn new(vocab: &Vocab, attrs: &[u32], unk: u32, charsmap: &[u8]) -> Result<Unigram, TokenizerError> {
        let mut tokens = Trie::new();
        let mut user_defined = Trie::new();
        let mut min_score = f32::MAX;
        for (id, text) in vocab.texts.iter().enumerate() {
            let attr = attrs[id];
            if attr & NORMAL != 0 {
                min_score = min_score.min(vocab.scores[id]);
            }
            if attr & (NORMAL | USER_DEFINED | UNUSED) != 0 {
                tokens.insert(text.as_bytes(), id as u32);
            }
            if attr & USER_DEFINED != 0 {
                user_defined.insert(text.as_bytes(), id as u32);
            }
        }
        Ok(Unigram {
            charsmap: Charsmap::parse(charsmap)?,
            tokens,
            user_defined,
            unk,
            // In f32, as llama.cpp computes it.
            unknown_score: f64::from(min_score - 10.0),
        })
    }

    /// `llm_tokenizer_ugm_session::tokenize` of one text fragment.
    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) {
        let normalized = self.normalize(vocab, text);
        let len = normalized.len();
        if len == 0 {
            return;
        }

        struct Best {
            id: u32,
            start: usize,
            score: f64,
        }
        let mut best: Vec<Best> = (0..=len)
            .map(|_| Best {
                id: self.unk,
                start: 0,
                score: -f64::MAX,
            })
            .collect();
        best[0].score = 0.0;

        let mut start = 0;
        while start < len {
            let char_len = utf8_len(normalized[start]).min(len - start);
            let base = best[start].score;
            let mut single_char_token = false;
            let mut node = self.tokens.child(0, normalized[start]);
            let mut end = start + 1;
            while let Some(n) = node {
                if let Some(id) = self.tokens.nodes[n].value {
                    if end - start == char_len {
                        single_char_token = true;
                    }
                    // User-defined tokens score 0, the best a log probability can.
                    let score = if vocab.attrs[id as usize] & USER_DEFINED != 0 {
                        0.0
                    } else {
                        f64::from(vocab.scores[id as usize])
                    };
                    if base + score > best[end].score {
                        best[end] = Best {
                            id,
                            start,
                            score: base + score,
                        };
                    }
                }
                node = normalized.get(end).and_then(|&b| self.tokens.child(n, b));
                end += 1;
            }
            if !single_char_token {
                let end = start + char_len;
                let score = base + self.unknown_score;
                if score > best[end].score {
                    best[end] = Best {
                        id: self.unk,
                        start,
                        score,
                    };
                }
            }
            start += char_len;
        }

        // Back from the end; a run of unknown tokens gives one.
        let first = out.len();
        let mut at = len;
        let mut previous_unknown = false;
        loop {
            let step = &best[at];
            let unknown = step.id == self.unk;
            if !(previous_unknown && unknown) {
                out.push(step.id);
            }
            if step.start == 0 {
                break;
            }
            previous_unknown = unknown;
            at = step.start;
        }
        out[first..].reverse();
    }

    /// `normalize`: the charsmap's replacements (user-defined tokens pass
    /// through untouched), spaces escaped to `▁`, a space prefix added or
    /// whitespace runs merged as the vocabulary asks.
    fn normalize(&self, vocab: &Vocab, input: &[u8]) -> Vec<u8> {
        let space: &[u8] = if vocab.escape_whitespaces {
            "\u{2581}".as_bytes()
        } else {
            b" "
        };
        // llama.cpp's treat_whitespace_as_suffix is never set, so the space
        // is always a prefix.
        let prepend_space = vocab.add_space_prefix;
        let merge_spaces = vocab.remove_extra_whitespaces;

        let mut out = Vec::with_capacity(input.len() * 3);
        let mut space_prepended = false;
        let mut in_word = false;
        let mut offset = 0;
        while offset < input.len() {
            let (piece, consumed) = self.normalize_prefix(&input[offset..]);
            for &c in piece {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (prepend_space && !space_prepended) || merge_spaces {
                            out.extend_from_slice(space);
                            space_prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !merge_spaces {
                        out.extend_from_slice(space);
                    }
                }
            }
            offset += consumed;
        }
        out
    }

    /// `normalize_prefix`: what the input at hand becomes, and how much of it
    /// that consumes.
    fn normalize_prefix<'a>(&'a self, input: &'a [u8]) -> (&'a [u8], usize) {
        let user_defined = self.user_defined.longest_path(input);
        if user_defined > 0 {
            return (&input[..user_defined], user_defined);
        }
        if let Some((length, replacement)) = self.charsmap.as_ref().and_then(|c| c.longest_match(input)) {
            return (replacement, length);
        }
        // One code point as it is, or one byte that starts none as U+FFFD.
        match code_point_at(input) {
            Some((_, length)) => (&input[..length], length),
            None => ("\u{FFFD}".as_bytes(), 1),
        }
    }
}
