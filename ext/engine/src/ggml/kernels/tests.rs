//! Every kernel's outputs against ggml's own product of the same rows.

use super::*;
use crate::ggml::{Backend, Buffer, Context, CpuDevice, Gallocr, GraphArena};

/// A deterministic stream of floats in [-1, 1).
fn floats(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `w · x` for `x` of `rows` rows, in one pass, with `products`; and whether a
/// kernel of ours computed it.
fn product(w: Tensor, x: &[f32], rows: i64, products: Products, backend: &mut Backend) -> (Vec<f32>, bool) {
    let mut arena = GraphArena::new(16);
    let graph = arena.graph().unwrap().use_products(products);
    let input = graph.input("x", sys::GGML_TYPE_F32, &[w.ne()[0], rows]);
    let out = graph.mul_mat(w, input);
    graph.expand(out);
    let ours = unsafe { (*out.as_ptr()).op } == sys::GGML_OP_CUSTOM;
    let mut galloc = Gallocr::new(backend.default_buft()).unwrap();
    galloc.alloc(&graph).unwrap();
    input.write(&x[..(w.ne()[0] * rows) as usize]);
    backend.compute(&graph).unwrap();
    let mut result = vec![0.0; (w.ne()[1] * rows) as usize];
    out.read_f32(0, &mut result);
    (result, ours)
}

/// Random weights of `ty` (quantized by ggml) in a buffer of type `buft`, times
/// random rows (a selection of counts up to MAX_ROWS), with ggml's default kernels
/// and with its reference kernels: wherever a kernel of ours takes the product, it
/// has the bits of ggml's product of the same rows; with the reference kernels and
/// plain weights, each row the bits of that row alone.
fn ours_have_ggmls_bits(ty: sys::ggml_type, buft: &str) {
    // A short row, and a long one (a feed-forward down projection's) over a count
    // of weight rows that is no multiple of ggml's tiles.
    for (k, n) in [(1024, 64), (8960, 136)] {
        ours_have_ggmls_bits_for_shape(ty, buft, k, n);
    }
}

/// A test that could compare nothing on this CPU shows nothing: it fails, unless
/// `ELELEM_ALLOW_UNCOMPARED=1` accepts that (CI never sets it).
fn nothing_compared(why: &str) {
    assert!(
        std::env::var("ELELEM_ALLOW_UNCOMPARED").is_ok_and(|v| v == "1"),
        "{why}: nothing compared; set ELELEM_ALLOW_UNCOMPARED=1 to accept that"
    );
    eprintln!("{why}: nothing compared (ELELEM_ALLOW_UNCOMPARED=1)");
}

fn ours_have_ggmls_bits_for_shape(ty: sys::ggml_type, buft: &str, k: i64, n: i64) {
    let device = CpuDevice::get().unwrap();
    let Some(&buft) = device.weight_bufts.iter().find(|b| b.name() == buft) else {
        return nothing_compared(&format!("no {buft} buffer type on this CPU"));
    };
    let ctx = Context::new_no_alloc(1).unwrap();
    let w = ctx.new_tensor(ty, &[k, n]).unwrap();
    let _buffer = Buffer::alloc_ctx_tensors(&ctx, buft, "test weights").unwrap();
    let weights = floats((k * n) as usize, 7);
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
        );
    }
    w.write(&quantized);
    // Every count a kernel's inner loops and ggml's tiles tell apart, then a few
    // up to a whole micro-batch.
    let row_counts = (1..=17).chain([23, 24, 25, 33, 40, 41, 63, 64, 100, 255, MAX_ROWS]);
    let x = floats((k * MAX_ROWS) as usize, 11);
    let mut compared = 0;
    for reference in [false, true] {
        let mut backend = Backend::cpu(2).unwrap();
        if reference {
            backend.use_reference_kernels().unwrap();
        }
        // Repacked weights ignore the reference setting (see `Backend::use_reference_kernels`).
        let rows_alone = reference && buft.name() != "CPU_REPACK";
        let alone: Vec<Vec<f32>> = if rows_alone {
            (0..MAX_ROWS as usize)
                .map(|r| product(w, &x[r * k as usize..], 1, Products::Ggml, &mut backend).0)
                .collect()
        } else {
            Vec::new()
        };
        for rows in row_counts.clone() {
            let (ours, taken) = product(
                w,
                &x,
                rows,
                Products::Own {
                    reference,
                    repacked: true,
                },
                &mut backend,
            );
            if !taken {
                continue;
            }
            let (theirs, _) = product(w, &x, rows, Products::Ggml, &mut backend);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&ours),
                bits(&theirs),
                "reference {reference}, {rows} rows: not ggml's bits"
            );
            if rows_alone {
                let alone: Vec<f32> = alone.iter().take(rows as usize).flatten().copied().collect();
                assert_eq!(bits(&ours), bits(&alone), "{rows} rows: not the bits of each row alone");
            }
            compared += 1;
        }
    }
    if compared == 0 {
        nothing_compared(&format!("no product of ours ran (instruction set: {:?})", isa()));
    }
}

#[test]
fn ours_have_ggmls_bits_for_repacked_q4_k() {
    ours_have_ggmls_bits(sys::GGML_TYPE_Q4_K, "CPU_REPACK");
}

#[test]
fn ours_have_ggmls_bits_for_q4_k() {
    ours_have_ggmls_bits(sys::GGML_TYPE_Q4_K, "CPU");
}

#[test]
fn ours_have_ggmls_bits_for_q6_k() {
    ours_have_ggmls_bits(sys::GGML_TYPE_Q6_K, "CPU");
}

/// Q5_0 and Q8_0 weight rows are taken four, two or one at a time: with two threads,
/// 67 of them are shared out six at a time (four, then two) and the last one alone.
const ODD_WEIGHT_ROWS: i64 = 67;

#[test]
fn ours_have_ggmls_bits_for_q5_0() {
    ours_have_ggmls_bits(sys::GGML_TYPE_Q5_0, "CPU");
    ours_have_ggmls_bits_for_shape(sys::GGML_TYPE_Q5_0, "CPU", 1024, ODD_WEIGHT_ROWS);
}

#[test]
fn ours_have_ggmls_bits_for_q8_0() {
    ours_have_ggmls_bits(sys::GGML_TYPE_Q8_0, "CPU");
    ours_have_ggmls_bits_for_shape(sys::GGML_TYPE_Q8_0, "CPU", 1024, ODD_WEIGHT_ROWS);
}

#[test]
fn ggmls_private_choices_are_the_ones_mirrored_here() {
    let source = |file: &str| {
        let path = std::path::Path::new(sys::GGML_SOURCE_DIR)
            .join("src/ggml-cpu")
            .join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let tiled = source("tiled/tiled.cpp");
    for line in [
        format!("return rows >= {TILED_MIN_ROWS} || ggml_tiled_matmul_forced();"),
        "enabled = env == NULL || atoi(env) != 0;".to_string(),
        "forced = env != NULL && atoi(env) == 1;".to_string(),
    ] {
        assert!(
            tiled.contains(&line),
            "ggml's tiled.cpp no longer says `{line}`: update kernels/mod.rs"
        );
    }
    assert!(
        source("repack.cpp").contains(&format!("return \"{REPACK_BUFFER}\";")),
        "ggml's repacking buffer is no longer named {REPACK_BUFFER}"
    );
}

#[test]
fn switches_parse_as_cs_atoi() {
    for (text, n) in [
        ("1", 1),
        (" 8x", 8),
        ("-2", -2),
        ("+3", 3),
        ("abc", 0),
        ("", 0),
        ("0", 0),
    ] {
        assert_eq!(atoi(text), n, "{text:?}");
    }
}
