//! The time of one decode pass over 1, 2, 4, 5 and 8 sequences (every row an output),
//! in three modes: `default` (our few-row kernels where they fit), `ggml` (ggml's
//! products only) and `batch-invariant`: what batching gains per row, what our
//! kernels gain, and what the reference kernels cost.
//!
//!     cargo run --release -p elelem-engine --example pass_times -- MODEL [N_THREADS] [REPS] [MODE] [ROWS]
//!
//! MODE is one of the three (`all` or absent: each); ROWS a list of row counts up to 8
//! (`1,2,4,5,8` when absent).
//!
//! Each of 8 sequences first holds a prompt of 64 tokens; the passes then add one
//! token to each of the first N. Prints `mode rows ms/pass`.

use std::sync::Arc;
use std::time::Instant;

use elelem_engine::{BatchToken, Context, ContextParams, Model, ModelParams};

const SEQUENCES: u32 = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, rest @ ..] = args.as_slice() else {
        return Err("usage: pass_times MODEL [N_THREADS] [REPS] [MODE] [ROWS]".into());
    };
    let n_threads = rest.first().map_or(Ok(2), |s| s.parse())?;
    let reps: u32 = rest.get(1).map_or(Ok(50), |s| s.parse())?;
    let only = rest.get(2).map(String::as_str).filter(|&mode| mode != "all");
    let row_counts: Vec<u32> = match rest.get(3) {
        Some(list) => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => vec![1, 2, 4, 5, 8],
    };
    if row_counts.iter().any(|&rows| !(1..=SEQUENCES).contains(&rows)) {
        return Err(format!("row counts go from 1 to {SEQUENCES}").into());
    }
    for mode in ["default", "ggml", "batch-invariant"] {
        if only.is_some_and(|only| only != mode) {
            continue;
        }
        let batch_invariant = mode == "batch-invariant";
        let params = ModelParams {
            repack: !batch_invariant,
            ..Default::default()
        };
        let model = Arc::new(Model::open(model, &params)?);
        let params = ContextParams {
            n_ctx: 1024 * SEQUENCES,
            n_threads,
            n_seq_max: SEQUENCES,
            n_outputs_max: SEQUENCES,
            adaptive_threads: false,
            batch_invariant,
            own_kernels: mode != "ggml",
            ..Default::default()
        };
        let mut ctx = Context::new(Arc::clone(&model), params)?;
        let n_vocab = model.hparams.n_vocab;
        let token = |i: u32| (i * 7919 + 13) % n_vocab;
        for seq in 0..SEQUENCES {
            let prompt: Vec<BatchToken> = (0..64)
                .map(|i| BatchToken {
                    token: token(i + 64 * seq),
                    seq,
                    output: i == 63,
                })
                .collect();
            ctx.decode_batch(&prompt)?;
        }
        for &rows in &row_counts {
            let start = Instant::now();
            for rep in 0..reps {
                let batch: Vec<BatchToken> = (0..rows)
                    .map(|seq| BatchToken {
                        token: token(rep * SEQUENCES + seq),
                        seq,
                        output: true,
                    })
                    .collect();
                ctx.decode_batch(&batch)?;
            }
            let ms = start.elapsed().as_secs_f64() * 1000.0 / f64::from(reps);
            println!("{mode} {rows} {ms:.1}");
        }
    }
    Ok(())
}
