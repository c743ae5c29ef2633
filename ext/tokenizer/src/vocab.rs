//! Token attributes and special-token roles, derived the way llama.cpp's
//! `llama_vocab::impl::load` derives them: from the token types and ids in
//! the metadata, then patched by its rules keyed on token text.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::texts::Texts;
use crate::{SpecialIds, TokenizerError, VocabKind, VocabSpec};

// llama.cpp's `llama_token_attr` bits.
pub(crate) const UNKNOWN: u32 = 1 << 0;
const UNUSED: u32 = 1 << 1;
pub(crate) const NORMAL: u32 = 1 << 2;
pub(crate) const CONTROL: u32 = 1 << 3;
pub(crate) const USER_DEFINED: u32 = 1 << 4;
pub(crate) const BYTE: u32 = 1 << 5;

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

pub(crate) struct Vocab {
    pub(crate) texts: Texts,
    pub(crate) scores: Vec<f32>,
    pub(crate) attrs: Vec<u32>,
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) eog: BTreeSet<u32>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_space_prefix: bool,
}

impl Vocab {
    pub(crate) fn new(spec: &VocabSpec) -> Result<Vocab, TokenizerError> {
        let n = spec.tokens.len();
        let is_bpe = matches!(spec.kind, VocabKind::Bpe { .. });

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
        let mut attrs = match &spec.token_types {
            Some(t) if t.len() < n => return Err(TokenizerError::ShortArray("token_type")),
            Some(t) => t[..n].iter().map(|&ty| attr_of_type(ty)).collect(),
            None => vec![NORMAL; n],
        };

        let ids_in = |id: Option<u32>| id.filter(|&id| (id as usize) < n);
        // Defaults first (dropped when out of range), then the metadata's id
        // when it is in range.
        let (default_bos, default_eos) = if is_bpe { (11, 11) } else { (1, 2) };
        let SpecialIds {
            bos,
            eos,
            eot,
            eom,
            fim_pre,
            fim_suf,
            fim_mid,
            fim_pad,
            fim_rep,
            fim_sep,
        } = spec.ids;
        let bos = ids_in(bos).or(ids_in(Some(default_bos)));
        let eos = ids_in(eos).or(ids_in(Some(default_eos)));
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
        let [(eot, _), (eom, _), _, _, _, (fim_pad, _), (fim_rep, _), (fim_sep, _)] = roles;

        // llama.cpp marks control tokens named "unused" UNUSED here; nothing
        // that tokenizes or renders reads that bit, so it is not kept.

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

        let default_add_bos = match &spec.kind {
            VocabKind::Bpe { pre, .. } => crate::Pre::from_name(pre).is_some_and(crate::Pre::adds_bos),
            VocabKind::Spm => true,
        };
        let default_add_space_prefix = !is_bpe;
        let add_bos = spec.add_bos.unwrap_or(default_add_bos);
        let add_eos = spec.add_eos.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(TokenizerError::MissingSpecial("BOS"));
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::MissingSpecial("EOS"));
        }

        Ok(Vocab {
            texts,
            scores,
            attrs,
            bos,
            eos,
            eog,
            add_bos,
            add_eos,
            add_space_prefix: spec.add_space_prefix.unwrap_or(default_add_space_prefix),
        })
    }

    pub(crate) fn id(&self, text: &str) -> Option<u32> {
        self.texts.id(text)
    }
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
