//! BPE as llama.cpp's `llm_tokenizer_bpe_session` runs it: the text is cut
//! into words by the pre-tokenizer's patterns (`llm_tokenizer_bpe`'s
//! `regex_exprs`, matched as [`Splitter`] does), each word is byte-encoded
//! GPT-2 style (unless the pre-tokenizer works on raw UTF-8, as Gemma 4's
//! does) and merged by rank.

use std::cmp::Reverse;
use std::collections::HashMap;

use crate::merge::merge;
use crate::regex::PatternError;
use crate::split::Splitter;
use crate::unicode::{code_points, push_utf8, to_lower, ByteLevel, Flags};
use crate::vocab::Vocab;

/// llama.cpp's BPE pre-tokenizers (`LLAMA_VOCAB_PRE_TYPE_*`), one variant per
/// list of patterns: the types llama.cpp gives the same patterns share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pre {
    /// `DEFAULT`.
    Default,
    /// `LLAMA3`, `DBRX`, `SMAUG`, `CHATGLM4`.
    Llama3,
    Jais2,
    DeepseekLlm,
    /// `DEEPSEEK3_LLM`, `HUNYUAN_DENSE`, `JOYAI_LLM`, `HY_V4`.
    Deepseek3Llm,
    Spark2_5,
    Youtu,
    DeepseekCoder,
    Falcon,
    /// `STARCODER`, `REFACT`, `COMMAND_R`, `SMOLLM`, `CODESHELL`, `EXAONE`,
    /// `MINERVA`, `MELLUM2`.
    Starcoder,
    /// `GPT2`, `MPT`, `OLMO`, `JAIS`, `TRILLION`, `GRANITE_DOCLING`.
    Gpt2,
    /// `STABLELM2`, `QWEN2`, `HUNYUAN`, `SOLAR_OPEN`, `GROK_2`.
    Qwen2,
    Qwen35,
    /// `PORO`, `BLOOM`, `GPT3_FINNISH`.
    Bloom,
    Viking,
    Tekken,
    Chameleon,
    /// `GPT4O`, `MINIMAX_M2`.
    Gpt4o,
    GraniteEmbMulti,
    TinyAya,
    KimiK2,
    Superbpe,
    Bailingmoe,
    SeedCoder,
    Ufakzeka,
    Afmoe,
    Laguna,
    ExaoneMoe,
    /// SentencePiece-style BPE over raw UTF-8 with `▁` for spaces.
    Gemma4,
    SarvamMoe,
    /// Gemma 4's patterns, then every `▁` starts a word.
    Mmbert,
    Minicpm5,
    Whitespace,
}

/// What a `tokenizer.ggml.pre` name sets in llama.cpp's `load`, besides the type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreConfig {
    pub(crate) pre: Pre,
    /// A word that is a token is that token, unmerged.
    pub(crate) ignore_merges: bool,
    /// `detokenize` tidies spaces around punctuation.
    pub(crate) clean_spaces: bool,
    /// BOS is added unless the metadata says otherwise.
    pub(crate) add_bos: bool,
    /// Spaces become `▁` before the pre-tokenizer runs.
    pub(crate) escape_whitespaces: bool,
    pub(crate) add_sep: bool,
    /// The default BOS id is dropped (chatglm, glm4).
    pub(crate) no_default_bos: bool,
}

impl PreConfig {
    /// llama.cpp's `tokenizer.ggml.pre` → `LLAMA_VOCAB_PRE_TYPE_*` mapping with
    /// the flags each name sets; `None` where llama.cpp refuses the name.
    /// An empty name is llama.cpp's missing key: the default pre-tokenizer.
    pub(crate) fn from_name(name: &str) -> Option<PreConfig> {
        let base = |pre| PreConfig {
            pre,
            ignore_merges: false,
            clean_spaces: true,
            add_bos: false,
            escape_whitespaces: false,
            add_sep: false,
            no_default_bos: false,
        };
        let unclean = |pre| PreConfig {
            clean_spaces: false,
            ..base(pre)
        };
        Some(match name {
            "" | "default" => base(Pre::Default),
            "minicpm5" => PreConfig {
                ignore_merges: true,
                ..base(Pre::Minicpm5)
            },
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
            | "jina-v5-nano" => PreConfig {
                ignore_merges: true,
                add_bos: true,
                ..base(Pre::Llama3)
            },
            "deepseek-llm" => unclean(Pre::DeepseekLlm),
            "deepseek-coder" => unclean(Pre::DeepseekCoder),
            "deepseek-v3" => unclean(Pre::Deepseek3Llm),
            "spark2_5" => unclean(Pre::Spark2_5),
            "youtu" => PreConfig {
                ignore_merges: true,
                ..unclean(Pre::Youtu)
            },
            "falcon" => base(Pre::Falcon),
            "mpt" => base(Pre::Gpt2),
            "starcoder" => base(Pre::Starcoder),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0"
            | "mellum" | "modern-bert" => base(Pre::Gpt2),
            "jais-2" => base(Pre::Jais2),
            "gemma4" | "granite-embed-multi-311m" => PreConfig {
                escape_whitespaces: true,
                ..base(Pre::Gemma4)
            },
            "mmbert" => PreConfig {
                escape_whitespaces: true,
                ..base(Pre::Mmbert)
            },
            "sarvam-moe" => PreConfig {
                escape_whitespaces: true,
                ..unclean(Pre::SarvamMoe)
            },
            "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => PreConfig {
                add_sep: true,
                ..base(Pre::Gpt2)
            },
            "whitespace" => base(Pre::Whitespace),
            "refact" => base(Pre::Starcoder),
            "command-r" => unclean(Pre::Starcoder),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => unclean(Pre::Qwen2),
            "qwen35" => unclean(Pre::Qwen35),
            "stablelm2" => base(Pre::Qwen2),
            "olmo" => base(Pre::Gpt2),
            "dbrx" | "smaug-bpe" => base(Pre::Llama3),
            "poro-chat" => unclean(Pre::Bloom),
            "chatglm-bpe" => PreConfig {
                no_default_bos: true,
                ..base(Pre::Llama3)
            },
            "glm4" | "glm5" => PreConfig {
                no_default_bos: true,
                ignore_merges: true,
                ..base(Pre::Llama3)
            },
            "viking" => unclean(Pre::Viking),
            "jais" => base(Pre::Gpt2),
            "tekken" => PreConfig {
                ignore_merges: true,
                add_bos: true,
                ..unclean(Pre::Tekken)
            },
            "smollm" => unclean(Pre::Starcoder),
            "codeshell" => base(Pre::Starcoder),
            "bloom" | "gpt3-finnish" => base(Pre::Bloom),
            "exaone" => base(Pre::Starcoder),
            "exaone4" => base(Pre::Gpt2),
            "exaone-moe" => base(Pre::ExaoneMoe),
            "chameleon" => PreConfig {
                add_bos: true,
                ..unclean(Pre::Chameleon)
            },
            "minerva-7b" => base(Pre::Starcoder),
            "megrez" => base(Pre::Qwen2),
            "gpt-4o" | "llama4" | "kanana2" | "talkie" => unclean(Pre::Gpt4o),
            "granite-embed-multi-97m" => PreConfig {
                ignore_merges: true,
                ..unclean(Pre::GraniteEmbMulti)
            },
            "tiny_aya" | "cohere2moe" => unclean(Pre::TinyAya),
            "superbpe" => unclean(Pre::Superbpe),
            "trillion" | "granite-docling" => unclean(Pre::Gpt2),
            "bailingmoe" | "bailingmoe2" | "llada-moe" => unclean(Pre::Bailingmoe),
            "seed-coder" => unclean(Pre::SeedCoder),
            "hunyuan" => unclean(Pre::Qwen2),
            "hunyuan-dense" | "hy_v4" | "joyai-llm" => unclean(Pre::Deepseek3Llm),
            "kimi-k2" => unclean(Pre::KimiK2),
            "ufakzeka" => unclean(Pre::Ufakzeka),
            "grok-2" => unclean(Pre::Qwen2),
            "afmoe" => unclean(Pre::Afmoe),
            "laguna" => unclean(Pre::Laguna),
            "minimax-m2" => unclean(Pre::Gpt4o),
            "solar-open" => unclean(Pre::Qwen2),
            "mellum2" => base(Pre::Starcoder),
            _ => return None,
        })
    }
}

const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const CJK: &str = "[一-龥ࠀ-一가-퟿]+";
const NEWLINES: &str = "[^\\n]+|[\\n]+";

impl Pre {
    /// `llm_tokenizer_bpe`'s `regex_exprs` for this type, verbatim.
    fn patterns(self) -> Vec<String> {
        let owned = |patterns: &[&str]| patterns.iter().map(|p| p.to_string()).collect();
        match self {
            Pre::Llama3 => owned(&[LLAMA3]),
            Pre::Jais2 => owned(&["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"]),
            Pre::DeepseekLlm => owned(&[
                "[\r\n]",
                // Escaped: editors and tools that normalize text would change these code points.
                "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
                "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
                "\\s+$",
                CJK,
                "\\p{N}+",
            ]),
            Pre::Deepseek3Llm => owned(&[
                "\\p{N}{1,3}",
                "[一-龥぀-ゟ゠-ヿ]+",
                "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
            ]),
            Pre::Spark2_5 => owned(&[
                "\\p{N}{1,3}",
                "[一-龥぀-ゟ゠-ヿ]+",
                "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
                "\\p{N}",
            ]),
            Pre::Youtu => owned(&[
                "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
                "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
            ]),
            Pre::DeepseekCoder => owned(&["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK, "\\p{N}"]),
            Pre::Falcon => owned(&["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"]),
            Pre::Starcoder => owned(&["\\p{N}", GPT2]),
            Pre::Gpt2 => owned(&[GPT2]),
            Pre::Qwen2 => owned(&[QWEN2]),
            Pre::Qwen35 => owned(&["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]),
            Pre::Bloom => owned(&[" ?[^(\\s|.,!?…。，、।۔،)]+"]),
            Pre::Viking => owned(&[" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"]),
            Pre::Tekken => owned(&["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]),
            Pre::Chameleon => owned(&[
                "<sentinel:[0-9]+>",
                "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                "([\\t\\n]|    |  )",
                "\\p{N}",
                "[\\p{P}!-/:-@\\[-`{-~]",
                GPT2,
            ]),
            Pre::Gpt4o => owned(&["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]),
            Pre::GraniteEmbMulti => owned(&["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]),
            Pre::TinyAya => owned(&[
                "\\d{1,3}(?=(?:\\d{3})*\\b)",
                "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
            ]),
            Pre::KimiK2 => owned(&["\\p{Han}+"]),
            Pre::Superbpe => owned(&["\\p{N}+", "(?=(\\d{3})+(?!\\d))"]),
            Pre::Bailingmoe => owned(&["'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"]),
            Pre::SeedCoder => owned(&["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]),
            Pre::Ufakzeka => owned(&["[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]),
            Pre::Afmoe => owned(&[
                "\\p{AFMoE_digits}",
                "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
                "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
            ]),
            Pre::Laguna => owned(&[NEWLINES, QWEN2]),
            Pre::ExaoneMoe => owned(&["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"]),
            Pre::Gemma4 | Pre::SarvamMoe | Pre::Mmbert => owned(&[NEWLINES]),
            Pre::Minicpm5 => owned(&[
                "\\p{N}{1,3}",
                "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
            ]),
            Pre::Whitespace => owned(&["\\S+"]),
            Pre::Default => owned(&[
                "[\\p{P}\\$\\+<=>\\^~\\|]+",
                GPT2,
                "\\p{N}+",
                "[0-9][0-9][0-9]",
            ]),
        }
    }

    /// `byte_encode`: whether words are GPT-2 byte-encoded before merging
    /// (otherwise they stay UTF-8 and bytes fall back to `<0xXX>` tokens).
    fn byte_encode(self) -> bool {
        !matches!(self, Pre::Gemma4 | Pre::SarvamMoe | Pre::Mmbert | Pre::Whitespace)
    }
}

pub(crate) struct Bpe {
    pre: Pre,
    ignore_merges: bool,
    /// `tokenizer.ggml.model = "whitespace"`: whitespace only separates words.
    whitespace_model: bool,
    splitter: Splitter,
    /// Every string that appears on either side of a merge, interned.
    pieces: HashMap<Vec<u8>, u32>,
    /// `(left, right)` interned → rank (the merge's line number).
    ranks: HashMap<(u32, u32), u32>,
    byte_level: ByteLevel,
}

/// `▁`, SentencePiece's escaped space.
const ESCAPED_SPACE: &str = "\u{2581}";

impl Bpe {
    pub(crate) fn new(config: &PreConfig, merges: &[String], whitespace_model: bool) -> Result<Bpe, PatternError> {
        let mut pieces = HashMap::new();
        let mut ranks = HashMap::with_capacity(merges.len());
        for (rank, merge) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte; a line
            // without one maps ("", "") and so can never apply.
            let Some(space) = merge.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let mut intern = |s: &str| {
                let next = pieces.len() as u32;
                *pieces.entry(s.as_bytes().to_vec()).or_insert(next)
            };
            let pair = (intern(&merge[..space]), intern(&merge[space + 1..]));
            // The first rank wins, as with llama.cpp's unordered_map::emplace.
            ranks.entry(pair).or_insert(rank as u32);
        }
        let patterns = config.pre.patterns();
        let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
        Ok(Bpe {
            pre: config.pre,
            ignore_merges: config.ignore_merges,
            whitespace_model,
            splitter: Splitter::new(&patterns)?,
            pieces,
            ranks,
            byte_level: ByteLevel::new(),
        })
    }

    pub(crate) fn byte_level(&self) -> &ByteLevel {
        &self.byte_level
    }

    /// Tokenizes one text fragment: `llm_tokenizer_bpe_session::tokenize`, or
    /// for the whitespace model `llm_tokenizer_whitespace_session`'s, which
    /// drops whitespace, lowercases as the normalizer says and runs the BPE
    /// session on each run of the rest.
    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) {
        if !self.whitespace_model {
            return self.tokenize_words(vocab, text, out);
        }
        let mut segment = Vec::new();
        for cp in code_points(text) {
            if Flags::of_code_point(cp).is_whitespace() {
                if !segment.is_empty() {
                    self.tokenize_words(vocab, &segment, out);
                    segment.clear();
                }
            } else {
                push_utf8(if vocab.lowercase { to_lower(cp) } else { cp }, &mut segment);
            }
        }
        if !segment.is_empty() {
            self.tokenize_words(vocab, &segment, out);
        }
    }

    /// `llm_tokenizer_bpe_session::tokenize` of one text fragment. The words
    /// are built from the code points llama.cpp decodes, so invalid UTF-8
    /// arrives as U+FFFD.
    fn tokenize_words(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<u32>) {
        let cpts = code_points(text);
        let mut words: Vec<Vec<u8>> = self
            .splitter
            .split(&cpts)
            .into_iter()
            .map(|range| {
                let mut word = Vec::new();
                for &cp in &cpts[range] {
                    push_utf8(cp, &mut word);
                }
                word
            })
            .collect();
        if self.pre == Pre::Mmbert {
            words = metaspace_words(words);
        }
        let byte_encode = self.pre.byte_encode();
        let mut encoded = Vec::new();
        for word in &words {
            let word = if byte_encode {
                encoded.clear();
                self.byte_level.encode(word, &mut encoded);
                &encoded
            } else {
                word
            };
            self.merge_word(vocab, word, byte_encode, out);
        }
    }

    fn rank(&self, left: &[u8], right: &[u8]) -> Option<u32> {
        let pair = (*self.pieces.get(left)?, *self.pieces.get(right)?);
        self.ranks.get(&pair).copied()
    }

    fn merge_word(&self, vocab: &Vocab, word: &[u8], byte_encode: bool, out: &mut Vec<u32>) {
        let whole_word_token = self.ignore_merges
            // Gemma 4's newline runs are tokens of their own, never merged.
            || (matches!(self.pre, Pre::Gemma4 | Pre::Mmbert) && word.iter().all(|&b| b == b'\n'));
        if whole_word_token {
            if let Some(id) = vocab.id(word) {
                out.push(id);
                return;
            }
        }
        // Lower ranks merge first.
        let symbols = merge(word, |left, right, _| self.rank(left, right).map(Reverse));
        for range in symbols {
            let text = &word[range];
            match vocab.id(text) {
                Some(id) => out.push(id),
                // Only when the vocabulary lacks a byte char or a merge's
                // result; llama.cpp then looks up each byte alone (`<0xXX>`
                // without byte encoding) and drops the ones it lacks.
                None if byte_encode => out.extend(text.iter().filter_map(|&b| vocab.id([b]))),
                None => out.extend(text.iter().filter_map(|b| vocab.id(format!("<0x{b:02X}>")))),
            }
        }
    }
}

/// mmBERT's Metaspace step: a word that is not all newlines starts with `▁`
/// (one is added if missing) and is cut before every further `▁`.
fn metaspace_words(words: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let space = ESCAPED_SPACE.as_bytes();
    let mut out = Vec::new();
    for mut word in words {
        if word.iter().all(|&b| b == b'\n') {
            out.push(word);
            continue;
        }
        if !word.starts_with(space) {
            word.splice(0..0, space.iter().copied());
        }
        let mut start = 0;
        while start < word.len() {
            let end = memchr::memmem::find(&word[start + space.len()..], space)
                .map_or(word.len(), |p| p + start + space.len());
            out.push(word[start..end].to_vec());
            start = end;
        }
    }
    out
}
