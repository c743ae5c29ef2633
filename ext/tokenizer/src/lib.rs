//! Tokenizers that give the token ids of llama.cpp's `llama_tokenize` and the
//! bytes of its `llama_token_to_piece` / `llama_detokenize`, for the two
//! vocabulary kinds elelem runs:
//!
//! * `gpt2` byte-level BPE with the `qwen2` pre-tokenizer (Qwen2.5), and
//! * `llama` SentencePiece-style vocabularies (Gemma 3).
//!
//! Other `tokenizer.ggml.model` / `tokenizer.ggml.pre` values are refused
//! rather than approximated.
//!
//! The algorithms are hand-written ports of llama.cpp's `src/llama-vocab.cpp`
//! and `src/unicode.cpp` (llama-cpp-sys-2 0.1.161). Libraries such as
//! `tokenizers` implement the upstream (Hugging Face / SentencePiece)
//! semantics, which llama.cpp does not reproduce exactly: it splits special
//! tokens out of the text first with its own rules and its own attribute
//! patches, splits words with a hand-written matcher over its own Unicode
//! tables, merges SentencePiece pairs by score alone, and renders pieces its
//! own way. Matching llama.cpp is the requirement, so its code is mirrored.

mod bpe;
mod merge;
mod spm;
mod stream;
mod texts;
mod unicode;
mod unicode_data;
mod vocab;

use std::ops::Range;

use aho_corasick::AhoCorasick;

pub use stream::Utf8Stream;

use bpe::Bpe;
pub use bpe::Pre;
use vocab::{Vocab, BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF metadata has no `{0}`")]
    MissingKey(&'static str),
    #[error("GGUF metadata `{0}` has the wrong type")]
    WrongType(&'static str),
    #[error("`tokenizer.ggml.{0}` has fewer entries than there are tokens")]
    ShortArray(&'static str),
    #[error("tokenizer.ggml.model {0:?} is not supported (only \"gpt2\" and \"llama\")")]
    UnsupportedModel(String),
    #[error("tokenizer.ggml.pre {0:?} is not supported for gpt2 vocabularies (only qwen2 and llama3 and their kin)")]
    UnsupportedPre(String),
    #[error("llama.cpp gives this model ({0}) token attributes that are not implemented")]
    UnsupportedAttributes(String),
    #[error("the vocabulary holds the same token text twice")]
    DuplicateTokens,
    #[error("the token texts add up to more than 4 GiB")]
    TooLarge,
    #[error("the vocabulary asks for a {0} token but has none")]
    MissingSpecial(&'static str),
    #[error("cannot index the special tokens: {0}")]
    SpecialTokenIndex(#[from] aho_corasick::BuildError),
}

/// A vocabulary as plain data: what [`Tokenizer::from_gguf`] reads from the
/// `tokenizer.ggml.*` metadata. `None` means the key is absent.
#[derive(Debug, Clone, Default)]
pub struct VocabSpec {
    pub kind: VocabKind,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    pub token_types: Option<Vec<i32>>,
    pub ids: SpecialIds,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
}

#[derive(Debug, Clone, Default)]
pub enum VocabKind {
    /// `tokenizer.ggml.model = "gpt2"`, with `tokenizer.ggml.pre` and `.merges`.
    Bpe { pre: String, merges: Vec<String> },
    /// `tokenizer.ggml.model = "llama"`.
    #[default]
    Spm,
}

/// Special-token ids named by the metadata (`tokenizer.ggml.*_token_id`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

pub struct Tokenizer {
    vocab: Vocab,
    algorithm: Algorithm,
    /// Ids llama.cpp splits out of raw text, longest text first.
    special: Vec<u32>,
    /// Finds which of `special` occur in a text at all (pattern i is
    /// `special[i]`), so the ordered splitting only visits those.
    special_index: AhoCorasick,
    /// `token_to_piece(id, special = true)` for every id, as llama.cpp caches
    /// it: piece `id` is `pieces[piece_starts[id]..piece_starts[id + 1]]`.
    pieces: Vec<u8>,
    piece_starts: Vec<usize>,
}

enum Algorithm {
    Bpe(Box<Bpe>),
    Spm { byte_tokens: Box<[Option<u32>; 256]> },
}

enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

impl Tokenizer {
    /// Reads the vocabulary from GGUF metadata, as llama.cpp's loader does.
    pub fn from_gguf(file: &elelem_gguf::Gguf) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::new(&VocabSpec::from_gguf(file)?)
    }

    pub fn new(spec: &VocabSpec) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::new(spec)?;
        let algorithm = match &spec.kind {
            VocabKind::Bpe { pre, merges } => {
                let pre = Pre::from_name(pre).ok_or_else(|| TokenizerError::UnsupportedPre(pre.clone()))?;
                Algorithm::Bpe(Box::new(Bpe::new(pre, merges)))
            }
            VocabKind::Spm => {
                let byte_tokens = std::array::from_fn(|b| {
                    let b = b as u8;
                    vocab
                        .id(&format!("<0x{b:02X}>"))
                        .or_else(|| std::str::from_utf8(&[b]).ok().and_then(|s| vocab.id(s)))
                });
                Algorithm::Spm {
                    byte_tokens: Box::new(byte_tokens),
                }
            }
        };

        let mut special: Vec<u32> = (0..vocab.texts.len() as u32)
            .filter(|&id| vocab.attrs[id as usize] & (CONTROL | USER_DEFINED | UNKNOWN) != 0)
            .collect();
        // llama.cpp uses an unstable sort here; the order among equally long
        // texts only matters if two of them can overlap in one string, which
        // neither supported vocabulary has.
        special.sort_by_key(|&id| std::cmp::Reverse(vocab.texts[id as usize].len()));
        let special_index = AhoCorasick::new(special.iter().map(|&id| &vocab.texts[id as usize]))?;

        let mut pieces = Vec::new();
        let mut piece_starts = vec![0];
        for id in 0..vocab.texts.len() {
            render(&vocab, &algorithm, id, &mut pieces);
            piece_starts.push(pieces.len());
        }

        Ok(Tokenizer {
            vocab,
            algorithm,
            special,
            special_index,
            pieces,
            piece_starts,
        })
    }

    /// `llama_tokenize`: `add_special` adds BOS/EOS as the vocabulary asks;
    /// `parse_special` turns control-token text into those tokens
    /// (user-defined tokens are always split out, as in llama.cpp).
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let whole = 0..text.len();
        let plain = if parse_special {
            &[]
        } else {
            std::slice::from_ref(&whole)
        };
        self.tokenize_with_plain(text, add_special, plain)
    }

    /// [`tokenize`](Self::tokenize) with special-token parsing everywhere but in
    /// the `plain` byte ranges (a chat's message contents), which are read as
    /// `parse_special` false reads text. Text on both sides of a range's edge is
    /// tokenized together, so a text without special-token text inside the
    /// ranges gives exactly the tokens of `tokenize(text, add_special, true)`.
    pub fn tokenize_with_plain(&self, text: &str, add_special: bool, plain: &[Range<usize>]) -> Vec<u32> {
        let mut out = Vec::new();
        let v = &self.vocab;
        if add_special && v.add_bos {
            out.extend(v.bos);
        }
        let mut after_special = true;
        for fragment in self.partition(text, plain) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(range) => {
                    let text = &text[range];
                    match &self.algorithm {
                        Algorithm::Bpe(bpe) => bpe.tokenize(v, text, &mut out),
                        Algorithm::Spm { byte_tokens } => {
                            let prefix = if v.add_space_prefix && after_special { " " } else { "" };
                            let escaped = format!("{prefix}{text}").replace(' ', "\u{2581}");
                            spm::tokenize(v, byte_tokens, &escaped, &mut out);
                        }
                    }
                    after_special = false;
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.eos);
        }
        out
    }

    /// `llama_token_to_piece` without lstrip: the bytes of one token. With
    /// `special` false, control and unknown tokens give nothing. Ids outside
    /// the vocabulary give nothing (llama.cpp throws).
    pub fn token_to_piece(&self, id: u32, special: bool) -> &[u8] {
        let Some(attr) = self.vocab.attrs.get(id as usize) else {
            return &[];
        };
        if !special && attr & (UNKNOWN | CONTROL) != 0 {
            return &[];
        }
        let id = id as usize;
        &self.pieces[self.piece_starts[id]..self.piece_starts[id + 1]]
    }

    /// `common_detokenize`, i.e. `llama_detokenize` with `remove_special`
    /// false: the pieces concatenated. When the vocabulary adds a space
    /// prefix, a leading space is dropped from the first token's piece (only
    /// the first token's, even when that piece is empty, e.g. a hidden BOS).
    pub fn detokenize(&self, ids: &[u32], special: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut strip_space = self.vocab.add_space_prefix;
        for &id in ids {
            let piece = self.token_to_piece(id, special);
            let piece = match piece.split_first() {
                Some((b' ', rest)) if strip_space => rest,
                _ => piece,
            };
            out.extend_from_slice(piece);
            strip_space = false;
        }
        out
    }

    /// Whether generation stops at `id` (`llama_vocab_is_eog`).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// Whether `tokenize(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `tokenize(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.texts.len()
    }

    /// llama.cpp's `tokenizer_st_partition`: for each special token, longest
    /// first, split every remaining text fragment at its occurrences. Tokens
    /// absent from the whole text cannot split any part of it, so only the
    /// ones present are visited. Control and unknown tokens are not split out
    /// where they overlap a `plain` range.
    fn partition(&self, text: &str, plain: &[Range<usize>]) -> Vec<Fragment> {
        let mut fragments = Vec::new();
        if !text.is_empty() {
            fragments.push(Fragment::Text(0..text.len()));
        }
        let mut present = vec![false; self.special.len()];
        for m in self.special_index.find_overlapping_iter(text) {
            present[m.pattern().as_usize()] = true;
        }
        for (&id, _) in self.special.iter().zip(present).filter(|&(_, present)| present) {
            let guarded = self.vocab.attrs[id as usize] & (CONTROL | UNKNOWN) != 0;
            let needle = &self.vocab.texts[id as usize];
            let mut split = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(range) = fragment else {
                    split.push(fragment);
                    continue;
                };
                let mut start = range.start;
                for (at, _) in text[range.clone()].match_indices(needle) {
                    let (at, end) = (range.start + at, range.start + at + needle.len());
                    if guarded && plain.iter().any(|p| p.start < end && at < p.end) {
                        continue;
                    }
                    if at > start {
                        split.push(Fragment::Text(start..at));
                    }
                    split.push(Fragment::Token(id));
                    start = end;
                }
                if start < range.end {
                    split.push(Fragment::Text(start..range.end));
                }
            }
            fragments = split;
        }
        fragments
    }
}

/// Appends the piece llama.cpp caches for `id` (rendered with `special` true).
fn render(vocab: &Vocab, algorithm: &Algorithm, id: usize, out: &mut Vec<u8>) {
    let attr = vocab.attrs[id];
    let text = &vocab.texts[id];
    if attr & (UNKNOWN | CONTROL | USER_DEFINED) != 0 {
        out.extend_from_slice(text.as_bytes());
    } else if attr & NORMAL != 0 {
        match algorithm {
            Algorithm::Bpe(bpe) => bpe.byte_level().decode(text, out),
            Algorithm::Spm { .. } => out.extend_from_slice(text.replace('\u{2581}', " ").as_bytes()),
        }
    } else if attr & BYTE != 0 {
        // `<0xXX>`: llama.cpp reads the two hex digits with strtol.
        let digits = text.get(3..5).unwrap_or("");
        out.push(u8::from_str_radix(digits, 16).unwrap_or(0));
    }
}

impl VocabSpec {
    /// Reads `tokenizer.ggml.*` (the one place that knows the key names).
    pub fn from_gguf(file: &elelem_gguf::Gguf) -> Result<VocabSpec, TokenizerError> {
        use elelem_gguf::Value;

        let string = |key: &'static str| -> Result<Option<&str>, TokenizerError> {
            file.get(key)
                .map(|v| v.as_str().ok_or(TokenizerError::WrongType(key)))
                .transpose()
        };
        let array = |key: &'static str| -> Result<Option<&[Value]>, TokenizerError> {
            file.get(key)
                .map(|v| v.as_array().ok_or(TokenizerError::WrongType(key)))
                .transpose()
        };
        let strings = |key: &'static str| -> Result<Option<Vec<String>>, TokenizerError> {
            array(key)?
                .map(|a| {
                    a.iter()
                        .map(|v| v.as_str().map(str::to_owned).ok_or(TokenizerError::WrongType(key)))
                        .collect()
                })
                .transpose()
        };
        let flag = |key: &'static str| -> Result<Option<bool>, TokenizerError> {
            file.get(key)
                .map(|v| v.as_bool().ok_or(TokenizerError::WrongType(key)))
                .transpose()
        };
        let id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            file.get(key)
                .map(|v| {
                    v.as_u64()
                        .and_then(|id| u32::try_from(id).ok())
                        .ok_or(TokenizerError::WrongType(key))
                })
                .transpose()
        };

        // llama.cpp patches token attributes by model name for these; refuse
        // rather than tokenize them differently.
        let name = string("general.name")?.unwrap_or("").to_lowercase();
        let arch = string("general.architecture")?.unwrap_or("");
        if ["phi-3", "phi3", "modern-bert"].iter().any(|n| name.contains(n))
            || ["nomic-bert-moe", "jina-bert-v3"].iter().any(|a| arch.contains(a))
        {
            return Err(TokenizerError::UnsupportedAttributes(name));
        }

        let model = string("tokenizer.ggml.model")?.ok_or(TokenizerError::MissingKey("tokenizer.ggml.model"))?;
        let kind = match model {
            "gpt2" => VocabKind::Bpe {
                pre: string("tokenizer.ggml.pre")?.unwrap_or("").to_owned(),
                merges: strings("tokenizer.ggml.merges")?.ok_or(TokenizerError::MissingKey("tokenizer.ggml.merges"))?,
            },
            "llama" => VocabKind::Spm,
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };

        let scores = array("tokenizer.ggml.scores")?
            .map(|a| {
                a.iter()
                    .map(|v| match v {
                        Value::F32(s) => Some(*s),
                        Value::I32(s) => Some(*s as f32),
                        _ => None,
                    })
                    .collect::<Option<Vec<f32>>>()
                    .ok_or(TokenizerError::WrongType("tokenizer.ggml.scores"))
            })
            .transpose()?;
        let token_types = array("tokenizer.ggml.token_type")?
            .map(|a| {
                a.iter()
                    .map(|v| match v {
                        Value::I32(t) => Some(*t),
                        _ => None,
                    })
                    .collect::<Option<Vec<i32>>>()
                    .ok_or(TokenizerError::WrongType("tokenizer.ggml.token_type"))
            })
            .transpose()?;

        let tokens = strings("tokenizer.ggml.tokens")?.ok_or(TokenizerError::MissingKey("tokenizer.ggml.tokens"))?;
        // llama.cpp reads the deprecated prefix/suffix/middle keys after the
        // fim_* ones, so an in-range deprecated id wins.
        let in_range = |id: Option<u32>| id.filter(|&id| (id as usize) < tokens.len());
        let fim = |current: &'static str, deprecated: &'static str| -> Result<Option<u32>, TokenizerError> {
            Ok(in_range(id(deprecated)?).or(id(current)?))
        };
        let ids = SpecialIds {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            eot: id("tokenizer.ggml.eot_token_id")?,
            eom: id("tokenizer.ggml.eom_token_id")?,
            fim_pre: fim("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id")?,
            fim_suf: fim("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id")?,
            fim_mid: fim("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id")?,
            fim_pad: id("tokenizer.ggml.fim_pad_token_id")?,
            fim_rep: id("tokenizer.ggml.fim_rep_token_id")?,
            fim_sep: id("tokenizer.ggml.fim_sep_token_id")?,
        };
        Ok(VocabSpec {
            kind,
            tokens,
            scores,
            token_types,
            ids,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
        })
    }
}
