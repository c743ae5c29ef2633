//! Each of mtmd's image preprocessor families with the parameters `clip.cpp` gives the models
//! that use it: what the preprocessing tests compare with mtmd's, and what the media fuzz
//! target (`fuzz/fuzz_targets/media.rs`) runs every decoded image through.

use elelem_engine::vision::{ImageParams, Pad, Preprocessor, ResizeAlgo};

const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

/// Each family with the parameters `clip.cpp` gives the models that use it.
pub fn configs() -> Vec<(&'static str, Preprocessor, ImageParams)> {
    let half = ImageParams {
        mean: [0.5; 3],
        std: [0.5; 3],
        ..ImageParams::default()
    };
    let clip = ImageParams {
        mean: CLIP_MEAN,
        std: CLIP_STD,
        ..ImageParams::default()
    };
    vec![
        (
            "gemma3",
            Preprocessor::FixedSize,
            ImageParams {
                image_size: 896,
                patch_size: 14,
                n_merge: 4,
                resize_algo: ResizeAlgo::Bilinear,
                ..half.clone()
            },
        ),
        (
            "llava-1.5",
            Preprocessor::FixedSize,
            ImageParams {
                image_size: 336,
                patch_size: 14,
                pad_color: [122, 116, 104],
                ..clip.clone()
            },
        ),
        (
            "yasa2 (stretched)",
            Preprocessor::FixedSize,
            ImageParams {
                image_size: 224,
                patch_size: 14,
                pad: Pad::None,
                ..clip.clone()
            },
        ),
        (
            "fixed, lanczos, nearest padding",
            Preprocessor::FixedSize,
            ImageParams {
                image_size: 384,
                patch_size: 16,
                resize_algo: ResizeAlgo::Lanczos,
                pad: Pad::Nearest,
                pad_color: [127, 127, 127],
                ..half.clone()
            },
        ),
        (
            "qwen2.5-vl",
            Preprocessor::DynSize,
            ImageParams {
                patch_size: 14,
                n_merge: 2,
                min_pixels: 8 * 784,
                max_pixels: 4096 * 784,
                ..clip.clone()
            },
        ),
        (
            "qwen3-vl",
            Preprocessor::DynSize,
            ImageParams {
                patch_size: 16,
                n_merge: 2,
                min_pixels: 8 * 1024,
                max_pixels: 4096 * 1024,
                ..half.clone()
            },
        ),
        (
            "qwen3-vl, 256 tokens at most",
            Preprocessor::DynSize,
            ImageParams {
                patch_size: 16,
                n_merge: 2,
                min_pixels: 8 * 1024,
                max_pixels: 256 * 1024,
                ..half.clone()
            },
        ),
        (
            "lightonocr (longest edge)",
            Preprocessor::LongestEdge,
            ImageParams {
                image_size: 1540,
                patch_size: 14,
                n_merge: 2,
                longest_edge: 1540,
                ..clip.clone()
            },
        ),
        (
            "llava-1.6 (pinpoints)",
            Preprocessor::LlavaUhd,
            ImageParams {
                image_size: 336,
                patch_size: 14,
                pad_color: [122, 116, 104],
                res_candidates: vec![(336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008)],
                ..clip.clone()
            },
        ),
        (
            "minicpm-v (grid search)",
            Preprocessor::LlavaUhd,
            ImageParams {
                image_size: 448,
                patch_size: 14,
                ..half.clone()
            },
        ),
        (
            "smolvlm (idefics3, longest edge)",
            Preprocessor::Idefics3,
            ImageParams {
                image_size: 512,
                patch_size: 16,
                n_merge: 4,
                longest_edge: 1536,
                resize_algo: ResizeAlgo::Lanczos,
                ..half.clone()
            },
        ),
        ("lfm2-vl", Preprocessor::Lfm2, lfm2_params()),
        (
            "idefics3 (token limits)",
            Preprocessor::Idefics3,
            ImageParams {
                image_size: 364,
                patch_size: 14,
                n_merge: 3,
                min_pixels: 364 * 364,
                max_pixels: 4 * 364 * 364,
                resize_algo: ResizeAlgo::Lanczos,
                ..half.clone()
            },
        ),
    ]
}

/// LFM2-VL's, as clip.cpp sets them: SigLIP2's patches of 16 merged 2 x 2, bilinear
/// everywhere, 64 to 256 tokens of 32 x 32 pixels.
pub fn lfm2_params() -> ImageParams {
    ImageParams {
        image_size: 512,
        patch_size: 16,
        n_merge: 2,
        min_pixels: 64 * 1024,
        max_pixels: 256 * 1024,
        resize_algo: ResizeAlgo::Bilinear,
        resize_algo_rf: ResizeAlgo::Bilinear,
        resize_algo_ov: ResizeAlgo::Bilinear,
        mean: [0.5; 3],
        std: [0.5; 3],
        ..ImageParams::default()
    }
}
