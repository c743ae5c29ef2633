//! The vocabulary keys of a BERT GGUF, as `BertModel.set_vocab` writes them:
//! `get_vocab_base` (tokens and their types, as transformers' `AutoTokenizer`
//! lists them), `get_vocab_base_pre` (the pre-tokenizer's name from the
//! fingerprint of the check text's ids), the phantom-space rewrite, and
//! gguf-py's `SpecialVocab` (special token ids, add_bos/add_eos/add_sep, the
//! chat template and the normalizer flags).

use std::collections::HashMap;
use std::path::Path;

use elelem_gguf::Value as Gguf;
use serde_json::{Map, Value};

use crate::wordpiece::{self, BertNormalizer, WordPiece};
use crate::{ConvertError, Kv, Result};

/// gguf-py's `TokenType`.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// An entry of tokenizer.json's `added_tokens`.
#[derive(Debug, Clone)]
struct Added {
    id: u32,
    content: String,
    special: bool,
    normalized: bool,
}

/// The tokenizer files of a model directory.
pub(crate) struct TokenizerFiles {
    path: String,
    json: Value,
    /// tokenizer_config.json, when there is one (Python's `None` otherwise).
    config: Option<Map<String, Value>>,
    special_tokens_map: Option<Map<String, Value>>,
    vocab: HashMap<String, u32>,
    added: Vec<Added>,
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|source| ConvertError::Io {
        path: shown.clone(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|e| ConvertError::Invalid {
        path: shown,
        why: format!("not valid JSON: {e}"),
    })
}

fn read_json_object(path: &Path) -> Result<Option<Map<String, Value>>> {
    if !path.is_file() {
        return Ok(None);
    }
    match read_json(path)? {
        Value::Object(m) => Ok(Some(m)),
        _ => Err(ConvertError::Invalid {
            path: path.display().to_string(),
            why: "not a JSON object".into(),
        }),
    }
}

/// Python's truthiness of a JSON value.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// The content of a special-token entry: a string or an AddedToken object.
fn token_content(v: Option<&Value>) -> Option<&str> {
    match v {
        Some(Value::String(s)) => Some(s),
        Some(Value::Object(o)) => o.get("content").and_then(Value::as_str),
        _ => None,
    }
}

impl TokenizerFiles {
    pub(crate) fn open(dir: &Path) -> Result<TokenizerFiles> {
        let file = dir.join("tokenizer.json");
        let path = file.display().to_string();
        if !file.is_file() {
            return Err(ConvertError::Missing {
                path,
                what: "the Hugging Face tokenizer (tokenizer.json); only fast-tokenizer files convert".into(),
            });
        }
        let json = read_json(&file)?;
        let bad = |why: String| ConvertError::Invalid {
            path: path.clone(),
            why,
        };
        let model = json.get("model").ok_or_else(|| bad("no \"model\"".into()))?;
        let kind = model.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "WordPiece" {
            return Err(ConvertError::Unsupported {
                path,
                why: format!("a {kind:?} tokenizer; only WordPiece (BERT) vocabularies convert"),
            });
        }
        let vocab = model
            .get("vocab")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("the WordPiece model has no vocab".into()))?
            .iter()
            .map(|(k, v)| {
                let id = v.as_u64().and_then(|id| u32::try_from(id).ok());
                id.map(|id| (k.clone(), id))
                    .ok_or_else(|| bad(format!("token {k:?} has no id")))
            })
            .collect::<Result<HashMap<_, _>>>()?;
        let mut added = Vec::new();
        for t in json.get("added_tokens").and_then(Value::as_array).into_iter().flatten() {
            let id = t
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| u32::try_from(id).ok());
            let content = t.get("content").and_then(Value::as_str);
            let (Some(id), Some(content)) = (id, content) else {
                return Err(bad(format!("an added token without id or content: {t}")));
            };
            added.push(Added {
                id,
                content: content.to_string(),
                special: t.get("special").and_then(Value::as_bool).unwrap_or(false),
                normalized: t.get("normalized").and_then(Value::as_bool).unwrap_or(true),
            });
        }
        Ok(TokenizerFiles {
            path,
            json,
            config: read_json_object(&dir.join("tokenizer_config.json"))?,
            special_tokens_map: read_json_object(&dir.join("special_tokens_map.json"))?,
            vocab,
            added,
        })
    }

    fn bad(&self, why: String) -> ConvertError {
        ConvertError::Invalid {
            path: self.path.clone(),
            why,
        }
    }

    fn unsupported(&self, why: String) -> ConvertError {
        ConvertError::Unsupported {
            path: self.path.clone(),
            why,
        }
    }

    /// The added tokens as transformers' fast tokenizer holds them: tokenizer.json's,
    /// with tokenizer_config.json's `added_tokens_decoder` flags, plus the special
    /// tokens the configs name (bos/eos/unk/sep/pad/cls/mask, additional_special_tokens),
    /// which transformers adds as special tokens.
    fn added_tokens(&self) -> Result<Vec<Added>> {
        let mut added = self.added.clone();
        if let Some(decoder) = self
            .config
            .as_ref()
            .and_then(|c| c.get("added_tokens_decoder"))
            .and_then(Value::as_object)
        {
            for (id, entry) in decoder {
                let Ok(id) = id.parse::<u32>() else { continue };
                if let Some(a) = added.iter_mut().find(|a| a.id == id) {
                    if let Some(s) = entry.get("special").and_then(Value::as_bool) {
                        a.special = s;
                    }
                    if let Some(n) = entry.get("normalized").and_then(Value::as_bool) {
                        a.normalized = n;
                    }
                }
            }
        }
        let mut named: Vec<String> = Vec::new();
        for map in [self.special_tokens_map.as_ref(), self.config.as_ref()]
            .into_iter()
            .flatten()
        {
            for typ in ["bos", "eos", "unk", "sep", "pad", "cls", "mask"] {
                if let Some(c) = token_content(map.get(&format!("{typ}_token"))) {
                    named.push(c.to_string());
                }
            }
            for t in map
                .get("additional_special_tokens")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(c) = token_content(Some(t)) {
                    named.push(c.to_string());
                }
            }
        }
        for content in named {
            if let Some(a) = added.iter_mut().find(|a| a.content == content) {
                a.special = true;
            } else if let Some(&id) = self.vocab.get(&content) {
                added.push(Added {
                    id,
                    content,
                    special: true,
                    normalized: false,
                });
            } else {
                return Err(self.unsupported(format!(
                    "the special token {content:?} is not in the vocabulary (transformers would append it)"
                )));
            }
        }
        Ok(added)
    }

    /// BertNormalizer's switches as transformers' `BertTokenizerFast` uses them:
    /// tokenizer.json's, replaced by tokenizer_config.json's `do_lower_case`,
    /// `strip_accents` and `tokenize_chinese_chars` when they disagree.
    fn normalizer(&self) -> Result<BertNormalizer> {
        let n = self.json.get("normalizer").and_then(Value::as_object);
        let Some(n) = n.filter(|n| n.get("type").and_then(Value::as_str) == Some("BertNormalizer")) else {
            return Err(self.unsupported(format!(
                "normalizer {}; only BertNormalizer is known",
                self.json.get("normalizer").map_or("null".into(), Value::to_string)
            )));
        };
        let flag = |k: &str, default: bool| n.get(k).and_then(Value::as_bool).unwrap_or(default);
        let mut norm = BertNormalizer {
            clean_text: flag("clean_text", true),
            handle_chinese_chars: flag("handle_chinese_chars", true),
            strip_accents: n.get("strip_accents").and_then(Value::as_bool),
            lowercase: flag("lowercase", true),
        };
        let class = self
            .config
            .as_ref()
            .and_then(|c| c.get("tokenizer_class"))
            .and_then(Value::as_str)
            .unwrap_or("BertTokenizer");
        if class.starts_with("BertTokenizer") {
            let c = self.config.clone().unwrap_or_default();
            let do_lower_case = c.get("do_lower_case").and_then(Value::as_bool).unwrap_or(true);
            let strip_accents = c.get("strip_accents").and_then(Value::as_bool);
            let chinese = c.get("tokenize_chinese_chars").and_then(Value::as_bool).unwrap_or(true);
            if norm.lowercase != do_lower_case
                || norm.strip_accents != strip_accents
                || norm.handle_chinese_chars != chinese
            {
                norm.lowercase = do_lower_case;
                norm.strip_accents = strip_accents;
                norm.handle_chinese_chars = chinese;
            }
        }
        Ok(norm)
    }

    /// The special-token ids the post-processor puts around one sequence.
    fn post_processor_wrap(&self) -> Result<(Vec<u32>, Vec<u32>)> {
        let Some(pp) = self.json.get("post_processor").filter(|p| !p.is_null()) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let kind = pp.get("type").and_then(Value::as_str).unwrap_or("");
        let pair_id = |key: &str| -> Result<u32> {
            pp.get(key)
                .and_then(Value::as_array)
                .and_then(|a| a.get(1))
                .and_then(Value::as_u64)
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| self.bad(format!("{kind} without {key}")))
        };
        match kind {
            "BertProcessing" | "RobertaProcessing" => Ok((vec![pair_id("cls")?], vec![pair_id("sep")?])),
            "TemplateProcessing" => {
                let single = pp.get("single").and_then(Value::as_array).cloned().unwrap_or_default();
                let (mut before, mut after, mut seen) = (Vec::new(), Vec::new(), false);
                for item in &single {
                    if let Some(id) = item
                        .get("SpecialToken")
                        .and_then(|s| s.get("id"))
                        .and_then(Value::as_str)
                    {
                        let ids = pp
                            .get("special_tokens")
                            .and_then(|s| s.get(id))
                            .and_then(|s| s.get("ids"))
                            .and_then(Value::as_array)
                            .ok_or_else(|| self.bad(format!("TemplateProcessing: no ids for {id:?}")))?;
                        let ids = ids
                            .iter()
                            .map(|i| i.as_u64().and_then(|i| u32::try_from(i).ok()))
                            .collect::<Option<Vec<u32>>>()
                            .ok_or_else(|| self.bad(format!("TemplateProcessing: bad ids for {id:?}")))?;
                        if seen { &mut after } else { &mut before }.extend(ids);
                    } else if item.get("Sequence").is_some() && !seen {
                        seen = true;
                    } else {
                        return Err(self.unsupported(format!("TemplateProcessing item {item}")));
                    }
                }
                Ok((before, after))
            }
            _ => Err(self.unsupported(format!("post-processor {kind:?}"))),
        }
    }

    /// `get_vocab_base_pre`: the fingerprint of the check text's ids, named.
    fn pre(&self, added: &[Added]) -> Result<String> {
        let pre = self
            .json
            .get("pre_tokenizer")
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str);
        if pre != Some("BertPreTokenizer") {
            return Err(self.unsupported(format!(
                "pre-tokenizer {}; only BertPreTokenizer is known",
                self.json.get("pre_tokenizer").map_or("null".into(), Value::to_string)
            )));
        }
        for a in added {
            if !a.content.is_empty() && crate::tables::CHKTXT.to_lowercase().contains(&a.content.to_lowercase()) {
                return Err(self.unsupported(format!(
                    "the added token {:?} occurs in the check text, which this converter cannot tokenize",
                    a.content
                )));
            }
        }
        let model = &self.json["model"];
        let wp = WordPiece {
            vocab: &self.vocab,
            unk_token: model.get("unk_token").and_then(Value::as_str).unwrap_or("[UNK]"),
            prefix: model
                .get("continuing_subword_prefix")
                .and_then(Value::as_str)
                .unwrap_or("##"),
            max_input_chars_per_word: model
                .get("max_input_chars_per_word")
                .and_then(Value::as_u64)
                .map_or(100, |n| n as usize),
        };
        let (before, after) = self.post_processor_wrap()?;
        let ids = wordpiece::encode_check_text(&self.normalizer()?, &wp, &before, &after).map_err(|e| self.bad(e))?;
        let chkhsh = wordpiece::check_hash(&ids);
        wordpiece::pre_name(&chkhsh).map(str::to_string).ok_or_else(|| {
            self.unsupported(format!(
                "llama.cpp's converter does not know this tokenizer (chkhsh {chkhsh}): its \
                 get_vocab_base_pre raises NotImplementedError, and so does this one"
            ))
        })
    }

    /// `BertModel.set_vocab` up to `SpecialVocab`: the token type count, the
    /// tokenizer model and pre-tokenizer, the phantom-space tokens and their types.
    pub(crate) fn write_vocab(
        &self,
        kv: &mut Kv,
        vocab_size: u32,
        type_vocab_size: u32,
        pre: Option<&str>,
    ) -> Result<usize> {
        let added = self.added_tokens()?;
        let pre = match pre {
            Some(p) => p.to_string(),
            None => self.pre(&added)?,
        };
        // get_vocab_base: tokenizer.vocab (the model's and the added tokens) by id.
        let mut reverse: HashMap<u32, &str> = self.vocab.iter().map(|(t, &id)| (id, t.as_str())).collect();
        for a in &added {
            reverse.insert(a.id, &a.content);
        }
        if let Some(&max) = reverse.keys().max() {
            if max >= vocab_size {
                return Err(self.bad(format!(
                    "token id {max} is not below the config's vocab_size {vocab_size}"
                )));
            }
        }
        let mut tokens = Vec::with_capacity(vocab_size as usize);
        let mut types = Vec::with_capacity(vocab_size as usize);
        for i in 0..vocab_size {
            let Some(&token) = reverse.get(&i) else {
                tokens.push(format!("[PAD{i}]"));
                types.push(UNUSED);
                continue;
            };
            let (token, ty) = match added.iter().find(|a| a.id == i) {
                // A non-normalized added token is re-encoded and decoded by transformers
                // first; for a whole added token that gives it back unchanged.
                Some(a) if a.special || looks_special(token) => (token.to_string(), CONTROL),
                Some(_) => (token.replace('\u{2581}', " "), USER_DEFINED),
                None => (token.to_string(), NORMAL),
            };
            tokens.push(token);
            types.push(ty);
        }
        kv.add("tokenizer.ggml.token_type_count", Gguf::U32(type_vocab_size));
        // The phantom-space vocabulary: word starts get U+2581, continuations lose "##".
        let tokens: Vec<Gguf> = tokens
            .into_iter()
            .zip(&types)
            .map(|(t, &ty)| {
                Gguf::String(if ty == CONTROL {
                    t
                } else if let Some(rest) = t.strip_prefix("##") {
                    rest.to_string()
                } else {
                    format!("\u{2581}{t}")
                })
            })
            .collect();
        let n = tokens.len();
        kv.add_string("tokenizer.ggml.model", "bert");
        kv.add_string("tokenizer.ggml.pre", &pre);
        kv.add_array("tokenizer.ggml.tokens", tokens);
        kv.add_array("tokenizer.ggml.token_type", types.into_iter().map(Gguf::I32).collect());
        Ok(n)
    }

    /// gguf-py's `SpecialVocab(dir, n_vocab=n).add_to_gguf`, without merges.
    pub(crate) fn write_special_vocab(&self, dir: &Path, kv: &mut Kv, n_vocab: usize) -> Result<()> {
        let mut sv = SpecialVocab {
            n_vocab,
            types: ["bos", "eos", "unk", "sep", "pad", "cls", "mask"]
                .map(String::from)
                .to_vec(),
            ids: Vec::new(),
            add: Vec::new(),
            path: self.path.clone(),
        };
        let mut lowercase = None;
        let mut strip_accents = None;
        if let Some(n) = self.json.get("normalizer") {
            parse_normalizer(n, &mut lowercase, &mut strip_accents);
        }
        let mut config = self.config.clone();
        self.special_from_tokenizer_json(&mut sv, &mut config);
        let mut chat_template: Option<String> = None;
        if let Some(config) = config.as_ref().filter(|c| !c.is_empty()) {
            chat_template = chat_template_of(dir, config)?;
            for typ in sv.types.clone() {
                if let Some(b) = config.get(&format!("add_{typ}_token")).and_then(Value::as_bool) {
                    if !sv.add.iter().any(|(t, _)| *t == typ) {
                        sv.add.push((typ.clone(), b));
                    }
                }
                let Some(content) = token_content(config.get(&format!("{typ}_token"))) else {
                    continue;
                };
                let id = self.added.iter().find(|a| a.content == content).map(|a| a.id);
                sv.set(&typ, id.map(i64::from))?;
            }
        }
        // _try_load_from_config_json
        let config_json = dir.join("config.json");
        if config_json.is_file() {
            let cfg = read_json(&config_json)?;
            for typ in sv.types.clone() {
                let key = format!("{typ}_token_id");
                let mut id = cfg.get(&key).filter(|v| !v.is_null());
                if id.is_none() {
                    id = cfg.get("text_config").and_then(|t| t.get(&key));
                }
                sv.set(&typ, id.and_then(Value::as_i64))?;
            }
        }
        // add_to_gguf
        for (typ, id) in &sv.ids {
            let key = match typ.as_str() {
                "bos" => "tokenizer.ggml.bos_token_id",
                "eos" => "tokenizer.ggml.eos_token_id",
                "unk" => "tokenizer.ggml.unknown_token_id",
                "sep" => "tokenizer.ggml.seperator_token_id",
                "pad" => "tokenizer.ggml.padding_token_id",
                "mask" => "tokenizer.ggml.mask_token_id",
                "eot" => "tokenizer.ggml.eot_token_id",
                "eom" => "tokenizer.ggml.eom_token_id",
                // gguf-py has no add_cls_token_id: it warns and skips the cls id.
                _ => continue,
            };
            kv.add(key, Gguf::U32(*id));
        }
        for (typ, value) in &sv.add {
            let key = match typ.as_str() {
                "bos" => "tokenizer.ggml.add_bos_token",
                "eos" => "tokenizer.ggml.add_eos_token",
                "sep" => "tokenizer.ggml.add_sep_token",
                _ => continue,
            };
            kv.add(key, Gguf::Bool(*value));
        }
        if let Some(t) = chat_template {
            kv.add_string("tokenizer.chat_template", &t);
        }
        if let Some(b) = lowercase {
            kv.add("tokenizer.ggml.normalizer.lowercase", Gguf::Bool(b));
        }
        if let Some(b) = strip_accents {
            kv.add("tokenizer.ggml.normalizer.strip_accents", Gguf::Bool(b));
        }
        Ok(())
    }

    /// `_try_load_from_tokenizer_json`'s reading of the configs and of the
    /// post-processor (which decides add_bos/add_eos/add_sep), line by line.
    fn special_from_tokenizer_json(&self, sv: &mut SpecialVocab, config: &mut Option<Map<String, Value>>) {
        let get = |c: &Option<Map<String, Value>>, k: &str| c.as_ref().and_then(|c| c.get(k)).cloned();
        let mut special_bos = get(config, "bos_token");
        let mut special_cls = get(config, "cls_token");
        let mut special_eos = get(config, "eos_token");
        let mut special_sep = get(config, "sep_token");
        let config_truthy = |c: &Option<Map<String, Value>>| c.as_ref().is_some_and(|c| !c.is_empty());
        if !truthy(special_bos.as_ref()) && truthy(special_cls.as_ref()) && config_truthy(config) {
            special_bos = special_cls.clone();
            config
                .as_mut()
                .unwrap()
                .insert("bos_token".into(), special_bos.clone().unwrap());
        }
        if !truthy(special_eos.as_ref()) && truthy(special_sep.as_ref()) && config_truthy(config) {
            special_eos = special_sep.clone();
            config
                .as_mut()
                .unwrap()
                .insert("eos_token".into(), special_eos.clone().unwrap());
        }
        let Some(pp) = self.json.get("post_processor").filter(|p| truthy(Some(p))) else {
            return;
        };
        let processors: Vec<&Value> = match pp.get("processors").and_then(Value::as_array) {
            Some(list) => list.iter().collect(),
            None => vec![pp],
        };
        let set_add = |sv: &mut SpecialVocab, typ: &str, v: bool, only_default: bool| {
            if let Some(e) = sv.add.iter_mut().find(|(t, _)| t == typ) {
                if !only_default {
                    e.1 = v;
                }
            } else {
                sv.add.push((typ.to_string(), v));
            }
        };
        let same = |a: &Option<Value>, b: &Option<Value>| a.as_ref().filter(|v| !v.is_null()) == b.as_ref();
        for processor in processors {
            match processor.get("type").and_then(Value::as_str) {
                Some("ByteLevel") => {
                    set_add(sv, "bos", false, true);
                    set_add(sv, "eos", false, true);
                }
                Some("RobertaProcessing") => {
                    set_add(sv, "bos", true, false);
                    set_add(sv, "eos", true, false);
                    set_add(sv, "sep", true, false);
                    if !truthy(special_cls.as_ref()) && config_truthy(config) {
                        special_cls = processor
                            .get("cls")
                            .and_then(|c| c.get(0))
                            .cloned()
                            .or(special_bos.clone());
                        config
                            .as_mut()
                            .unwrap()
                            .insert("cls_token".into(), special_cls.clone().unwrap_or(Value::Null));
                    }
                    if !truthy(special_sep.as_ref()) && config_truthy(config) {
                        special_sep = processor
                            .get("sep")
                            .and_then(|c| c.get(0))
                            .cloned()
                            .or(special_eos.clone());
                        config
                            .as_mut()
                            .unwrap()
                            .insert("sep_token".into(), special_sep.clone().unwrap_or(Value::Null));
                    }
                }
                Some("TemplateProcessing") => {
                    let empty = Vec::new();
                    let single = processor.get("single").and_then(Value::as_array).unwrap_or(&empty);
                    let pair = processor.get("pair").and_then(Value::as_array).unwrap_or(&empty);
                    let special_id = |item: Option<&Value>| {
                        item.and_then(|i| i.get("SpecialToken"))
                            .and_then(|s| s.get("id"))
                            .filter(|v| truthy(Some(v)))
                            .cloned()
                    };
                    let mut special_first = None;
                    let mut special_last = None;
                    if single.len() > 1 {
                        special_first = special_id(single.first());
                        if let Some(first) = &special_first {
                            let first = Some(first.clone());
                            let known = same(&special_bos, &first) || same(&special_cls, &first);
                            if !config_truthy(config) {
                                special_bos = first.clone();
                            } else if !known {
                                if !truthy(special_bos.as_ref()) {
                                    special_bos = first.clone();
                                    config
                                        .as_mut()
                                        .unwrap()
                                        .insert("bos_token".into(), first.clone().unwrap());
                                }
                                if !truthy(special_cls.as_ref()) {
                                    special_cls = first.clone();
                                    config
                                        .as_mut()
                                        .unwrap()
                                        .insert("cls_token".into(), first.clone().unwrap());
                                }
                            }
                            let known = same(&special_bos, &first) || same(&special_cls, &first);
                            set_add(sv, "bos", known, false);
                        }
                        special_last = special_id(single.last());
                        if let Some(last) = &special_last {
                            let last = Some(last.clone());
                            if !config_truthy(config) {
                                special_eos = last.clone();
                            } else if !same(&special_eos, &last) {
                                let c = config.as_mut().unwrap();
                                if !sv.types.iter().any(|t| t == "eot") {
                                    sv.types.push("eot".into());
                                    c.insert("eot_token".into(), special_eos.clone().unwrap_or(Value::Null));
                                } else if !sv.types.iter().any(|t| t == "eom") {
                                    sv.types.push("eom".into());
                                    c.insert("eom_token".into(), special_eos.clone().unwrap_or(Value::Null));
                                }
                                special_eos = last.clone();
                                c.insert("eos_token".into(), last.clone().unwrap());
                            }
                            set_add(sv, "eos", same(&special_eos, &last), false);
                        }
                    }
                    if !pair.is_empty() {
                        let first_matches = special_first.is_some() && special_id(pair.first()) == special_first;
                        let last_matches = special_last.is_some() && special_id(pair.last()) == special_last;
                        let start = usize::from(first_matches);
                        let stop = pair.len() - usize::from(last_matches);
                        let inner = if start <= stop { &pair[start..stop] } else { &pair[0..0] };
                        if !inner.is_empty() {
                            let (a, b) = (sequence_id(&inner[0]), sequence_id(&inner[inner.len() - 1]));
                            if a == Some("A") && b == Some("B") && inner.len() > 2 {
                                let middle = &inner[1..inner.len() - 1];
                                let sep_or_eos = |id: &Option<Value>| same(&special_sep, id) || same(&special_eos, id);
                                let mut add_sep = false;
                                let entry = special_id(middle.first());
                                if entry.is_some() && sep_or_eos(&entry) && special_last.is_none() {
                                    add_sep = true;
                                }
                                if middle.len() == 2 {
                                    let entry = special_id(middle.get(1));
                                    if entry.is_some() && sep_or_eos(&entry) {
                                        add_sep = true;
                                    }
                                }
                                set_add(sv, "sep", add_sep, false);
                                if add_sep && !truthy(special_sep.as_ref()) && config_truthy(config) {
                                    config
                                        .as_mut()
                                        .unwrap()
                                        .insert("sep_token".into(), special_eos.clone().unwrap_or(Value::Null));
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// A TemplateProcessing item's sequence id ("A", "B").
fn sequence_id(item: &Value) -> Option<&str> {
    item.get("Sequence").and_then(|s| s.get("id")).and_then(Value::as_str)
}

/// `does_token_look_special`.
fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// `SpecialVocab._parse_normalizer`.
fn parse_normalizer(n: &Value, lowercase: &mut Option<bool>, strip_accents: &mut Option<bool>) {
    match n.get("type").and_then(Value::as_str) {
        Some("Lowercase") => *lowercase = Some(true),
        Some("StripAccents") => *strip_accents = Some(true),
        Some("BertNormalizer") => {
            if let Some(v) = n.get("lowercase") {
                *lowercase = v.as_bool();
            }
            if let Some(v) = n.get("strip_accents") {
                *strip_accents = v.as_bool();
            }
        }
        Some("Sequence") => {
            for inner in n.get("normalizers").and_then(Value::as_array).into_iter().flatten() {
                parse_normalizer(inner, lowercase, strip_accents);
            }
        }
        _ => {}
    }
}

/// The chat template `SpecialVocab` finds: tokenizer_config.json's, else
/// chat_template.jinja, else chat_template.json's. Lists of named templates are refused.
fn chat_template_of(dir: &Path, config: &Map<String, Value>) -> Result<Option<String>> {
    let unsupported = |path: &Path| ConvertError::Unsupported {
        path: path.display().to_string(),
        why: "lists of named chat templates do not convert".into(),
    };
    let jinja = dir.join("chat_template.jinja");
    let json = dir.join("chat_template.json");
    let alt = if jinja.is_file() {
        if dir.join("additional_chat_templates").is_dir() {
            return Err(unsupported(&jinja));
        }
        Some(Value::String(std::fs::read_to_string(&jinja).map_err(|source| {
            ConvertError::Io {
                path: jinja.display().to_string(),
                source,
            }
        })?))
    } else if json.is_file() {
        read_json(&json)?.get("chat_template").cloned()
    } else {
        None
    };
    match config.get("chat_template").cloned().or(alt) {
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Array(_)) => Err(unsupported(&dir.join("tokenizer_config.json"))),
        _ => Ok(None),
    }
}

struct SpecialVocab {
    n_vocab: usize,
    types: Vec<String>,
    /// In the order they were set (a Python dict's).
    ids: Vec<(String, u32)>,
    add: Vec<(String, bool)>,
    path: String,
}

impl SpecialVocab {
    /// `_set_special_token`: the first id set for a type stays.
    fn set(&mut self, typ: &str, id: Option<i64>) -> Result<()> {
        let Some(id) = id else { return Ok(()) };
        if id < 0 {
            return Err(ConvertError::Invalid {
                path: self.path.clone(),
                why: format!("invalid value for special token type {typ}: {id}"),
            });
        }
        if (id as u64) < self.n_vocab as u64 && !self.ids.iter().any(|(t, _)| t == typ) {
            self.ids.push((typ.to_string(), id as u32));
        }
        Ok(())
    }
}
