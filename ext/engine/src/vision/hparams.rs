//! A projector GGUF's `clip.*` hyper-parameters, read as `tools/mtmd/clip.cpp`'s
//! `clip_model_loader::load_hparams` reads them for a vision encoder (or an audio one's,
//! `clip.audio.*`): a missing required key or a value of the wrong type is an
//! [`Error::Load`] naming the key; a projector type elelem does not run is
//! [`Error::Unsupported`].

use elelem_gguf::{Gguf, Value};

use super::preprocess::{ImageParams, Pad, Preprocessor, ResizeAlgo};
use crate::audio::{FRAMES_PER_CHUNK, MAX_MEL_BANDS};
use crate::{Error, Result};

/// The largest `clip.vision.image_size` accepted: beyond any model's (896 for Gemma 3),
/// and small enough that the worst-case graph is planned without overflow.
pub const MAX_IMAGE_SIZE: u32 = 4096;

/// The most encoder layers accepted (SigLIP has 27).
pub const MAX_LAYERS: u32 = 256;

/// The fewest and most tokens LFM2's preprocessing aims an image (or a thumbnail) at:
/// clip.cpp's `set_limit_image_tokens(64, 256)` for it.
const LFM2_IMAGE_TOKENS: (u32, u32) = (64, 256);

/// clip.cpp's padding colour for LLaVA's images (its CLIP processor's mean, as bytes).
const LLAVA_PAD_COLOR: [u8; 3] = [122, 116, 104];

/// The patches a side MobileVLM's projectors take (clip.cpp's `n_patch`: 336 / 14).
pub const LDP_GRID: u32 = 24;

/// The most tiles InternVL's slicing may aim an image at (its models use 12; the
/// resolutions it weighs grow with it, and the slices with them).
const MAX_TILES: u32 = 64;

/// The most grid pinpoints accepted (LLaVA 1.6 has 5; real files have a few dozen at most).
const MAX_GRID_PINPOINTS: usize = 64;
/// The fewest and most tokens Qwen2-VL's preprocessing aims an image at: clip.cpp's
/// `set_limit_image_tokens(8, 4096)` for it.
const QWEN2VL_IMAGE_TOKENS: (u32, u32) = (8, 4096);

/// The side of Qwen2.5-VL's attention windows in pixels: clip.cpp's default
/// `attn_window_size` (HF's `window_size`), which it reads from no key for this type.
const QWEN25VL_WINDOW_PIXELS: u32 = 112;

/// The `clip.projector_type` names elelem runs, as its refusals list them.
const RUNS: &str =
    "gemma3, idefics3, lfm2, mlp (and mlp_norm), ldp, ldpv2, internvl, qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger, \
     pixtral, llama4, gemma4v";

/// Pixtral's: clip.cpp's `set_limit_image_tokens(8, 1024)`, in merged patches (the
/// `[IMG_BREAK]` rows not counted).
const PIXTRAL_IMAGE_TOKENS: (u32, u32) = (8, 1024);

/// The base frequency of Pixtral's and Llama 4's 2D RoPE (clip.cpp sets it; the file has
/// no key).
const VIT_ROPE_THETA: f32 = 10000.0;

/// Gemma 4's: clip.cpp's `set_limit_image_tokens(70, 1120)`, in pooled tokens.
const GEMMA4V_IMAGE_TOKENS: (u32, u32) = (70, 1120);

/// The base frequency of Gemma 4's 2D RoPE (clip.cpp sets it).
const GEMMA4V_ROPE_THETA: f32 = 100.0;

/// Llama 4's tiles a side: clip.cpp's `set_llava_uhd_res_candidates(model, 3)`.
const LLAMA4_MAX_TILES_SIDE: i32 = 3;

/// The projector types elelem runs: clip.cpp's `projector_type` by its `clip.projector_type`
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectorType {
    /// `gemma3`: SigLIP, 4x4 average pooling, the soft-embedding RMS norm, the input
    /// projection ([`super::projector::gemma3`]).
    Gemma3,
    /// `idefics3` (SmolVLM): SigLIP, the pixel unshuffle of `n_merge` x `n_merge` patches
    /// into one, a linear projection ([`super::projector::idefics3`]).
    Idefics3,
    /// `lfm2` (LFM2-VL): SigLIP2 at any size (its position embeddings resized to the
    /// image's grid), the pixel unshuffle, an optional LayerNorm and a two-layer GELU MLP
    /// ([`super::projector::lfm2`]).
    Lfm2,
    /// `mlp` (LLaVA 1.5 and 1.6; `mlp_norm`, Yi-VL's, where the file has `mm.3`): CLIP with
    /// its class embedding and pre-LayerNorm, the features of an earlier layer, a two-layer
    /// GELU MLP ([`super::projector::llava`]).
    Mlp,
    /// `ldp` (MobileVLM): LLaVA's CLIP, an MLP, then two blocks of depthwise convolutions
    /// and squeeze-and-excitation, the second halving the grid
    /// ([`super::projector::llava`]).
    Ldp,
    /// `ldpv2` (MobileVLM V2): LLaVA's CLIP, an MLP, 2 x 2 average pooling and a depthwise
    /// convolution added as the positional encoding ([`super::projector::llava`]).
    Ldpv2,
    /// `internvl`: InternViT (a class embedding, layer scales), the pixel shuffle of
    /// `n_merge` x `n_merge` patches into one, a LayerNorm and a two-layer GELU MLP
    /// ([`super::projector::internvl`]).
    Internvl,
    /// `qwen2vl_merger` (Qwen2-VL): a ViT at any size with two patch convolutions added,
    /// 2D rotary positions, each 2 x 2 patches merged by a two-layer GELU MLP
    /// ([`super::projector::qwen2vl`]).
    Qwen2vl,
    /// `qwen2.5vl_merger` (Qwen2.5-VL): Qwen2-VL's ViT and merger with RMS norms, a
    /// SiLU-gated feed-forward, and attention within windows of 112 x 112 pixels in all
    /// layers but every `n_wa_pattern`th ([`ClipHParams::n_wa_pattern`]), the patches
    /// grouped by window for them ([`super::projector::qwen2vl`]).
    Qwen25vl,
    /// `qwen3vl_merger` (Qwen3-VL): Qwen2-VL's ViT with a fused QKV, LayerNorms, a patch
    /// bias and learned position embeddings resized to the image; the 2 x 2 merger, and
    /// the deepstack layers' merged outputs beside it ([`super::projector::qwen3vl`]).
    Qwen3vl,
    /// `pixtral` (Pixtral, Mistral Small 3.x): a ViT of RMS norms, a SiLU-gated
    /// feed-forward and 2D RoPE over the patch rows and columns, at any size; the optional
    /// patch merger, a GELU MLP, and `[IMG_BREAK]` after each row ([`super::projector::pixtral`]).
    Pixtral,
    /// `llama4`: a ViT of LayerNorms with a class token, learned positions and 2D RoPE,
    /// its patch embedding a linear map of unfolded patches; the pixel shuffle and a GELU
    /// MLP adapter; images cut into up to 3 x 3 tiles and an overview
    /// ([`super::projector::llama4`]).
    Llama4,
    /// `gemma4v` (Gemma 4, not its E models): a ViT of RMS norms (Q and K normed per head,
    /// V without weight, norms after the attention and the feed-forward), a GELU-gated
    /// feed-forward, 2D RoPE in NEOX order and position tables by column and row, at any
    /// size; average pooling, an optional standardization and the input projection
    /// ([`super::projector::gemma4v`]).
    Gemma4v,
    /// `qwen2a` (Qwen2-Audio), an audio encoder: Whisper's (two 1D convolutions over the
    /// log-mel frames, learned positions, a ViT of LayerNorms with no K bias and a GELU-erf
    /// feed-forward), its positions average-pooled in pairs before the post-LayerNorm, then
    /// one matrix with a bias ([`super::projector::qwen2a`]).
    Qwen2a,
}

/// The norm of a projector type's ViT (clip.cpp's `norm_type` argument of `build_vit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VitNorm {
    /// LayerNorm (`NORM_TYPE_NORMAL`): SigLIP's.
    Layer,
    /// RMS norm (`NORM_TYPE_RMS`): Pixtral's.
    Rms,
}

/// A projector type's 2D RoPE: clip.cpp's `build_rope_2d` on Q and K, the first half of
/// each head turned by one coordinate of the patch, the second half by the other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VitRope2d {
    pub theta: f32,
    /// Pixtral's `interleave_freq`: the second half at the odd frequencies.
    pub interleave_freq: bool,
    /// Llama 4's and Gemma 4's: the column first, then the row (Pixtral's: the row first).
    pub columns_first: bool,
    /// Gemma 4's: each half turned in NEOX order (halves), not in consecutive pairs.
    pub neox: bool,
}

impl ProjectorType {
    /// clip.cpp's name of the type (`PROJECTOR_TYPE_NAMES`).
    pub fn name(self) -> &'static str {
        match self {
            ProjectorType::Gemma3 => "gemma3",
            ProjectorType::Idefics3 => "idefics3",
            ProjectorType::Lfm2 => "lfm2",
            ProjectorType::Mlp => "mlp",
            ProjectorType::Ldp => "ldp",
            ProjectorType::Ldpv2 => "ldpv2",
            ProjectorType::Internvl => "internvl",
            ProjectorType::Qwen2vl => "qwen2vl_merger",
            ProjectorType::Qwen25vl => "qwen2.5vl_merger",
            ProjectorType::Qwen3vl => "qwen3vl_merger",
            ProjectorType::Pixtral => "pixtral",
            ProjectorType::Llama4 => "llama4",
            ProjectorType::Gemma4v => "gemma4v",
            ProjectorType::Qwen2a => "qwen2a",
        }
    }

    /// Whether the encoder reads audio (log-mel pieces, clip.cpp's `CLIP_MODALITY_AUDIO`: its
    /// keys `clip.audio.*`, its tensors `a.*`) rather than images.
    pub fn audio(self) -> bool {
        self == ProjectorType::Qwen2a
    }

    /// The prefix of the encoder's tensors: `a` for audio, `v` for vision (clip.cpp's
    /// `load_tensors`).
    pub fn tensor_prefix(self) -> &'static str {
        if self.audio() {
            "a"
        } else {
            "v"
        }
    }

    /// Whether the encoder is CLIP's ViT as LLaVA's graph runs it: position embeddings
    /// looked up by row, and only the layers up to its feature layer.
    pub fn llava_vit(self) -> bool {
        matches!(self, ProjectorType::Mlp | ProjectorType::Ldp | ProjectorType::Ldpv2)
    }

    /// Whether the projector is MobileVLM's, whose graph clip.cpp builds for a grid of
    /// [`LDP_GRID`] x [`LDP_GRID`] patches, pooled to a quarter of them.
    pub fn mobilevlm(self) -> bool {
        matches!(self, ProjectorType::Ldp | ProjectorType::Ldpv2)
    }

    /// Whether the encoder may have a class embedding (appended after the patches) and a
    /// pre-LayerNorm: LLaVA's CLIP, InternViT and Llama 4's ViT.
    pub fn class_token(self) -> bool {
        self.llava_vit() || matches!(self, ProjectorType::Internvl | ProjectorType::Llama4)
    }

    /// Qwen2-VL's ViT, Qwen2.5-VL's and Qwen3-VL's: two patch convolutions added (the temporal
    /// merge of one image), the patches reordered in 2 x 2 blocks, `ggml_rope_multi` in vision
    /// mode over their rows and columns, 2 x 2 merges only.
    pub fn qwen_vit(self) -> bool {
        matches!(
            self,
            ProjectorType::Qwen2vl | ProjectorType::Qwen25vl | ProjectorType::Qwen3vl
        )
    }

    /// Whether clip.cpp swaps back the feed-forward's `ffn_up` and `ffn_down` of old
    /// conversions for this type (its `is_ffn_swapped` list).
    pub fn swapped_ffn_fixed(self) -> bool {
        self.llava_vit()
            || matches!(
                self,
                ProjectorType::Gemma3 | ProjectorType::Idefics3 | ProjectorType::Qwen2vl | ProjectorType::Qwen25vl
            )
    }

    /// Whether the encoder takes images of any size (LFM2's dynamic resolution: the
    /// position embeddings resized to the grid; Qwen2-VL's and Qwen2.5-VL's rotary
    /// positions; Pixtral's and Gemma 4's RoPE) rather than `image_size` squares only.
    pub fn dynamic_size(self) -> bool {
        self.qwen_vit()
            || matches!(
                self,
                ProjectorType::Lfm2 | ProjectorType::Pixtral | ProjectorType::Gemma4v
            )
    }

    /// The ViT's norm.
    pub fn vit_norm(self) -> VitNorm {
        match self {
            ProjectorType::Pixtral | ProjectorType::Gemma4v | ProjectorType::Qwen25vl => VitNorm::Rms,
            _ => VitNorm::Layer,
        }
    }

    /// Whether the ViT adds learned position embeddings (`v.position_embd.weight`) to the
    /// patches: all but Qwen2-VL's and Qwen2.5-VL's (rotary only; Qwen3-VL's has both),
    /// Pixtral and Gemma 4 (whose are tables looked up by column and row).
    pub fn learned_positions(self) -> bool {
        !matches!(
            self,
            ProjectorType::Qwen2vl | ProjectorType::Qwen25vl | ProjectorType::Pixtral | ProjectorType::Gemma4v
        )
    }

    /// The ViT's 2D RoPE, where it has one.
    pub fn rope_2d(self) -> Option<VitRope2d> {
        match self {
            ProjectorType::Pixtral => Some(VitRope2d {
                theta: VIT_ROPE_THETA,
                interleave_freq: true,
                columns_first: false,
                neox: false,
            }),
            ProjectorType::Llama4 => Some(VitRope2d {
                theta: VIT_ROPE_THETA,
                interleave_freq: false,
                columns_first: true,
                neox: false,
            }),
            ProjectorType::Gemma4v => Some(VitRope2d {
                theta: GEMMA4V_ROPE_THETA,
                interleave_freq: false,
                columns_first: true,
                neox: true,
            }),
            _ => None,
        }
    }

    /// Llama 4's ViT: a class token (`v.class_embd`, appended after the patches, its
    /// position 0 and the patches' from 1), and the patch embedding a linear map of each
    /// unfolded patch (`v.patch_embd.weight` of `[3 · patch², n_embd]`).
    pub fn llama4_vit(self) -> bool {
        self == ProjectorType::Llama4
    }

    /// Whether the ViT's feed-forward is gated (`ffn_gate`): Pixtral's, Gemma 4's and
    /// Qwen2.5-VL's; SigLIP's is not, and elelem refuses a gate there.
    pub fn gated_vit(self) -> bool {
        matches!(
            self,
            ProjectorType::Pixtral | ProjectorType::Gemma4v | ProjectorType::Qwen25vl
        )
    }

    /// Gemma 4's ViT: its input scaled to [-1, 1] in the graph, no patch bias, position
    /// tables (`v.position_embd.weight` of `[n_embd, n, 2]`: by column, then by row), Q and
    /// K RMS-normed per head (`attn_q_norm`, `attn_k_norm`), V RMS-normed without weight,
    /// the attention unscaled (`kq_scale` 1), RMS norms after the attention and after the
    /// feed-forward (`attn_post_norm`, `ffn_post_norm`).
    pub fn gemma4_vit(self) -> bool {
        self == ProjectorType::Gemma4v
    }

    /// Whether the ViT's files may have a pre-norm (`v.pre_ln`): Pixtral's, Llama 4's and
    /// those with a class token; SigLIP's have none, and elelem refuses one there.
    pub fn vit_pre_norm(self) -> bool {
        matches!(self, ProjectorType::Pixtral | ProjectorType::Llama4) || self.class_token()
    }

    fn from_name(name: &str) -> Result<ProjectorType> {
        match name {
            "gemma3" => Ok(ProjectorType::Gemma3),
            "idefics3" => Ok(ProjectorType::Idefics3),
            "lfm2" => Ok(ProjectorType::Lfm2),
            "mlp" => Ok(ProjectorType::Mlp),
            "ldp" => Ok(ProjectorType::Ldp),
            "ldpv2" => Ok(ProjectorType::Ldpv2),
            "internvl" => Ok(ProjectorType::Internvl),
            "qwen2vl_merger" => Ok(ProjectorType::Qwen2vl),
            "qwen2.5vl_merger" => Ok(ProjectorType::Qwen25vl),
            "qwen3vl_merger" => Ok(ProjectorType::Qwen3vl),
            "pixtral" => Ok(ProjectorType::Pixtral),
            "llama4" => Ok(ProjectorType::Llama4),
            "gemma4v" => Ok(ProjectorType::Gemma4v),
            "qwen2a" => Ok(ProjectorType::Qwen2a),
            _ => Err(Error::Unsupported(format!(
                "projector type {name:?} is not supported (elelem runs: {RUNS})"
            ))),
        }
    }
}

/// The feed-forward's activation, as clip.cpp picks it from `clip.use_gelu` and
/// `clip.use_silu` (neither: GELU-quick), or the type sets it (the whisper encoders'
/// GELU-erf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnOp {
    Gelu,
    Silu,
    GeluQuick,
    GeluErf,
}

/// clip.cpp's `clip_hparams`, the encoder's share (the preprocessing's are in
/// [`super::ImageParams`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClipHParams {
    pub projector: ProjectorType,
    /// The encoder's width (`clip.vision.embedding_length`).
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    /// Each head's width: `clip.vision.attention.head_dim`, else `n_embd / n_head`.
    pub d_head: u32,
    pub n_ff: u32,
    pub n_layer: u32,
    pub projection_dim: u32,
    pub eps: f32,
    pub image_size: u32,
    pub patch_size: u32,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    pub ffn_op: FfnOp,
    /// Patches merged per side by the projector (Gemma 3's pooling kernel: 4 unless
    /// `clip.vision.projector.scale_factor` says otherwise; Idefics3's and LFM2's
    /// unshuffle: that key; Pixtral's merger: `clip.vision.spatial_merge_size`, else 1).
    pub n_merge: u32,
    /// Idefics3's `clip.vision.preproc_image_size` (the longest edge it resizes to before
    /// slicing), 0 where absent.
    pub longest_edge: u32,
    /// `clip.vision.feature_layer`: the hidden states LLaVA's projector takes (0 is the
    /// encoder's input), stacked; empty: the last layer's of all but one.
    pub feature_layers: Vec<i32>,
    /// `clip.vision.image_grid_pinpoints` as (width, height): LLaVA 1.6's slicing
    /// resolutions; empty: one fixed-size image.
    pub grid_pinpoints: Vec<(i32, i32)>,
    /// Qwen2.5-VL's `clip.vision.n_wa_pattern`: every `n_wa_pattern`th layer attends over
    /// the whole image, the others within windows ([`ClipHParams::window_attention`]); 0:
    /// no windows (and for every other type).
    pub n_wa_pattern: u32,
    /// An audio encoder's mel bands (`clip.audio.num_mel_bins`); 0 for a vision encoder.
    pub n_mel_bins: u32,
}

impl ClipHParams {
    /// How mtmd preprocesses an image for this projector: its preprocessor family
    /// (`mtmd_context`'s choice by projector type) and the preprocessing share of
    /// `clip_hparams` as clip.cpp's `load_hparams` sets it.
    ///
    pub fn preprocessing(&self) -> (Preprocessor, ImageParams) {
        let common = ImageParams {
            image_size: self.image_size as i32,
            patch_size: self.patch_size as i32,
            n_merge: self.n_merge as i32,
            mean: self.image_mean,
            std: self.image_std,
            ..ImageParams::default()
        };
        match self.projector {
            // Fixed size, bilinear, clip_hparams' default padding (PAD_CEIL, black).
            ProjectorType::Gemma3 => (
                Preprocessor::FixedSize,
                ImageParams {
                    resize_algo: ResizeAlgo::Bilinear,
                    ..common
                },
            ),
            // Tiles and an overview of `image_size`, Lanczos (mtmd's idefics3 preprocessor).
            ProjectorType::Idefics3 => (
                Preprocessor::Idefics3,
                ImageParams {
                    resize_algo: ResizeAlgo::Lanczos,
                    longest_edge: self.longest_edge as i32,
                    ..common
                },
            ),
            // Bilinear everywhere, and the token limits of `set_limit_image_tokens(64, 256)`
            // as pixels (the refined image's padding and the thumbnail's stretch are
            // clip_hparams' defaults).
            ProjectorType::Lfm2 => {
                let (min_tokens, max_tokens) = LFM2_IMAGE_TOKENS;
                (
                    Preprocessor::Lfm2,
                    ImageParams {
                        resize_algo: ResizeAlgo::Bilinear,
                        resize_algo_rf: ResizeAlgo::Bilinear,
                        resize_algo_ov: ResizeAlgo::Bilinear,
                        min_pixels: self.token_pixels(min_tokens),
                        max_pixels: self.token_pixels(max_tokens),
                        ..common
                    },
                )
            }
            // LLaVA-UHD's slices, bilinear, over grids of up to 3 x 3 tiles (every one but
            // the single tile, x outer, as clip.cpp lists them).
            ProjectorType::Llama4 => {
                let side = self.image_size as i32;
                let res_candidates = (1..=LLAMA4_MAX_TILES_SIDE)
                    .flat_map(|x| (1..=LLAMA4_MAX_TILES_SIDE).map(move |y| (x, y)))
                    .filter(|&xy| xy != (1, 1))
                    .map(|(x, y)| (x * side, y * side))
                    .collect();
                (
                    Preprocessor::LlavaUhd,
                    ImageParams {
                        resize_algo: ResizeAlgo::Bilinear,
                        res_candidates,
                        ..common
                    },
                )
            }
            // mtmd's dyn_size preprocessor: the smart resize, bicubic, within the type's
            // `set_limit_image_tokens` as pixels.
            ProjectorType::Qwen2vl
            | ProjectorType::Qwen25vl
            | ProjectorType::Qwen3vl
            | ProjectorType::Pixtral
            | ProjectorType::Gemma4v => {
                let (min_tokens, max_tokens) = self.dyn_size_tokens();
                (
                    Preprocessor::DynSize,
                    ImageParams {
                        resize_algo: ResizeAlgo::Bicubic,
                        min_pixels: self.token_pixels(min_tokens),
                        max_pixels: self.token_pixels(max_tokens),
                        ..common
                    },
                )
            }
            // InternVL's LLaVA-UHD slicing at the grids of its tile counts, clip_hparams'
            // defaults otherwise (bicubic, ceil padding in black).
            ProjectorType::Internvl => (
                Preprocessor::LlavaUhd,
                ImageParams {
                    res_candidates: self.grid_pinpoints.clone(),
                    ..common
                },
            ),
            // An audio encoder takes no images (clip.cpp's `image_size` 0, `patch_size` 1):
            // clip_hparams' defaults, which nothing reads.
            ProjectorType::Qwen2a => (Preprocessor::FixedSize, common),
            // clip.cpp's `load_hparams` for `mlp`: the grey of LLaVA's padding, and with
            // pinpoints LLaVA-UHD's slicing (bicubic, ceil padding); without, one bicubic
            // fixed-size image (the refined image's padding it sets then goes unused).
            ProjectorType::Mlp | ProjectorType::Ldp | ProjectorType::Ldpv2 => {
                let llava = ImageParams {
                    pad_color: LLAVA_PAD_COLOR,
                    ..common
                };
                if self.grid_pinpoints.is_empty() {
                    (
                        Preprocessor::FixedSize,
                        ImageParams {
                            pad_ov: Pad::None,
                            pad_rf: Pad::Ceil,
                            pad_color_rf: LLAVA_PAD_COLOR,
                            ..llava
                        },
                    )
                } else {
                    (
                        Preprocessor::LlavaUhd,
                        ImageParams {
                            res_candidates: self.grid_pinpoints.clone(),
                            ..llava
                        },
                    )
                }
            }
        }
    }

    /// The encoder layers the graph runs: all of them, but for LLaVA's (clip.cpp's
    /// `max_feature_layer`) up to the deepest feature layer, else all but the last.
    pub fn n_layer_run(&self) -> u32 {
        if !self.projector.llava_vit() {
            return self.n_layer;
        }
        match self.feature_layers.iter().copied().max() {
            Some(deepest) if deepest >= 0 => deepest as u32,
            _ => self.n_layer - 1,
        }
    }

    /// How many hidden states the projector takes side by side: for LLaVA's, one per
    /// feature layer the graph reaches, or the last one's alone; one for the others.
    pub fn n_feature_stack(&self) -> u32 {
        if !self.projector.llava_vit() {
            return 1;
        }
        let deepest = self.n_layer_run() as i32;
        let stacked = (0..=deepest).filter(|il| self.feature_layers.contains(il)).count() as u32;
        stacked.max(1)
    }

    /// Qwen2.5-VL's window attention, where the file turns it on: the side of a window in
    /// merged patches (clip.cpp's `grid_window`: 112 pixels over the merged patch, rounded
    /// down), and the pattern of full-attention layers.
    pub fn window_attention(&self) -> Option<WindowAttention> {
        (self.n_wa_pattern > 0).then(|| WindowAttention {
            grid_window: QWEN25VL_WINDOW_PIXELS / self.patch_size / self.n_merge,
            n_wa_pattern: self.n_wa_pattern,
        })
    }

    /// The pixels of `tokens` merged patches (clip.cpp's `set_limit_image_tokens`); beyond
    /// `i32` (no real file: clip.cpp's `int` would overflow) saturated, and so refused by
    /// the preprocessing's checks.
    fn token_pixels(&self, tokens: u32) -> i32 {
        let merged_patch = i64::from(self.patch_size * self.n_merge);
        i32::try_from(i64::from(tokens) * merged_patch * merged_patch).unwrap_or(i32::MAX)
    }

    /// Refuses a language model of another width than the embeddings this projector
    /// gives (mtmd's check at `mtmd_init_from_file`).
    ///
    /// # Errors
    /// [`Error::Load`] naming both widths.
    pub fn check_text_embd(&self, n_mmproj_embd: u32, n_embd_text: u32) -> Result<()> {
        if n_mmproj_embd == n_embd_text {
            return Ok(());
        }
        Err(Error::Load(format!(
            "the vision projector ({}) gives embeddings {n_mmproj_embd} wide, but the language model's are              {n_embd_text} wide: this mmproj is not the model's",
            self.projector.name()
        )))
    }

    /// The most merged patches one image may give a dynamic-size projector: LFM2's 256
    /// (clip.cpp's `set_limit_image_tokens(64, 256)`, or the native square's where that is
    /// more), Qwen2-VL's 4096 (`set_limit_image_tokens(8, 4096)`), Pixtral's 1024 (its
    /// `set_limit_image_tokens(8, 1024)`; its `image_size` is a longest side, not a size it is
    /// trained at), Gemma 4's 1120. mtmd's preprocessing keeps to them but for extreme aspect
    /// ratios, whose short side it cannot shrink below one merged patch. It bounds the
    /// attention's size.
    pub fn max_image_tokens(&self) -> u32 {
        match self.projector {
            ProjectorType::Qwen2vl | ProjectorType::Qwen25vl | ProjectorType::Qwen3vl => {
                QWEN2VL_IMAGE_TOKENS.1.max(self.n_output_tokens())
            }
            ProjectorType::Pixtral | ProjectorType::Gemma4v => self.dyn_size_tokens().1,
            _ => LFM2_IMAGE_TOKENS.1.max(self.n_output_tokens()),
        }
    }

    /// The fewest and most tokens mtmd's dyn_size preprocessor aims an image of this type
    /// at (clip.cpp's `set_limit_image_tokens` for it; LFM2's where the type has none).
    fn dyn_size_tokens(&self) -> (u32, u32) {
        match self.projector {
            ProjectorType::Qwen2vl | ProjectorType::Qwen25vl | ProjectorType::Qwen3vl => QWEN2VL_IMAGE_TOKENS,
            ProjectorType::Pixtral => PIXTRAL_IMAGE_TOKENS,
            ProjectorType::Gemma4v => GEMMA4V_IMAGE_TOKENS,
            _ => LFM2_IMAGE_TOKENS,
        }
    }

    /// What a dynamic-size encoder's image sides must be multiples of: the patch (LFM2
    /// pads a grid its merge does not divide, as clip.cpp does), or the merged patch
    /// (Qwen2-VL's graph reorders the patches in 2 x 2 blocks, and clip.cpp asserts it;
    /// Pixtral's merger, Gemma 4's pooling: grids mtmd's preprocessing always aligns).
    pub fn image_side_multiple(&self) -> u32 {
        match self.projector {
            ProjectorType::Qwen2vl
            | ProjectorType::Qwen25vl
            | ProjectorType::Qwen3vl
            | ProjectorType::Pixtral
            | ProjectorType::Gemma4v => self.patch_size * self.n_merge,
            _ => self.patch_size,
        }
    }

    /// The merged patches of a `width` x `height` image (rounded up: LFM2 pads the grid).
    pub fn n_merged_patches(&self, width: usize, height: usize) -> usize {
        let out = (self.patch_size * self.n_merge) as usize;
        width.div_ceil(out) * height.div_ceil(out)
    }

    /// Patches per side of the (square, fixed-size) input.
    pub fn n_patches_side(&self) -> u32 {
        self.image_size / self.patch_size
    }

    /// The embeddings one image of the encoder's native size (`image_size` square)
    /// becomes (clip.cpp's `clip_n_output_tokens`); for an audio encoder, one log-mel piece.
    pub fn n_output_tokens(&self) -> u32 {
        if self.projector.audio() {
            // A piece's frames halved by the stride-2 convolution, then by the pooling.
            return FRAMES_PER_CHUNK as u32 / 4;
        }
        if self.projector.mobilevlm() {
            return self.n_patches_side().pow(2) / 4;
        }
        let side = self.n_patches_side() / self.n_merge;
        side * side
    }

    /// The grid of an image chunk's `n_tokens` tokens, its first image `width` x `height`
    /// (clip.cpp's `clip_n_output_tokens_x` and `_y`, which mtmd places the tokens by under
    /// multi-dimensional rope): Qwen2-VL's and Qwen2.5-VL's merged patches across and down;
    /// otherwise the tokens in one row.
    pub fn output_grid(&self, width: usize, height: usize, n_tokens: usize) -> (usize, usize) {
        match self.projector {
            ProjectorType::Qwen2vl | ProjectorType::Qwen25vl | ProjectorType::Qwen3vl => {
                let out = (self.patch_size * self.n_merge) as usize;
                (width / out, height / out)
            }
            _ => (n_tokens, 1),
        }
    }

    /// The embeddings a `width` x `height` image becomes (clip.cpp's `clip_n_output_tokens`:
    /// for a dynamic-size projector, its grid of merged patches, rounded up, and Pixtral's
    /// `[IMG_BREAK]` after each row but the last; otherwise the native size's).
    pub fn n_image_tokens(&self, width: usize, height: usize) -> usize {
        match self.projector {
            ProjectorType::Pixtral => {
                let rows = height / (self.patch_size * self.n_merge) as usize;
                (self.n_merged_patches(width, height) + rows).saturating_sub(1)
            }
            p if p.dynamic_size() => self.n_merged_patches(width, height),
            _ => self.n_output_tokens() as usize,
        }
    }
}

/// Qwen2.5-VL's window attention (clip.cpp's `clip_image_batch_encode` for it): the merged
/// patches are grouped by windows of `grid_window` x `grid_window` (partial at the right
/// and bottom edges), row by row, each window's patches together, and the layers that are
/// not every `n_wa_pattern`th attend within their window only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowAttention {
    pub grid_window: u32,
    pub n_wa_pattern: u32,
}

impl WindowAttention {
    /// Whether layer `il` attends over the whole image (qwen2vl.cpp's `full_attn`).
    pub fn full_attention(&self, il: usize) -> bool {
        (il + 1).is_multiple_of(self.n_wa_pattern as usize)
    }
}

/// The `clip.projector_type` of Qwen2.5-Omni's files, which hold both encoders: clip.cpp's
/// `load_hparams` reads it as `qwen2.5vl_merger` for the vision encoder and `qwen2a` for
/// the audio one (its "legacy method" for mixed modalities).
const QWEN25O: &str = "qwen2.5o";

/// One of a projector file's encoders (clip.cpp's `clip_modality`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Modality {
    /// `clip.has_vision_encoder`: `clip.vision.*` keys, `v.*` tensors.
    Vision,
    /// `clip.has_audio_encoder`: `clip.audio.*` keys, `a.*` tensors.
    Audio,
}

/// The hyper-parameters of each encoder the file holds, as clip.cpp's `clip_init` loads
/// them (`load_hparams` once per modality): the vision encoder's where
/// `clip.has_vision_encoder`, the audio encoder's where `clip.has_audio_encoder`; one at
/// least.
///
/// # Errors
/// [`Error::Load`] for a file with neither encoder, or the errors of either's keys.
pub fn read_encoders_hparams(gguf: &Gguf) -> Result<(Option<ClipHParams>, Option<ClipHParams>)> {
    let keys = ClipKeys(gguf);
    let has_vision = keys.opt_bool("clip.has_vision_encoder")?.unwrap_or(false);
    let has_audio = keys.opt_bool("clip.has_audio_encoder")?.unwrap_or(false);
    if !has_vision && !has_audio {
        return Err(Error::Load(
            "this GGUF has no vision encoder (clip.has_vision_encoder is not true): not a vision projector".into(),
        ));
    }
    let vision = has_vision.then(|| read_vision_hparams(&keys)).transpose()?;
    let audio = has_audio.then(|| read_audio_hparams(&keys)).transpose()?;
    Ok((vision, audio))
}

/// The projector type's name for `modality`: `clip.projector_type`, else (files with mixed
/// modalities) `clip.vision.projector_type` or `clip.audio.projector_type`.
fn projector_name<'g>(keys: &ClipKeys<'g>, modality: Modality) -> Result<Option<&'g str>> {
    Ok(match keys.opt_str("clip.projector_type")? {
        Some(name) => Some(name),
        None => keys.opt_str(match modality {
            Modality::Vision => "clip.vision.projector_type",
            Modality::Audio => "clip.audio.projector_type",
        })?,
    })
}

/// The `clip.vision.*` keys of a vision encoder.
fn read_vision_hparams(keys: &ClipKeys) -> Result<ClipHParams> {
    let proj_name = projector_name(keys, Modality::Vision)?
        .ok_or_else(|| Error::Load("missing required metadata key clip.projector_type".into()))?;
    let projector = if proj_name == QWEN25O {
        ProjectorType::Qwen25vl
    } else {
        ProjectorType::from_name(proj_name)?
    };
    if projector.audio() {
        // clip.cpp would build Whisper's graph over an image.
        return Err(Error::Unsupported(format!(
            "a {proj_name} projector is an audio encoder, but this GGUF declares it a vision encoder \
             (clip.has_vision_encoder)"
        )));
    }

    let n_embd = keys.u32("clip.vision.embedding_length")?;
    let n_head = keys.u32("clip.vision.attention.head_count")?;
    let n_embd_head = keys.opt_u32("clip.vision.attention.head_dim")?.unwrap_or(0);
    let n_ff = keys.u32("clip.vision.feed_forward_length")?;
    let n_layer = keys.u32("clip.vision.block_count")?;
    let projection_dim = keys.u32("clip.vision.projection_dim")?;
    let eps = keys.f32("clip.vision.attention.layer_norm_epsilon")?;
    let n_head_kv = keys.opt_u32("clip.vision.attention.head_count_kv")?.unwrap_or(n_head);
    let image_size = keys.u32("clip.vision.image_size")?;
    let patch_size = keys.u32("clip.vision.patch_size")?;

    let use_gelu = keys.opt_bool("clip.use_gelu")?.unwrap_or(false);
    let use_silu = keys.opt_bool("clip.use_silu")?.unwrap_or(false);
    let ffn_op = match (use_gelu, use_silu) {
        (true, true) => {
            return Err(Error::Load(
                "both clip.use_gelu and clip.use_silu are set to true".into(),
            ))
        }
        (true, false) => FfnOp::Gelu,
        (false, true) => FfnOp::Silu,
        (false, false) => FfnOp::GeluQuick,
    };
    let image_mean = keys.three_f32("clip.vision.image_mean")?;
    let image_std = keys.three_f32("clip.vision.image_std")?;

    // clip.cpp's defaults by type: Gemma 3 pools by 4; Idefics3 and LFM2 have no default
    // (clip_hparams' 1, on which build_patch_merge_permute asserts); Pixtral merges none
    // unless its spatial merge says so (Mistral Small's patch merger).
    let mut n_wa_pattern = 0;
    let (n_merge, longest_edge) = match projector {
        ProjectorType::Qwen2a => unreachable!("an audio type is refused above"),
        ProjectorType::Pixtral => (keys.opt_u32("clip.vision.spatial_merge_size")?.unwrap_or(1), 0),
        ProjectorType::Gemma3 => (keys.opt_u32("clip.vision.projector.scale_factor")?.unwrap_or(4), 0),
        // Gemma 4's pooling kernel.
        ProjectorType::Gemma4v => (keys.opt_u32("clip.vision.projector.scale_factor")?.unwrap_or(3), 0),
        ProjectorType::Idefics3 | ProjectorType::Lfm2 | ProjectorType::Llama4 => {
            let n_merge = keys.opt_u32("clip.vision.projector.scale_factor")?.unwrap_or(1);
            if n_merge < 2 {
                return Err(Error::Load(format!(
                    "invalid vision projector: {} needs clip.vision.projector.scale_factor above 1, got {n_merge}",
                    projector.name()
                )));
            }
            let longest_edge = if projector == ProjectorType::Idefics3 {
                keys.opt_u32("clip.vision.preproc_image_size")?.unwrap_or(0)
            } else {
                0
            };
            (n_merge, longest_edge)
        }
        // clip_hparams' 1: LLaVA merges nothing.
        ProjectorType::Mlp | ProjectorType::Ldp | ProjectorType::Ldpv2 => (1, 0),
        // Optional: 1 shuffles nothing.
        ProjectorType::Internvl => (keys.opt_u32("clip.vision.projector.scale_factor")?.unwrap_or(1), 0),
        ProjectorType::Qwen2vl | ProjectorType::Qwen25vl | ProjectorType::Qwen3vl => {
            // clip.cpp's graph merges 2 x 2 patches whatever the key says (its positions
            // and the merger's reshape are written for 2). It requires `n_wa_pattern` of
            // Qwen2.5-VL; Qwen2-VL's graph would turn window attention on for one too, but
            // its inputs would be left unset (clip.cpp fills them for Qwen2.5-VL only).
            let n_merge = keys.opt_u32("clip.vision.spatial_merge_size")?.unwrap_or(2);
            if n_merge != 2 {
                return Err(Error::Unsupported(format!(
                    "a {} projector merging {n_merge} x {n_merge} patches is not supported (2 x 2 only)",
                    projector.name()
                )));
            }
            if projector == ProjectorType::Qwen25vl {
                n_wa_pattern = keys.u32("clip.vision.n_wa_pattern")?;
                if n_wa_pattern == 1 {
                    // Every layer attends over the whole image: clip.cpp's graph then leaves
                    // out the window mask it sets, and aborts.
                    return Err(Error::Unsupported(
                        "a qwen2.5vl_merger projector with clip.vision.n_wa_pattern 1 (window attention in no \
                         layer) is not supported"
                            .into(),
                    ));
                }
            } else if keys.opt_u32("clip.vision.n_wa_pattern")?.unwrap_or(0) > 0 {
                return Err(Error::Unsupported(format!(
                    "a {} projector with window attention (clip.vision.n_wa_pattern) is not supported",
                    projector.name()
                )));
            }
            (n_merge, 0)
        }
    };
    let feature_layers = keys.opt_i32_array("clip.vision.feature_layer")?.unwrap_or_default();
    if let Some(v) = feature_layers.iter().find(|&&v| i64::from(v) > i64::from(n_layer)) {
        return Err(Error::Load(format!(
            "invalid vision projector: feature layer index {v} is out of range (n_layer: {n_layer})"
        )));
    }
    let pinpoints = keys
        .opt_i32_array("clip.vision.image_grid_pinpoints")?
        .unwrap_or_default();
    if pinpoints.len() % 2 != 0 || pinpoints.len() > 2 * MAX_GRID_PINPOINTS {
        return Err(Error::Load(format!(
            "clip.vision.image_grid_pinpoints must have an even number of elements (at most {}), got {}",
            2 * MAX_GRID_PINPOINTS,
            pinpoints.len()
        )));
    }
    // clip.cpp reads the pinpoints for every type; only LLaVA's preprocessing uses them, and
    // InternVL's its own grids.
    let grid_pinpoints = match projector {
        ProjectorType::Mlp | ProjectorType::Ldp | ProjectorType::Ldpv2 => {
            pinpoints.chunks_exact(2).map(|wh| (wh[0], wh[1])).collect()
        }
        ProjectorType::Internvl => internvl_grids(keys, image_size)?,
        _ => Vec::new(),
    };
    // clip.cpp's graph switches to RMS norms for InternViT-6B's width and depth (whose Q/K
    // norms elelem would refuse anyway).
    if projector == ProjectorType::Internvl && n_embd == 3200 && n_layer == 45 {
        return Err(Error::Unsupported(
            "InternViT-6B (RMS norms, 3200 wide, 45 layers) is not supported".into(),
        ));
    }

    let invalid = |what: String| Err(Error::Load(format!("invalid vision projector: {what}")));
    if n_embd == 0 || n_head == 0 || n_ff == 0 || n_layer == 0 || patch_size == 0 || image_size == 0 || n_merge == 0 {
        return invalid(format!(
            "embedding_length {n_embd}, head_count {n_head}, feed_forward_length {n_ff}, block_count {n_layer}, \
             patch_size {patch_size}, image_size {image_size} and the merge {n_merge} must all be positive"
        ));
    }
    let d_head = head_width("vision", n_embd, n_head, n_head_kv, n_embd_head)?;
    if image_size > MAX_IMAGE_SIZE || n_layer > MAX_LAYERS {
        return invalid(format!(
            "image_size {image_size} (at most {MAX_IMAGE_SIZE}), block_count {n_layer} (at most {MAX_LAYERS})"
        ));
    }
    if image_size % patch_size != 0 {
        return invalid(format!(
            "image_size {image_size} is not a multiple of patch_size {patch_size}"
        ));
    }
    if projector.mobilevlm() && image_size / patch_size != LDP_GRID {
        // clip.cpp's graph would abort on any other.
        return Err(Error::Unsupported(format!(
            "{} projectors of {} patches a side are not supported: clip.cpp builds them for {LDP_GRID}",
            projector.name(),
            image_size / patch_size
        )));
    }
    if (image_size / patch_size) % n_merge != 0 {
        // clip.cpp pads Idefics3's grid (and floors Gemma 3's pooling): no released model needs it.
        return Err(Error::Unsupported(format!(
            "{} patches a side that a merge of {n_merge} does not divide are not supported",
            image_size / patch_size
        )));
    }
    if projector.qwen_vit() && d_head % 4 != 0 {
        // The vision rotary embedding turns d_head / 4 pairs per coordinate.
        return invalid(format!(
            "{} heads of width {d_head}: not a multiple of 4",
            projector.name()
        ));
    }
    if n_wa_pattern > 0 && QWEN25VL_WINDOW_PIXELS / patch_size / n_merge == 0 {
        // clip.cpp's windows would be empty (and its loop over them endless).
        return invalid(format!(
            "window attention over merged patches of {} pixels, wider than a window of {QWEN25VL_WINDOW_PIXELS}",
            patch_size * n_merge
        ));
    }
    if !eps.is_finite() || eps < 0.0 {
        return invalid(format!("layer_norm_epsilon {eps}"));
    }
    Ok(ClipHParams {
        projector,
        n_embd,
        n_head,
        n_head_kv,
        d_head,
        n_ff,
        n_layer,
        projection_dim,
        eps,
        image_size,
        patch_size,
        image_mean,
        image_std,
        ffn_op,
        n_merge,
        longest_edge,
        // clip.cpp reads them for every type; only LLaVA's graph uses them.
        feature_layers: if projector.llava_vit() {
            feature_layers
        } else {
            Vec::new()
        },
        grid_pinpoints,
        n_wa_pattern,
        n_mel_bins: 0,
    })
}

/// The `clip.audio.*` keys clip.cpp's `load_hparams` reads for an audio encoder of the
/// types elelem runs (`qwen2a`): its width, heads, depth and epsilon, its mel bands; the
/// feed-forward GELU-erf whatever `clip.use_gelu` says (clip.cpp sets it for the whisper
/// types, after refusing both `use_gelu` and `use_silu`); `image_size` 0 and `patch_size`
/// 1, as clip.cpp sets them for audio.
fn read_audio_hparams(keys: &ClipKeys) -> Result<ClipHParams> {
    let name = projector_name(keys, Modality::Audio)?.unwrap_or("unnamed");
    if name != ProjectorType::Qwen2a.name() && name != QWEN25O {
        return Err(audio_refusal(name));
    }
    let projector = ProjectorType::Qwen2a;
    let n_embd = keys.u32("clip.audio.embedding_length")?;
    let n_head = keys.u32("clip.audio.attention.head_count")?;
    let n_embd_head = keys.opt_u32("clip.audio.attention.head_dim")?.unwrap_or(0);
    let n_ff = keys.u32("clip.audio.feed_forward_length")?;
    let n_layer = keys.u32("clip.audio.block_count")?;
    let projection_dim = keys.u32("clip.audio.projection_dim")?;
    let eps = keys.f32("clip.audio.attention.layer_norm_epsilon")?;
    let n_head_kv = keys.opt_u32("clip.audio.attention.head_count_kv")?.unwrap_or(n_head);
    let n_mel_bins = keys.u32("clip.audio.num_mel_bins")?;
    if keys.opt_bool("clip.use_gelu")?.unwrap_or(false) && keys.opt_bool("clip.use_silu")?.unwrap_or(false) {
        return Err(Error::Load(
            "both clip.use_gelu and clip.use_silu are set to true".into(),
        ));
    }

    let invalid = |what: String| Err(Error::Load(format!("invalid audio projector: {what}")));
    if n_embd == 0 || n_head == 0 || n_ff == 0 || n_layer == 0 {
        return invalid(format!(
            "embedding_length {n_embd}, head_count {n_head}, feed_forward_length {n_ff} and block_count \
             {n_layer} must all be positive"
        ));
    }
    if n_mel_bins == 0 || n_mel_bins as usize > MAX_MEL_BANDS {
        return invalid(format!("num_mel_bins {n_mel_bins} (1 to {MAX_MEL_BANDS})"));
    }
    let d_head = head_width("audio", n_embd, n_head, n_head_kv, n_embd_head)?;
    if n_layer > MAX_LAYERS {
        return invalid(format!("block_count {n_layer} (at most {MAX_LAYERS})"));
    }
    if !eps.is_finite() || eps < 0.0 {
        return invalid(format!("layer_norm_epsilon {eps}"));
    }
    Ok(ClipHParams {
        projector,
        n_embd,
        n_head,
        n_head_kv,
        d_head,
        n_ff,
        n_layer,
        projection_dim,
        eps,
        image_size: 0,
        patch_size: 1,
        image_mean: [0.0; 3],
        image_std: [0.0; 3],
        ffn_op: FfnOp::GeluErf,
        n_merge: 1,
        longest_edge: 0,
        feature_layers: Vec::new(),
        grid_pinpoints: Vec::new(),
        n_wa_pattern: 0,
        n_mel_bins,
    })
}

/// The width of a `kind` encoder's attention heads: `head_dim`, else the width over the
/// heads (a positive `n_head` checked first); the heads must make up the width, and the K/V
/// heads be the query heads (clip.cpp's `build_attn` without grouped-query attention).
fn head_width(kind: &str, n_embd: u32, n_head: u32, n_head_kv: u32, n_embd_head: u32) -> Result<u32> {
    if n_embd_head == 0 && !n_embd.is_multiple_of(n_head) {
        return Err(Error::Load(format!(
            "invalid {kind} projector: embedding_length {n_embd} is not a multiple of head_count {n_head}"
        )));
    }
    let d_head = if n_embd_head > 0 { n_embd_head } else { n_embd / n_head };
    if d_head * n_head != n_embd {
        return Err(Error::Unsupported(format!(
            "{kind} heads of {d_head} x {n_head} that are not the width {n_embd} are not supported"
        )));
    }
    if n_head_kv != n_head {
        return Err(Error::Unsupported(format!(
            "{kind} attention with {n_head_kv} K/V heads for {n_head} query heads is not supported"
        )));
    }
    Ok(d_head)
}

/// Why an audio projector of another type than `qwen2a` is refused: elelem runs no other
/// audio encoder yet (docs/AUDIO-PLAN.md), and the pinned clip.cpp cannot encode
/// Ultravox's or Voxtral's audio at all (its graph stacks the 30 s piece's positions into
/// 188 tokens where `clip_n_output_tokens` counts 187, and it aborts).
fn audio_refusal(name: &str) -> Error {
    let why = match name {
        "ultravox" | "voxtral" => {
            " (nor does the pinned llama.cpp: its clip.cpp aborts on every 30 s piece of this type, expecting \
             187 tokens where its graph gives 188)"
        }
        _ => "",
    };
    Error::Unsupported(format!(
        "this GGUF is an audio projector ({name:?}): elelem runs the qwen2a audio encoder (Qwen2.5-Omni's \
         too) only{why}"
    ))
}

/// InternVL's slicing resolutions (clip.cpp's `set_internvl_dhr_res_candidates`): every
/// grid of `a` x `b` tiles of `image_size` whose count is within
/// `clip.vision.preproc_min_tiles` and `preproc_max_tiles` (1 and 12 where absent), by `a`
/// then `b`.
fn internvl_grids(keys: &ClipKeys, image_size: u32) -> Result<Vec<(i32, i32)>> {
    let min = keys.opt_u32("clip.vision.preproc_min_tiles")?.unwrap_or(1);
    let max = keys.opt_u32("clip.vision.preproc_max_tiles")?.unwrap_or(12);
    if min > max || max > MAX_TILES {
        return Err(Error::Load(format!(
            "invalid vision projector: preproc_min_tiles {min} and preproc_max_tiles {max} \
             (at most {MAX_TILES}, and the least no more than the most)"
        )));
    }
    let mut grids = Vec::new();
    // clip.cpp's guard against a division by 0: no grid, so one overview an image.
    if min < 1 {
        return Ok(grids);
    }
    let side = image_size as i32;
    for a in min..=max {
        let lo = min.div_ceil(a).max(min);
        let hi = (max / a).min(max);
        grids.extend((lo..=hi).map(|b| (a as i32 * side, b as i32 * side)));
    }
    Ok(grids)
}

/// The `clip.*` keys, with errors naming them.
struct ClipKeys<'a>(&'a Gguf);

impl<'a> ClipKeys<'a> {
    fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{key} must be an unsigned 32-bit integer, got {v:?}"))),
        }
    }

    fn u32(&self, key: &str) -> Result<u32> {
        self.opt_u32(key)?.ok_or_else(|| missing(key))
    }

    fn f32(&self, key: &str) -> Result<f32> {
        match self.0.get(key) {
            None => Err(missing(key)),
            Some(v) => v
                .as_f32()
                .ok_or_else(|| Error::Load(format!("{key} must be a float, got {v:?}"))),
        }
    }

    /// An array of integers that each fit an `i32` (clip.cpp's `get_arr_int`).
    fn opt_i32_array(&self, key: &str) -> Result<Option<Vec<i32>>> {
        let Some(v) = self.0.get(key) else {
            return Ok(None);
        };
        v.as_array()
            .and_then(|items| {
                items
                    .iter()
                    .map(|x| x.as_i64().and_then(|n| i32::try_from(n).ok()))
                    .collect::<Option<Vec<i32>>>()
            })
            .map(Some)
            .ok_or_else(|| Error::Load(format!("{key} must be an array of 32-bit integers, got {v:?}")))
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{key} must be a boolean, got {v:?}"))),
        }
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| Error::Load(format!("{key} must be a string, got {v:?}"))),
        }
    }

    /// The first three of an array of at least three floats (clip.cpp requires three,
    /// reads three).
    fn three_f32(&self, key: &str) -> Result<[f32; 3]> {
        let v = self.0.get(key).ok_or_else(|| missing(key))?;
        let values = v
            .as_array()
            .and_then(|items| items.iter().map(Value::as_f32).collect::<Option<Vec<f32>>>())
            .filter(|values| values.len() >= 3)
            .ok_or_else(|| Error::Load(format!("{key} must be an array of at least 3 floats, got {v:?}")))?;
        Ok([values[0], values[1], values[2]])
    }
}

fn missing(key: &str) -> Error {
    Error::Load(format!("missing required metadata key {key}"))
}
