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

/// Each projector type's preprocessing parameters are the ones clip.cpp's loader sets:
/// Gemma 3's fixed size, Idefics3's longest edge or none, LFM2's token limits at two
/// patch sizes and merges.
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
        w.set("clip.projector_type", Value::String("qwen2.5vl_merger".into()));
    });
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("qwen2.5vl_merger")),
        "{e:?}"
    );

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
                        // LFM2, Pixtral: a grid other than the native one.
                        let p = mmproj.hparams.image_side_multiple() as usize;
                        vec![normalized_image(side + 3 * p, side.max(2 * p) - p, 5)]
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
        Shape::PIXTRAL,
        Shape::LLAMA4,
    ] {
        let bytes = writer(&shape).to_bytes();
        let mmproj = Arc::new(Mmproj::load(elelem_gguf::Gguf::from_bytes(&bytes).unwrap()).unwrap());
        let side = mmproj.hparams.image_size as usize;
        let image = if mmproj.hparams.projector.dynamic_size() {
            // LFM2, Pixtral: an image of another grid than the native one.
            normalized_image(side + 32, side - 48, 9)
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
