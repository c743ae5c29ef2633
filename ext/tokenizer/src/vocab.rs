//! Token attributes and special-token roles, derived the way llama.cpp's
//! `llama_vocab::impl::load` derives them: from the token types and ids in
//! the metadata, then patched by its rules keyed on token text.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::texts::Texts;
use crate::{SpecialIds, TokenizerError, VocabSpec};

// llama.cpp's `llama_token_attr` bits.
pub(crate) const UNKNOWN: u32 = 1 << 0;
pub(crate) const UNUSED: u32 = 1 << 1;
pub(crate) const NORMAL: u32 = 1 << 2;
pub(crate) const CONTROL: u32 = 1 << 3;
pub(crate) const USER_DEFINED: u32 = 1 << 4;
pub(crate) const BYTE: u32 = 1 << 5;
/// Whitespace before the token is dropped when it is split out of a text.
pub(crate) const LSTRIP: u32 = 1 << 7;
/// Whitespace after the token is dropped when it is split out of a text.
pub(crate) const RSTRIP: u32 = 1 << 8;

/// Texts llama.cpp takes for a role when the metadata names no id for it.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts that end generation whatever the metadata says.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Texts llama.cpp always renders (gpt-oss), whatever their type says.
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// What llama.cpp's `load` sets per tokenizer model (and BPE pre-tokenizer)
/// before it reads the metadata that may override it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Defaults {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) sep: Option<u32>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_sep: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) clean_spaces: bool,
    pub(crate) escape_whitespaces: bool,
    /// Gemma 4: BOS is added whatever the metadata says.
    pub(crate) force_add_bos: bool,
    /// The normalizer keeps case unless the metadata says otherwise (the
    /// `whitespace` pre-tokenizer); it lowercases otherwise.
    pub(crate) keep_case: bool,
}

/// A vocabulary's fill-in-the-middle tokens, as llama.cpp finds them (the
/// metadata's ids, else the tokens named like them): what llama-server's
/// `format_prompt_infill` lays a prompt out with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FimTokens {
    /// Before the prefix (`<|fim_prefix|>`).
    pub pre: Option<u32>,
    /// Before the suffix (`<|fim_suffix|>`).
    pub suf: Option<u32>,
    /// Where the middle is to be written (`<|fim_middle|>`).
    pub mid: Option<u32>,
    /// Before a repository's name (`<|repo_name|>`).
    pub rep: Option<u32>,
    /// Before each file's name (`<|file_sep|>`).
    pub sep: Option<u32>,
}

pub(crate) struct Vocab {
    pub(crate) texts: Texts,
    pub(crate) scores: Vec<f32>,
    pub(crate) attrs: Vec<u32>,
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) sep: Option<u32>,
    pub(crate) eog: BTreeSet<u32>,
    /// The fill-in-the-middle tokens (`llama_vocab_fim_pre` ...).
    pub(crate) fim: FimTokens,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_sep: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) clean_spaces: bool,
    pub(crate) escape_whitespaces: bool,
    pub(crate) remove_extra_whitespaces: bool,
    /// The normalizer (WordPiece, the whitespace model): lowercase, and strip
    /// accents (NFD, marks dropped; WordPiece only).
    pub(crate) lowercase: bool,
    pub(crate) strip_accents: bool,
    /// The longest token text, in bytes (`max_token_len`).
    pub(crate) max_token_len: usize,
}

impl Vocab {
    pub(crate) fn new(spec: &VocabSpec, defaults: Defaults) -> Result<Vocab, TokenizerError> {
        let n = spec.tokens.len();

        let texts = Texts::new(spec.tokens.iter().enumerate().map(|(i, t)| {
            if t.is_empty() {
                Cow::Owned(format!("[EMPTY_{i}]"))
            } else {
                Cow::Borrowed(t.as_str())
            }
        }))?;

        let scores = match &spec.scores {
            Some(s) if s.len() < n => return Err(TokenizerError::ShortArray("scores")),
            Some(s) => s[..n].to_vec(),
            None => vec![0.0; n],
        };
        let mut attrs = type_attrs(spec)?;

        let ids_in = |id: Option<u32>| id.filter(|&id| (id as usize) < n);
        // Defaults first (dropped when out of range), then the metadata's id
        // when it is in range.
        let SpecialIds {
            bos,
            eos,
            eot,
            eom,
            unk,
            sep,
            fim_pre,
            fim_suf,
            fim_mid,
            fim_pad,
            fim_rep,
            fim_sep,
        } = spec.ids;
        let bos = ids_in(bos).or(ids_in(defaults.bos));
        let eos = ids_in(eos).or(ids_in(defaults.eos));
        let unk = ids_in(unk).or(ids_in(defaults.unk));
        let sep = ids_in(sep).or(ids_in(defaults.sep));
        let mut roles = [
            (ids_in(eot), EOT_TEXTS),
            (ids_in(eom), EOM_TEXTS),
            (ids_in(fim_pre), FIM_PRE_TEXTS),
            (ids_in(fim_suf), FIM_SUF_TEXTS),
            (ids_in(fim_mid), FIM_MID_TEXTS),
            (ids_in(fim_pad), FIM_PAD_TEXTS),
            (ids_in(fim_rep), FIM_REP_TEXTS),
            (ids_in(fim_sep), FIM_SEP_TEXTS),
        ];

        // llama.cpp walks its unordered_map here, so when a vocabulary holds
        // two candidate texts for one role, which one it picks depends on hash
        // order; ascending ids pick the same one whenever there is only one.
        for (id, text) in texts.iter().enumerate() {
            for (role, candidates) in roles.iter_mut() {
                if role.is_none() && candidates.contains(&text) {
                    *role = Some(id as u32);
                    attrs[id] |= CONTROL;
                }
            }
        }
        let [(eot, _), (eom, _), (fim_pre, _), (fim_suf, _), (fim_mid, _), (fim_pad, _), (fim_rep, _), (fim_sep, _)] =
            roles;

        // llama.cpp marks control tokens named "unused" UNUSED here; its
        // Unigram matcher, the one reader of that bit, was built before, so
        // the mark is not kept.

        let mut eog: BTreeSet<u32> = [fim_pad, fim_rep, fim_sep].into_iter().flatten().collect();
        for (id, text) in texts.iter().enumerate() {
            if EOG_TEXTS.contains(&text) {
                eog.insert(id as u32);
                attrs[id] |= CONTROL;
            }
        }
        for (attr, text) in attrs.iter_mut().zip(texts.iter()) {
            if ALWAYS_RENDERED.contains(&text) {
                *attr = USER_DEFINED;
            }
        }
        eog.extend([eos, eot, eom].into_iter().flatten());

        // gpt-oss and solar-open: "<|end|>" ends a message, not generation.
        let eog_with = |eog: &BTreeSet<u32>, text: &str| eog.iter().find(|&&id| &texts[id as usize] == text).copied();
        if let Some(end) = eog_with(&eog, "<|end|>") {
            let has = |t: &str| eog_with(&eog, t).is_some();
            if (has("<|return|>") && (has("<|call|>") || has("<|calls|>")))
                || (has("<|flush|>") && (has("<|call|>") || has("<|calls|>")))
            {
                eog.remove(&end);
                attrs[end as usize] = USER_DEFINED;
            }
        }
        // gemma4 and plamo2: "</s>" is an ordinary token there.
        if let Some(s) = eog_with(&eog, "</s>") {
            if eog_with(&eog, "<|tool_response>").is_some() || eog_with(&eog, "<|plamo:eos|>").is_some() {
                eog.remove(&s);
                attrs[s as usize] = NORMAL;
            }
        }

        let add_bos = spec.add_bos.unwrap_or(defaults.add_bos) || defaults.force_add_bos;
        let add_eos = spec.add_eos.unwrap_or(defaults.add_eos);
        let add_sep = spec.add_sep.unwrap_or(defaults.add_sep);
        // llama.cpp asserts these when it tokenizes with add_special; refusing
        // the vocabulary up front keeps tokenize infallible.
        if add_bos && bos.is_none() {
            return Err(TokenizerError::MissingSpecial("BOS"));
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::MissingSpecial("EOS"));
        }

        let lowercase = spec.normalizer_lowercase.unwrap_or(!defaults.keep_case);
        let max_token_len = texts.iter().map(str::len).max().unwrap_or(0);
        let mut vocab = Vocab {
            texts,
            scores,
            attrs,
            bos,
            eos,
            unk,
            sep,
            eog,
            fim: FimTokens {
                pre: fim_pre,
                suf: fim_suf,
                mid: fim_mid,
                rep: fim_rep,
                sep: fim_sep,
            },
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix: spec.add_space_prefix.unwrap_or(defaults.add_space_prefix),
            clean_spaces: defaults.clean_spaces,
            escape_whitespaces: defaults.escape_whitespaces,
            remove_extra_whitespaces: spec.remove_extra_whitespaces.unwrap_or(false),
            lowercase,
            strip_accents: spec.normalizer_strip_accents.unwrap_or(lowercase),
            max_token_len,
        };
        vocab.patch_strip_attributes(spec)?;
        Ok(vocab)
    }

    /// The end of llama.cpp's `load`: whitespace-stripping attributes it gives
    /// some models' special tokens, by pre-tokenizer, architecture or name.
    fn patch_strip_attributes(&mut self, spec: &VocabSpec) -> Result<(), TokenizerError> {
        let pre = spec.pre_name().unwrap_or("");
        let arch = spec.architecture.as_deref().unwrap_or("");
        // llama.cpp lowercases the name byte by byte (ASCII only).
        let name = spec.name.as_deref().unwrap_or("").to_ascii_lowercase();
        let contains_any = |s: &str, parts: &[&str]| parts.iter().any(|p| s.contains(p));
        if contains_any(pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"])
            || contains_any(arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            // llama.cpp warns when the mask token is missing.
            self.set_attr("<mask>", LSTRIP, true);
        } else if contains_any(&name, &["phi-3", "phi3"]) {
            for id in 0..self.attrs.len() {
                if self.attrs[id] & (CONTROL | USER_DEFINED | UNKNOWN) != 0 {
                    self.attrs[id] |= RSTRIP;
                }
            }
            // llama.cpp's `token_to_id.at` throws (the load fails) when
            // one of these is missing.
            for (text, on) in [
                ("</s>", true),
                ("<unk>", false),
                ("<s>", false),
                ("<|endoftext|>", false),
            ] {
                if !self.set_attr(text, RSTRIP, on) {
                    return Err(TokenizerError::MissingToken(text));
                }
            }
        } else if name.contains("modern-bert") {
            self.set_attr("[MASK]", LSTRIP, true);
        }
        Ok(())
    }

    /// llama.cpp's `_set_token_attr`; false if there is no such token.
    fn set_attr(&mut self, text: &str, attr: u32, on: bool) -> bool {
        let Some(id) = self.id(text) else {
            return false;
        };
        let current = &mut self.attrs[id as usize];
        *current = if on { *current | attr } else { *current & !attr };
        true
    }

    /// The token whose text is these bytes.
    pub(crate) fn id(&self, text: impl AsRef<[u8]>) -> Option<u32> {
        self.texts.id(text.as_ref())
    }
}

/// The attributes the token types give, before `load` patches any: what
/// llama.cpp's tokenizer objects see, as they are built first.
pub(crate) fn type_attrs(spec: &VocabSpec) -> Result<Vec<u32>, TokenizerError> {
    let n = spec.tokens.len();
    Ok(match &spec.token_types {
        Some(t) if t.len() < n => return Err(TokenizerError::ShortArray("token_type")),
        Some(t) => t[..n].iter().map(|&ty| attr_of_type(ty)).collect(),
        None => vec![NORMAL; n],
    })
}

/// `llama_token_type` (GGUF `tokenizer.ggml.token_type`) → attribute bits.
fn attr_of_type(ty: i32) -> u32 {
    match ty {
        1 => NORMAL,
        2 => UNKNOWN,
        3 => CONTROL,
        4 => USER_DEFINED,
        5 => UNUSED,
        6 => BYTE,
        _ => 0,
    }
}
