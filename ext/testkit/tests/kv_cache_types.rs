//! The KV cache types (llama.cpp's `-ctk` / `-ctv`): what a quantized cache costs,
//! and the configurations llama.cpp refuses, refused here with an error rather than
//! one of ggml's aborts. Its bits against llama.cpp's are the `*-kv-q8_0` goldens.

use std::sync::Arc;

use elelem_engine::{CacheType, Context, ContextParams, Error, Model};
use elelem_gguf::Gguf;
use elelem_testkit::canary::{self, Shape};

fn model(shape: &Shape) -> Arc<Model> {
    Arc::new(Model::from_gguf(Gguf::from_bytes(canary::writer(shape).to_bytes()).unwrap()).unwrap())
}

fn params(flash_attn: bool, type_k: CacheType, type_v: CacheType) -> ContextParams {
    ContextParams {
        n_ctx: 512,
        n_threads: 2,
        flash_attn,
        type_k,
        type_v,
        ..Default::default()
    }
}

fn refusal(model: &Arc<Model>, params: ContextParams) -> String {
    match Context::new(Arc::clone(model), params) {
        Err(Error::InvalidArgument(msg)) => msg,
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(_) => panic!("expected a refusal"),
    }
}

#[test]
fn quantized_caches_run_and_cost_their_row_size() {
    // The Gemma 2-shaped model (a sliding window) with heads of 64: two of them.
    let shape = Shape {
        n_head: 2,
        n_head_kv: 1,
        ..canary::shape("tiny-gemma2").unwrap()
    };
    let model = model(&shape);
    let prompt: Vec<u32> = (0..40).map(|i| i * 7 % 256).collect();
    let run = |type_k, type_v| {
        let mut ctx = Context::new(Arc::clone(&model), params(true, type_k, type_v)).unwrap();
        let logits = ctx.decode(&prompt).unwrap().to_vec();
        (ctx.kv_cache_bytes(), logits)
    };
    let (f16_bytes, f16) = run(CacheType::F16, CacheType::F16);
    let (q8_bytes, q8) = run(CacheType::Q8_0, CacheType::Q8_0);
    let (q4_bytes, q4) = run(CacheType::Q4_0, CacheType::Q4_0);
    // A q8_0 block is 32 values in 34 bytes, q4_0's in 18; F16's 32 values take 64.
    assert_eq!(q8_bytes * 64, f16_bytes * 34);
    assert_eq!(q4_bytes * 64, f16_bytes * 18);
    for logits in [&q8, &q4] {
        assert!(logits.iter().all(|x| x.is_finite()));
        assert_ne!(logits, &f16, "a quantized cache gives other bits");
    }
    // A quantized K cache alone works without flash attention.
    let mut ctx = Context::new(Arc::clone(&model), params(false, CacheType::Q8_0, CacheType::F16)).unwrap();
    assert!(ctx.decode(&prompt).unwrap().iter().all(|x| x.is_finite()));
}

#[test]
fn refuses_what_llama_cpp_refuses() {
    let tiny = model(&canary::shape("tiny-gemma2").unwrap());
    let msg = refusal(&tiny, params(true, CacheType::Q8_0, CacheType::F16));
    assert!(msg.contains("head dimension 16"), "{msg}");
    let msg = refusal(&tiny, params(true, CacheType::F16, CacheType::Q4_0));
    assert!(msg.contains("V cache type q4_0"), "{msg}");
    let msg = refusal(&tiny, params(false, CacheType::F16, CacheType::Q8_0));
    assert!(msg.contains("needs flash attention"), "{msg}");
}

/// Latent attention's cache is K alone, which elelem keeps f16: a quantized one, which
/// llama.cpp runs, is unsupported.
#[test]
fn latent_attention_keeps_an_f16_cache() {
    let latent = model(&canary::shape("tiny-deepseek2").unwrap());
    match Context::new(latent, params(true, CacheType::Q8_0, CacheType::Q8_0)) {
        Err(Error::Unsupported(msg)) => assert!(msg.contains("latent attention keeps its cache f16"), "{msg}"),
        Err(e) => panic!("expected Unsupported, got {e}"),
        Ok(_) => panic!("expected a refusal"),
    }
}
