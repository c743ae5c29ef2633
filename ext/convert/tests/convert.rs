//! Converts a tiny hand-made BERT directory (written here: config, safetensors,
//! tokenizer files, the sentence-transformers pooling module) and reads the GGUF
//! back: the keys in convert_hf_to_gguf.py's order and types, the tensors it
//! keeps, their names, order, types and bytes, and the refusals.

use std::fs;
use std::path::{Path, PathBuf};

use elelem_convert::{convert, ConvertError, Options, OutType};
use elelem_gguf::{Gguf, TensorType, Value};
use serde_json::json;

const HIDDEN: usize = 8;
const FF: usize = 16;
const POSITIONS: usize = 16;
const WORDS: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", ",", "!", "the", "un", "##aff", "##able",
];

/// A scratch directory, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("elelem-convert-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Writes a safetensors file: (name, dtype, shape, little-endian bytes).
fn write_safetensors(path: &Path, tensors: &[(String, &str, Vec<usize>, Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&header);
    file.extend_from_slice(&data);
    fs::write(path, file).unwrap();
}

/// Deterministic float32 values: `seed` + i/3 (thirds are not representable,
/// so every one rounds on its way to F16).
fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| seed + i as f32 / 3.0).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A one-layer BERT with the tiny vocabulary, laid out as transformers saves a
/// `BertModel`, plus what the converter must drop (position_ids, the pooler) and
/// an old-style LayerNorm (gamma/beta).
fn write_model(dir: &Path) {
    let vocab = WORDS.len();
    let mut t: Vec<(String, &str, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, shape: Vec<usize>, seed: f32| {
        let n = shape.iter().product();
        t.push((name.to_string(), "F32", shape, f32_bytes(&values(n, seed))));
    };
    add("embeddings.word_embeddings.weight", vec![vocab, HIDDEN], 0.0);
    add("embeddings.position_embeddings.weight", vec![POSITIONS, HIDDEN], 1.0);
    add("embeddings.token_type_embeddings.weight", vec![2, HIDDEN], 2.0);
    add("embeddings.LayerNorm.gamma", vec![HIDDEN], 3.0);
    add("embeddings.LayerNorm.beta", vec![HIDDEN], 4.0);
    let l = "encoder.layer.0";
    for (i, part) in [
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
    ]
    .iter()
    .enumerate()
    {
        add(&format!("{l}.{part}.weight"), vec![HIDDEN, HIDDEN], 5.0 + i as f32);
        add(&format!("{l}.{part}.bias"), vec![HIDDEN], 9.0 + i as f32);
    }
    add(&format!("{l}.attention.output.LayerNorm.weight"), vec![HIDDEN], 13.0);
    add(&format!("{l}.attention.output.LayerNorm.bias"), vec![HIDDEN], 14.0);
    add(&format!("{l}.intermediate.dense.weight"), vec![FF, HIDDEN], 15.0);
    add(&format!("{l}.intermediate.dense.bias"), vec![FF], 16.0);
    add(&format!("{l}.output.dense.weight"), vec![HIDDEN, FF], 17.0);
    add(&format!("{l}.output.dense.bias"), vec![HIDDEN], 18.0);
    add(&format!("{l}.output.LayerNorm.weight"), vec![HIDDEN], 19.0);
    add(&format!("{l}.output.LayerNorm.bias"), vec![HIDDEN], 20.0);
    add("pooler.dense.weight", vec![HIDDEN, HIDDEN], 21.0);
    add("pooler.dense.bias", vec![HIDDEN], 22.0);
    let ids: Vec<u8> = (0..POSITIONS as i64).flat_map(|i| i.to_le_bytes()).collect();
    t.push(("embeddings.position_ids".into(), "I64", vec![1, POSITIONS], ids));
    write_safetensors(&dir.join("model.safetensors"), &t);

    let config = json!({
        "_name_or_path": "example/tiny-bert-L1-uncased", "architectures": ["BertModel"], "model_type": "bert",
        "hidden_size": HIDDEN, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": FF,
        "max_position_embeddings": POSITIONS, "vocab_size": vocab, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "pad_token_id": 0, "hidden_act": "gelu"
    });
    fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let special = |id: usize| {
        json!({"id": id, "content": WORDS[id], "single_word": false, "lstrip": false,
                                      "rstrip": false, "normalized": false, "special": true})
    };
    let vocab_map: serde_json::Map<String, serde_json::Value> = WORDS
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), json!(i)))
        .collect();
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(0), special(1), special(2), special(3), special(4)],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab_map}
    });
    fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let tokenizer_config = json!({"do_lower_case": true, "unk_token": "[UNK]", "sep_token": "[SEP]",
        "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]", "tokenize_chinese_chars": true,
        "strip_accents": null, "tokenizer_class": "BertTokenizer", "model_max_length": 512});
    fs::write(dir.join("tokenizer_config.json"), tokenizer_config.to_string()).unwrap();
    let modules = json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
    ]);
    fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
    fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    let pooling = json!({"word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": false,
                         "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false});
    fs::write(dir.join("1_Pooling/config.json"), pooling.to_string()).unwrap();
}

fn with_pre() -> Options {
    Options {
        out_type: OutType::F16,
        pre_tokenizer: Some("jina-v2-en".into()),
    }
}

#[test]
fn an_unknown_tokenizer_is_refused_as_the_script_refuses_it() {
    let scratch = Scratch::new("unknown");
    let model = scratch.0.join("tiny-bert");
    fs::create_dir_all(&model).unwrap();
    write_model(&model);
    let err = convert(&model, Some(&scratch.0.join("x.gguf")), &Options::default()).unwrap_err();
    // The fingerprint of this vocabulary, as Hugging Face's tokenizers library computes
    // it (tokenizers 0.23.3: sha256 of str(Tokenizer.from_file(...).encode(chktxt).ids)).
    assert!(
        err.to_string()
            .contains("be9b87d422b2fdf905b40a7f38751e8e0a6889b46b782961cbcc773a9716e2a7"),
        "{err}"
    );
    assert!(matches!(err, ConvertError::Unsupported { .. }));
}

#[test]
fn converts_a_tiny_bert_as_convert_hf_to_gguf() {
    let scratch = Scratch::new("tiny");
    let model = scratch.0.join("tiny-bert-L1-v2");
    fs::create_dir_all(&model).unwrap();
    write_model(&model);
    let out = scratch.0.join("tiny.gguf");
    let report = convert(&model, Some(&out), &with_pre()).unwrap();
    assert_eq!(report.tensors, 21);
    assert_eq!(report.name.as_deref(), Some("Tiny Bert L1 Uncased"));
    let file = Gguf::open(&out).unwrap();
    assert_eq!(report.bytes, fs::metadata(&out).unwrap().len());

    let keys: Vec<&str> = file.metadata().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "general.architecture",
            "general.type",
            "general.name",
            "general.version",
            "general.organization",
            "general.basename",
            "general.size_label",
            "bert.block_count",
            "bert.context_length",
            "bert.embedding_length",
            "bert.feed_forward_length",
            "bert.attention.head_count",
            "bert.attention.layer_norm_epsilon",
            "general.file_type",
            "bert.attention.causal",
            "bert.pooling_type",
            "general.quantization_version",
            "tokenizer.ggml.token_type_count",
            "tokenizer.ggml.model",
            "tokenizer.ggml.pre",
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.token_type",
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.unknown_token_id",
            "tokenizer.ggml.seperator_token_id",
            "tokenizer.ggml.padding_token_id",
            "tokenizer.ggml.mask_token_id",
            "tokenizer.ggml.add_bos_token",
            "tokenizer.ggml.add_eos_token",
            "tokenizer.ggml.add_sep_token",
            "tokenizer.ggml.normalizer.lowercase",
        ]
    );
    let get = |k: &str| file.get(k).unwrap_or_else(|| panic!("{k}")).clone();
    let s = |v: &str| Value::String(v.into());
    assert_eq!(get("general.name"), s("Tiny Bert L1 Uncased"));
    assert_eq!(get("general.organization"), s("Example"));
    assert_eq!(get("general.basename"), s("tiny-bert-L1"));
    assert_eq!(get("general.version"), s("v2"));
    assert_eq!(get("general.size_label"), s("0.9K"));
    assert_eq!(get("bert.block_count"), Value::U32(1));
    assert_eq!(get("bert.context_length"), Value::U32(POSITIONS as u32));
    assert_eq!(get("bert.embedding_length"), Value::U32(HIDDEN as u32));
    assert_eq!(get("bert.feed_forward_length"), Value::U32(FF as u32));
    assert_eq!(get("bert.attention.head_count"), Value::U32(2));
    assert_eq!(get("bert.attention.layer_norm_epsilon"), Value::F32(1e-12));
    assert_eq!(get("general.file_type"), Value::U32(1));
    assert_eq!(get("bert.attention.causal"), Value::Bool(false));
    assert_eq!(get("bert.pooling_type"), Value::U32(1));
    assert_eq!(get("tokenizer.ggml.model"), s("bert"));
    assert_eq!(get("tokenizer.ggml.pre"), s("jina-v2-en"));
    let tokens: Vec<Value> = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "▁hello", "▁world", "s", "▁,", "▁!",
    ]
    .iter()
    .map(|t| s(t))
    .chain(["▁the", "▁un", "aff", "able"].iter().map(|t| s(t)))
    .collect();
    assert_eq!(get("tokenizer.ggml.tokens"), Value::Array(tokens));
    let types: Vec<Value> = [3, 3, 3, 3, 3].iter().chain(&[1; 9]).map(|&t| Value::I32(t)).collect();
    assert_eq!(get("tokenizer.ggml.token_type"), Value::Array(types));
    for (key, id) in [
        ("bos", 2),
        ("eos", 3),
        ("unknown", 1),
        ("seperator", 3),
        ("padding", 0),
        ("mask", 4),
    ] {
        assert_eq!(get(&format!("tokenizer.ggml.{key}_token_id")), Value::U32(id), "{key}");
    }
    assert_eq!(get("tokenizer.ggml.add_bos_token"), Value::Bool(true));
    assert_eq!(get("tokenizer.ggml.add_eos_token"), Value::Bool(true));
    assert_eq!(get("tokenizer.ggml.add_sep_token"), Value::Bool(false));

    // Sorted by the checkpoint's names; position_ids and the pooler dropped; gamma/beta renamed.
    let tensors: Vec<(String, TensorType, Vec<u64>)> = file
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.tensor_type, t.dims.clone()))
        .collect();
    let h = HIDDEN as u64;
    let expected: Vec<(&str, TensorType, Vec<u64>)> = vec![
        ("token_embd_norm.bias", TensorType::F32, vec![h]), // LayerNorm.beta < LayerNorm.gamma
        ("token_embd_norm.weight", TensorType::F32, vec![h]),
        ("position_embd.weight", TensorType::F32, vec![h, POSITIONS as u64]),
        ("token_types.weight", TensorType::F32, vec![h, 2]),
        ("token_embd.weight", TensorType::F16, vec![h, WORDS.len() as u64]),
        ("blk.0.attn_output_norm.bias", TensorType::F32, vec![h]),
        ("blk.0.attn_output_norm.weight", TensorType::F32, vec![h]),
        ("blk.0.attn_output.bias", TensorType::F32, vec![h]),
        ("blk.0.attn_output.weight", TensorType::F16, vec![h, h]),
        ("blk.0.attn_k.bias", TensorType::F32, vec![h]),
        ("blk.0.attn_k.weight", TensorType::F16, vec![h, h]),
        ("blk.0.attn_q.bias", TensorType::F32, vec![h]),
        ("blk.0.attn_q.weight", TensorType::F16, vec![h, h]),
        ("blk.0.attn_v.bias", TensorType::F32, vec![h]),
        ("blk.0.attn_v.weight", TensorType::F16, vec![h, h]),
        ("blk.0.ffn_up.bias", TensorType::F32, vec![FF as u64]),
        ("blk.0.ffn_up.weight", TensorType::F16, vec![h, FF as u64]),
        ("blk.0.layer_output_norm.bias", TensorType::F32, vec![h]),
        ("blk.0.layer_output_norm.weight", TensorType::F32, vec![h]),
        ("blk.0.ffn_down.bias", TensorType::F32, vec![h]),
        ("blk.0.ffn_down.weight", TensorType::F16, vec![FF as u64, h]),
    ];
    let expected: Vec<(String, TensorType, Vec<u64>)> =
        expected.into_iter().map(|(n, t, d)| (n.to_string(), t, d)).collect();
    assert_eq!(tensors, expected);

    // F32 stays bit for bit; F16 is rounded to nearest even (1/3 -> 0x3555, 1 + 1/3 -> 0x3d55).
    let bytes = |name: &str| file.tensor_data(file.tensors().iter().find(|t| t.name == name).unwrap());
    assert_eq!(
        bytes("position_embd.weight"),
        f32_bytes(&values(POSITIONS * HIDDEN, 1.0)).as_slice()
    );
    let embd: Vec<u16> = bytes("token_embd.weight")
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(&embd[..4], &[0x0000, 0x3555, 0x3955, 0x3c00]);
    assert_eq!(embd.len(), WORDS.len() * HIDDEN);

    // The same again is the same file.
    let again = scratch.0.join("again.gguf");
    convert(&model, Some(&again), &with_pre()).unwrap();
    assert_eq!(fs::read(&out).unwrap(), fs::read(&again).unwrap());

    // --outtype f32 keeps every tensor float32, and the default name is the script's.
    let f32_options = Options {
        out_type: OutType::F32,
        ..with_pre()
    };
    let report = convert(&model, None, &f32_options).unwrap();
    assert_eq!(report.path, model.join("tiny-bert-L1-0.9K-v2-F32.gguf"));
    let f32_file = Gguf::open(&report.path).unwrap();
    assert!(f32_file.tensors().iter().all(|t| t.tensor_type == TensorType::F32));
    assert_eq!(f32_file.get("general.file_type"), Some(&Value::U32(0)));
}

#[test]
fn the_vocabulary_tokenizes_as_bert() {
    let scratch = Scratch::new("vocab");
    let model = scratch.0.join("tiny-bert");
    fs::create_dir_all(&model).unwrap();
    write_model(&model);
    let out = scratch.0.join("tiny.gguf");
    convert(&model, Some(&out), &with_pre()).unwrap();
    let file = Gguf::open(&out).unwrap();
    let tok = elelem_tokenizer::Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(
        tok.tokenize("Hello, worlds! unaffable", true, true),
        [2, 5, 8, 6, 7, 9, 11, 12, 13, 3]
    );
}

#[test]
fn refuses_what_it_cannot_convert() {
    let scratch = Scratch::new("refuse");
    let model = scratch.0.join("m");
    fs::create_dir_all(&model).unwrap();
    write_model(&model);
    let out = scratch.0.join("x.gguf");
    let err = |dir: &Path| convert(dir, Some(&out), &with_pre()).unwrap_err().to_string();

    assert!(err(&scratch.0.join("nowhere")).contains("missing the model directory"));

    let config = fs::read_to_string(model.join("config.json")).unwrap();
    fs::write(
        model.join("config.json"),
        config.replace("BertModel", "LlamaForCausalLM"),
    )
    .unwrap();
    assert!(
        err(&model).contains("architecture \"LlamaForCausalLM\""),
        "{}",
        err(&model)
    );
    fs::write(
        model.join("config.json"),
        config.replace("\"hidden_size\":8", "\"hidden_size\":12"),
    )
    .unwrap();
    assert!(err(&model).contains("token_embd.weight has shape [14, 8], but the config makes it [14, 12]"));
    fs::write(model.join("config.json"), &config).unwrap();

    let tok = fs::read_to_string(model.join("tokenizer.json")).unwrap();
    fs::write(
        model.join("tokenizer.json"),
        tok.replace("\"type\":\"WordPiece\",\"unk", "\"type\":\"BPE\",\"unk"),
    )
    .unwrap();
    assert!(
        err(&model).contains("only WordPiece (BERT) vocabularies convert"),
        "{}",
        err(&model)
    );
    fs::remove_file(model.join("tokenizer.json")).unwrap();
    assert!(err(&model).contains("missing the Hugging Face tokenizer (tokenizer.json)"));
    fs::write(model.join("tokenizer.json"), &tok).unwrap();

    let weights = fs::read(model.join("model.safetensors")).unwrap();
    fs::write(model.join("model.safetensors"), &weights[..weights.len() - 4]).unwrap();
    assert!(err(&model).contains("not a valid safetensors file"), "{}", err(&model));
    fs::remove_file(model.join("model.safetensors")).unwrap();
    assert!(
        err(&model).contains("missing the weights (model.safetensors"),
        "{}",
        err(&model)
    );
    fs::write(model.join("model.safetensors"), &weights).unwrap();

    fs::write(
        model.join("1_Pooling/config.json"),
        "{\"pooling_mode_max_tokens\": true}",
    )
    .unwrap();
    assert!(
        err(&model).contains("only MEAN, CLS and LAST pooling"),
        "{}",
        err(&model)
    );
    assert!(!out.exists(), "nothing is written on a refusal");
}
