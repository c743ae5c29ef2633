//! Tokenizers that give the token ids of llama.cpp's `llama_tokenize` and the
//! bytes of its `llama_token_to_piece` / `llama_detokenize`, for the
//! vocabulary kinds llama.cpp's tokenizer suite exercises:
//!
//! * byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with every pre-tokenizer
//!   llama.cpp names (`tokenizer.ggml.pre`: qwen2, llama3, gpt-2, starcoder,
//!   deepseek, falcon, gpt-4o, tekken, … and the default), the `"whitespace"`
//!   model's BPE between whitespace, and Gemma 4's SentencePiece-style BPE
//!   (`"gemma4"`);
//! * SentencePiece (`"llama"`), with the attribute patches llama.cpp gives
//!   some models by name (phi-3);
//! * WordPiece (`"bert"`) and Unigram (`"t5"`, with its precompiled charsmap).
//!
//! What llama.cpp refuses is refused, and the few kinds it has that elelem
//! does not (`rwkv`, `plamo2`, `hybriddna`) are refused as such
//! ([`TokenizerError`]); nothing is approximated.
//!
//! The algorithms are hand-written ports of llama.cpp's `src/llama-vocab.cpp`
//! and `src/unicode.cpp` (llama-cpp-sys-2 0.1.161). Libraries such as
//! `tokenizers` implement the upstream (Hugging Face / SentencePiece)
//! semantics, which llama.cpp does not reproduce exactly: it splits special
//! tokens out of the text first with its own rules and its own attribute
//! patches, splits words with hand-written matchers over its own Unicode
//! tables or with C++ `std::regex` over "collapsed" text (mirrored by the small
//! matcher in `regex.rs`), merges SentencePiece pairs by score alone, reads
//! invalid UTF-8 its own way, and renders pieces its own way. Matching
//! llama.cpp is the requirement, so its code is mirrored.

mod bpe;
mod merge;
mod regex;
mod split;
mod spm;
mod stream;
mod texts;
mod ugm;
mod unicode;
mod unicode_data;
mod vocab;
mod wpm;

use std::ops::Range;

use aho_corasick::AhoCorasick;

pub use stream::Utf8Stream;
pub use vocab::FimTokens;

use bpe::{Bpe, Pre, PreConfig};
use ugm::Unigram;
use vocab::{Defaults, Vocab, BYTE, CONTROL, LSTRIP, NORMAL, RSTRIP, UNKNOWN, USER_DEFINED};

/// Why a vocabulary cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF metadata has no `{0}`")]
    MissingKey(&'static str),
    #[error("GGUF metadata `{0}` has the wrong type")]
    WrongType(&'static str),
    #[error("`tokenizer.ggml.{0}` has fewer entries than there are tokens")]
    ShortArray(&'static str),
    /// A `tokenizer.ggml.model` llama.cpp does not know either.
    #[error("unknown tokenizer.ggml.model {0:?} (llama.cpp refuses it too)")]
    UnknownModel(String),
    /// A `tokenizer.ggml.model` llama.cpp runs but elelem does not implement.
    #[error("tokenizer.ggml.model {0:?} is not implemented (elelem has gpt2, whitespace, gemma4, llama, bert and t5)")]
    UnsupportedModel(String),
    /// A `tokenizer.ggml.pre` llama.cpp does not know.
    #[error("unknown tokenizer.ggml.pre {0:?} (llama.cpp refuses it too)")]
    UnsupportedPre(String),
    /// A pre-tokenizer pattern llama.cpp's `std::regex` would throw on.
    #[error("the pre-tokenizer pattern does not compile: {0}")]
    Pattern(String),
    #[error("the vocabulary holds the same token text twice")]
    DuplicateTokens,
    #[error("the token texts add up to more than 4 GiB")]
    TooLarge,
    #[error("the vocabulary asks for a {0} token but has none")]
    MissingSpecial(&'static str),
    /// llama.cpp patches this token's attributes by model name and fails to
    /// load without it.
    #[error("this model's attribute patches need the token {0:?}, which the vocabulary lacks")]
    MissingToken(&'static str),
    #[error("tokenizer.ggml.precompiled_charsmap is malformed: {0}")]
    Charsmap(&'static str),
    #[error("cannot index the special tokens: {0}")]
    SpecialTokenIndex(#[from] aho_corasick::BuildError),
}

/// A vocabulary as plain data: what [`Tokenizer::from_gguf`] reads from the
/// `tokenizer.ggml.*` metadata. `None` means the key is absent.
#[derive(Debug, Clone, Default)]
pub struct VocabSpec {
    pub kind: VocabKind,
    /// `tokenizer.ggml.model` as written (empty: the kind's usual name).
    pub model: String,
    /// `tokenizer.ggml.pre` as written.
    pub pre: Option<String>,
    /// `general.name` and `general.architecture`, which llama.cpp reads to
    /// patch some models' token attributes.
    pub name: Option<String>,
    pub architecture: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    pub token_types: Option<Vec<i32>>,
    pub ids: SpecialIds,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_sep: Option<bool>,
    pub add_space_prefix: Option<bool>,
    pub remove_extra_whitespaces: Option<bool>,
    /// `tokenizer.ggml.normalizer.lowercase` and `.strip_accents` (WordPiece).
    pub normalizer_lowercase: Option<bool>,
    pub normalizer_strip_accents: Option<bool>,
}

/// The tokenizer a vocabulary asks for.
#[derive(Debug, Clone, Default)]
pub enum VocabKind {
    /// Byte-level BPE, `tokenizer.ggml.model = "gpt2"` with
    /// `tokenizer.ggml.pre` and `.merges`; also `"whitespace"` (words between
    /// whitespace, [`VocabSpec::model`] says which) and `"gemma4"` (whose
    /// pre-tokenizer is always `gemma4`).
    Bpe { pre: String, merges: Vec<String> },
    /// SentencePiece BPE, `tokenizer.ggml.model = "llama"`.
    #[default]
    Spm,
    /// WordPiece, `tokenizer.ggml.model = "bert"`.
    WordPiece,
    /// Unigram, `tokenizer.ggml.model = "t5"`, with
    /// `tokenizer.ggml.precompiled_charsmap` (empty if absent).
    Unigram { precompiled_charsmap: Vec<u8> },
}

/// Special-token ids named by the metadata (`tokenizer.ggml.*_token_id`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// A loaded vocabulary and its tokenizer, answering as llama.cpp's
/// `llama_vocab` does.
pub struct Tokenizer {
    vocab: Vocab,
    algorithm: Algorithm,
    model: String,
    pre: Option<String>,
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
    WordPiece,
    Unigram(Box<Unigram>),
}

enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

impl VocabKind {
    /// The `tokenizer.ggml.model` name of this kind.
    fn model_name(&self) -> &'static str {
        match self {
            VocabKind::Bpe { .. } => "gpt2",
            VocabKind::Spm => "llama",
            VocabKind::WordPiece => "bert",
            VocabKind::Unigram { .. } => "t5",
        }
    }
}

/// What llama.cpp's `load` sets for a model kind before the metadata speaks.
fn defaults(spec: &VocabSpec, pre: Option<&PreConfig>) -> Defaults {
    match (&spec.kind, pre) {
        (VocabKind::Spm, _) => Defaults {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            add_bos: true,
            add_space_prefix: true,
            escape_whitespaces: true,
            ..Defaults::default()
        },
        (VocabKind::WordPiece, _) => Defaults {
            bos: Some(101),
            unk: Some(100),
            sep: Some(102),
            add_bos: true,
            add_sep: true,
            clean_spaces: true,
            escape_whitespaces: true,
            ..Defaults::default()
        },
        (VocabKind::Unigram { .. }, _) => Defaults {
            eos: Some(1),
            unk: Some(2),
            add_eos: true,
            escape_whitespaces: true,
            ..Defaults::default()
        },
        (VocabKind::Bpe { .. }, pre) => {
            let pre = pre.expect("a BPE vocabulary has a pre-tokenizer");
            let gemma4 = spec.model == "gemma4";
            let default_bos = (!gemma4 && !pre.no_default_bos).then_some(11);
            Defaults {
                bos: default_bos,
                eos: (!gemma4).then_some(11),
                add_bos: pre.add_bos,
                add_sep: pre.add_sep,
                clean_spaces: pre.clean_spaces,
                escape_whitespaces: pre.escape_whitespaces,
                force_add_bos: pre.pre == Pre::Gemma4,
                keep_case: pre.pre == Pre::Whitespace,
                ..Defaults::default()
            }
        }
    }
}

impl Tokenizer {
    /// Reads the vocabulary from GGUF metadata, as llama.cpp's loader does.
    pub fn from_gguf(file: &elelem_gguf::Gguf) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::new(&VocabSpec::from_gguf(file)?)
    }

    /// Builds the tokenizer `spec` describes, as llama.cpp's `load` would.
    pub fn new(spec: &VocabSpec) -> Result<Tokenizer, TokenizerError> {
        let pre = match &spec.kind {
            VocabKind::Bpe { pre, .. } => {
                Some(PreConfig::from_name(pre).ok_or_else(|| TokenizerError::UnsupportedPre(pre.clone()))?)
            }
            _ => None,
        };
        let vocab = Vocab::new(spec, defaults(spec, pre.as_ref()))?;
        let algorithm = match &spec.kind {
            VocabKind::Bpe { merges, .. } => {
                let pre = pre.as_ref().expect("set above for BPE");
                let whitespace_model = spec.model == "whitespace";
                Algorithm::Bpe(Box::new(
                    Bpe::new(pre, merges, whitespace_model).map_err(|e| TokenizerError::Pattern(e.0))?,
                ))
            }
            VocabKind::Spm => {
                // `byte_to_token`: `<0xXX>`, else the byte as a one-byte text.
                let byte_tokens = std::array::from_fn(|b| {
                    let b = b as u8;
                    vocab.id(format!("<0x{b:02X}>")).or_else(|| vocab.id([b]))
                });
                Algorithm::Spm {
                    byte_tokens: Box::new(byte_tokens),
                }
            }
            VocabKind::WordPiece => {
                // llama.cpp asserts BOS and SEP when it adds them and would
                // emit id -1 for unknown words without an UNK.
                for (id, role) in [(vocab.bos, "BOS"), (vocab.sep, "SEP"), (vocab.unk, "UNK")] {
                    id.ok_or(TokenizerError::MissingSpecial(role))?;
                }
                Algorithm::WordPiece
            }
            VocabKind::Unigram { precompiled_charsmap } => {
                let unk = vocab.unk.ok_or(TokenizerError::MissingSpecial("UNK"))?;
                let attrs = vocab::type_attrs(spec)?;
                Algorithm::Unigram(Box::new(Unigram::new(&vocab, &attrs, unk, precompiled_charsmap)?))
            }
        };

        let mut special: Vec<u32> = (0..vocab.texts.len() as u32)
            .filter(|&id| vocab.attrs[id as usize] & (CONTROL | USER_DEFINED | UNKNOWN) != 0)
            .collect();
        // llama.cpp uses an unstable sort here; the order among equally long
        // texts only matters if two of them can overlap in one string.
        special.sort_by_key(|&id| std::cmp::Reverse(vocab.texts[id as usize].len()));
        let special_index = AhoCorasick::new(special.iter().map(|&id| vocab.texts[id as usize].as_bytes()))?;

        let mut pieces = Vec::new();
        let mut piece_starts = vec![0];
        for id in 0..vocab.texts.len() {
            render(&vocab, &algorithm, id, &mut pieces);
            piece_starts.push(pieces.len());
        }

        Ok(Tokenizer {
            vocab,
            algorithm,
            model: if spec.model.is_empty() {
                spec.kind.model_name().to_owned()
            } else {
                spec.model.clone()
            },
            pre: spec.pre.clone().or_else(|| match &spec.kind {
                VocabKind::Bpe { pre, .. } => Some(pre.clone()),
                _ => None,
            }),
            special,
            special_index,
            pieces,
            piece_starts,
        })
    }

    /// `llama_tokenize`: `add_special` adds BOS/EOS (WordPiece: BOS and SEP)
    /// as the vocabulary asks; `parse_special` turns control-token text into
    /// those tokens (user-defined tokens are always split out, as in llama.cpp).
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.tokenize_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// [`tokenize`](Self::tokenize) of any bytes, as llama.cpp takes them:
    /// invalid UTF-8 is read the way each of its tokenizers reads it (byte
    /// tokens in SentencePiece, U+FFFD in the others).
    pub fn tokenize_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Vec<u32> {
        let whole = 0..text.len();
        let plain = if parse_special {
            &[]
        } else {
            std::slice::from_ref(&whole)
        };
        self.tokenize_fragments(text, add_special, plain)
    }

    /// [`tokenize`](Self::tokenize) with special-token parsing everywhere but in
    /// the `plain` byte ranges (a chat's message contents), which are read as
    /// `parse_special` false reads text. Text on both sides of a range's edge is
    /// tokenized together, so a text without special-token text inside the
    /// ranges gives exactly the tokens of `tokenize(text, add_special, true)`.
    pub fn tokenize_with_plain(&self, text: &str, add_special: bool, plain: &[Range<usize>]) -> Vec<u32> {
        self.tokenize_fragments(text.as_bytes(), add_special, plain)
    }

    /// `llama_vocab::impl::tokenize`: the special tokens split out, then each
    /// text fragment through the vocabulary's tokenizer.
    fn tokenize_fragments(&self, text: &[u8], add_special: bool, plain: &[Range<usize>]) -> Vec<u32> {
        let mut out = Vec::new();
        let v = &self.vocab;
        let word_piece = matches!(self.algorithm, Algorithm::WordPiece);
        if add_special && (v.add_bos || word_piece) {
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
                        Algorithm::Bpe(bpe) if v.escape_whitespaces => {
                            bpe.tokenize(v, &escape_spaces(b"", text), &mut out)
                        }
                        Algorithm::Bpe(bpe) => bpe.tokenize(v, text, &mut out),
                        Algorithm::Spm { byte_tokens } => {
                            let prefix: &[u8] = if v.add_space_prefix && after_special { b" " } else { b"" };
                            spm::tokenize(v, byte_tokens, &escape_spaces(prefix, text), &mut out);
                        }
                        Algorithm::WordPiece => wpm::tokenize(v, text, &mut out),
                        Algorithm::Unigram(unigram) => unigram.tokenize(v, text, &mut out),
                    }
                    after_special = false;
                }
            }
        }
        if add_special {
            if word_piece {
                out.extend(v.sep);
            } else if v.add_eos {
                out.extend(v.eos);
            }
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
    /// Vocabularies that clean up spaces (`clean_spaces`) then drop the
    /// spaces llama.cpp drops around punctuation and contractions.
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
        if self.vocab.clean_spaces {
            clean_spaces(&mut out);
        }
        out
    }

    /// Whether generation stops at `id` (`llama_vocab_is_eog`).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// The BOS token (`llama_vocab_bos`), if the vocabulary has one.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    /// The EOS token (`llama_vocab_eos`), if the vocabulary has one.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// Whether `tokenize(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos || matches!(self.algorithm, Algorithm::WordPiece)
    }

    /// Whether `tokenize(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos && !matches!(self.algorithm, Algorithm::WordPiece)
    }

    /// The SEP token (`llama_vocab_sep`), if the vocabulary has one.
    pub fn sep(&self) -> Option<u32> {
        self.vocab.sep
    }

    /// `llama_vocab_get_add_eos`: the vocabulary's own flag, which rerank prompts
    /// follow (WordPiece's `tokenize` ends with SEP whatever it says).
    pub fn add_eos_flag(&self) -> bool {
        self.vocab.add_eos
    }

    /// `llama_vocab_get_add_sep`: whether embedding callers append SEP.
    pub fn add_sep(&self) -> bool {
        self.vocab.add_sep
    }

    /// The fill-in-the-middle tokens the vocabulary has (`llama_vocab_fim_pre`, ...).
    pub fn fim(&self) -> FimTokens {
        self.vocab.fim
    }

    /// How many tokens the vocabulary has (`llama_vocab_n_tokens`).
    pub fn n_vocab(&self) -> usize {
        self.vocab.texts.len()
    }

    /// `tokenizer.ggml.model` (`"gpt2"`, `"llama"`, `"bert"`, …).
    pub fn model_name(&self) -> &str {
        &self.model
    }

    /// `tokenizer.ggml.pre` as the metadata names it, if it does.
    pub fn pre_name(&self) -> Option<&str> {
        self.pre.as_deref()
    }

    /// llama.cpp's `tokenizer_st_partition`: for each special token, longest
    /// first, split every remaining text fragment at its occurrences,
    /// dropping the whitespace a token's LSTRIP/RSTRIP attribute strips.
    /// Tokens absent from the whole text cannot split any part of it, so only
    /// the ones present are visited. Control and unknown tokens are not split
    /// out where they overlap a `plain` range.
    fn partition(&self, text: &[u8], plain: &[Range<usize>]) -> Vec<Fragment> {
        let mut fragments = Vec::new();
        if !text.is_empty() {
            fragments.push(Fragment::Text(0..text.len()));
        }
        let mut present = vec![false; self.special.len()];
        for m in self.special_index.find_overlapping_iter(text) {
            present[m.pattern().as_usize()] = true;
        }
        // `isspace` in the "C" locale.
        let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
        for (&id, _) in self.special.iter().zip(present).filter(|&(_, present)| present) {
            let attr = self.vocab.attrs[id as usize];
            let guarded = attr & (CONTROL | UNKNOWN) != 0;
            let needle = memchr::memmem::Finder::new(self.vocab.texts[id as usize].as_bytes());
            let mut split = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(range) = fragment else {
                    split.push(fragment);
                    continue;
                };
                let mut start = range.start;
                let mut search = range.start;
                while let Some(found) = needle.find(&text[search..range.end]) {
                    let at = search + found;
                    let mut end = at + needle.needle().len();
                    if guarded && plain.iter().any(|p| p.start < end && at < p.end) {
                        search = end;
                        continue;
                    }
                    let mut left_end = at;
                    if attr & LSTRIP != 0 {
                        while left_end > start && is_space(text[left_end - 1]) {
                            left_end -= 1;
                        }
                    }
                    if left_end > start {
                        split.push(Fragment::Text(start..left_end));
                    }
                    split.push(Fragment::Token(id));
                    if attr & RSTRIP != 0 {
                        while end < range.end && is_space(text[end]) {
                            end += 1;
                        }
                    }
                    start = end;
                    search = end;
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

/// `llama_escape_whitespace` of `prefix` + `text`: spaces become `▁`.
fn escape_spaces(prefix: &[u8], text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + text.len() + 8);
    for &b in prefix.iter().chain(text) {
        if b == b' ' {
            out.extend_from_slice("\u{2581}".as_bytes());
        } else {
            out.push(b);
        }
    }
    out
}

/// The end of llama.cpp's `detokenize` with `clean_spaces`, pass for pass
/// and in place as it does it: no space before `?!.,`, none around a lone
/// `'`, none before `'s`, `'m`, `'re`, `'ve`.
fn clean_spaces(text: &mut Vec<u8>) {
    // First pass: " ?", " !", " .", " ,".
    let total1 = text.len();
    let mut total = usize::from(total1 > 0);
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    // Second pass: " ' " loses both spaces.
    let total2 = total;
    total = usize::from(total2 > 0);
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    // Third pass: " 's", " 'm", " 're", " 've" lose their space.
    let total3 = total;
    total = usize::from(total3 > 0);
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            let x2 = text.get(i + 2).copied().filter(|_| i + 2 < total3);
            if matches!(x1, b's' | b'm') || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))) {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Appends the piece llama.cpp caches for `id` (rendered with `special` true).
fn render(vocab: &Vocab, algorithm: &Algorithm, id: usize, out: &mut Vec<u8>) {
    let attr = vocab.attrs[id];
    let text = &vocab.texts[id];
    if attr & (UNKNOWN | CONTROL | USER_DEFINED) != 0 {
        out.extend_from_slice(text.as_bytes());
    } else if attr & NORMAL != 0 {
        match algorithm {
            Algorithm::Bpe(bpe) if !vocab.escape_whitespaces => bpe.byte_level().decode(text, out),
            _ => out.extend_from_slice(text.replace('\u{2581}', " ").as_bytes()),
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

        let model = string("tokenizer.ggml.model")?.ok_or(TokenizerError::MissingKey("tokenizer.ggml.model"))?;
        let pre = string("tokenizer.ggml.pre")?.map(str::to_owned);
        let merges = || strings("tokenizer.ggml.merges")?.ok_or(TokenizerError::MissingKey("tokenizer.ggml.merges"));
        let kind = match model {
            // Kimi-K2 is the one BPE vocabulary llama.cpp loads without merges.
            "gpt2" | "whitespace" if pre.as_deref() == Some("kimi-k2") => VocabKind::Bpe {
                pre: "kimi-k2".to_owned(),
                merges: strings("tokenizer.ggml.merges")?.unwrap_or_default(),
            },
            "gpt2" | "whitespace" => VocabKind::Bpe {
                pre: pre.clone().unwrap_or_default(),
                merges: merges()?,
            },
            // llama.cpp's Gemma 4 tokenizer: BPE whose pre-tokenizer is always gemma4.
            "gemma4" => VocabKind::Bpe {
                pre: "gemma4".to_owned(),
                merges: merges()?,
            },
            "llama" => VocabKind::Spm,
            "bert" => VocabKind::WordPiece,
            "t5" => VocabKind::Unigram {
                precompiled_charsmap: match array("tokenizer.ggml.precompiled_charsmap")? {
                    None => Vec::new(),
                    Some(values) => values
                        .iter()
                        .map(|v| match v {
                            Value::U8(b) => Some(*b),
                            Value::I8(b) => Some(*b as u8),
                            _ => None,
                        })
                        .collect::<Option<Vec<u8>>>()
                        .ok_or(TokenizerError::WrongType("tokenizer.ggml.precompiled_charsmap"))?,
                },
            },
            "no_vocab" | "none" | "rwkv" | "test" | "plamo2" | "hybriddna" => {
                return Err(TokenizerError::UnsupportedModel(model.to_owned()))
            }
            other => return Err(TokenizerError::UnknownModel(other.to_owned())),
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
            unk: id("tokenizer.ggml.unknown_token_id")?,
            sep: id("tokenizer.ggml.seperator_token_id")?,
            fim_pre: fim("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id")?,
            fim_suf: fim("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id")?,
            fim_mid: fim("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id")?,
            fim_pad: id("tokenizer.ggml.fim_pad_token_id")?,
            fim_rep: id("tokenizer.ggml.fim_rep_token_id")?,
            fim_sep: id("tokenizer.ggml.fim_sep_token_id")?,
        };
        Ok(VocabSpec {
            kind,
            model: model.to_owned(),
            pre,
            name: string("general.name")?.map(str::to_owned),
            architecture: string("general.architecture")?.map(str::to_owned),
            tokens,
            scores,
            token_types,
            ids,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            add_sep: flag("tokenizer.ggml.add_sep_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
            remove_extra_whitespaces: flag("tokenizer.ggml.remove_extra_whitespaces")?,
            normalizer_lowercase: flag("tokenizer.ggml.normalizer.lowercase")?,
            normalizer_strip_accents: flag("tokenizer.ggml.normalizer.strip_accents")?,
        })
    }

    /// `tokenizer.ggml.pre` as written, else the BPE pre-tokenizer's name.
    pub(crate) fn pre_name(&self) -> Option<&str> {
        self.pre.as_deref().or(match &self.kind {
            VocabKind::Bpe { pre, .. } => Some(pre.as_str()),
            _ => None,
        })
    }
}
