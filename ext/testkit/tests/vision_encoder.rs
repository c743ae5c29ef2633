//! The vision encoder against the pinned llama.cpp's: synthetic projector GGUFs (seeded
//! random weights, `elelem_testkit::mmproj`) encode the same preprocessed image through
//! clip.cpp's `clip_image_encode` (compiled by `build.rs`, over the same ggml) and through
//! the engine's `vision::Encoder`, and the embeddings must be the same bits. Then the
//! projector files the loader refuses, each with its error.

use std::path::PathBuf;
use std::sync::Arc;

use elelem_engine::vision::{self, Encoder, EncoderParams, ImageU8, Mmproj};
use elelem_engine::Error;
use elelem_gguf::{GgufWriter, TensorType, Value};
use elelem_testkit::canary::Rng;
use elelem_testkit::mmproj::{writer, Shape};
use elelem_testkit::mtmd;

fn write(name: &str, w: &GgufWriter) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.gguf"));
    w.write(&path).unwrap();
    path
}

/// A seeded photograph-like RGB image of `width` x `height`, preprocessed as `mmproj`'s
/// projector type is (Gemma 3's: mtmd's fixed-size family, bilinear; Idefics3's: tiles and
/// an overview, Lanczos; LFM2's: its smart resize, or tiles and a thumbnail; the file's
/// mean and std): every image the encoder then takes.
fn preprocessed(mmproj: &Mmproj, width: usize, height: usize, seed: u64) -> Vec<vision::ImageF32> {
    let mut rng = Rng(seed);
    let pixels: Vec<u8> = (0..width * height * 3).map(|_| (rng.next_u64() >> 56) as u8).collect();
    let img = ImageU8::new(width, height, pixels).unwrap();
    let (kind, params) = mmproj.hparams.preprocessing();
    let out = vision::preprocess(kind, &params, &img).unwrap();
    out.entries.into_iter().chain(out.overview).collect()
}

/// A seeded image of normalized floats in [-1, 1), as a preprocessing with a mean and
/// std of 0.5 gives, of any size: LFM2's encoder at grids its preprocessing may not give.
fn normalized_image(width: usize, height: usize, seed: u64) -> vision::ImageF32 {
    let mut rng = Rng(seed);
    let data = (0..width * height * 3).map(|_| rng.next_f32()).collect();
    vision::ImageF32::new(width, height, data).unwrap()
}

/// Encodes every image of a preprocessed `width` x `height` one with both, compares every
/// float's bits; returns how many were compared.
fn compare(name: &str, shape: &Shape, flash_attn: bool, n_threads: usize, (width, height): (usize, usize)) -> usize {
    let path = write(name, &writer(shape));
    let mmproj = Mmproj::open(&path).unwrap();
    let images = preprocessed(&mmproj, width, height, shape.seed ^ 0xa5a5);
    compare_images(name, &path, mmproj, flash_attn, n_threads, &images)
}

/// Encodes `images` with the projector at `path` (loaded as `mmproj`) by both, compares
/// every float's bits; returns how many were compared.
fn compare_images(
    name: &str,
    path: &std::path::Path,
    mmproj: Mmproj,
    flash_attn: bool,
    n_threads: usize,
    images: &[vision::ImageF32],
) -> usize {
    let mmproj = Arc::new(mmproj);
    let n_out = mmproj.n_mmproj_embd() as usize;
    let mut encoder = Encoder::new(Arc::clone(&mmproj), EncoderParams { n_threads, flash_attn }).unwrap();
    let reserved = encoder.compute_bytes();
    let mut compared = 0;
    let mut tokens = Vec::new();
    for (i, img) in images.iter().enumerate() {
        let n_tokens = mmproj.n_image_tokens(img.width(), img.height());
        tokens.push(n_tokens);
        let ours = encoder.encode(img).unwrap();
        assert_eq!(encoder.compute_bytes(), reserved, "{name}: the compute buffer grew");
        let theirs = mtmd::clip_encode(
            path,
            flash_attn,
            n_threads,
            (img.width(), img.height(), img.data()),
            1 << 24,
        )
        .expect("clip.cpp encodes the synthetic projector");
        assert_eq!(ours.len(), n_tokens * n_out, "{name}: our embeddings' size");
        assert_eq!(theirs.len(), ours.len(), "{name}: clip.cpp's embeddings' size");
        assert!(ours.iter().all(|v| v.is_finite()), "{name}: finite embeddings");
        // Not a vacuous comparison: the values spread (Llama 4's least, about 3e-3, after
        // its adapter's two GELUs and three products of seeded weights).
        let mean = ours.iter().sum::<f32>() / ours.len() as f32;
        let var = ours.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / ours.len() as f32;
        assert!(var > 1e-3, "{name}: embeddings of variance {var}");
        let breaks = break_rows(&mmproj, img);
        check_break_rows(name, &ours, &breaks, n_out);
        let their_nan_breaks = breaks
            .iter()
            .filter(|&&r| theirs[r * n_out..(r + 1) * n_out].iter().any(|v| v.is_nan()))
            .count();
        if their_nan_breaks > 0 {
            eprintln!("{name}, image {i}: {their_nan_breaks} of clip.cpp's break rows hold NaN (its unset memory)");
        }
        let differing: Vec<usize> = (0..ours.len())
            .filter(|&i| ours[i].to_bits() != theirs[i].to_bits())
            .filter(|&i| !(theirs[i].is_nan() && breaks.contains(&(i / n_out))))
            .collect();
        let max_diff = differing
            .iter()
            .map(|&i| (ours[i] - theirs[i]).abs())
            .fold(0.0f32, f32::max);
        assert!(
            differing.is_empty(),
            "{name}, image {i} ({}x{}): {} of {} floats differ from clip.cpp's (max |diff| {max_diff:e}; first at {})",
            img.width(),
            img.height(),
            differing.len(),
            ours.len(),
            differing[0]
        );
        compared += ours.len();
    }
    eprintln!(
        "{name}: {} image(s), {compared} floats ({tokens:?} tokens x {n_out} each) compared, all identical",
        images.len()
    );
    compared
}

/// The rows of Pixtral's `[IMG_BREAK]` embeddings in an image's output (after each row of
/// merged patches but the last); none for the other types.
fn break_rows(mmproj: &Mmproj, img: &vision::ImageF32) -> Vec<usize> {
    let hp = &mmproj.hparams;
    if hp.projector != vision::ProjectorType::Pixtral {
        return Vec::new();
    }
    let out = (hp.patch_size * hp.n_merge) as usize;
    let (columns, rows) = (img.width() / out, img.height() / out);
    (0..rows.saturating_sub(1))
        .map(|r| r * (columns + 1) + columns)
        .collect()
}

/// clip.cpp makes Pixtral's break rows as `0 · (unset memory) + embedding`: a NaN where
/// that memory held one, so a NaN of its in a break row is not compared. Ours are the
/// embedding: every break row the same finite values.
fn check_break_rows(name: &str, ours: &[f32], breaks: &[usize], n_out: usize) {
    let row = |r: usize| &ours[r * n_out..(r + 1) * n_out];
    for &r in breaks {
        assert!(row(r).iter().all(|v| v.is_finite()), "{name}: break row {r}");
        assert_eq!(
            row(r).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            row(breaks[0]).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{name}: break row {r}"
        );
    }
}

#[test]
fn gemma3_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_shape = Shape {
        matrix_type: TensorType::F32,
        seed: 7,
        ..Shape::GEMMA3
    };
    let merge2 = Shape {
        n_merge: Some(2),
        n_layer: 3,
        seed: 11,
        ..Shape::GEMMA3
    };
    let swapped = Shape {
        swapped_ffn: true,
        seed: 13,
        ..Shape::GEMMA3
    };
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        total += compare(&format!("gemma3-f16-{fa}"), &Shape::GEMMA3, flash_attn, 2, (150, 97));
        total += compare(&format!("gemma3-f32-{fa}"), &f32_shape, flash_attn, 1, (150, 97));
        total += compare(&format!("gemma3-merge2-{fa}"), &merge2, flash_attn, 2, (150, 97));
        total += compare(&format!("gemma3-swapped-ffn-{fa}"), &swapped, flash_attn, 2, (150, 97));
    }
    eprintln!("{total} floats compared in all, all identical");
}

#[test]
fn lfm2_embeddings_are_clip_cpps_bit_for_bit() {
    let no_norm = Shape {
        input_norm: false,
        matrix_type: TensorType::F32,
        seed: 19,
        ..Shape::LFM2
    };
    let merge4 = Shape {
        n_merge: Some(4),
        n_layer: 1,
        seed: 23,
        ..Shape::LFM2
    };
    // Patches of 8: the native 16 x 16 grid (no resize), smaller and larger grids, wide
    // and tall ones, and grids the merge does not divide (padded, as clip.cpp pads them).
    let sizes = [(128, 128), (64, 64), (160, 96), (96, 200), (256, 128), (72, 40)];
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        for (name, shape, sizes) in [
            ("lfm2-f16", Shape::LFM2, &sizes[..]),
            ("lfm2-f32-no-input-norm", no_norm, &sizes[..3]),
            ("lfm2-merge4", merge4, &[(128, 128), (88, 136)][..]),
        ] {
            let name = format!("{name}-{fa}");
            let path = write(&name, &writer(&shape));
            let images: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(w, h))| normalized_image(w, h, shape.seed ^ i as u64))
                .collect();
            let mmproj = Mmproj::open(&path).unwrap();
            total += compare_images(&name, &path, mmproj, flash_attn, 2, &images);
        }
    }
    eprintln!("{total} floats compared in all, all identical");
}

/// Pixtral's ViT (2D RoPE, RMS norms, the SiLU-gated feed-forward) and projector, with
/// Mistral Small's patch merger (2 x 2) and without it (Pixtral 12B's), at grids square,
/// wide, tall, of one merged patch and of a row; then through its own preprocessing.
#[test]
fn pixtral_embeddings_are_clip_cpps_bit_for_bit() {
    let no_merger = Shape {
        n_merge: None,
        matrix_type: TensorType::F32,
        seed: 31,
        ..Shape::PIXTRAL
    };
    let sizes = [(128, 128), (96, 64), (160, 48), (48, 144), (16, 16), (128, 16)];
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        for (name, shape) in [("pixtral-f16", Shape::PIXTRAL), ("pixtral-f32-no-merger", no_merger)] {
            let name = format!("{name}-{fa}");
            let path = write(&name, &writer(&shape));
            let images: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(w, h))| normalized_image(w, h, shape.seed ^ i as u64))
                .collect();
            let mmproj = Mmproj::open(&path).unwrap();
            total += compare_images(&name, &path, mmproj, flash_attn, 2, &images);
        }
        total += compare(
            &format!("pixtral-preprocessed-{fa}"),
            &Shape::PIXTRAL,
            flash_attn,
            2,
            (150, 97),
        );
    }
    eprintln!("{total} floats compared in all, all identical");
}

/// Gemma 4's ViT (position tables, per-head Q/K norms, V's norm, post-norms, NEOX 2D
/// RoPE, the GELU gate) and projector (3 x 3 pooling, the standardization), at grids square,
/// wide, tall and of one token, and through its own preprocessing.
#[test]
fn gemma4v_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_merge2 = Shape {
        n_merge: Some(2),
        matrix_type: TensorType::F32,
        seed: 41,
        ..Shape::GEMMA4V
    };
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        for (name, shape, sizes) in [
            (
                "gemma4v-f16",
                Shape::GEMMA4V,
                &[(96, 96), (48, 72), (144, 48), (24, 24)][..],
            ),
            ("gemma4v-f32-merge2", f32_merge2, &[(64, 64), (80, 32)][..]),
        ] {
            let name = format!("{name}-{fa}");
            let path = write(&name, &writer(&shape));
            let images: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(w, h))| normalized_image(w, h, shape.seed ^ i as u64))
                .collect();
            let mmproj = Mmproj::open(&path).unwrap();
            total += compare_images(&name, &path, mmproj, flash_attn, 2, &images);
        }
        total += compare(
            &format!("gemma4v-preprocessed-{fa}"),
            &Shape::GEMMA4V,
            flash_attn,
            2,
            (150, 97),
        );
    }
    eprintln!("{total} floats compared in all, all identical");
}

/// Llama 4's ViT (the class token, learned positions and 2D RoPE, the unfolded patches'
/// linear map) and projector (the pixel shuffle, the adapter MLP), through its LLaVA-UHD
/// slices: a large image in tiles and the overview, a small one.
#[test]
fn llama4_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_merge4 = Shape {
        n_merge: Some(4),
        matrix_type: TensorType::F32,
        seed: 37,
        ..Shape::LLAMA4
    };
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        total += compare(&format!("llama4-f16-{fa}"), &Shape::LLAMA4, flash_attn, 2, (300, 194));
        total += compare(
            &format!("llama4-f16-small-{fa}"),
            &Shape::LLAMA4,
            flash_attn,
            2,
            (90, 60),
        );
        total += compare(
            &format!("llama4-f32-merge4-{fa}"),
            &f32_merge4,
            flash_attn,
            1,
            (200, 260),
        );
    }
    eprintln!("{total} floats compared in all, all identical");
}

/// LFM2's own preprocessing feeds its encoder: an image smart-resized whole (150 x 90 to
/// 352 x 224: 77 tokens), and one cut in two 512 tiles (256 tokens each, the most the
/// encoder takes) and a thumbnail (672 x 352: 231 tokens), with SigLIP2's patches of 16.
#[test]
fn lfm2_preprocessed_images_encode_as_clip_cpps() {
    let shape = Shape {
        image_size: 256,
        patch_size: 16,
        n_layer: 1,
        seed: 29,
        ..Shape::LFM2
    };
    let n_out = shape.n_text_embd as usize;
    for ((w, h), n_tokens) in [((150, 90), 77), ((1100, 600), 256 + 256 + 231)] {
        let compared = compare(&format!("lfm2-preprocessed-{w}x{h}"), &shape, true, 2, (w, h));
        assert_eq!(compared, n_tokens * n_out, "{w}x{h}");
    }
}

/// Qwen2-VL's encoder (two patch convolutions, the 2 x 2 reorder, 2D rotary positions,
/// the merger) on images of mtmd's smart resize (bicubic, multiples of 28 pixels): small
/// ones scaled up to its minimum of 8 tokens, wide and tall ones, and at grids the
/// preprocessing may not give; F16 and F32 matrices, with and without flash attention.
#[test]
fn qwen2vl_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_shape = Shape {
        matrix_type: TensorType::F32,
        seed: 31,
        ..Shape::QWEN2VL
    };
    let mut compared = 0;
    for (i, (name, shape)) in [("qwen2vl-f16", Shape::QWEN2VL), ("qwen2vl-f32", f32_shape)]
        .into_iter()
        .enumerate()
    {
        for flash_attn in [true, false] {
            for (w, h) in [(160, 120), (47, 31), (300, 90), (60, 250)] {
                let name = format!("{name}-{w}x{h}-fa{flash_attn}");
                compared += compare(&name, &shape, flash_attn, 2, (w, h));
            }
        }
        let path = write(&format!("{name}-grids"), &writer(&shape));
        let images: Vec<_> = [(28, 28), (56, 112), (140, 28), (224, 168)]
            .into_iter()
            .map(|(w, h)| normalized_image(w, h, 41 + i as u64))
            .collect();
        compared += compare_images(name, &path, Mmproj::open(&path).unwrap(), true, 2, &images);
    }
    assert!(compared > 0);
}

/// Qwen3-VL's encoder (Qwen2-VL's input and rotary positions, a patch bias, position
/// embeddings resized bilinear with aligned corners and reordered in 2 x 2 blocks, the fused
/// QKV, the merger) and its deepstack embeddings (layers 1 and 2 of 3, the last one's output
/// before the post-LayerNorm), every float of each token's main path and deepstack slices: on
/// images of mtmd's smart resize (multiples of 32 pixels; 128 x 128 is the position grid's
/// own size, not resized), and at grids the preprocessing may not give; F16 and F32
/// matrices, with and without flash attention.
#[test]
fn qwen3vl_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_shape = Shape {
        matrix_type: TensorType::F32,
        seed: 37,
        ..Shape::QWEN3VL
    };
    let mut compared = 0;
    for (i, (name, shape)) in [("qwen3vl-f16", Shape::QWEN3VL), ("qwen3vl-f32", f32_shape)]
        .into_iter()
        .enumerate()
    {
        for flash_attn in [true, false] {
            for (w, h) in [(160, 120), (47, 31), (300, 90), (60, 250), (128, 128)] {
                let name = format!("{name}-{w}x{h}-fa{flash_attn}");
                compared += compare(&name, &shape, flash_attn, 2, (w, h));
            }
        }
        let path = write(&format!("{name}-grids"), &writer(&shape));
        let mmproj = Mmproj::open(&path).unwrap();
        // The main path's 96 values a token and each deepstack layer's 96.
        assert_eq!(mmproj.n_mmproj_embd(), 3 * 96, "{name}");
        let images: Vec<_> = [(32, 32), (64, 128), (160, 32), (256, 192)]
            .into_iter()
            .map(|(w, h)| normalized_image(w, h, 43 + i as u64))
            .collect();
        compared += compare_images(name, &path, mmproj, true, 2, &images);
    }
    assert!(compared > 0);
    eprintln!("qwen3vl: {compared} floats (main path and deepstack) identical to clip.cpp's");
}

/// Qwen2.5-VL's encoder (Qwen2-VL's with RMS norms, the gated feed-forward with biases, and
/// window attention: the merged patches grouped by 4 x 4 windows, masked attention in the
/// layers that are not every `n_wa_pattern`th, the order put back after the merger) on
/// images of mtmd's smart resize, and at grids of one whole window, one partial window,
/// whole windows, whole and partial ones on both axes, a single column; with the file's
/// pattern, with the last layer only attending over the whole image (3), with none (4), and
/// without windows (0); F16 and F32 matrices, with and without flash attention.
#[test]
fn qwen25vl_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_shape = Shape {
        matrix_type: TensorType::F32,
        seed: 37,
        ..Shape::QWEN25VL
    };
    let grids = [(112, 112), (56, 84), (224, 224), (280, 168), (28, 448)];
    let mut compared = 0;
    for (i, (name, shape)) in [("qwen25vl-f16", Shape::QWEN25VL), ("qwen25vl-f32", f32_shape)]
        .into_iter()
        .enumerate()
    {
        for flash_attn in [true, false] {
            for (w, h) in [(160, 120), (47, 31), (300, 90), (60, 250)] {
                let name = format!("{name}-{w}x{h}-fa{flash_attn}");
                compared += compare(&name, &shape, flash_attn, 2, (w, h));
            }
            let images: Vec<_> = grids
                .into_iter()
                .map(|(w, h)| normalized_image(w, h, 43 + i as u64))
                .collect();
            for n_wa_pattern in [elelem_testkit::mmproj::QWEN25VL_WA_PATTERN, 3, 4, 0] {
                let mut w = writer(&shape);
                w.set("clip.vision.n_wa_pattern", Value::U32(n_wa_pattern));
                let name = format!("{name}-grids-wa{n_wa_pattern}-fa{flash_attn}");
                let path = write(&name, &w);
                let mmproj = Mmproj::open(&path).unwrap();
                compared += compare_images(&name, &path, mmproj, flash_attn, 2, &images);
            }
        }
    }
    assert!(compared > 0);
}

/// A Qwen2.5-VL projector loads with Qwen2-VL's preprocessing and its window pattern, with
/// or without the gate's biases; one without the pattern, with windows no merged patch fits
/// in, a `projection_dim` that is not the merger's width (clip.cpp reorders its output by
/// it), a missing gate, or a tensor its graph does not read is refused.
#[test]
fn qwen25vl_projectors_that_do_not_fit_are_refused() {
    let load = |alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape {
            n_layer: 1,
            ..Shape::QWEN25VL
        });
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    let mmproj = load(&|_| {}).unwrap();
    assert_eq!(mmproj.n_mmproj_embd(), 96);
    assert_eq!(mmproj.n_image_tokens(168, 112), 6 * 4);
    let wa = mmproj.hparams.window_attention().unwrap();
    assert_eq!((wa.grid_window, wa.n_wa_pattern), (4, 2));
    let (kind, params) = mmproj.hparams.preprocessing();
    assert_eq!(kind, vision::Preprocessor::DynSize);
    assert_eq!((params.min_pixels, params.max_pixels), (8 * 784, 4096 * 784));
    assert!(load(&|w| {
        w.remove_tensor("v.blk.0.ffn_gate.bias");
    })
    .is_ok());

    let refused = |alter: &dyn Fn(&mut GgufWriter), expected: &str| {
        let e = load(alter).err().unwrap_or_else(|| panic!("{expected}: loaded"));
        assert!(
            matches!(&e, Error::Load(m) | Error::Unsupported(m) if m.contains(expected)),
            "{expected}: {e:?}"
        );
    };
    refused(
        &|w| {
            w.remove("clip.vision.n_wa_pattern");
        },
        "missing required metadata key clip.vision.n_wa_pattern",
    );
    refused(
        &|w| {
            w.set("clip.vision.n_wa_pattern", Value::U32(1));
        },
        "n_wa_pattern 1",
    );
    refused(
        &|w| {
            w.set("clip.vision.patch_size", Value::U32(112));
            w.set("clip.vision.image_size", Value::U32(448));
        },
        "wider than a window of 112",
    );
    refused(
        &|w| {
            w.set("clip.vision.projection_dim", Value::U32(64));
        },
        "clip.vision.projection_dim 64 is not mm.2.weight's width 96",
    );
    refused(
        &|w| {
            w.remove_tensor("v.blk.0.ffn_gate.weight");
        },
        "missing tensor v.blk.0.ffn_gate.weight",
    );
    refused(
        &|w| {
            w.remove_tensor("v.blk.0.attn_v.bias");
        },
        "missing tensor v.blk.0.attn_v.bias",
    );
    refused(
        &|w| {
            w.add_f32("v.pre_ln.weight", &[64], &[1.0; 64]);
        },
        "v.pre_ln.weight",
    );
    refused(
        &|w| {
            w.remove_tensor("v.blk.0.ffn_gate.bias");
            w.add_f32("v.blk.0.ffn_gate.bias", &[64], &[0.0; 64]);
        },
        "v.blk.0.ffn_gate.bias",
    );
}

/// Each projector type's preprocessing parameters are the ones clip.cpp's loader sets:
/// Gemma 3's fixed size, Idefics3's longest edge or none, LFM2's token limits at two
/// patch sizes and merges, LLaVA's padding with and without grid pinpoints.
#[test]
fn preprocessing_parameters_are_clip_cpps() {
    let lfm2_siglip2 = Shape {
        patch_size: 16,
        image_size: 256,
        ..Shape::LFM2
    };
    let lfm2_merge4 = Shape {
        n_merge: Some(4),
        ..Shape::LFM2
    };
    let pixtral_no_merger = Shape {
        n_merge: None,
        ..Shape::PIXTRAL
    };
    let idefics3_no_longest_edge = Shape {
        longest_edge: None,
        ..Shape::IDEFICS3
    };
    let shapes = [
        ("gemma3", Shape::GEMMA3),
        ("idefics3", Shape::IDEFICS3),
        ("idefics3-no-longest-edge", idefics3_no_longest_edge),
        ("lfm2", Shape::LFM2),
        ("lfm2-siglip2", lfm2_siglip2),
        ("lfm2-merge4", lfm2_merge4),
        ("llava", Shape::LLAVA),
        ("internvl", Shape::INTERNVL),
        ("ldp", Shape::LDP),
        (
            "llava-pinpoints",
            Shape {
                grid_pinpoints: elelem_testkit::mmproj::LLAVA_PINPOINTS,
                ..Shape::LLAVA
            },
        ),
        ("qwen2vl", Shape::QWEN2VL),
        ("qwen25vl", Shape::QWEN25VL),
        ("qwen3vl", Shape::QWEN3VL),
        ("pixtral", Shape::PIXTRAL),
        ("pixtral-no-merger", pixtral_no_merger),
        ("llama4", Shape::LLAMA4),
        ("gemma4v", Shape::GEMMA4V),
    ];
    for (name, shape) in shapes {
        let shape = Shape { n_layer: 1, ..shape };
        let path = write(&format!("params-{name}"), &writer(&shape));
        let theirs = mtmd::clip_image_params(&path).expect("clip.cpp loads the synthetic projector");
        let (_, ours) = Mmproj::open(&path).unwrap().hparams.preprocessing();
        assert_eq!(ours, theirs, "{name}");
        if name.starts_with("lfm2") {
            let merged_patch = theirs.patch_size * theirs.n_merge;
            assert_eq!(theirs.max_pixels, 256 * merged_patch * merged_patch, "{name}");
        }
    }
}

#[test]
fn lfm2_projectors_and_images_that_do_not_fit_are_refused() {
    let load = |alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape {
            n_layer: 1,
            ..Shape::LFM2
        });
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    let mmproj = load(&|_| {}).unwrap();
    assert_eq!(mmproj.n_mmproj_embd(), 96);
    assert_eq!(mmproj.n_image_tokens(160, 96), 10 * 6);
    assert_eq!(mmproj.n_image_tokens(72, 40), 5 * 3);
    // clip.cpp's limits of 64 to 256 tokens, as pixels of merged 16 x 16 patches.
    let (kind, params) = mmproj.hparams.preprocessing();
    assert_eq!(kind, vision::Preprocessor::Lfm2);
    assert_eq!((params.min_pixels, params.max_pixels), (64 * 256, 256 * 256));

    for name in ["mm.1.weight", "mm.1.bias", "mm.2.weight", "mm.2.bias"] {
        let e = load(&|w| {
            w.remove_tensor(name);
        })
        .err()
        .unwrap();
        assert!(matches!(&e, Error::Load(m) if m.contains(name)), "{name}: {e:?}");
    }
    // The input norm is optional, its weight and bias each (clip.cpp's graph takes either).
    assert!(load(&|w| {
        w.remove_tensor("mm.input_norm.weight");
    })
    .is_ok());
    let e = load(&|w| {
        w.remove_tensor("mm.input_norm.bias");
        w.add_f32("mm.input_norm.bias", &[64], &[0.0; 64]);
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("mm.input_norm.bias")),
        "{e:?}"
    );
    // The MLP's first layer must take the unshuffled width (64 x 2 x 2).
    let e = load(&|w| {
        w.remove_tensor("mm.1.weight");
        w.add_f32("mm.1.weight", &[64, 128], &vec![0.0; 64 * 128]);
    })
    .err()
    .unwrap();
    assert!(matches!(&e, Error::Load(m) if m.contains("mm.1.weight")), "{e:?}");
    let e = load(&|w| {
        w.remove("clip.vision.projector.scale_factor");
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("lfm2") && m.contains("scale_factor")),
        "{e:?}"
    );

    let params = EncoderParams {
        n_threads: 1,
        flash_attn: true,
    };
    let mut encoder = Encoder::new(Arc::new(mmproj), params).unwrap();
    // Sides that are not multiples of the patch, and more than 256 tokens.
    for (w, h, what) in [(100, 64, "multiples of 8"), (8 * 40, 8 * 30, "at most 256 tokens")] {
        let e = encoder.encode(&normalized_image(w, h, 1)).unwrap_err();
        assert!(matches!(&e, Error::Image(m) if m.contains(what)), "{w}x{h}: {e:?}");
    }
    assert_eq!(encoder.encode(&normalized_image(8, 8, 1)).unwrap().len(), 96);
}

#[test]
fn pixtral_projectors_and_images_that_do_not_fit_are_refused() {
    let load = |alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape {
            n_layer: 1,
            ..Shape::PIXTRAL
        });
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    let mmproj = load(&|_| {}).unwrap();
    // 10 x 6 merged patches and a break after each row but the last.
    assert_eq!(mmproj.n_image_tokens(160, 96), 10 * 6 + 5);
    // clip.cpp's limits of 8 to 1024 tokens, as pixels of merged 8 x 8 patches.
    let (kind, params) = mmproj.hparams.preprocessing();
    assert_eq!(kind, vision::Preprocessor::DynSize);
    assert_eq!((params.min_pixels, params.max_pixels), (8 * 256, 1024 * 256));

    for name in [
        "mm.1.weight",
        "mm.2.weight",
        "v.token_embd.img_break",
        "mm.input_norm.weight",
    ] {
        let e = load(&|w| {
            w.remove_tensor(name);
        })
        .err()
        .unwrap();
        assert!(matches!(&e, Error::Load(m) if m.contains(name)), "{name}: {e:?}");
    }
    // The MLP's biases are optional (clip.cpp's graph takes either).
    assert!(load(&|w| {
        w.remove_tensor("mm.1.bias");
        w.remove_tensor("mm.2.bias");
    })
    .is_ok());
    // A spatial merge without the merger, and a merger without the merge.
    let e = load(&|w| {
        w.remove_tensor("mm.patch_merger.weight");
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("mm.patch_merger.weight") && m.contains("spatial_merge_size")),
        "{e:?}"
    );
    let e = load(&|w| {
        w.remove("clip.vision.spatial_merge_size");
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("mm.patch_merger.weight")),
        "{e:?}"
    );
    // Learned positions, which clip.cpp's Pixtral graph ignores.
    let e = load(&|w| {
        w.add_f32("v.position_embd.weight", &[64, 256], &vec![0.0; 64 * 256]);
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("v.position_embd.weight")),
        "{e:?}"
    );
    let e = load(&|w| {
        w.remove_tensor("v.blk.0.ffn_gate.weight");
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("v.blk.0.ffn_gate.weight")),
        "{e:?}"
    );

    let params = EncoderParams {
        n_threads: 1,
        flash_attn: true,
    };
    let mut encoder = Encoder::new(Arc::new(mmproj), params).unwrap();
    // Sides that are not multiples of the merged patch, and more than 1024 merged patches.
    for (w, h, what) in [(40, 64, "multiples of 16"), (16 * 40, 16 * 30, "at most 1024 tokens")] {
        let e = encoder.encode(&normalized_image(w, h, 1)).unwrap_err();
        assert!(matches!(&e, Error::Image(m) if m.contains(what)), "{w}x{h}: {e:?}");
    }
    assert_eq!(encoder.encode(&normalized_image(16, 16, 1)).unwrap().len(), 96);
}

#[test]
fn idefics3_embeddings_are_clip_cpps_bit_for_bit() {
    let merge4 = Shape {
        n_merge: Some(4),
        matrix_type: TensorType::F32,
        seed: 17,
        ..Shape::IDEFICS3
    };
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        // 300 x 194 becomes 256 x 166 at most: two tiles by two of 128, and the overview.
        total += compare(
            &format!("idefics3-f16-{fa}"),
            &Shape::IDEFICS3,
            flash_attn,
            2,
            (300, 194),
        );
        total += compare(&format!("idefics3-merge4-{fa}"), &merge4, flash_attn, 1, (90, 60));
    }
    eprintln!("{total} floats compared in all, all identical");
}

/// LLaVA's CLIP and MLP: 1.5's (one fixed-size image, the layer before the last), 1.6's
/// (LLaVA-UHD slices at grid pinpoints and the overview, `v.image_newline` unused), Granite's
/// feature layers stacked (the input, a middle layer, the last), Yi-VL's `mlp_norm`; F16 and
/// F32, so that the position embeddings are looked up from both.
#[test]
fn llava_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_shape = Shape {
        matrix_type: TensorType::F32,
        seed: 31,
        ..Shape::LLAVA
    };
    let pinpoints = Shape {
        grid_pinpoints: elelem_testkit::mmproj::LLAVA_PINPOINTS,
        seed: 37,
        ..Shape::LLAVA
    };
    let feature_layers = Shape {
        feature_layers: &[0, 2, 3],
        seed: 41,
        ..Shape::LLAVA
    };
    let mlp_norm = Shape {
        mlp_norm: true,
        seed: 43,
        ..Shape::LLAVA
    };
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        total += compare(&format!("llava-f16-{fa}"), &Shape::LLAVA, flash_attn, 2, (150, 97));
        total += compare(&format!("llava-f32-{fa}"), &f32_shape, flash_attn, 1, (150, 97));
        // 150 x 97 best fits 128 x 128 (the most of its pixels kept): four slices and the
        // overview.
        let n = compare(&format!("llava-pinpoints-{fa}"), &pinpoints, flash_attn, 2, (150, 97));
        assert_eq!(n, 5 * 64 * 96);
        total += n;
        total += compare(
            &format!("llava-feature-layers-{fa}"),
            &feature_layers,
            flash_attn,
            2,
            (97, 150),
        );
        total += compare(&format!("llava-mlp-norm-{fa}"), &mlp_norm, flash_attn, 2, (150, 97));
    }
    eprintln!("{total} floats compared in all, all identical");
}

/// MobileVLM's projectors on LLaVA's CLIP at the 24 x 24 patches clip.cpp builds them for:
/// `ldp`'s blocks (convolutions of stride 1 and 2, squeeze-and-excitation) and `ldpv2`'s
/// pooling and positional encoding generator; F16 and F32 matrices.
#[test]
fn mobilevlm_embeddings_are_clip_cpps_bit_for_bit() {
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        for (name, shape) in [("ldp", Shape::LDP), ("ldpv2", Shape::LDPV2)] {
            let f32_shape = Shape {
                matrix_type: TensorType::F32,
                seed: shape.seed ^ 1,
                ..shape
            };
            let n = compare(&format!("{name}-f16-{fa}"), &shape, flash_attn, 2, (150, 97));
            assert_eq!(n, 144 * 96, "{name}: a quarter of the 576 patches");
            total += n;
            total += compare(&format!("{name}-f32-{fa}"), &f32_shape, flash_attn, 1, (97, 150));
        }
    }
    eprintln!("{total} floats compared in all, all identical");
}

#[test]
fn mobilevlm_projectors_that_do_not_fit_are_refused() {
    let load = |shape: Shape, alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape { n_layer: 1, ..shape });
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    for shape in [Shape::LDP, Shape::LDPV2] {
        let mmproj = load(shape, &|_| {}).unwrap();
        assert_eq!((mmproj.n_mmproj_embd(), mmproj.n_output_tokens()), (96, 144));
        // clip.cpp's graph is built for 24 x 24 patches.
        let e = load(
            Shape {
                image_size: 64,
                ..shape
            },
            &|_| {},
        )
        .err()
        .unwrap();
        assert!(matches!(&e, Error::Unsupported(m) if m.contains("32 patches")), "{e:?}");
    }
    for (shape, kernel) in [
        (Shape::LDP, "mm.model.mb_block.2.block.0.0.weight"),
        (Shape::LDPV2, "mm.model.peg.0.weight"),
    ] {
        let e = load(shape, &|w| {
            w.remove_tensor(kernel);
            w.add_f32(kernel, &[3, 3, 1, 96], &[0.0; 9 * 96]);
        })
        .err()
        .unwrap();
        assert!(
            matches!(&e, Error::Unsupported(m) if m.contains(kernel) && m.contains("F16")),
            "{e:?}"
        );
        let e = load(shape, &|w| {
            w.remove_tensor(kernel);
        })
        .err()
        .unwrap();
        assert!(matches!(&e, Error::Load(m) if m.contains(kernel)), "{e:?}");
    }
    let e = load(Shape::LDP, &|w| {
        w.remove_tensor("mm.model.mb_block.1.block.1.fc1.weight");
    })
    .err()
    .unwrap();
    assert!(matches!(&e, Error::Load(m) if m.contains("fc1.weight")), "{e:?}");
}

/// InternVL's InternViT and projector: an image cut into tiles at the grid closest to its
/// aspect (clip.cpp's default 1 to 12 tiles) and the overview, each through the encoder;
/// F16 and F32; a shuffle of 1 (no `scale_factor`) and one of 4.
#[test]
fn internvl_embeddings_are_clip_cpps_bit_for_bit() {
    let f32_shape = Shape {
        matrix_type: TensorType::F32,
        seed: 47,
        ..Shape::INTERNVL
    };
    let no_shuffle = Shape {
        n_merge: None,
        seed: 53,
        ..Shape::INTERNVL
    };
    let shuffle4 = Shape {
        n_merge: Some(4),
        seed: 59,
        ..Shape::INTERNVL
    };
    let mut total = 0;
    for flash_attn in [true, false] {
        let fa = if flash_attn { "fa" } else { "nofa" };
        total += compare(
            &format!("internvl-f16-{fa}"),
            &Shape::INTERNVL,
            flash_attn,
            2,
            (150, 97),
        );
        total += compare(&format!("internvl-f32-{fa}"), &f32_shape, flash_attn, 1, (97, 150));
        total += compare(
            &format!("internvl-no-shuffle-{fa}"),
            &no_shuffle,
            flash_attn,
            2,
            (60, 40),
        );
        total += compare(&format!("internvl-shuffle4-{fa}"), &shuffle4, flash_attn, 2, (150, 97));
    }
    eprintln!("{total} floats compared in all, all identical");
}

#[test]
fn internvl_projectors_that_do_not_fit_are_refused() {
    let load = |alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape::INTERNVL);
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    let mmproj = load(&|_| {}).unwrap();
    assert_eq!((mmproj.n_mmproj_embd(), mmproj.n_output_tokens()), (96, 16));
    // clip.cpp's grids of 1 to 12 tiles: 12 + 6 + 4 + 3 + 2 + 2 + 6 of them.
    let (kind, params) = mmproj.hparams.preprocessing();
    assert_eq!(
        (kind, params.res_candidates.len()),
        (vision::Preprocessor::LlavaUhd, 35)
    );
    assert_eq!(params.res_candidates[..2], [(64, 64), (64, 128)]);

    // internvl.cpp asserts the class embedding.
    for name in ["v.class_embd", "mm.model.mlp.0.weight", "mm.model.mlp.3.bias"] {
        let e = load(&|w| {
            w.remove_tensor(name);
        })
        .err()
        .unwrap();
        assert!(matches!(&e, Error::Load(m) if m.contains(name)), "{name}: {e:?}");
    }
    for (min, max) in [(3, 2), (1, 1000)] {
        let e = load(&|w| {
            w.set("clip.vision.preproc_min_tiles", Value::U32(min));
            w.set("clip.vision.preproc_max_tiles", Value::U32(max));
        })
        .err()
        .unwrap();
        assert!(matches!(&e, Error::Load(m) if m.contains("preproc_max_tiles")), "{e:?}");
    }
    // InternViT-6B's RMS norms.
    let e = load(&|w| {
        w.set("clip.vision.embedding_length", Value::U32(3200));
        w.set("clip.vision.block_count", Value::U32(45));
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("InternViT-6B")),
        "{e:?}"
    );
    // Q/K norms are not part of the graph elelem runs.
    let e = load(&|w| {
        w.add_f32("v.blk.0.attn_q_norm.weight", &[64], &[1.0; 64]);
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("attn_q_norm")),
        "{e:?}"
    );
}

#[test]
fn llava_projectors_that_do_not_fit_are_refused() {
    let load = |alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape::LLAVA);
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    let mmproj = load(&|_| {}).unwrap();
    assert_eq!((mmproj.n_mmproj_embd(), mmproj.n_output_tokens()), (96, 64));
    assert_eq!(mmproj.hparams.n_layer_run(), 2);
    let (kind, params) = mmproj.hparams.preprocessing();
    assert_eq!(
        (kind, params.pad_color),
        (vision::Preprocessor::FixedSize, [122, 116, 104])
    );

    for name in [
        "mm.0.weight",
        "mm.0.bias",
        "mm.2.weight",
        "mm.2.bias",
        "v.blk.2.ffn_down.weight",
    ] {
        let e = load(&|w| {
            w.remove_tensor(name);
        })
        .err()
        .unwrap();
        assert!(matches!(&e, Error::Load(m) if m.contains(name)), "{name}: {e:?}");
    }
    // A position for each patch and the class token: 65, not 64.
    let e = load(&|w| {
        w.remove_tensor("v.position_embd.weight");
        w.add_f32("v.position_embd.weight", &[64, 64], &[0.0; 64 * 64]);
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("v.position_embd.weight")),
        "{e:?}"
    );
    let e = load(&|w| {
        w.set("clip.vision.feature_layer", Value::Array(vec![Value::I32(4)]));
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("feature layer index 4")),
        "{e:?}"
    );
    let e = load(&|w| {
        w.set(
            "clip.vision.image_grid_pinpoints",
            Value::Array(vec![Value::I32(64), Value::I32(128), Value::I32(64)]),
        );
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("image_grid_pinpoints")),
        "{e:?}"
    );
    // Layer scales are InternVL's, not LLaVA's graph.
    let e = load(&|w| {
        w.add_f32("v.blk.0.ls1.weight", &[64], &[1.0; 64]);
    })
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("v.blk.0.ls1.weight")),
        "{e:?}"
    );
}

/// What `Mmproj::load` says of a synthetic Gemma 3 projector altered by `alter`.
fn load_altered(alter: impl FnOnce(&mut GgufWriter)) -> Result<Mmproj, Error> {
    let mut w = writer(&Shape {
        n_layer: 1,
        ..Shape::GEMMA3
    });
    alter(&mut w);
    Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
}

fn load_error(alter: impl FnOnce(&mut GgufWriter)) -> Error {
    match load_altered(alter) {
        Ok(_) => panic!("loaded"),
        Err(e) => e,
    }
}

#[test]
fn projector_files_that_do_not_fit_are_refused_with_what_is_wrong() {
    assert!(load_altered(|_| {}).is_ok());

    let e = load_error(|w| {
        w.remove_tensor("v.blk.0.attn_q.weight");
    });
    assert!(
        matches!(&e, Error::Load(m) if m == "missing tensor v.blk.0.attn_q.weight"),
        "{e:?}"
    );

    let e = load_error(|w| {
        w.remove_tensor("mm.soft_emb_norm.weight");
    });
    assert!(
        matches!(&e, Error::Load(m) if m.contains("mm.soft_emb_norm.weight")),
        "{e:?}"
    );

    let e = load_error(|w| {
        w.remove_tensor("v.blk.0.ffn_up.weight");
        w.add_f32("v.blk.0.ffn_up.weight", &[64, 100], &vec![0.0; 6400]);
    });
    assert!(
        matches!(&e, Error::Load(m) if m.contains("v.blk.0.ffn_up.weight") && m.contains("shape")),
        "{e:?}"
    );

    let e = load_error(|w| {
        w.add_f32("v.pre_ln.weight", &[64], &[1.0; 64]);
    });
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("v.pre_ln.weight")),
        "{e:?}"
    );

    let e = load_error(|w| {
        w.set("clip.projector_type", Value::String("kimivl".into()));
    });
    assert!(matches!(&e, Error::Unsupported(m) if m.contains("kimivl")), "{e:?}");

    let e = load_error(|w| {
        w.remove("clip.vision.patch_size");
    });
    assert!(
        matches!(&e, Error::Load(m) if m == "missing required metadata key clip.vision.patch_size"),
        "{e:?}"
    );

    let e = load_error(|w| {
        w.set("clip.vision.block_count", Value::String("two".into()));
    });
    assert!(
        matches!(&e, Error::Load(m) if m.contains("clip.vision.block_count")),
        "{e:?}"
    );

    let e = load_error(|w| {
        w.set("clip.has_vision_encoder", Value::Bool(false));
    });
    assert!(matches!(&e, Error::Load(m) if m.contains("no vision encoder")), "{e:?}");

    // 16 patches a side do not pool by 3.
    let e = load_error(|w| {
        w.set("clip.vision.projector.scale_factor", Value::U32(3));
    });
    assert!(matches!(&e, Error::Unsupported(m) if m.contains("merge of 3")), "{e:?}");

    // Idefics3 needs its unshuffle's factor.
    let e = load_error(|w| {
        w.set("clip.projector_type", Value::String("idefics3".into()));
        w.remove("clip.vision.projector.scale_factor");
    });
    assert!(matches!(&e, Error::Load(m) if m.contains("scale_factor")), "{e:?}");

    let e = load_error(|w| {
        w.set("clip.vision.image_mean", Value::Array(vec![Value::F32(0.5)]));
    });
    assert!(
        matches!(&e, Error::Load(m) if m.contains("clip.vision.image_mean")),
        "{e:?}"
    );

    // A language model of another width than the projector's embeddings (96).
    let mmproj = Arc::new(load_altered(|_| {}).unwrap());
    assert!(mmproj.check_text_model(96).is_ok());
    let e = mmproj.check_text_model(2048).unwrap_err();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("96") && m.contains("2048")),
        "{e:?}"
    );

    // An encoder refuses an image of another size than its input.
    let small = load_altered(|w| {
        w.set("clip.vision.image_size", Value::U32(64));
        w.remove_tensor("v.position_embd.weight");
        w.add_f32("v.position_embd.weight", &[64, 64], &vec![0.0; 64 * 64]);
    })
    .unwrap();
    let params = EncoderParams {
        n_threads: 1,
        flash_attn: true,
    };
    let mut encoder = Encoder::new(mmproj, params).unwrap();
    let e = encoder.encode(&preprocessed(&small, 10, 10, 1)[0]).unwrap_err();
    assert!(
        matches!(&e, Error::Image(m) if m.contains("128x128") && m.contains("64x64")),
        "{e:?}"
    );
}

/// Loads a synthetic projector altered by `alter` and, where it loads, encodes one image
/// of its input size: either must be an error, never a panic or an abort.
fn load_and_encode(shape: &Shape, alter: impl FnOnce(&mut GgufWriter)) -> Result<usize, Error> {
    let mut w = writer(shape);
    alter(&mut w);
    let mmproj = Arc::new(Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())?);
    let side = mmproj.hparams.image_size as usize;
    let images = preprocessed(&mmproj, side, side, 3);
    let params = EncoderParams {
        n_threads: 2,
        flash_attn: true,
    };
    let mut encoder = Encoder::new(mmproj, params)?;
    Ok(encoder.encode(&images[0])?.len())
}

#[test]
fn extreme_hyper_parameters_encode_or_are_refused() {
    let one_layer = Shape {
        n_layer: 1,
        ..Shape::GEMMA3
    };
    // One head per value: heads of width 1.
    assert!(load_and_encode(&one_layer, |w| {
        w.set("clip.vision.attention.head_count", Value::U32(64));
    })
    .is_ok());
    // No pooling at all (a merge of 1): 256 tokens.
    assert_eq!(
        load_and_encode(&one_layer, |w| {
            w.set("clip.vision.projector.scale_factor", Value::U32(1));
        })
        .unwrap(),
        256 * 96
    );
    // Pooling the whole grid into one token.
    assert_eq!(
        load_and_encode(&one_layer, |w| {
            w.set("clip.vision.projector.scale_factor", Value::U32(16));
        })
        .unwrap(),
        96
    );
    let refused: [(&str, Value); 8] = [
        ("clip.vision.attention.head_count", Value::U32(0)),
        ("clip.vision.attention.head_count", Value::U32(3)),
        ("clip.vision.attention.head_dim", Value::U32(8)),
        ("clip.vision.attention.head_count_kv", Value::U32(2)),
        ("clip.vision.attention.layer_norm_epsilon", Value::F32(f32::NAN)),
        ("clip.vision.image_size", Value::U32(1 << 20)),
        ("clip.vision.patch_size", Value::U32(0)),
        ("clip.vision.block_count", Value::U32(u32::MAX)),
    ];
    for (key, value) in refused {
        let shown = format!("{key} = {value:?}");
        let e = load_and_encode(&one_layer, |w| {
            w.set(key, value);
        })
        .unwrap_err();
        assert!(matches!(e, Error::Load(_) | Error::Unsupported(_)), "{shown}: {e:?}");
    }
    // A norm in F16 (clip.cpp multiplies by it; elelem's loader takes norms in F32 only).
    let e = load_and_encode(&one_layer, |w| {
        w.remove_tensor("v.blk.0.ln1.weight");
        w.add_tensor("v.blk.0.ln1.weight", &[64], TensorType::F16, vec![0; 128]);
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("v.blk.0.ln1.weight") && m.contains("F16")),
        "{e:?}"
    );
    // Position embeddings in F16 (ggml's CPU backend would abort adding them).
    let e = load_and_encode(&one_layer, |w| {
        w.remove_tensor("v.position_embd.weight");
        w.add_tensor(
            "v.position_embd.weight",
            &[64, 256],
            TensorType::F16,
            vec![0; 64 * 256 * 2],
        );
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Load(m) if m.contains("v.position_embd.weight") && m.contains("F16")),
        "{e:?}"
    );
    // Every tensor in turn replaced by three I32 values: refused, naming it.
    let names: Vec<String> = elelem_gguf::Gguf::from_bytes(writer(&one_layer).to_bytes())
        .unwrap()
        .tensors()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    for name in &names {
        let e = load_and_encode(&one_layer, |w| {
            w.remove_tensor(name);
            w.add_tensor(name, &[3], TensorType::from_id(26).unwrap(), vec![0; 12]);
        })
        .unwrap_err();
        assert!(
            matches!(&e, Error::Load(m) if m.contains(name.as_str())),
            "{name}: {e:?}"
        );
    }
}

#[test]
fn mutated_projector_files_are_errors_or_encode() {
    for shape in [
        Shape::GEMMA3,
        Shape::IDEFICS3,
        Shape::LFM2,
        Shape::QWEN2VL,
        Shape::QWEN25VL,
        Shape::PIXTRAL,
        Shape::LLAMA4,
    ] {
        let shape = Shape { n_layer: 1, ..shape };
        let bytes = writer(&shape).to_bytes();
        let header = elelem_gguf::Gguf::from_bytes(&bytes).unwrap().data_offset() as usize;
        let mut rng = Rng(0xf022);
        let (mut loaded, mut refused) = (0, 0);
        for _ in 0..1000 {
            let mut mutated = bytes.clone();
            // One to four bytes of the keys and tensor descriptors, to random values.
            for _ in 0..1 + rng.next_u64() % 4 {
                let at = (rng.next_u64() % header as u64) as usize;
                mutated[at] = (rng.next_u64() >> 56) as u8;
            }
            let outcome = elelem_gguf::Gguf::from_bytes(&mutated)
                .map_err(Error::from)
                .and_then(|gguf| {
                    let mmproj = Arc::new(Mmproj::load(gguf)?);
                    let side = mmproj.hparams.image_size as usize;
                    let images = if mmproj.hparams.projector.dynamic_size() {
                        // LFM2, Qwen2-VL, Qwen2.5-VL, Pixtral: a grid other than the native one.
                        let m = mmproj.hparams.image_side_multiple() as usize;
                        vec![normalized_image(side + 3 * m, side.max(2 * m) - m, 5)]
                    } else {
                        preprocessed(&mmproj, side, side, 5)
                    };
                    let params = EncoderParams {
                        n_threads: 2,
                        flash_attn: true,
                    };
                    Encoder::new(mmproj, params)?.encode(&images[0])
                });
            match outcome {
                Ok(_) => loaded += 1,
                Err(Error::Load(_) | Error::Unsupported(_) | Error::Image(_)) => refused += 1,
                Err(e) => panic!("a mutated projector failed otherwise than refused: {e:?}"),
            }
        }
        eprintln!(
            "{:?}: 1000 mutated files, {loaded} encoded, {refused} refused",
            shape.kind
        );
    }
}

#[test]
fn the_embeddings_do_not_depend_on_the_thread_count() {
    for shape in [
        Shape::GEMMA3,
        Shape::IDEFICS3,
        Shape::LFM2,
        Shape::QWEN2VL,
        Shape::PIXTRAL,
        Shape::LLAMA4,
    ] {
        let bytes = writer(&shape).to_bytes();
        let mmproj = Arc::new(Mmproj::load(elelem_gguf::Gguf::from_bytes(&bytes).unwrap()).unwrap());
        let side = mmproj.hparams.image_size as usize;
        let image = if mmproj.hparams.projector.dynamic_size() {
            // LFM2, Qwen2-VL, Pixtral: an image of another grid than the native one (in
            // multiples of what their sides must be).
            let m = mmproj.hparams.image_side_multiple() as usize;
            normalized_image(side + 2 * m, side - 2 * m, 9)
        } else {
            preprocessed(&mmproj, side + 7, side - 5, 9).remove(0)
        };
        for flash_attn in [true, false] {
            let encode = |n_threads| {
                let params = EncoderParams { n_threads, flash_attn };
                Encoder::new(Arc::clone(&mmproj), params)
                    .unwrap()
                    .encode(&image)
                    .unwrap()
            };
            let one = encode(1);
            for n_threads in [2, 3] {
                let many = encode(n_threads);
                assert!(
                    one.iter().zip(&many).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{:?}, flash attention {flash_attn}: 1 and {n_threads} threads differ",
                    shape.kind
                );
            }
        }
    }
}

/// Qwen3-VL's projector: its width is the main path's and each deepstack layer's (none:
/// the main path's alone); what its graph needs is required (the patch bias, the position
/// embeddings, the fused QKV's bias, a deepstack merger's every part once it has `fc1`, its
/// output as wide as the main path's), and what it would not read is refused (separate Q,
/// K, V beside the fused ones; a deepstack merger's parts without its `fc1`).
#[test]
fn qwen3vl_projectors_that_do_not_fit_are_refused() {
    let load = |alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape::QWEN3VL);
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    assert_eq!(load(&|_| {}).unwrap().n_mmproj_embd(), 3 * 96);
    let deepstack_parts = [
        "norm.weight",
        "norm.bias",
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    ];
    let without_deepstack = load(&|w| {
        for il in [1, 2] {
            for part in deepstack_parts {
                w.remove_tensor(&format!("v.deepstack.{il}.{part}"));
            }
        }
    });
    assert_eq!(without_deepstack.unwrap().n_mmproj_embd(), 96);

    let refused = |alter: &dyn Fn(&mut GgufWriter), expected: &str| {
        let e = load(alter).err().unwrap_or_else(|| panic!("{expected}: loaded"));
        assert!(
            matches!(&e, Error::Load(m) | Error::Unsupported(m) if m.contains(expected)),
            "{expected}: {e:?}"
        );
    };
    for name in [
        "v.patch_embd.bias",
        "v.position_embd.weight",
        "v.blk.0.attn_qkv.bias",
        "v.deepstack.1.norm.bias",
        "v.deepstack.2.fc2.weight",
    ] {
        refused(
            &|w| {
                w.remove_tensor(name);
            },
            name,
        );
    }
    refused(
        &|w| {
            w.add_f32("v.blk.0.attn_q.weight", &[64, 64], &[0.0; 64 * 64]);
        },
        "v.blk.0.attn_q.weight",
    );
    refused(
        &|w| {
            w.remove_tensor("v.deepstack.2.fc1.weight");
        },
        "v.deepstack.2.",
    );
    // A deepstack merger to another width than the main path's.
    refused(
        &|w| {
            w.remove_tensor("v.deepstack.1.fc2.weight")
                .remove_tensor("v.deepstack.1.fc2.bias")
                .add_f32("v.deepstack.1.fc2.weight", &[128, 64], &[0.0; 128 * 64])
                .add_f32("v.deepstack.1.fc2.bias", &[64], &[0.0; 64]);
        },
        "v.deepstack.1.fc2.weight",
    );
}

#[test]
fn qwen2vl_projectors_and_images_that_do_not_fit_are_refused() {
    let load = |alter: &dyn Fn(&mut GgufWriter)| {
        let mut w = writer(&Shape {
            n_layer: 1,
            ..Shape::QWEN2VL
        });
        alter(&mut w);
        Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    let mmproj = Arc::new(load(&|_| {}).unwrap());
    assert_eq!(mmproj.n_mmproj_embd(), 96);
    assert_eq!(mmproj.n_image_tokens(168, 112), 6 * 4);
    // clip.cpp's limits of 8 to 4096 tokens, as pixels of merged 14 x 14 patches.
    let (kind, params) = mmproj.hparams.preprocessing();
    assert_eq!(kind, vision::Preprocessor::DynSize);
    assert_eq!((params.min_pixels, params.max_pixels), (8 * 784, 4096 * 784));

    let refused = |alter: &dyn Fn(&mut GgufWriter), expected: &str| {
        let e = load(alter).err().unwrap_or_else(|| panic!("{expected}: loaded"));
        assert!(
            matches!(&e, Error::Load(m) | Error::Unsupported(m) if m.contains(expected)),
            "{expected}: {e:?}"
        );
    };
    refused(
        &|w| {
            w.remove_tensor("v.patch_embd.weight.1");
        },
        "missing tensor v.patch_embd.weight.1",
    );
    refused(
        &|w| {
            w.remove_tensor("v.blk.0.attn_k.bias");
        },
        "missing tensor v.blk.0.attn_k.bias",
    );
    refused(
        &|w| {
            w.add_f32("v.patch_embd.bias", &[64], &[0.0; 64]);
        },
        "v.patch_embd.bias",
    );
    refused(
        &|w| {
            w.add_f32("v.position_embd.weight", &[64, 64], &[0.0; 64 * 64]);
        },
        "v.position_embd.weight",
    );
    for name in ["mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias"] {
        refused(
            &|w| {
                w.remove_tensor(name);
            },
            name,
        );
    }
    refused(
        &|w| {
            w.set("clip.vision.spatial_merge_size", Value::U32(4));
        },
        "merging 4 x 4 patches",
    );
    refused(
        &|w| {
            w.set("clip.vision.n_wa_pattern", Value::U32(8));
        },
        "window attention",
    );
    // Qwen2.5-VL's type requires its window pattern.
    refused(
        &|w| {
            w.set("clip.projector_type", Value::String("qwen2.5vl_merger".into()));
        },
        "missing required metadata key clip.vision.n_wa_pattern",
    );
    refused(
        &|w| {
            // Heads of width 2.
            w.set("clip.vision.attention.head_count", Value::U32(32));
        },
        "not a multiple of 4",
    );

    // Sides that are not multiples of the merged patch (28), and more tokens than the
    // encoder takes: 4096 with flash attention, 1024 without.
    for flash_attn in [true, false] {
        let mut encoder = Encoder::new(
            Arc::clone(&mmproj),
            EncoderParams {
                n_threads: 2,
                flash_attn,
            },
        )
        .unwrap();
        let (max, side) = if flash_attn { (4096, 64) } else { (1024, 32) };
        assert_eq!(encoder.max_image_tokens(), max);
        assert!(encoder.encode(&normalized_image(28 * side, 28 * side, 3)).is_ok());
        for (w, h) in [(42, 56), (56, 14), (28 * (side + 1), 28 * side)] {
            let e = encoder.encode(&normalized_image(w, h, 3)).unwrap_err();
            assert!(matches!(e, Error::Image(_)), "{w}x{h}: {e:?}");
        }
        eprintln!(
            "qwen2vl, flash attention {flash_attn}: a compute buffer of {} MiB",
            encoder.compute_bytes() >> 20
        );
    }
}
