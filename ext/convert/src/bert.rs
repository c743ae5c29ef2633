//! `BertModel` of llama.cpp's converter (conversion/bert.py, on conversion/base.py's
//! `ModelBase` and `TextModel`): the tensor filter and names, the output types, and
//! the metadata in the order the script writes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use elelem_gguf::{GgufWriter, TensorType, Value as Gguf};
use serde_json::{Map, Value};

use crate::f16::{bf16_bits_to_f32, f16_bits_to_f32, f32_bits_to_f16_bits};
use crate::metadata::{path_name, Naming};
use crate::safetensors::{Dtype, SafeTensors};
use crate::tables::{BERT_BLOCK_TENSORS, BERT_TENSORS};
use crate::vocab::{read_json, TokenizerFiles};
use crate::{io_error, ConvertError, Kv, Options, OutType, Report, Result};

/// The `architectures` the script converts with `BertModel`.
const ARCHITECTURES: &[&str] = &[
    "BertModel",
    "BertForMaskedLM",
    "CamembertModel",
    "BertForSequenceClassification",
];

/// transformers' `BertConfig` defaults: `AutoConfig.from_pretrained(dir).to_dict()`
/// (the script's hparams) holds them for every key config.json leaves out.
fn bert_config_defaults() -> Map<String, Value> {
    let mut m = Map::new();
    for (k, v) in [
        ("vocab_size", Value::from(30522)),
        ("hidden_size", Value::from(768)),
        ("num_hidden_layers", Value::from(12)),
        ("num_attention_heads", Value::from(12)),
        ("intermediate_size", Value::from(3072)),
        ("max_position_embeddings", Value::from(512)),
        ("type_vocab_size", Value::from(2)),
        ("layer_norm_eps", Value::from(1e-12)),
    ] {
        m.insert(k.to_string(), v);
    }
    m
}

/// Config keys of other model families whose keys the script would add; a BERT has none.
const FOREIGN_KEYS: &[&str] = &[
    "text_config",
    "rope_parameters",
    "rope_scaling",
    "global_rope_theta",
    "rope_global_theta",
    "rope_theta_global",
    "rope_theta",
    "rotary_emb_base",
    "local_rope_theta",
    "rope_local_theta",
    "rope_theta_local",
    "swa_rope_theta",
    "rope_local_base_freq",
    "partial_rotary_factor",
    "rope_pct",
    "rope_percent",
    "original_max_position_embeddings",
    "rms_norm_eps",
    "norm_eps",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "num_experts_per_token",
    "top_k_experts",
    "n_group",
    "topk_group",
    "score_function",
    "scoring_func",
    "score_func",
    "moe_router_activation",
    "moe_router_activation_func",
    "expert_selection_fn",
    "head_dim",
    "quantization_config",
];

/// The model directory's config, as the script's hparams.
struct Config {
    path: String,
    h: Map<String, Value>,
    /// config.json's own `_name_or_path` (what `Metadata` reads).
    name_or_path: Option<String>,
}

impl Config {
    fn load(dir: &Path) -> Result<Config> {
        let file = dir.join("config.json");
        let path = file.display().to_string();
        if !file.is_file() {
            return Err(ConvertError::Missing {
                path,
                what: "the model's config (config.json)".into(),
            });
        }
        let Value::Object(raw) = read_json(&file)? else {
            return Err(ConvertError::Invalid {
                path,
                why: "not a JSON object".into(),
            });
        };
        let name_or_path = raw.get("_name_or_path").and_then(Value::as_str).map(str::to_string);
        let mut h = if raw.get("model_type").and_then(Value::as_str) == Some("bert") {
            bert_config_defaults()
        } else {
            Map::new()
        };
        h.extend(raw);
        let config = Config { path, h, name_or_path };
        let arch = config
            .h
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .unwrap_or("");
        if !ARCHITECTURES.contains(&arch) {
            return Err(config.unsupported(format!(
                "architecture {arch:?}; only BERT ({}) converts",
                ARCHITECTURES.join(", ")
            )));
        }
        if let Some(k) = FOREIGN_KEYS
            .iter()
            .find(|k| config.h.get(**k).is_some_and(|v| !v.is_null()))
        {
            return Err(config.unsupported(format!("config key {k:?}, which a BERT does not have")));
        }
        Ok(config)
    }

    fn invalid(&self, why: String) -> ConvertError {
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

    /// `find_hparam`: the first of `keys` present.
    fn find<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &Value)> {
        keys.iter().find_map(|k| self.h.get(*k).map(|v| (*k, v)))
    }

    fn find_u32(&self, keys: &[&str]) -> Result<Option<u32>> {
        match self.find(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.invalid(format!("{k} is {v}, not a count"))),
        }
    }

    fn require_u32(&self, keys: &[&str]) -> Result<u32> {
        self.find_u32(keys)?
            .ok_or_else(|| self.invalid(format!("could not find any of {keys:?}")))
    }

    /// id2label as transformers makes it (int keys; `num_labels` LABEL_i when absent),
    /// or nothing when it is the dummy two labels.
    fn classifier_labels(&self) -> Result<Option<Vec<String>>> {
        let mut labels: Vec<(i64, String)> = match self.h.get("id2label").and_then(Value::as_object) {
            Some(m) => m
                .iter()
                .map(|(k, v)| match (k.parse::<i64>(), v.as_str()) {
                    (Ok(i), Some(s)) => Ok((i, s.to_string())),
                    _ => Err(self.invalid(format!("id2label entry {k:?}: {v}"))),
                })
                .collect::<Result<_>>()?,
            None => {
                let n = self.h.get("num_labels").and_then(Value::as_u64).unwrap_or(2);
                (0..n as i64).map(|i| (i, format!("LABEL_{i}"))).collect()
            }
        };
        labels.sort();
        if labels.is_empty() || (labels.len() == 2 && labels.iter().any(|(i, l)| *i == 0 && l == "LABEL_0")) {
            return Ok(None);
        }
        Ok(Some(labels.into_iter().map(|(_, l)| l).collect()))
    }
}

/// `TensorNameMap(MODEL_ARCH.BERT, n_blocks).mapping`, built in the same order
/// with the same overwrites.
fn tensor_name_map(n_blocks: u32) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for (key, name, _) in BERT_TENSORS {
        map.insert(key.to_string(), name.to_string());
    }
    for bid in 0..n_blocks {
        let b = bid.to_string();
        for (key, name, _) in BERT_BLOCK_TENSORS {
            map.insert(key.replace("{bid}", &b), name.replace("{bid}", &b));
        }
    }
    map
}

/// `TensorNameMap.get_name(name, try_suffixes=(".weight", ".bias"))`.
fn map_tensor_name(map: &HashMap<String, String>, name: &str) -> Option<String> {
    if let Some(n) = map.get(name) {
        return Some(n.clone());
    }
    for suffix in [".weight", ".bias"] {
        if let Some(stem) = name.strip_suffix(suffix) {
            if let Some(n) = map.get(stem) {
                return Some(format!("{n}{suffix}"));
            }
        }
    }
    None
}

/// `BertModel.filter_tensors`, then `TextModel`'s and `ModelBase`'s: the name the
/// tensor goes by, or `None` for a tensor the script drops.
fn filter_tensor_name(name: &str) -> Option<String> {
    let mut name = name.strip_prefix("bert.").unwrap_or(name).to_string();
    if let Some(stem) = name.strip_suffix(".gamma") {
        name = format!("{stem}.weight");
    }
    if let Some(stem) = name.strip_suffix(".beta") {
        name = format!("{stem}.bias");
    }
    if matches!(
        name.as_str(),
        "embeddings.position_ids" | "pooler.dense.weight" | "pooler.dense.bias"
    ) || name.starts_with("cls.predictions")
        || name.starts_with("cls.seq_relationship")
    {
        return None;
    }
    // TextModel: multimodal tensors.
    const PREFIXES: &[&str] = &[
        "mlp",
        "vit.",
        "vpm.",
        "siglip2.",
        "conformer.",
        "merger.",
        "resampler.",
        "sound_encoder.",
        "sound_projection.",
        "speech_embeddings.",
    ];
    const PARTS: &[&str] = &[
        "visual.",
        "vision.",
        "audio.",
        "talker.",
        "vision_",
        "audio_",
        "token2wav.",
        "code2wav.",
        "projector.",
        "pre_mm_projector_norm",
        "image_newline",
        "view_seperator",
        "patch_embed",
        "patch_embedding",
        "patch_merger.",
        "patch_merge_mlp.",
        "model.connector.",
    ];
    if PREFIXES.iter().any(|p| name.starts_with(p)) || PARTS.iter().any(|p| name.contains(p)) {
        return None;
    }
    // ModelBase.
    if name.ends_with("e_score_correction_bias") {
        name = name.replace("e_score_correction_bias", "e_score_correction.bias");
    }
    if name.contains("language_model.") {
        name = name.replace("language_model.", "");
    }
    Some(name)
}

/// The safetensors file of the directory: the script reads every `model*.safetensors`;
/// one file is what this converter takes.
fn weights_file(dir: &Path) -> Result<PathBuf> {
    let mut parts: Vec<String> = std::fs::read_dir(dir)
        .map_err(io_error(dir))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("model") && n.ends_with(".safetensors"))
        .collect();
    parts.sort();
    let shown = dir.display().to_string();
    if dir.join("model.safetensors.index.json").is_file() || parts.len() > 1 {
        return Err(ConvertError::Unsupported {
            path: shown,
            why: format!("sharded weights ({}); one model.safetensors converts", parts.join(", ")),
        });
    }
    match parts.pop() {
        Some(p) => Ok(dir.join(p)),
        None => Err(ConvertError::Missing {
            path: shown,
            what: "the weights (model.safetensors; PyTorch .bin checkpoints do not convert)".into(),
        }),
    }
}

/// One tensor as it goes into the file.
struct OutTensor {
    name: String,
    /// Row-major shape (the script's numpy shape).
    shape: Vec<u64>,
    ty: TensorType,
    data: Vec<u8>,
}

/// The tensor's values as float32 bits, whatever its stored float type.
fn f32_bits(st: &SafeTensors, t: &crate::safetensors::Tensor) -> Vec<u32> {
    let bytes = st.bytes(t);
    match t.dtype {
        Dtype::Other(_) => unreachable!("refused before"),
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])).to_bits())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])).to_bits())
            .collect(),
    }
}

/// `prepare_tensors`: every tensor the script writes, in its order, converted.
fn prepare_tensors(st: &SafeTensors, config: &Config, n_blocks: u32, out_type: OutType) -> Result<Vec<OutTensor>> {
    // index_tensors: sorted safetensors names through filter_tensors; a later
    // tensor filtered to the same name replaces the earlier where it stands.
    let mut model_tensors: Vec<(String, usize)> = Vec::new();
    for (i, t) in st.tensors().iter().enumerate() {
        if let Some(name) = filter_tensor_name(&t.name) {
            match model_tensors.iter_mut().find(|(n, _)| *n == name) {
                Some(entry) => entry.1 = i,
                None => model_tensors.push((name, i)),
            }
        }
    }
    // The ftype heuristic of `--outtype auto`: the first matrix in BF16 or F16 decides.
    if out_type == OutType::F16 {
        let first_half = model_tensors
            .iter()
            .map(|&(_, i)| &st.tensors()[i])
            .find(|t| t.shape.len() >= 2 && matches!(t.dtype, Dtype::F16 | Dtype::BF16));
        if first_half.is_some_and(|t| t.dtype == Dtype::BF16) {
            return Err(ConvertError::Unsupported {
                path: st.path().to_string(),
                why: "a bfloat16 checkpoint: the script would write BF16 tensors, which this converter does not".into(),
            });
        }
    }
    let labels = config.classifier_labels()?;
    let names = tensor_name_map(n_blocks);
    let mut out = Vec::with_capacity(model_tensors.len());
    for (name, i) in model_tensors {
        if name.ends_with(".attention.masked_bias")
            || name.ends_with(".attention.bias")
            || name.ends_with(".rotary_emb.inv_freq")
        {
            continue;
        }
        let t = &st.tensors()[i];
        if let Dtype::Other(d) = &t.dtype {
            return Err(ConvertError::Unsupported {
                path: st.path().to_string(),
                why: format!("tensor {:?} is {d}; only F32, F16 and BF16 weights convert", t.name),
            });
        }
        let mut hf_name = name.clone();
        if labels.is_some() {
            if hf_name == "classifier.weight" {
                hf_name = "classifier.out_proj.weight".into();
            } else if hf_name == "classifier.bias" {
                hf_name = "classifier.out_proj.bias".into();
            }
        }
        let new_name = map_tensor_name(&names, &hf_name).ok_or_else(|| ConvertError::Unsupported {
            path: st.path().to_string(),
            why: format!("cannot map tensor {:?} to a llama.cpp BERT tensor", t.name),
        })?;
        let n_dims = t.shape.len();
        let f32_only = n_dims <= 1
            || new_name.ends_with("_norm.weight")
            || matches!(new_name.as_str(), "token_types.weight" | "position_embd.weight")
            || !(new_name.ends_with(".weight") || new_name.ends_with(".lora_a") || new_name.ends_with(".lora_b"));
        let ty = if f32_only || out_type == OutType::F32 {
            TensorType::F32
        } else {
            TensorType::F16
        };
        let data: Vec<u8> = match (ty == TensorType::F16, &t.dtype) {
            (false, Dtype::F32) | (true, Dtype::F16) => st.bytes(t).to_vec(),
            (false, _) => f32_bits(st, t).into_iter().flat_map(u32::to_le_bytes).collect(),
            (true, _) => f32_bits(st, t)
                .into_iter()
                .flat_map(|f| f32_bits_to_f16_bits(f).to_le_bytes())
                .collect(),
        };
        out.push(OutTensor {
            name: new_name,
            shape: t.shape.clone(),
            ty,
            data,
        });
    }
    Ok(out)
}

/// The shapes llama.cpp's BERT loader expects, checked before anything is written.
fn check_shapes(tensors: &[OutTensor], config: &Config, h: &Hparams) -> Result<()> {
    let shapes: HashMap<&str, &[u64]> = tensors.iter().map(|t| (t.name.as_str(), t.shape.as_slice())).collect();
    let (n_embd, n_ff) = (u64::from(h.n_embd), u64::from(h.n_ff));
    let mut want: Vec<(String, Vec<u64>)> = vec![
        ("token_embd.weight".into(), vec![u64::from(h.n_vocab), n_embd]),
        ("position_embd.weight".into(), vec![u64::from(h.n_ctx), n_embd]),
        ("token_types.weight".into(), vec![u64::from(h.n_token_types), n_embd]),
        ("token_embd_norm.weight".into(), vec![n_embd]),
        ("token_embd_norm.bias".into(), vec![n_embd]),
    ];
    for b in 0..h.n_layer {
        for (t, shape) in [
            ("attn_q", vec![n_embd, n_embd]),
            ("attn_k", vec![n_embd, n_embd]),
            ("attn_v", vec![n_embd, n_embd]),
            ("attn_output", vec![n_embd, n_embd]),
            ("ffn_up", vec![n_ff, n_embd]),
            ("ffn_down", vec![n_embd, n_ff]),
        ] {
            want.push((format!("blk.{b}.{t}.bias"), vec![shape[0]]));
            want.push((format!("blk.{b}.{t}.weight"), shape));
        }
        for t in ["attn_output_norm", "layer_output_norm"] {
            want.push((format!("blk.{b}.{t}.weight"), vec![n_embd]));
            want.push((format!("blk.{b}.{t}.bias"), vec![n_embd]));
        }
    }
    for (name, shape) in want {
        match shapes.get(name.as_str()) {
            None => return Err(config.invalid(format!("the weights have no tensor for {name}"))),
            Some(s) if *s != shape.as_slice() => {
                return Err(config.invalid(format!("{name} has shape {s:?}, but the config makes it {shape:?}")))
            }
            Some(_) => {}
        }
    }
    if h.n_head == 0 || !h.n_embd.is_multiple_of(h.n_head) {
        return Err(config.invalid(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            h.n_embd, h.n_head
        )));
    }
    Ok(())
}

struct Hparams {
    n_layer: u32,
    n_ctx: u32,
    n_embd: u32,
    n_ff: u32,
    n_head: u32,
    n_vocab: u32,
    n_token_types: u32,
}

/// `_try_set_pooling_type`: the sentence-transformers pooling module's mode.
fn pooling_type(dir: &Path) -> Result<Option<u32>> {
    let modules_file = dir.join("modules.json");
    if !modules_file.is_file() {
        return Ok(None);
    }
    let modules = read_json(&modules_file)?;
    let invalid = |why: String| ConvertError::Invalid {
        path: modules_file.display().to_string(),
        why,
    };
    let mut pooling_path = None;
    for m in modules.as_array().ok_or_else(|| invalid("not a JSON array".into()))? {
        let ty = m
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("module without type: {m}")))?;
        if ty.ends_with("Pooling") {
            pooling_path = Some(m.get("path").and_then(Value::as_str).unwrap_or("").to_string());
            break;
        }
    }
    let Some(pooling_path) = pooling_path else {
        return Ok(None);
    };
    let file = dir.join(&pooling_path).join("config.json");
    if !file.is_file() {
        return Err(ConvertError::Missing {
            path: file.display().to_string(),
            what: "the pooling module's config".into(),
        });
    }
    let p = read_json(&file)?;
    let on = |k: &str| {
        p.get(k)
            .is_some_and(|v| v.as_bool() == Some(true) || v.as_i64().is_some_and(|n| n != 0))
    };
    let ty = if on("pooling_mode_mean_tokens") {
        1
    } else if on("pooling_mode_cls_token") {
        2
    } else if on("pooling_mode_lasttoken") {
        3
    } else {
        match p.get("pooling_mode").and_then(Value::as_str) {
            Some("mean") => 1,
            Some("cls") => 2,
            Some("lasttoken") => 3,
            _ => {
                return Err(ConvertError::Unsupported {
                    path: file.display().to_string(),
                    why: "pooling: only MEAN, CLS and LAST pooling types are supported".into(),
                })
            }
        }
    };
    Ok(Some(ty))
}

/// What the script reads that this converter does not.
fn notes(dir: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    let card = dir.join("README.md");
    if std::fs::read_to_string(&card).is_ok_and(|s| s.lines().next() == Some("---")) {
        notes.push(format!(
            "{}: the model card's metadata (license, tags, languages, datasets, base models) is not copied",
            card.display()
        ));
    }
    let gen = dir.join("generation_config.json");
    if gen.is_file() {
        notes.push(format!("{}: sampling defaults are not copied", gen.display()));
    }
    notes
}

pub(crate) fn default_file_name(dir: &Path, out_type: OutType) -> Result<String> {
    let (_, _, naming) = plan(dir, out_type)?;
    Ok(format!("{}.gguf", naming.file_stem(out_type.name())))
}

/// Reads and converts everything but the vocabulary.
fn plan(dir: &Path, out_type: OutType) -> Result<(Config, Vec<OutTensor>, Naming)> {
    if !dir.is_dir() {
        return Err(ConvertError::Missing {
            path: dir.display().to_string(),
            what: "the model directory".into(),
        });
    }
    let config = Config::load(dir)?;
    let n_layer = config.require_u32(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])?;
    let st = SafeTensors::open(&weights_file(dir)?)?;
    let tensors = prepare_tensors(&st, &config, n_layer, out_type)?;
    let parameters: u64 = tensors.iter().map(|t| t.shape.iter().product::<u64>()).sum();
    let dir_name = path_name(&dir.to_string_lossy());
    let naming = Naming::guess(config.name_or_path.as_deref(), &dir_name, parameters as i64);
    Ok((config, tensors, naming))
}

/// Converts the BERT checkpoint in `dir` to a GGUF at `out` (by default, in `dir`
/// under the name the script would pick), as `convert_hf_to_gguf.py dir
/// [--outfile out] [--outtype f32]` does.
pub fn convert(dir: &Path, out: Option<&Path>, options: &Options) -> Result<Report> {
    let out_type = options.out_type;
    let (config, tensors, naming) = plan(dir, out_type)?;
    let h = Hparams {
        n_layer: config.require_u32(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])?,
        n_ctx: config.require_u32(&[
            "max_position_embeddings",
            "n_ctx",
            "n_positions",
            "max_length",
            "max_sequence_length",
            "model_max_length",
        ])?,
        n_embd: config.require_u32(&["hidden_size", "n_embd", "dim"])?,
        n_ff: config.require_u32(&[
            "prefix_dense_intermediate_size",
            "dense_intermediate_size",
            "intermediate_size",
            "n_inner",
            "hidden_dim",
        ])?,
        n_head: config.require_u32(&["num_attention_heads", "n_head", "n_heads"])?,
        n_vocab: config.require_u32(&["vocab_size"])?,
        n_token_types: config.find_u32(&["type_vocab_size"])?.unwrap_or(1),
    };
    let tokenizer = TokenizerFiles::open(dir)?;
    check_shapes(&tensors, &config, &h)?;
    let parameters: u64 = tensors.iter().map(|t| t.shape.iter().product::<u64>()).sum();

    let mut kv = Kv::default();
    kv.add_string("general.architecture", "bert");
    // prepare_metadata: set_type, Metadata.set_gguf_meta_model.
    kv.add_string("general.type", "model");
    let strings = [
        ("general.name", &naming.name),
        ("general.version", &naming.version),
        ("general.organization", &naming.organization),
        ("general.finetune", &naming.finetune),
        ("general.basename", &naming.basename),
        ("general.size_label", &naming.size_label),
    ];
    for (key, value) in strings {
        if let Some(v) = value {
            kv.add_string(key, v);
        }
    }
    // TextModel.set_gguf_parameters
    kv.add("bert.block_count", Gguf::U32(h.n_layer));
    kv.add("bert.context_length", Gguf::U32(h.n_ctx));
    kv.add("bert.embedding_length", Gguf::U32(h.n_embd));
    kv.add("bert.feed_forward_length", Gguf::U32(h.n_ff));
    kv.add("bert.attention.head_count", Gguf::U32(h.n_head));
    if let Some(n) = config.find_u32(&["num_key_value_heads", "n_kv_heads"])? {
        kv.add("bert.attention.head_count_kv", Gguf::U32(n));
    }
    if config.h.get("is_causal") == Some(&Value::Bool(false)) {
        kv.add("bert.attention.causal", Gguf::Bool(false));
    }
    if let Some((k, v)) = config.find(&["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
        let eps = v
            .as_f64()
            .ok_or_else(|| config.invalid(format!("{k} is {v}, not a number")))?;
        kv.add("bert.attention.layer_norm_epsilon", Gguf::F32(eps as f32));
    }
    kv.add(
        "general.file_type",
        Gguf::U32(if out_type == OutType::F16 { 1 } else { 0 }),
    );
    // BertModel.set_gguf_parameters
    kv.add("bert.attention.causal", Gguf::Bool(false));
    if let Some(p) = pooling_type(dir)? {
        kv.add("bert.pooling_type", Gguf::U32(p));
    }
    if let Some(v) = config.h.get("classifier_pooling").filter(|v| !v.is_null()) {
        let p = match v.as_str() {
            Some("cls") => 2,
            Some("mean") => 1,
            _ => return Err(config.unsupported(format!("classifier_pooling {v}"))),
        };
        kv.add("bert.classifier.pooling_type", Gguf::U32(p));
    }
    if let Some(labels) = config.classifier_labels()? {
        kv.add_array(
            "bert.classifier.output_labels",
            labels.into_iter().map(Gguf::String).collect(),
        );
    }
    kv.add("general.quantization_version", Gguf::U32(2));
    // TextModel.prepare_metadata -> BertModel.set_vocab
    let n_vocab = tokenizer.write_vocab(&mut kv, h.n_vocab, h.n_token_types, options.pre_tokenizer.as_deref())?;
    tokenizer.write_special_vocab(dir, &mut kv, n_vocab)?;

    let out_path = match out {
        Some(p) => p.to_path_buf(),
        None => dir.join(format!("{}.gguf", naming.file_stem(out_type.name()))),
    };
    let mut w = GgufWriter::new();
    for (key, value) in kv.entries() {
        w.set(key, value.clone());
    }
    let n_tensors = tensors.len();
    for t in tensors {
        let dims: Vec<u64> = t.shape.iter().rev().copied().collect();
        w.add_tensor(&t.name, &dims, t.ty, t.data);
    }
    w.write(&out_path).map_err(|source| ConvertError::Write {
        path: out_path.display().to_string(),
        source,
    })?;
    let bytes = std::fs::metadata(&out_path).map_err(io_error(&out_path))?.len();
    Ok(Report {
        path: out_path,
        tensors: n_tensors,
        bytes,
        parameters,
        name: naming.name.clone(),
        notes: notes(dir),
    })
}
