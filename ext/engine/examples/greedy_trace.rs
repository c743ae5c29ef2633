//! Greedy decoding traced step by step: each step's id and its margin over the
//! runner-up logit, optionally with the raw logits, for comparing builds.
//!
//!     cargo run --release -p elelem-engine --example greedy_trace -- MODEL IDS N_TOKENS [LOGITS_DIR]
//!
//! IDS is comma-separated prompt ids. Prints the build profile, then
//! `step id margin` lines; with LOGITS_DIR, writes each step's logits there
//! as `step-<n>.f32` (little-endian f32).

use std::sync::Arc;

use elelem_engine::{
    generate, text::sampler, BuildProfile, Context, ContextParams, GenerateParams, Model, ModelParams,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, ids, n_tokens, rest @ ..] = args.as_slice() else {
        return Err("usage: greedy_trace MODEL IDS N_TOKENS [LOGITS_DIR]".into());
    };
    let prompt: Vec<u32> = ids.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let profile = BuildProfile::current().expect("the CPU backend loads");
    println!(
        "profile {} ({}; {})",
        profile.id(),
        profile.compiler,
        profile.isa.join(" ")
    );
    let model = Arc::new(Model::open(model, &ModelParams::default())?);
    let params = ContextParams {
        n_ctx: 4096,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(model, params)?;
    let gen = GenerateParams {
        max_tokens: n_tokens.parse()?,
        ignore_eos: true,
        reuse_prefix: false,
    };
    let mut step = 0;
    generate(&mut ctx, &prompt, gen, |logits| {
        let margin = sampler::top_two_margin(logits);
        if let Some(dir) = rest.first() {
            let bytes: Vec<u8> = logits.iter().flat_map(|l| l.to_le_bytes()).collect();
            std::fs::write(format!("{dir}/step-{step}.f32"), bytes).expect("writing logits");
        }
        let id = sampler::greedy(logits);
        println!("{step} {id} {margin}");
        step += 1;
        id
    })?;
    Ok(())
}
