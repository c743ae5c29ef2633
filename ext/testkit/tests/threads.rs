//! A pass gives the same bits on any number of threads, which lets a context run on
//! fewer of them while other work takes the cores (`ContextParams::adaptive_threads`).
//! ggml gives each thread whole rows of every op but one: a lone query's flash
//! attention over 512 cells or more is split into chunks, which stay the configured
//! count's on fewer threads (`Graph::fix_attention_chunks`, tested beside it; a context
//! of fixed threads computes its own count's). So these runs, each a fixed count against
//! another, stay below 256 cells (a pass attends over the cells used, padded to 256):
//! prompts (many rows: the matrix kernels and tiled attention), lone decode steps, and
//! passes over several sequences.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use elelem_engine::{text::sampler, BatchToken, CacheType, Context, ContextParams, Model, ModelParams};
use elelem_gguf::Gguf;
use elelem_testkit::{canary, model_path};

/// What a context of `n_threads` computes: the logits after a prompt, after each of
/// `steps` greedy tokens, and of every row of two passes over three sequences.
fn logits(model: &Arc<Model>, params: &ContextParams, n_threads: usize, prompt: usize, steps: usize) -> Vec<f32> {
    let params = ContextParams {
        n_threads,
        adaptive_threads: false,
        n_seq_max: 3,
        n_outputs_max: 4,
        ..params.clone()
    };
    let mut ctx = Context::new(Arc::clone(model), params).unwrap();
    let n_vocab = model.hparams.n_vocab;
    let prompt: Vec<u32> = (0..prompt as u32).map(|i| (i * 7919 + 13) % n_vocab).collect();
    let mut out = ctx.decode(&prompt).unwrap().to_vec();
    for _ in 0..steps {
        let next = sampler::greedy(ctx.logits());
        out.extend_from_slice(ctx.decode(&[next]).unwrap());
    }
    for pass in 0..2u32 {
        let batch: Vec<BatchToken> = (0..4)
            .map(|i| BatchToken {
                token: (pass * 31 + i * 17 + 5) % n_vocab,
                seq: 1 + i % 2,
                output: true,
            })
            .collect();
        ctx.decode_batch(&batch).unwrap();
        (0..batch.len()).for_each(|row| out.extend_from_slice(ctx.output_logits(row)));
    }
    out
}

fn assert_same_bits(name: &str, model: &Arc<Model>, params: &ContextParams, prompt: usize, steps: usize) {
    // Two threads against one: a governor steps the count by one at a time.
    let one = logits(model, params, 1, prompt, steps);
    let two = logits(model, params, 2, prompt, steps);
    let differ = one.iter().zip(&two).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!(
        differ, 0,
        "{name}, {params:?}: {differ} logits differ between 1 and 2 threads"
    );
}

fn params(flash_attn: bool, cache: CacheType) -> ContextParams {
    ContextParams {
        n_ctx: 512,
        flash_attn,
        type_k: cache,
        type_v: cache,
        ..Default::default()
    }
}

#[test]
fn every_synthetic_model_gives_the_same_bits_on_any_thread_count() {
    for (name, shape) in canary::synthetic() {
        let model = Arc::new(Model::from_gguf(Gguf::from_bytes(canary::writer(&shape).to_bytes()).unwrap()).unwrap());
        for flash_attn in [true, false] {
            assert_same_bits(&name, &model, &params(flash_attn, CacheType::F16), 100, 12);
        }
    }
}

#[test]
fn the_real_models_give_the_same_bits_on_any_thread_count() {
    for file in ["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "gemma-3-270m-q4_k_m.gguf"] {
        let model = Arc::new(Model::open(model_path(file), &ModelParams::default()).unwrap());
        for flash_attn in [true, false] {
            assert_same_bits(file, &model, &params(flash_attn, CacheType::F16), 200, 16);
        }
        assert_same_bits(file, &model, &params(true, CacheType::Q8_0), 200, 16);
    }
}

/// Keeps every core busy (a thread each, spinning) until dropped.
struct Spinners(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Spinners {
    fn start() -> Spinners {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Spinners(stop, threads)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        self.1.drain(..).for_each(|t| t.join().unwrap());
    }
}

#[test]
fn a_context_whose_cores_are_taken_runs_on_fewer_threads_with_the_same_bits() {
    let model = Arc::new(
        Model::open(
            model_path("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
            &ModelParams::default(),
        )
        .unwrap(),
    );
    // 240 prompt tokens, then lone steps over 256 cells and then 512 (padded), where a
    // flash attention's bits depend on the thread count.
    let prompt: Vec<u32> = (0..240).map(|i| (i * 7919 + 13) % model.hparams.n_vocab).collect();
    let run = |adaptive_threads: bool| {
        let params = ContextParams {
            n_ctx: 1024,
            n_threads: 2,
            adaptive_threads,
            ..Default::default()
        };
        let mut ctx = Context::new(Arc::clone(&model), params).unwrap();
        let mut out = ctx.decode(&prompt).unwrap().to_vec();
        let mut threads = vec![(ctx.n_past(), ctx.last_pass_threads())];
        for _ in 0..40 {
            let next = sampler::greedy(ctx.logits());
            out.extend_from_slice(ctx.decode(&[next]).unwrap());
            threads.push((ctx.n_past(), ctx.last_pass_threads()));
        }
        (out, threads)
    };
    let (fixed, _) = run(false);
    let (governed, threads) = {
        let _busy = Spinners::start();
        run(true)
    };
    // Over 512 cells too a pass runs on one thread, its attention computing two chunks.
    for (what, range) in [("256 cells", 0..=256), ("512", 257..=u32::MAX)] {
        assert!(
            threads.iter().any(|&(cells, n)| range.contains(&cells) && n == 1),
            "no pass over {what} ran on one thread while the cores were busy: {threads:?}"
        );
    }
    let differ = fixed
        .iter()
        .zip(&governed)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(differ, 0, "{differ} logits differ from the quiet two-thread run's");
}
