//! Models with recurrent layers (the synthetic lfm2, with short convolutions beside
//! attention; mamba2, whose every layer keeps a convolution and a scan state;
//! granitehybrid, with Mamba-2 layers beside attention; qwen35, qwen35moe and qwen3next,
//! with gated delta nets beside attention; nemotron_h, with Mamba-2 layers, attention and
//! feed-forwards alone; and falcon-h1, attention and Mamba-2 side by side in each layer):
//! their state is reused only whole, never cut back, survives an interrupted pass, and
//! speculative decoding with them is refused. Their bits against llama.cpp are the
//! goldens' (golden.rs).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use elelem_engine::{
    generate, text::sampler, BatchToken, Batcher, Context, ContextParams, DraftLength, DraftSource, Error,
    GenerateParams, Model, ModelParams, Pooling, Request, Speculation, SpeculativeParams, TextParams,
};
use elelem_gguf::Gguf;
use elelem_testkit::canary;

const PROMPT: [u32; 6] = [1, 50, 60, 70, 80, 90];

/// The synthetic models with recurrent layers, by name, opened without repacked weights
/// (as batch-invariant passes need them: qwen35's head is Q8_0).
fn models() -> Vec<(&'static str, Arc<Model>)> {
    let params = ModelParams {
        repack: false,
        ..Default::default()
    };
    [
        "tiny-lfm2",
        "tiny-mamba2",
        "tiny-granitehybrid",
        "tiny-qwen35",
        "tiny-qwen35moe",
        "tiny-nemotron_h",
        "tiny-falcon-h1",
        "tiny-qwen3next",
    ]
    .into_iter()
    .map(|name| {
        let shape = canary::shape(name).unwrap();
        let gguf = Gguf::from_bytes(canary::writer(&shape).to_bytes()).unwrap();
        let model = Model::from_gguf_with(gguf, &params).unwrap();
        (name, Arc::new(model))
    })
    .collect()
}

fn context(model: &Arc<Model>, n_seq_max: u32) -> Context {
    let params = ContextParams {
        n_ctx: 256,
        n_seq_max,
        ..Default::default()
    };
    Context::new(Arc::clone(model), params).unwrap()
}

fn greedy(ctx: &mut Context, prompt: &[u32], reuse_prefix: bool) -> Vec<u32> {
    let params = GenerateParams {
        max_tokens: 8,
        ignore_eos: true,
        reuse_prefix,
    };
    generate(ctx, prompt, params, sampler::greedy).unwrap().0
}

#[test]
fn the_state_is_reused_whole_or_not_at_all() {
    for (name, model) in models() {
        state_is_reused_whole_or_not_at_all(name, &model);
    }
}

fn state_is_reused_whole_or_not_at_all(name: &str, model: &Arc<Model>) {
    let mut ctx = context(model, 1);
    assert!(ctx.is_recurrent());
    assert!(ctx.recurrent_state_bytes() > 0);
    let first = greedy(&mut ctx, &PROMPT, false);
    let held = ctx.seq_tokens(0).to_vec();
    // A prompt that continues the whole conversation reuses all of it ...
    let next = [&held[..], &[first[first.len() - 1], 7, 8]].concat();
    assert_eq!(ctx.reusable_prefix(0, &next), held.len());
    // ... one that shares only part of it, nothing (a transformer would keep the part).
    assert_eq!(ctx.reusable_prefix(0, &PROMPT[..4]), 0);
    assert_eq!(ctx.reusable_prefix(0, &[&PROMPT[..], &[3]].concat()), 0);
    // The state cannot be cut back to an earlier position; to nothing, or to all, it can.
    match ctx.seq_truncate(0, 3) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("cannot be cut back"), "{message}"),
        other => panic!("{name}: {other:?}"),
    }
    assert_eq!(ctx.seq_tokens(0), &held[..]);
    ctx.seq_truncate(0, held.len()).unwrap();
    ctx.seq_truncate(0, 0).unwrap();
    assert!(ctx.seq_tokens(0).is_empty());
    // Forgotten, the sequence starts afresh: the same ids as the first time.
    assert_eq!(greedy(&mut ctx, &PROMPT, true), first, "{name}");
}

#[test]
fn an_interrupted_pass_leaves_the_state_as_it_was() {
    for (name, model) in models() {
        interrupted_pass_leaves_the_state_as_it_was(name, &model);
    }
}

fn interrupted_pass_leaves_the_state_as_it_was(name: &str, model: &Arc<Model>) {
    let mut ctx = context(model, 2);
    let tokens = |seq, ids: &[u32]| -> Vec<BatchToken> {
        ids.iter()
            .map(|&token| BatchToken {
                token,
                seq,
                output: false,
            })
            .collect()
    };
    ctx.decode_batch(&tokens(0, &PROMPT)).unwrap();
    ctx.seq_copy(0, 1).unwrap();
    // Two sequences of different lengths: the batch is split in two micro-batches,
    // and the interruption comes in the first.
    let batch = [tokens(0, &[3, 4, 5]), tokens(1, &[6])].concat();
    ctx.abort_flag().store(true, Ordering::SeqCst);
    assert!(matches!(ctx.decode_batch(&batch), Err(Error::Aborted)));
    ctx.abort_flag().store(false, Ordering::SeqCst);
    assert_eq!(ctx.seq_tokens(0), &PROMPT[..]);
    ctx.decode_batch(&tokens(0, &[3, 4, 5])).unwrap();
    let after_abort = ctx.logits().to_vec();
    // The same from a context that was never interrupted.
    let mut fresh = context(model, 2);
    fresh.decode_batch(&tokens(0, &PROMPT)).unwrap();
    fresh.decode_batch(&tokens(0, &[3, 4, 5])).unwrap();
    assert_eq!(after_abort, fresh.logits(), "{name}");
    // The copy holds the prompt's state (every state: mamba2's convolution and scan
    // states both): it continues as sequence 0 did.
    ctx.decode_batch(&tokens(1, &[3, 4, 5])).unwrap();
    assert_eq!(ctx.logits(), fresh.logits(), "{name}");
}

#[test]
fn speculative_decoding_and_embeddings_are_refused() {
    for (_, model) in models() {
        speculative_decoding_and_embeddings_refused(model);
    }
}

fn speculative_decoding_and_embeddings_refused(model: Arc<Model>) {
    let ctx = context(&model, 1);
    let request = Request {
        prompt: PROMPT.to_vec(),
        embeddings: Vec::new(),
        params: TextParams::default(),
        logprobs: None,
        choose: None,
        constraint: None,
    };
    let params = SpeculativeParams {
        source: DraftSource::Lookup,
        length: DraftLength::Fixed(4),
    };
    match Speculation::new(&ctx, None, request, params) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("recurrent state"), "{message}"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a speculation over a recurrent state"),
    }
    let embed = ContextParams {
        pooling: Some(Pooling::Last),
        ..Default::default()
    };
    match Context::new(model, embed) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("recurrent state"), "{message}"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("embeddings from a recurrent state"),
    }
}

/// With `batch_invariant`, a sequence's logits have the bits they have alone, whatever
/// else its passes carry (the batcher's passes, split into micro-batches of equal shares).
#[test]
fn a_batch_invariant_sequence_has_its_lone_bits_beside_others() {
    for (name, model) in models() {
        batch_invariant_sequence_has_its_lone_bits(name, &model);
    }
}

fn batch_invariant_sequence_has_its_lone_bits(name: &str, model: &Arc<Model>) {
    let invariant = || {
        let params = ContextParams {
            n_ctx: 1024,
            n_seq_max: 8,
            adaptive_threads: false,
            batch_invariant: true,
            ..Default::default()
        };
        Context::new(Arc::clone(model), params).unwrap()
    };
    // Eight streams, as a server's, their prompts of different lengths.
    let prompts: Vec<Vec<u32>> = [5u32, 40, 13, 1, 77, 8, 30, 2]
        .iter()
        .map(|&n| (0..n).map(|j| 3 + (j * 7919) % 500).collect())
        .collect();
    // A request whose chooser keeps the bits of every step's logits.
    let request = |prompt: &[u32], seen: Arc<Mutex<Vec<Vec<u32>>>>| Request {
        prompt: prompt.to_vec(),
        embeddings: Vec::new(),
        params: TextParams {
            generate: GenerateParams {
                max_tokens: 12,
                ignore_eos: true,
                reuse_prefix: false,
            },
            ..TextParams::default()
        },
        logprobs: None,
        choose: Some(Box::new(move |logits: &[f32]| {
            seen.lock().unwrap().push(logits.iter().map(|x| x.to_bits()).collect());
            sampler::greedy(logits)
        })),
        constraint: None,
    };
    let run = |ctx: &mut Context, prompts: &[Vec<u32>]| -> Vec<Vec<Vec<u32>>> {
        let mut batcher = Batcher::new(ctx, prompts.len());
        let seen: Vec<_> = prompts.iter().map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
        let ids: Vec<_> = prompts
            .iter()
            .zip(&seen)
            .map(|(p, s)| batcher.submit(request(p, Arc::clone(s))).unwrap())
            .collect();
        while batcher.step(ctx).unwrap() {}
        for id in ids {
            while batcher.next_event(id).unwrap().is_some() {}
        }
        seen.iter().map(|s| s.lock().unwrap().clone()).collect()
    };
    let together = run(&mut invariant(), &prompts);
    for (i, prompt) in prompts.iter().enumerate() {
        let alone = run(&mut invariant(), std::slice::from_ref(prompt)).remove(0);
        assert_eq!(alone.len(), 12);
        assert!(
            together[i] == alone,
            "{name}: sequence {i}: its logits differ from its lone ones"
        );
    }
}
