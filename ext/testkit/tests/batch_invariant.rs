//! A batch-invariant context (`ContextParams::batch_invariant`) gives a sequence the
//! bits it gets alone, whatever else its passes carry: other sequences' prompt chunks
//! and decode steps, its own prompt in chunks of another size, another slot of the
//! cache, another thread count, a speculative draft's rows. Each test compares every
//! logit's bits.

use std::sync::Arc;

use elelem_engine::runtime::speculative::MAX_DRAFT_TOKENS;
use elelem_engine::{
    generate, text::sampler, BatchToken, Context, ContextParams, DraftLength, DraftSource, Event, GenerateParams,
    Model, ModelParams, Request, SeqId, Speculation, SpeculativeParams, TextParams,
};
use elelem_testkit::model_path;

const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
/// Sliding-window layers: their cells are partitioned too, never a ring.
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

fn open(file: &str) -> Arc<Model> {
    let params = ModelParams {
        repack: false,
        ..Default::default()
    };
    Arc::new(Model::open(model_path(file), &params).unwrap())
}

fn context(model: &Arc<Model>, n_threads: usize) -> Context {
    let params = ContextParams {
        n_ctx: 2048,
        n_seq_max: 4,
        n_threads,
        adaptive_threads: false,
        n_outputs_max: MAX_DRAFT_TOKENS + 1,
        batch_invariant: true,
        ..Default::default()
    };
    Context::new(Arc::clone(model), params).unwrap()
}

/// The logits after each of `steps` greedy tokens (and after the prompt) of a
/// sequence alone in sequence 0 of a fresh context, its prompt in one pass.
fn alone(model: &Arc<Model>, prompt: &[u32], steps: usize, n_threads: usize) -> Vec<Vec<f32>> {
    let mut ctx = context(model, n_threads);
    let mut out = vec![ctx.decode(prompt).unwrap().to_vec()];
    for _ in 0..steps {
        let next = sampler::greedy(out.last().unwrap());
        out.push(ctx.decode(&[next]).unwrap().to_vec());
    }
    out
}

/// The same as [`alone`] for every prompt, the sequences together in one context:
/// prompt `i` arrives at pass `i` in sequence `3 - i`, fed `chunk` tokens a pass,
/// and every pass carries each running sequence's next step.
fn together(model: &Arc<Model>, prompts: &[Vec<u32>], steps: usize, chunk: usize) -> Vec<Vec<Vec<f32>>> {
    let mut ctx = context(model, 2);
    let mut outs: Vec<Vec<Vec<f32>>> = vec![Vec::new(); prompts.len()];
    let mut fed = vec![0; prompts.len()];
    for pass in 0.. {
        let mut batch = Vec::new();
        let mut owners = Vec::new();
        for (i, prompt) in prompts.iter().enumerate().filter(|&(i, _)| i <= pass) {
            let seq = 3 - i as SeqId;
            if fed[i] < prompt.len() {
                let end = (fed[i] + chunk).min(prompt.len());
                for (j, &token) in prompt[fed[i]..end].iter().enumerate() {
                    let output = fed[i] + j + 1 == prompt.len();
                    batch.push(BatchToken { token, seq, output });
                }
                if end == prompt.len() {
                    owners.push(i);
                }
                fed[i] = end;
            } else if outs[i].len() <= steps {
                let token = sampler::greedy(outs[i].last().unwrap());
                batch.push(BatchToken {
                    token,
                    seq,
                    output: true,
                });
                owners.push(i);
            }
        }
        if batch.is_empty() {
            break;
        }
        ctx.decode_batch(&batch).unwrap();
        for (row, &i) in owners.iter().enumerate() {
            outs[i].push(ctx.output_logits(row).to_vec());
        }
    }
    outs
}

fn prompts(model: &Model) -> Vec<Vec<u32>> {
    let n_vocab = model.hparams.n_vocab;
    [37u32, 150, 9, 90]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (j * 7919 + 13 + i as u32 * 104_729) % n_vocab).collect())
        .collect()
}

fn count_differing(a: &[Vec<f32>], b: &[Vec<f32>]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).filter(|(p, q)| p.to_bits() != q.to_bits()).count())
        .sum()
}

#[test]
fn a_sequence_has_the_bits_it_has_alone_in_any_batch() {
    for file in [QWEN, GEMMA] {
        let model = open(file);
        let prompts = prompts(&model);
        let steps = 12;
        // Alone on one thread, together on two.
        let lone: Vec<_> = prompts.iter().map(|p| alone(&model, p, steps, 1)).collect();
        for chunk in [7, 512] {
            let mixed = together(&model, &prompts, steps, chunk);
            for (i, (a, b)) in lone.iter().zip(&mixed).enumerate() {
                let differ = count_differing(a, b);
                assert_eq!(
                    differ, 0,
                    "{file}, prompt {i}, chunks of {chunk}: {differ} logits differ"
                );
            }
        }
    }
}

#[test]
fn a_batch_invariant_context_needs_flash_attention_and_plain_weights() {
    let plain = open(QWEN);
    let params = ContextParams {
        batch_invariant: true,
        ..Default::default()
    };
    let without_fa = ContextParams {
        flash_attn: false,
        ..params.clone()
    };
    let error = Context::new(Arc::clone(&plain), without_fa).err().unwrap();
    assert!(error.to_string().contains("flash attention"), "{error}");
    let repacked = Arc::new(Model::open(model_path(QWEN), &ModelParams::default()).unwrap());
    if repacked.repacked_bytes() > 0 {
        let error = Context::new(repacked, params).err().unwrap();
        assert!(error.to_string().contains("repacked"), "{error}");
    }
}

/// Speculative decoding verifies a draft's tokens in one pass; batch-invariant, the
/// pass gives each row a one-token pass's bits, so greedy output is plain greedy
/// output, token for token, even where the draft is often wrong.
#[test]
fn speculative_greedy_output_is_plain_greedy_output() {
    let model = open(QWEN);
    // No draft model: prompt lookup and copying draft from the prompt's text.
    let text = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n";
    let tokenizer = model.tokenizer().unwrap();
    let prompt = tokenizer.tokenize(&format!("{text}{text}# the same, iteratively\n"), true, true);
    let max_tokens = 48;
    let mut target = context(&model, 2);
    let params = GenerateParams {
        max_tokens,
        ignore_eos: true,
        reuse_prefix: false,
    };
    let expected = generate(&mut target, &prompt, params.clone(), sampler::greedy)
        .unwrap()
        .0;
    let drafts = [
        (DraftSource::Lookup, DraftLength::Fixed(4)),
        (DraftSource::Lookup, DraftLength::Adaptive),
        (DraftSource::Copy, DraftLength::Adaptive),
    ];
    for (source, length) in drafts {
        let request = Request {
            prompt: prompt.clone(),
            embeddings: Vec::new(),
            params: TextParams {
                generate: params.clone(),
                ..TextParams::default()
            },
            logprobs: None,
            choose: None,
            constraint: None,
        };
        let spec = SpeculativeParams { source, length };
        let mut speculation = Speculation::new(&target, None, request, spec).unwrap();
        let summary = loop {
            match speculation.next_event(&mut target, None).unwrap() {
                Some(Event::Done { summary, .. }) => break summary,
                Some(Event::Token { .. }) => {}
                None => panic!("no summary"),
            }
        };
        let stats = summary.draft.unwrap();
        assert!(stats.accepted > 0 && stats.accepted < stats.proposed, "{stats:?}");
        assert_eq!(summary.tokens, expected, "{source:?} {length:?}");
    }
}
