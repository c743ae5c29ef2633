//! The time of one matrix product over a few to a micro-batch of activation rows,
//! with our kernels and with ggml's products, for the weight types the kernels take
//! (random weights, quantized by ggml, in the buffer a model would hold them in;
//! plain Q4_K on ggml's reference kernels, as a batch-invariant context runs it):
//!
//!     cargo run --release -p elelem-engine --example product_times -- [N_THREADS] [REPS] [TYPE] [ROWS]
//!
//! TYPE (`q4_K`, `q6_K`, `q5_0` or `q8_0`; `all` when absent) times that type's
//! products only; ROWS is a list of row counts (`1,2,4,5,8,16,17,32,33,64` when
//! absent). Ours and ggml's take turns, `REPS` products at a turn, five turns each;
//! prints `type buffer K×N rows ours_ms ggml_ms`, the medians (rows where ours does
//! not apply time ggml's twice). Where ggml's AMX kernels are in use, a third column,
//! `amx_ms`, times ggml's product with the same weights in its AMX buffer, as a model
//! would hold them there (`-` where AMX does not take the type or the kernels are off).

use elelem_engine::ggml::kernels::Products;
use elelem_engine::ggml::{Backend, Buffer, BufferType, Context, CpuDevice, Gallocr, GraphArena, Tensor};
use ggml_sys as sys;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n_threads = args.first().map_or(Ok(2), |s| s.parse())?;
    let reps: u32 = args.get(1).map_or(Ok(20), |s| s.parse())?;
    let only = args.get(2).map(String::as_str).filter(|&t| t != "all");
    let row_counts: Vec<i64> = match args.get(3) {
        Some(list) => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => vec![1, 2, 4, 5, 8, 16, 17, 32, 33, 64],
    };
    let device = CpuDevice::get()?;
    let mut backend = Backend::cpu(n_threads)?;
    let mut reference = Backend::cpu(n_threads)?;
    reference.use_reference_kernels()?;
    // Eight of the 1.5B's feed-forward down projections (Q4_K, 62 MB: more than the
    // cache holds, as a model's layers are) and its output head (Q6_K); sixteen of the
    // 0.5B's gate projections (Q5_0, 48 MB) and its output head (Q8_0); sixteen of a
    // 1024-wide Q8_0 model's gate and down projections (Qwen3-0.6B's: 53 MB each), whose
    // crossover with tinyBLAS is not the head's.
    for (ty, buft, k, n, on_reference) in [
        (sys::GGML_TYPE_Q4_K, "CPU_REPACK", 8960, 8 * 1536, false),
        (sys::GGML_TYPE_Q4_K, "CPU", 8960, 8 * 1536, true),
        (sys::GGML_TYPE_Q6_K, "CPU", 1536, 151936, false),
        (sys::GGML_TYPE_Q5_0, "CPU", 896, 16 * 4864, false),
        (sys::GGML_TYPE_Q8_0, "CPU", 896, 151936, false),
        (sys::GGML_TYPE_Q8_0, "CPU", 1024, 16 * 3072, false),
        (sys::GGML_TYPE_Q8_0, "CPU", 3072, 16 * 1024, false),
    ] {
        let backend = if on_reference { &mut reference } else { &mut backend };
        let name = unsafe { std::ffi::CStr::from_ptr(sys::ggml_type_name(ty)) }.to_string_lossy();
        if only.is_some_and(|only| only != name) {
            continue;
        }
        let Some(&buft) = device.weight_bufts.iter().find(|b| b.name() == buft) else {
            println!("no {buft} buffer type here");
            continue;
        };
        let (_ctx, w, _buffer) = weight(ty, buft, k, n)?;
        // AMX takes Q4_K and Q6_K, Q8_0 and others, not Q5_0; reference kernels never.
        let amx = device
            .weight_bufts
            .iter()
            .find(|b| b.name() == "AMX")
            .filter(|_| !on_reference && ty != sys::GGML_TYPE_Q5_0)
            .map(|&amx| weight(ty, amx, k, n))
            .transpose()?;
        for &rows in &row_counts {
            let mut turns = [const { Vec::new() }; 2];
            for _ in 0..TURNS {
                for (own, times) in [true, false].into_iter().zip(&mut turns) {
                    times.push(time(w, k, rows, own, on_reference, reps, backend));
                }
            }
            let median = |mut times: Vec<f64>| {
                times.sort_by(f64::total_cmp);
                times[TURNS / 2]
            };
            let [ours, theirs] = turns.map(median);
            let amx = amx.as_ref().map_or("-".to_string(), |(_, w, _)| {
                let times = (0..TURNS)
                    .map(|_| time(*w, k, rows, false, false, reps, backend))
                    .collect();
                format!("{:.2}", median(times))
            });
            println!("{name} {} {k}x{n} {rows} {ours:.2} {theirs:.2} {amx}", buft.name());
        }
    }
    Ok(())
}

/// A `k`×`n` weight of type `ty` in a buffer of type `buft`, from the same
/// deterministic values whatever the buffer (its context and buffer keep it alive).
fn weight(
    ty: sys::ggml_type,
    buft: BufferType,
    k: i64,
    n: i64,
) -> Result<(Context, Tensor, Buffer), Box<dyn std::error::Error>> {
    let ctx = Context::new_no_alloc(1)?;
    let w = ctx.new_tensor(ty, &[k, n])?;
    let buffer = Buffer::alloc_ctx_tensors(&ctx, buft, "weights")?;
    let weights: Vec<f32> = (0..k * n).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
    let mut quantized = vec![0u8; unsafe { sys::ggml_row_size(ty, k) } * n as usize];
    unsafe {
        sys::ggml_quantize_chunk(
            ty,
            weights.as_ptr(),
            quantized.as_mut_ptr().cast(),
            0,
            n,
            k,
            std::ptr::null(),
        )
    };
    w.write(&quantized);
    Ok((ctx, w, buffer))
}

/// Turns each side takes at each row count.
const TURNS: usize = 5;

/// Milliseconds per product of `w` with `rows` rows (`reference`: on ggml's
/// reference kernels, which `backend` runs).
fn time(w: Tensor, k: i64, rows: i64, own: bool, reference: bool, reps: u32, backend: &mut Backend) -> f64 {
    let mut arena = GraphArena::new(16);
    let products = if own {
        Products::Own {
            reference,
            repacked: true,
        }
    } else {
        Products::Ggml
    };
    let graph = arena.graph().expect("arena").use_products(products);
    let x = graph.input("x", sys::GGML_TYPE_F32, &[k, rows]);
    graph.expand(graph.mul_mat(w, x));
    let mut galloc = Gallocr::new(backend.default_buft()).expect("allocator");
    galloc.alloc(&graph).expect("alloc");
    x.write(&vec![0.5f32; (k * rows) as usize]);
    backend.compute(&graph).expect("compute");
    let start = Instant::now();
    for _ in 0..reps {
        backend.compute(&graph).expect("compute");
    }
    start.elapsed().as_secs_f64() * 1000.0 / f64::from(reps)
}
