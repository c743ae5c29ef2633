//! Greedy tokens identical to llama.cpp's on the golden prompts
//! (spec/fixtures/goldens, recorded per build profile from the reference only:
//! `rake golden` rewrites them, `rake goldens` records a missing profile into a cache).

use std::path::PathBuf;
use std::sync::Arc;

use elelem_engine::{
    cpu_model, generate, text::sampler, Batcher, BuildProfile, CacheType, Context, ContextParams, Event,
    GenerateParams, Model, ModelParams, Request, RequestId, TextParams,
};
use elelem_testkit::{canary, model_path};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The recording of `doc` for this build's profile: from the file, or else from the
/// cache of recordings `rake goldens` made on this machine from the reference
/// (`$ELELEM_GOLDEN_CACHE`, by default `~/.cache/elelem/goldens`, then `<profile id>/<file>`).
fn recording(golden: &str, doc: &Value, profile: &BuildProfile) -> Value {
    let id = profile.id();
    if let Some(rec) = doc["recordings"].get(&id) {
        return rec.clone();
    }
    let cache = std::env::var_os("ELELEM_GOLDEN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/elelem/goldens"));
    // The cache keeps each file by its name alone (the fixtures' subdirectories aside).
    let file = std::path::Path::new(golden).file_name().expect("a file name");
    let cached = cache.join(&id).join(file);
    match std::fs::read_to_string(&cached) {
        Ok(text) => serde_json::from_str::<Value>(&text).unwrap()["recordings"][&id].clone(),
        Err(_) => panic!(
            "{golden} has no recording for this build profile {id} ({}), and {} does not exist: greedy ids \
             hold only within a profile; `rake goldens` records this one from the reference llama.cpp built here",
            profile.isa.join(" "),
            cached.display()
        ),
    }
}

/// Whether the golden was recorded with flash attention (llama.cpp's `-fa`; on unless it says).
fn flash_attn(doc: &Value) -> bool {
    doc["flash_attn"].as_bool().unwrap_or(true)
}

/// The KV cache type `key` (`cache_type_k` / `cache_type_v`) the golden was recorded with
/// (llama.cpp's `-ctk` / `-ctv`; f16 unless it says).
fn cache_type(doc: &Value, key: &str) -> CacheType {
    doc[key].as_str().map_or(CacheType::F16, |name| {
        CacheType::from_name(name).expect("a known cache type")
    })
}

fn check_goldens(golden: &str, model: Model) {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("spec/fixtures/goldens").join(golden)).expect("golden file"),
    )
    .unwrap();
    let profile = BuildProfile::current().expect("the CPU backend loads");
    let rec = recording(golden, &doc, &profile);
    let params = ContextParams {
        n_ctx: doc["n_ctx"].as_u64().unwrap() as u32,
        n_threads: doc["n_threads"].as_u64().unwrap() as usize,
        flash_attn: flash_attn(&doc),
        type_k: cache_type(&doc, "cache_type_k"),
        type_v: cache_type(&doc, "cache_type_v"),
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
    let cases = doc["cases"].as_array().unwrap();
    assert!(
        !cases.is_empty(),
        "{golden} has no cases: `rake goldens` adds a synthetic model's"
    );
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let gen = GenerateParams {
            max_tokens: case["max_tokens"].as_u64().unwrap() as u32,
            ignore_eos: case["ignore_eos"].as_bool().unwrap_or(false),
            reuse_prefix: false,
        };
        if case.get("continuation").is_some() {
            check_continued(golden, &mut ctx, case, &rec, gen);
            continue;
        }
        let mut margins = Vec::new();
        let (out, _) = generate(&mut ctx, &ids(&case["prompt"]), gen, |logits| {
            margins.push(sampler::top_two_margin(logits));
            sampler::greedy(logits)
        })
        .unwrap();
        let expected = ids(&rec["outputs"][name]["ids"]);
        if let Some(step) = (0..out.len().max(expected.len())).find(|&i| out.get(i) != expected.get(i)) {
            let show = |id: Option<&u32>| id.map_or("nothing".to_string(), u32::to_string);
            let recorded_margin = &rec["outputs"][name]["margins"][step];
            panic!(
                "{golden} case {name:?}: the ids differ first at step {step} (0-based): expected {}, got {}\n  \
                 top-two logit margin there: the recorder's {}, ours {} (a small margin: a rounding \
                 difference flipped a near tie)\n  recorded by {} on {} (this CPU: {}), build profile {} \
                 (this build's)\n  expected: {expected:?}\n  actual:   {out:?}",
                show(expected.get(step)),
                show(out.get(step)),
                recorded_margin
                    .as_f64()
                    .map_or("not recorded".into(), |m| format!("{m:.4}")),
                margins.get(step).map_or("none".into(), |m| format!("{m:.4}")),
                rec["recorder"].as_str().unwrap_or("?"),
                rec["cpu"].as_str().unwrap_or("an unknown CPU"),
                cpu_model().unwrap_or_else(|| "unknown".into()),
                profile.id()
            );
        }
        // The compute buffer is reserved once and never grows, prompt or decode.
        let bytes = ctx.compute_buffer_bytes();
        assert_eq!(*compute_bytes.get_or_insert(bytes), bytes);
    }
}

/// A continued case: its prompt decoded afresh, then the conversation (the prompt, what
/// it generated, the continuation) continued from what the context holds.
fn check_continued(golden: &str, ctx: &mut Context, case: &Value, rec: &Value, gen: GenerateParams) {
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let name = case["name"].as_str().unwrap();
    let prompt = ids(&case["prompt"]);
    let (first, _) = generate(ctx, &prompt, gen.clone(), sampler::greedy).unwrap();
    let next = [prompt.clone(), first.clone(), ids(&case["continuation"])].concat();
    let cached = ctx.seq_tokens(0).len();
    let resumed = GenerateParams {
        reuse_prefix: true,
        ..gen
    };
    // The cache holds the conversation but the last token generated, which the second
    // turn evaluates with the continuation.
    assert_eq!(
        cached,
        prompt.len() + first.len() - 1,
        "{golden} case {name:?}: the first turn's cache"
    );
    let (second, _) = generate(ctx, &next, resumed, sampler::greedy).unwrap();
    let expected = &rec["outputs"][name]["ids"];
    assert_eq!(
        [first, second],
        [ids(&expected[0]), ids(&expected[1])],
        "{golden} case {name:?}: the turns' ids"
    );
}

/// Every synthetic model (`canary::synthetic()`: a new one needs only its golden file),
/// written where only this test sees it.
#[test]
fn synthetic_models_match_llama_cpp() {
    let dir = std::env::temp_dir().join(format!("elelem-synthetic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, shape) in canary::synthetic() {
        let path = dir.join(format!("{name}.gguf"));
        std::fs::write(&path, canary::writer(&shape).to_bytes()).unwrap();
        check_goldens(
            &format!("{name}.json"),
            Model::open(&path, &ModelParams::default()).unwrap(),
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The synthetic models spread over two RPC workers (`rpc2-tiny-*`, recorded from llama.cpp's
/// `--rpc` over `elelem rpc-server` workers): here the workers are ggml's RPC server on
/// threads of this process, with the workers' thread count, serving this build's CPU backend.
#[test]
fn synthetic_models_over_two_rpc_workers_match_llama_cpp() {
    let endpoints: Vec<String> = (0..2).map(|_| rpc_worker()).collect();
    let dir = std::env::temp_dir().join(format!("elelem-synthetic-rpc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for (name, shape) in canary::synthetic() {
        let golden = format!("rpc/rpc2-{name}.json");
        if !root().join("spec/fixtures/goldens").join(&golden).exists() {
            continue;
        }
        let path = dir.join(format!("{name}.gguf"));
        std::fs::write(&path, canary::writer(&shape).to_bytes()).unwrap();
        let params = ModelParams {
            rpc: endpoints.clone(),
            ..ModelParams::default()
        };
        let model = Model::open(&path, &params).unwrap();
        assert_eq!(model.placement().offloaded(), model.placement().layers.len() + 1);
        check_goldens(&golden, model);
        checked += 1;
    }
    std::fs::remove_dir_all(dir).unwrap();
    assert!(
        checked >= 4,
        "the rpc2 goldens of the synthetic models are there ({checked} found)"
    );
}

/// ggml's RPC server on a thread of this process (it serves until the process ends) at a
/// free loopback port, with the thread count of the Ruby side's workers (spec/support/rpc_workers.rb).
fn rpc_worker() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::thread::spawn(move || elelem_engine::ggml::rpc::serve("127.0.0.1", port, 2, None));
    let endpoint = format!("127.0.0.1:{port}");
    for _ in 0..200 {
        if std::net::TcpStream::connect(&endpoint).is_ok() {
            return endpoint;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the RPC worker at {endpoint} did not start");
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

/// Plain attention over a transposed V cache (`flash_attn: false`, llama.cpp's `-fa
/// off`): the `*-fa-off` goldens, recorded by the reference in that mode.
#[test]
fn flash_attention_off_matches_llama_cpp() {
    check_mirrors(
        "-fa-off",
        &[
            "tiny-gemma2",
            "tiny-gemma4",
            "tiny-gemma4-e",
            "tiny-gemma3n",
            "tiny-phi3",
            "tiny-gpt-oss",
            "tiny-glm4moe",
            "tiny-deepseek2",
            "qwen2.5-coder-0.5b",
            "gemma-3-270m",
        ],
    );
}

/// A q8_0 KV cache (llama.cpp's `-ctk q8_0 -ctv q8_0`, flash attention on): the
/// `*-kv-q8_0` goldens, recorded by the reference in that mode.
#[test]
fn q8_0_kv_cache_matches_llama_cpp() {
    check_mirrors("-kv-q8_0", &["qwen2.5-coder-0.5b", "gemma-3-270m", "tiny-gemma3n"]);
}

/// A context past Llama 4's attention chunk (8,192 positions): `tiny-llama4-16k.json`,
/// recorded by the reference with n_ctx 16,384.
#[test]
fn a_context_past_an_attention_chunk_matches_llama_cpp() {
    check_mirrors("-16k", &["tiny-llama4"]);
}

/// The goldens `<name><suffix>.json` of `names`, synthetic models or known ones.
fn check_mirrors(suffix: &str, names: &[&str]) {
    let dir = std::env::temp_dir().join(format!("elelem{suffix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in names {
        let golden = format!("{name}{suffix}.json");
        let model = match canary::shape(name) {
            Some(shape) => {
                let path = dir.join(format!("{name}.gguf"));
                std::fs::write(&path, canary::writer(&shape).to_bytes()).unwrap();
                Model::open(&path, &ModelParams::default()).unwrap()
            }
            None => {
                let doc: Value = serde_json::from_str(
                    &std::fs::read_to_string(root().join("spec/fixtures/goldens").join(&golden)).unwrap(),
                )
                .unwrap();
                Model::open(
                    model_path(doc["model"]["file"].as_str().unwrap()),
                    &ModelParams::default(),
                )
                .unwrap()
            }
        };
        check_goldens(&golden, model);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Sequences started together in one context (the `lockstep-*` goldens): each gives
/// llama.cpp's ids when both decode them in the same passes, laid out alike.
#[test]
fn lockstep_sequences_match_llama_cpp() {
    let dir = std::env::temp_dir().join(format!("elelem-lockstep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (golden, model_name) in [
        ("lockstep-tiny-gemma2.json", "tiny-gemma2"),
        ("lockstep-qwen2.5-coder-0.5b.json", "qwen2.5-coder-0.5b"),
        ("lockstep-tiny-gemma2-fa-off.json", "tiny-gemma2"),
        ("lockstep-tiny-lfm2.json", "tiny-lfm2"),
        ("lockstep-tiny-mamba2.json", "tiny-mamba2"),
        ("lockstep-tiny-granitehybrid.json", "tiny-granitehybrid"),
        ("lockstep-tiny-qwen35.json", "tiny-qwen35"),
        ("lockstep-tiny-qwen35moe.json", "tiny-qwen35moe"),
        ("lockstep-tiny-deepseek2.json", "tiny-deepseek2"),
        ("lockstep-tiny-nemotron_h.json", "tiny-nemotron_h"),
        ("lockstep-tiny-falcon-h1.json", "tiny-falcon-h1"),
        ("lockstep-tiny-qwen3next.json", "tiny-qwen3next"),
        ("lockstep-tiny-gemma3n.json", "tiny-gemma3n"),
        ("lockstep-tiny-gemma4.json", "tiny-gemma4"),
    ] {
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(root().join("spec/fixtures/goldens").join(golden)).expect("golden file"),
        )
        .unwrap();
        let path = match canary::shape(model_name) {
            Some(shape) => {
                let path = dir.join(format!("{model_name}.gguf"));
                std::fs::write(&path, canary::writer(&shape).to_bytes()).unwrap();
                path
            }
            None => model_path(doc["model"]["file"].as_str().unwrap()),
        };
        let rec = recording(golden, &doc, &BuildProfile::current().expect("the CPU backend loads"));
        let params = ContextParams {
            n_ctx: doc["n_ctx"].as_u64().unwrap() as u32,
            n_threads: doc["n_threads"].as_u64().unwrap() as usize,
            n_seq_max: doc["parallel"].as_u64().unwrap() as u32,
            flash_attn: flash_attn(&doc),
            type_k: cache_type(&doc, "cache_type_k"),
            type_v: cache_type(&doc, "cache_type_v"),
            ..Default::default()
        };
        let mut ctx = Context::new(Arc::new(Model::open(&path, &ModelParams::default()).unwrap()), params).unwrap();
        let case = &doc["cases"][0];
        let mut batcher = Batcher::new(&ctx, case["prompts"].as_array().unwrap().len());
        let ids: Vec<RequestId> = case["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|prompt| {
                let request = Request {
                    prompt: prompt
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_u64().unwrap() as u32)
                        .collect(),
                    embeddings: Vec::new(),
                    params: TextParams {
                        generate: GenerateParams {
                            max_tokens: case["max_tokens"].as_u64().unwrap() as u32,
                            ignore_eos: case["ignore_eos"].as_bool().unwrap(),
                            reuse_prefix: false,
                        },
                        ..TextParams::default()
                    },
                    logprobs: None,
                    choose: Some(Box::new(sampler::greedy)),
                    constraint: None,
                };
                batcher.submit(request).unwrap()
            })
            .collect();
        while batcher.step(&mut ctx).unwrap() {}
        for (seq, &id) in ids.iter().enumerate() {
            let mut tokens = None;
            while let Some(event) = batcher.next_event(id).unwrap() {
                if let Event::Done { summary, .. } = event {
                    tokens = Some(summary.tokens);
                }
            }
            let expected: Vec<u32> = rec["outputs"]["lockstep"]["ids"][seq]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(tokens.unwrap(), expected, "{golden}: sequence {seq}");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The goldens' long prompt reaches every expert of every synthetic mixture of experts:
/// silencing any one expert (its down projection zeroed in every layer) changes the logits.
#[test]
fn the_long_prompt_routes_to_every_expert() {
    let moe: Vec<_> = canary::synthetic()
        .into_iter()
        .filter(|(_, shape)| shape.n_expert > 0)
        .collect();
    assert!(!moe.is_empty(), "a synthetic mixture of experts");
    for (name, shape) in moe {
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(root().join(format!("spec/fixtures/goldens/{name}.json"))).unwrap(),
        )
        .unwrap();
        let long = doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "long")
            .unwrap();
        let prompt: Vec<u32> = long["prompt"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let logits = |w: &elelem_gguf::GgufWriter| {
            let model = Model::from_gguf(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap()).unwrap();
            let params = ContextParams {
                n_ctx: 1024,
                n_threads: 2,
                ..Default::default()
            };
            let mut ctx = Context::new(Arc::new(model), params).unwrap();
            ctx.decode(&prompt).unwrap().to_vec()
        };
        let all = logits(&canary::writer(&shape));
        // An expert's down projection: n_embd rows of n_ff weights (all-zero bytes are
        // zeros in every type the recipe writes experts in: F32, MXFP4).
        let row_bytes = shape.family.experts_type.row_bytes(shape.n_ff).expect("whole blocks");
        let expert_bytes = (row_bytes * shape.n_embd) as usize;
        for expert in 0..shape.n_expert as usize {
            let mut silenced = canary::writer(&shape);
            // Every layer with experts (the first may be dense).
            for il in 0..shape.n_layer {
                if let Some(down) = silenced.tensor_data_mut(&format!("blk.{il}.ffn_down_exps.weight")) {
                    down[expert * expert_bytes..(expert + 1) * expert_bytes].fill(0);
                }
            }
            assert_ne!(
                logits(&silenced),
                all,
                "{name}: no token of the prompt was routed to expert {expert}"
            );
        }
    }
}
