//! `Runtime::open`, the one place a model is assembled from `Elelem.open`'s options:
//! what it builds for a decoder and an encoder, how it passes the options on to the
//! contexts, and what it refuses before any context exists.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use elelem_engine::runtime::speculative::MAX_DRAFT_TOKENS;
use elelem_engine::{CacheType, Draft, DraftLength, DraftSource, Error, OpenParams, Runtime};
use elelem_gguf::GgufWriter;
use elelem_testkit::canary::{self, Shape};

/// A GGUF written where `Runtime::open` can read it, a file of its own (the tests run at
/// once), removed when dropped.
struct Written(PathBuf);

impl Drop for Written {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn file(name: &str, w: &GgufWriter) -> Written {
    static WRITTEN: AtomicUsize = AtomicUsize::new(0);
    let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("elelem-runtime-open-{}-{n}-{name}.gguf", std::process::id()));
    w.write(&path).unwrap();
    Written(path)
}

fn decoder(name: &str) -> Written {
    file(name, &canary::writer(&canary::shape(name).unwrap()))
}

fn encoder() -> Written {
    let (name, bert) = canary::embedding()
        .into_iter()
        .find(|(name, _)| name == "tiny-bert")
        .unwrap();
    file(&name, &bert.writer())
}

fn open(file: &Written, params: &OpenParams) -> Result<Runtime, Error> {
    Runtime::open(&file.0, params)
}

/// The message of a refusal: an invalid argument, or a draft the target cannot use.
fn refusal<T>(result: Result<T, Error>) -> String {
    match result.err() {
        Some(Error::InvalidArgument(message) | Error::IncompatibleDraft(message)) => message,
        other => panic!("not refused as invalid: {other:?}"),
    }
}

#[test]
fn a_decoder_gets_a_scheduler_whose_context_has_the_options() {
    let params = OpenParams {
        n_ctx: 512,
        n_threads: 1,
        parallel: 3,
        type_k: CacheType::Q8_0,
        type_v: CacheType::Q8_0,
        flash_attn: true,
        ..OpenParams::default()
    };
    // The canary's 8-wide heads hold no block of 32: a quantized cache needs wider ones.
    let refused = refusal(open(&decoder("tiny-llama-canary"), &params));
    assert!(refused.contains("head dimension 8"), "{refused}");
    let wide_heads = Shape {
        n_head: 4,
        n_head_kv: 2,
        ..canary::shape("tiny-llama3").unwrap()
    };
    let runtime = open(
        &file("tiny-llama3-32-wide-heads", &canary::writer(&wide_heads)),
        &params,
    )
    .unwrap();
    let context = runtime.scheduler().expect("a decoder generates").params();
    assert_eq!((context.n_ctx, context.n_threads, context.n_seq_max), (512, 1, 3));
    assert_eq!((context.type_k, context.type_v), (CacheType::Q8_0, CacheType::Q8_0));
    // A verifying pass has a row per drafted token and one more, whether or not the model drafts now.
    assert_eq!(context.n_outputs_max, MAX_DRAFT_TOKENS + 1);
    assert!(runtime.speculation().is_none() && runtime.draft_name().is_none());
    assert_eq!(runtime.params().parallel, 3);
    assert!(runtime.path().ends_with("tiny-llama3-32-wide-heads.gguf"));
}

#[test]
fn an_encoder_gets_no_scheduler_and_an_embedder_on_first_use() {
    let runtime = open(&encoder(), &OpenParams::default()).unwrap();
    assert!(runtime.scheduler().is_none());
    let embedder = runtime.embedder(None, 4).unwrap();
    assert_eq!(embedder.batch_texts(), 4);
}

#[test]
fn a_draft_is_opened_beside_the_target_and_becomes_the_default_speculation() {
    let draft = decoder("tiny-llama3");
    let params = OpenParams {
        draft: Some(Draft::File(draft.0.clone())),
        draft_tokens: DraftLength::Fixed(4),
        ..OpenParams::default()
    };
    let runtime = open(&decoder("tiny-llama-canary"), &params).unwrap();
    assert!(runtime.draft_context().is_some());
    assert!(runtime.draft_name().is_some());
    let speculation = runtime.speculation().unwrap();
    assert_eq!(speculation.source, DraftSource::Model);
    assert_eq!(speculation.length, DraftLength::Fixed(4));
    // A call may turn it off, and a constrained call does not speculate unless it asks.
    assert!(runtime.speculation_for(Some(None), None, false).unwrap().is_none());
    assert!(runtime.speculation_for(None, None, true).unwrap().is_none());
    assert!(refusal(runtime.speculation_for(Some(Some(DraftSource::Model)), None, true)).contains("constraint"));
}

#[test]
fn lookup_needs_no_second_model_and_a_draft_model_source_needs_one() {
    let params = OpenParams {
        draft: Some(Draft::Lookup),
        ..OpenParams::default()
    };
    let runtime = open(&decoder("tiny-llama-canary"), &params).unwrap();
    assert!(runtime.draft_context().is_none());
    assert_eq!(runtime.speculation().unwrap().source, DraftSource::Lookup);
    let message = refusal(runtime.speculation_for(Some(Some(DraftSource::Model)), None, false));
    assert!(message.contains("needs a draft model"), "{message}");
    let plain = open(&decoder("tiny-llama-canary"), &OpenParams::default()).unwrap();
    let message = refusal(plain.speculation_for(None, Some(4), false));
    assert!(message.contains("draft_tokens:"), "{message}");
}

#[test]
fn what_cannot_be_assembled_is_refused_before_any_context() {
    let target = decoder("tiny-llama-canary");
    let other_vocabulary = file(
        "tiny-llama3-1024",
        &canary::writer(&Shape {
            n_vocab: 1024,
            ..canary::shape("tiny-llama3").unwrap()
        }),
    );
    let mismatched = OpenParams {
        draft: Some(Draft::File(other_vocabulary.0.clone())),
        ..OpenParams::default()
    };
    assert!(refusal(open(&target, &mismatched)).contains("1024 tokens"));
    for draft in [Draft::File(target.0.clone()), Draft::Lookup, Draft::Copy] {
        let drafted = OpenParams {
            draft: Some(draft),
            ..OpenParams::default()
        };
        assert!(refusal(open(&encoder(), &drafted)).contains("generates no text"));
    }
    let invariant = OpenParams {
        batch_invariant: true,
        ..OpenParams::default()
    };
    assert!(refusal(open(&encoder(), &invariant)).contains("embedding model"));
    match Runtime::open(
        &std::env::temp_dir().join("elelem-runtime-open-missing.gguf"),
        &OpenParams::default(),
    ) {
        Err(Error::Load(message)) => assert!(message.contains("missing"), "{message}"),
        other => panic!("{:?}", other.err()),
    }
}
