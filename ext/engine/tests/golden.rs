//! Greedy tokens identical to llama.cpp's on the golden prompts
//! (spec/fixtures/goldens, written by `rake golden` from the reference only).

use std::path::PathBuf;
use std::sync::Arc;

use elelem_engine::{canary, generate, sampler, Context, ContextParams, GenerateParams, Model, ModelParams};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model_path(file: &str) -> PathBuf {
    let dir = std::env::var_os("ELELEM_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/elelem/models"));
    let path = dir.join(file);
    assert!(path.exists(), "{} is missing: run `rake models` first", path.display());
    path
}

fn check_goldens(golden: &str, model: Model) {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("spec/fixtures/goldens").join(golden)).expect("golden file"),
    )
    .unwrap();
    let params = ContextParams {
        n_ctx: doc["n_ctx"].as_u64().unwrap() as u32,
        n_threads: doc["n_threads"].as_u64().unwrap() as usize,
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::new(model), params).unwrap();
    let ids = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect::<Vec<_>>()
    };
    let mut compute_bytes = None;
    for case in doc["cases"].as_array().unwrap() {
        let gen = GenerateParams {
            max_tokens: case["max_tokens"].as_u64().unwrap() as u32,
            ignore_eos: case["ignore_eos"].as_bool().unwrap_or(false),
            reuse_prefix: false,
        };
        let (out, _) = generate(&mut ctx, &ids(&case["prompt"]), gen, sampler::greedy).unwrap();
        assert_eq!(out, ids(&case["output"]), "{golden} case {}", case["name"]);
        // The compute buffer is reserved once and never grows, prompt or decode.
        let bytes = ctx.compute_buffer_bytes();
        assert_eq!(*compute_bytes.get_or_insert(bytes), bytes);
    }
}

#[test]
fn tiny_llama_canary_matches_llama_cpp() {
    let dir = std::env::temp_dir().join(format!("elelem-canary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("canary.gguf");
    std::fs::write(&path, canary::canary_gguf()).unwrap();
    check_goldens(
        "tiny-llama-canary.json",
        Model::open(&path, &ModelParams::default()).unwrap(),
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn qwen_0_5b_matches_llama_cpp() {
    let model = Model::open(
        model_path("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        &ModelParams::default(),
    )
    .unwrap();
    assert!(
        model.repacked_bytes() > 0,
        "the Q4_K ffn_down weights use the repacked layout"
    );
    check_goldens("qwen2.5-coder-0.5b.json", model);
}

#[test]
fn qwen_1_5b_matches_llama_cpp() {
    let model = Model::open(
        model_path("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
        &ModelParams::default(),
    )
    .unwrap();
    check_goldens("qwen2.5-coder-1.5b.json", model);
}

#[test]
fn gemma_3_270m_matches_llama_cpp() {
    let model = Model::open(model_path("gemma-3-270m-q4_k_m.gguf"), &ModelParams::default()).unwrap();
    check_goldens("gemma-3-270m.json", model);
}
