//! Prompt lookup's drafts, as llama.cpp's `lookup` example makes them with
//! `common/ngram-cache.cpp`: every n-gram of 1 to 4 tokens seen in the prompt and
//! the text so far, with the tokens that followed it and how often. A draft
//! continues the text with the usual follower of its longest n-gram that has been
//! seen often enough, token after token, until no n-gram has one. Only the cache
//! of the current context is kept (llama.cpp's optional dynamic and static caches,
//! read from files, are empty in its `lookup` by default).
//!
//! Also the copy drafter ([`copy_draft`]), which follows one earlier occurrence
//! of the text's last few tokens instead of their usual followers.

use std::collections::HashMap;

/// The shortest and longest n-grams counted (LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX).
pub const NGRAM_MIN: usize = 1;
pub const NGRAM_MAX: usize = 4;
/// Below this many tokens of text, nothing is drafted (LLAMA_NGRAM_STATIC).
const MIN_HISTORY: usize = 2;
/// Per n-gram size (1 to 4): how often the n-gram must have been seen, and the share
/// (in percent) of those sightings its likeliest follower must have, for a draft
/// (llama.cpp's `draft_min_sample_size_lax` and `draft_min_percent_lax`).
const MIN_SIGHTINGS: [u32; NGRAM_MAX] = [2, 2, 1, 1];
const MIN_PERCENT: [u32; NGRAM_MAX] = [66, 50, 50, 50];

/// Pads an n-gram shorter than `NGRAM_MAX` (llama.cpp's LLAMA_TOKEN_NULL), so that
/// n-grams of each size are keys of their own.
const NO_TOKEN: u32 = u32::MAX;

type Ngram = [u32; NGRAM_MAX];

fn ngram(tokens: impl Iterator<Item = u32>) -> Ngram {
    let mut key = [NO_TOKEN; NGRAM_MAX];
    for (slot, token) in key.iter_mut().zip(tokens) {
        *slot = token;
    }
    key
}

/// The n-grams of a text and their followers.
#[derive(Debug, Default, Clone)]
pub struct NgramCache {
    /// Each n-gram's followers with their counts, in the order they were first seen.
    followers: HashMap<Ngram, Vec<(u32, u32)>>,
}

impl NgramCache {
    /// Counts the n-grams that end just before each of the last `new` tokens of
    /// `text`, followed by that token (`common_ngram_cache_update`). `text` may only
    /// grow between calls.
    pub fn update(&mut self, text: &[u32], new: usize) {
        for size in NGRAM_MIN..=NGRAM_MAX {
            for i in text.len().saturating_sub(new).max(size)..text.len() {
                let part = self
                    .followers
                    .entry(ngram(text[i - size..i].iter().copied()))
                    .or_default();
                match part.iter_mut().find(|(token, _)| *token == text[i]) {
                    Some((_, count)) => *count += 1,
                    None => part.push((text[i], 1)),
                }
            }
        }
    }

    /// Up to `n` tokens to follow `text` (`common_ngram_cache_draft` with the
    /// context's cache): each the likely follower of the longest n-gram that ends
    /// the text and the tokens drafted so far.
    pub fn draft(&self, text: &[u32], n: usize) -> Vec<u32> {
        let mut draft: Vec<u32> = Vec::new();
        if text.len() < MIN_HISTORY {
            return draft;
        }
        while draft.len() < n {
            let len = text.len() + draft.len();
            let at = |i: usize| if i < text.len() { text[i] } else { draft[i - text.len()] };
            let next = (NGRAM_MIN..=NGRAM_MAX.min(len))
                .rev()
                .find_map(|size| self.likely_follower(&ngram((len - size..len).map(at)), size));
            match next {
                Some(token) => draft.push(token),
                None => break,
            }
        }
        draft
    }

    /// The n-gram's most frequent follower, if the n-gram was seen often enough and
    /// the follower has the share its size asks for. Ties go to the follower first
    /// seen last: the order in which llama.cpp's `std::unordered_map` (libstdc++)
    /// visits so small a part (a tie at the top with a share of at least half means
    /// two followers).
    fn likely_follower(&self, key: &Ngram, size: usize) -> Option<u32> {
        let part = self.followers.get(key)?;
        let (mut best, mut best_count, mut sightings) = (NO_TOKEN, 0, 0);
        for &(token, count) in part.iter().rev() {
            if count > best_count {
                (best, best_count) = (token, count);
            }
            sightings += count;
        }
        let enough = sightings >= MIN_SIGHTINGS[size - 1] && 100 * best_count >= MIN_PERCENT[size - 1] * sightings;
        enough.then_some(best)
    }
}

/// How many of the text's last tokens the copy drafter looks for (llama.cpp's
/// `ngram-simple` takes 12 by default; 3 found more of our edits' copied stretches).
pub const COPY_NGRAM: usize = 3;

/// The copy drafter (llama.cpp's `ngram-simple` speculation): the up to `n` tokens
/// that followed the most recent earlier occurrence of the text's last
/// [`COPY_NGRAM`] tokens. When the model is rewriting or quoting what the prompt
/// holds, that occurrence is where it is copying from, and the draft is the rest
/// of the stretch.
pub fn copy_draft(text: &[u32], n: usize) -> Vec<u32> {
    let len = text.len();
    if n == 0 || len <= COPY_NGRAM {
        return Vec::new();
    }
    let suffix = &text[len - COPY_NGRAM..];
    (0..len - COPY_NGRAM)
        .rev()
        .find(|&start| &text[start..start + COPY_NGRAM] == suffix)
        .map(|start| {
            let from = start + COPY_NGRAM;
            text[from..len.min(from + n)].to_vec()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_drafts_follow_the_latest_earlier_occurrence() {
        // "a b c" occurs at 0 and 5; the text ends with it again at 10.
        let text = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3];
        assert_eq!(copy_draft(&text, 4), [7, 8, 1, 2]);
        assert_eq!(copy_draft(&text, 1), [7]);
        // The draft stops at the end of the text.
        assert_eq!(copy_draft(&[5, 6, 7, 5, 6, 7, 5, 6, 7], 8), [5, 6, 7]);
        // No earlier occurrence, too short a text, nothing asked.
        assert!(copy_draft(&[1, 2, 3, 4, 5, 6], 4).is_empty());
        assert!(copy_draft(&[1, 2, 3], 4).is_empty());
        assert!(copy_draft(&text, 0).is_empty());
    }

    fn cache(text: &[u32]) -> NgramCache {
        let mut cache = NgramCache::default();
        cache.update(text, text.len());
        cache
    }

    #[test]
    fn drafts_what_followed_the_longest_matching_ngram() {
        // "1 2 3" was followed by "4 5 9", and so on: the draft copies the text.
        let text = [1, 2, 3, 4, 5, 9, 1, 2, 3];
        assert_eq!(cache(&text).draft(&text, 8), [4, 5, 9, 1, 2, 3, 4, 5]);
        assert_eq!(cache(&text).draft(&text, 1), [4]);
        assert!(cache(&text).draft(&text, 0).is_empty());
    }

    #[test]
    fn a_one_gram_needs_two_sightings_and_two_thirds_of_them() {
        // 7 was followed by 8 once: too few sightings for a 1-gram.
        assert!(cache(&[7, 8, 1, 7]).draft(&[7, 8, 1, 7], 4).is_empty());
        // Twice by 8: drafted; then "8" was followed by 1 and 2 (no majority for a 1-gram),
        // but the 2-gram "7 8" was followed by 1 once and 2 once, a tie at half: the later wins.
        let text = [7, 8, 1, 7, 8, 2, 7];
        assert_eq!(cache(&text).draft(&text, 4), [8, 2, 7, 8]);
    }

    #[test]
    fn counts_grow_as_the_text_grows() {
        let mut text = vec![5, 6, 5];
        let mut ngrams = cache(&text);
        assert_eq!(ngrams.draft(&text, 2), Vec::<u32>::new());
        text.push(6);
        ngrams.update(&text, 1);
        text.push(5);
        ngrams.update(&text, 1);
        // "5 6 5" was followed by 6, "5 6 5 6" by 5.
        assert_eq!(ngrams.draft(&text, 3), [6, 5, 6]);
        // Every n-gram of the five tokens with its follower: 4 + 3 + 2 + 1.
        let sightings: u32 = ngrams.followers.values().flatten().map(|f| f.1).sum();
        assert_eq!(sightings, 10);
    }

    #[test]
    fn short_texts_draft_nothing() {
        assert!(cache(&[3]).draft(&[3], 4).is_empty());
    }
}
