//! Greedy generation from token ids, printing the ids:
//! `cargo run --release --example generate -- MODEL 1,2,3 N_PREDICT [N_THREADS] [N_CTX]`.
use std::sync::Arc;

use elelem_engine::{generate, text::sampler, Context, ContextParams, GenerateParams, Model, ModelParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let model = Arc::new(Model::open(&args[1], &ModelParams::default())?);
    let prompt: Vec<u32> = args[2].split(',').map(str::parse).collect::<Result<_, _>>()?;
    let max_tokens = args[3].parse()?;
    let n_threads = args.get(4).map_or(Ok(2), |s| s.parse())?;
    let n_ctx = args.get(5).map_or(Ok(4096), |s| s.parse())?;
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx,
            n_threads,
            ..Default::default()
        },
    )?;
    let params = GenerateParams {
        max_tokens,
        ..Default::default()
    };
    let (ids, reason) = generate(&mut ctx, &prompt, params, sampler::greedy)?;
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    println!("{}", ids.join(" "));
    let s = ctx.stats();
    eprintln!(
        "{reason:?}; prompt {:.1} t/s, decode {:.1} t/s, compute buffer {} B, KV {} B, recurrent state {} B",
        s.prompt_tokens as f64 / s.prompt_seconds,
        s.decode_tokens as f64 / s.decode_seconds,
        ctx.compute_buffer_bytes(),
        ctx.kv_cache_bytes(),
        ctx.recurrent_state_bytes()
    );
    Ok(())
}
