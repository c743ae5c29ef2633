//! The token texts: one string for all of them and a table of ids keyed by
//! text, instead of a `String` per token and a map holding another copy of
//! each. Gemma 3's 262,144 tokens take ~3.5 MB this way rather than ~30 MB.

use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};

use crate::TokenizerError;

pub(crate) struct Texts {
    all: String,
    /// Text `id` is `all[ends[id - 1]..ends[id]]` (from 0 for id 0).
    ends: Vec<u32>,
    ids: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl Texts {
    /// Fails on a repeated text: llama.cpp's `token_to_id` would keep one id of
    /// the two, and tokenizing would never produce the other.
    pub(crate) fn new<S: AsRef<str>>(texts: impl ExactSizeIterator<Item = S>) -> Result<Texts, TokenizerError> {
        let mut t = Texts {
            all: String::new(),
            ends: Vec::with_capacity(texts.len()),
            ids: HashTable::with_capacity(texts.len()),
            hasher: DefaultHashBuilder::default(),
        };
        for text in texts {
            let text = text.as_ref();
            let id = t.ends.len() as u32;
            t.all.push_str(text);
            let end = u32::try_from(t.all.len()).map_err(|_| TokenizerError::TooLarge)?;
            t.ends.push(end);
            let hash = t.hasher.hash_one(text.as_bytes());
            let (all, ends) = (&t.all, &t.ends);
            let same = |&other: &u32| slice(all, ends, other) == text;
            let rehash = |&other: &u32| t.hasher.hash_one(slice(all, ends, other).as_bytes());
            match t.ids.entry(hash, same, rehash) {
                Entry::Occupied(_) => return Err(TokenizerError::DuplicateTokens),
                Entry::Vacant(slot) => {
                    slot.insert(id);
                }
            }
        }
        Ok(t)
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The id of the token with these bytes (texts hash as bytes, so any
    /// byte string can be looked up).
    pub(crate) fn id(&self, text: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(text);
        self.ids
            .find(hash, |&id| self.get(id as usize).as_bytes() == text)
            .copied()
    }

    pub(crate) fn get(&self, id: usize) -> &str {
        slice(&self.all, &self.ends, id as u32)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|id| self.get(id))
    }
}

impl std::ops::Index<usize> for Texts {
    type Output = str;

    fn index(&self, id: usize) -> &str {
        self.get(id)
    }
}

fn slice<'a>(all: &'a str, ends: &[u32], id: u32) -> &'a str {
    let id = id as usize;
    let start = if id == 0 { 0 } else { ends[id - 1] as usize };
    &all[start..ends[id] as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_text_and_refuses_repeats() {
        let words = ["a", "", "bc", "日本", "a b"];
        let texts = Texts::new(words.iter().copied()).unwrap();
        assert_eq!(texts.len(), 5);
        for (id, word) in words.iter().enumerate() {
            assert_eq!(&texts[id], *word);
            assert_eq!(texts.id(word.as_bytes()), Some(id as u32));
        }
        assert_eq!(texts.id(b"b"), None);
        assert_eq!(texts.id(b"\xFF"), None);
        assert_eq!(texts.iter().collect::<Vec<_>>(), words);
        assert!(matches!(
            Texts::new(["x", "y", "x"].into_iter()),
            Err(TokenizerError::DuplicateTokens)
        ));
    }
}
