//! Speculative decoding on the synthetic models: a draft model of the same vocabulary
//! (the Llama 3-shaped model drafting for the canary, so that it is often wrong and the
//! caches roll back often), prompt lookup and copying, greedy and sampled; a mismatched
//! pair is refused.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use elelem_engine::runtime::speculative::{check_compatible, MAX_DRAFT_TOKENS};
use elelem_engine::{
    generate, text::sampler, Context, ContextParams, DraftLength, DraftSource, Error, Event, GenerateParams, Model,
    Request, Speculation, SpeculativeParams, Summary, TextParams,
};
use elelem_gguf::{Gguf, GgufWriter, Value};
use elelem_testkit::canary::{self, Shape};

fn load(w: GgufWriter) -> Arc<Model> {
    Arc::new(Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap()).unwrap())
}

fn synthetic(name: &str) -> Arc<Model> {
    load(canary::writer(&canary::shape(name).unwrap()))
}

fn context(model: &Arc<Model>) -> Context {
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 2,
        n_outputs_max: MAX_DRAFT_TOKENS + 1,
        ..Default::default()
    };
    Context::new(Arc::clone(model), params).unwrap()
}

fn request(prompt: &[u32], max_tokens: u32, temperature: f32) -> Request<'static> {
    let mut params = TextParams {
        generate: GenerateParams {
            max_tokens,
            ignore_eos: true,
            reuse_prefix: false,
        },
        ..TextParams::default()
    };
    params.sampler.temperature = temperature;
    params.sampler.seed = 11;
    Request {
        prompt: prompt.to_vec(),
        embeddings: Vec::new(),
        params,
        logprobs: None,
        choose: None,
        constraint: None,
    }
}

fn speculate(
    target: &mut Context,
    mut draft: Option<&mut Context>,
    request: Request<'static>,
    params: SpeculativeParams,
) -> Result<Summary, Error> {
    let mut speculation = Speculation::new(target, draft.as_deref(), request, params)?;
    loop {
        match speculation.next_event(target, draft.as_deref_mut())? {
            Some(Event::Done { summary, .. }) => return Ok(summary),
            Some(Event::Token { .. }) => {}
            None => panic!("no summary"),
        }
    }
}

fn plain(target: &mut Context, prompt: &[u32], max_tokens: u32) -> Vec<u32> {
    let params = GenerateParams {
        max_tokens,
        ignore_eos: true,
        reuse_prefix: false,
    };
    generate(target, prompt, params, sampler::greedy).unwrap().0
}

const PROMPT: [u32; 12] = [1, 50, 60, 70, 80, 90, 50, 60, 70, 80, 91, 50];

#[test]
fn a_draft_model_keeps_the_targets_greedy_tokens_and_rolls_back_both_caches() {
    let (target_model, draft_model) = (synthetic("tiny-llama-canary"), synthetic("tiny-llama3"));
    let (mut target, mut draft) = (context(&target_model), context(&draft_model));
    let expected = plain(&mut target, &PROMPT, 40);
    for length in [DraftLength::Fixed(1), DraftLength::Fixed(5), DraftLength::Adaptive] {
        let params = SpeculativeParams {
            source: DraftSource::Model,
            length,
        };
        let summary = speculate(&mut target, Some(&mut draft), request(&PROMPT, 40, 0.0), params).unwrap();
        assert_eq!(summary.tokens, expected, "{length:?}");
        let stats = summary.draft.unwrap();
        // The models disagree often: rejected guesses were rolled back.
        assert!(stats.accepted < stats.proposed, "{stats:?}");
        // Both caches hold the prompt and every token but the last, as a plain decode leaves them.
        let held: Vec<u32> = PROMPT.iter().chain(&expected[..expected.len() - 1]).copied().collect();
        assert_eq!(target.seq_tokens(0), held);
        assert_eq!(draft.seq_tokens(0), held);
        assert_eq!(summary.n_past, held.len());
    }
}

#[test]
fn drafting_from_the_text_keeps_the_targets_greedy_tokens() {
    let model = synthetic("tiny-llama-canary");
    let mut target = context(&model);
    // A prompt that repeats itself, then the model's own text, which lookup and
    // copying draft back.
    let prompt: Vec<u32> = PROMPT.iter().cycle().take(60).copied().collect();
    let expected = plain(&mut target, &prompt, 48);
    let drafts = [
        (DraftSource::Lookup, DraftLength::Fixed(3)),
        (DraftSource::Lookup, DraftLength::Adaptive),
        (DraftSource::Copy, DraftLength::Fixed(6)),
        (DraftSource::Copy, DraftLength::Adaptive),
    ];
    for (source, length) in drafts {
        let params = SpeculativeParams { source, length };
        let summary = speculate(&mut target, None, request(&prompt, 48, 0.0), params).unwrap();
        assert_eq!(summary.tokens, expected, "{source:?} {length:?}");
        assert!(summary.draft.unwrap().accepted > 0, "{:?}", summary.draft);
        assert_eq!(summary.decode_tokens, 47, "the first token comes with the prompt");
        assert!(summary.decode_passes < summary.decode_tokens, "{summary:?}");
    }
}

#[test]
fn sampling_is_seeded_and_stops_at_max_tokens() {
    let (target_model, draft_model) = (synthetic("tiny-llama-canary"), synthetic("tiny-llama3"));
    let (mut target, mut draft) = (context(&target_model), context(&draft_model));
    let params = SpeculativeParams {
        source: DraftSource::Model,
        length: DraftLength::Adaptive,
    };
    let mut run = || {
        speculate(&mut target, Some(&mut draft), request(&PROMPT, 30, 0.8), params)
            .unwrap()
            .tokens
    };
    let first = run();
    assert_eq!(first.len(), 30);
    assert_eq!(run(), first);
}

#[test]
fn an_interrupt_stops_a_round_and_leaves_consistent_caches() {
    let model = synthetic("tiny-llama-canary");
    let mut target = context(&model);
    let params = SpeculativeParams {
        source: DraftSource::Lookup,
        length: DraftLength::Fixed(4),
    };
    let mut speculation = Speculation::new(&target, None, request(&PROMPT, 20, 0.0), params).unwrap();
    target.abort_flag().store(true, Ordering::SeqCst);
    assert!(matches!(speculation.next_event(&mut target, None), Err(Error::Aborted)));
    target.abort_flag().store(false, Ordering::SeqCst);
    // The pass changed nothing; a new generation runs as usual.
    let expected = plain(&mut target, &PROMPT, 20);
    assert_eq!(
        speculate(&mut target, None, request(&PROMPT, 20, 0.0), params)
            .unwrap()
            .tokens,
        expected
    );
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused() {
    let target = synthetic("tiny-llama-canary");
    assert!(check_compatible(&target, &synthetic("tiny-llama3")).is_ok());
    let llama3 = canary::shape("tiny-llama3").unwrap();
    let bigger = load(canary::writer(&Shape {
        n_vocab: 1024,
        ..llama3.clone()
    }));
    let mut other_bos = canary::writer(&llama3);
    other_bos.set("tokenizer.ggml.bos_token_id", Value::U32(3));
    for (draft, why) in [(bigger, "512 and 1024 tokens"), (load(other_bos), "BOS tokens differ")] {
        match check_compatible(&target, &draft) {
            Err(Error::IncompatibleDraft(message)) => assert!(message.contains(why), "{message}"),
            other => panic!("{other:?}"),
        }
        let params = SpeculativeParams {
            source: DraftSource::Model,
            length: DraftLength::Adaptive,
        };
        let (target_ctx, draft_ctx) = (context(&target), context(&draft));
        let refused = Speculation::new(&target_ctx, Some(&draft_ctx), request(&PROMPT, 4, 0.0), params);
        assert!(matches!(refused, Err(Error::IncompatibleDraft(_))));
    }
}
