//! The projector GGUF (`mmproj`): its `clip.*` hyper-parameters and its tensors, read as
//! `tools/mtmd/clip.cpp`'s `clip_model_loader` reads them (`load_hparams`, `load_tensors`),
//! for the projector types elelem runs ([`super::ProjectorType`]; the keys are
//! [`super::hparams`]'s).
//!
//! What clip.cpp would read and elelem does not is refused, not ignored: a tensor the graph
//! of that projector type does not use (a gate, a pre-LayerNorm, a layer scale) would
//! change its arithmetic, so the file is [`Error::Unsupported`]. A required key or
//! tensor that is missing, a value of the wrong type, a tensor of the wrong shape, is an
//! [`Error::Load`] naming it.

use std::sync::Arc;

use elelem_gguf::Gguf;

use super::hparams::{read_encoders_hparams, ClipHParams, ProjectorType};
use super::projector::{self, ProjectorWeights};
use crate::audio::FRAMES_PER_CHUNK;
use crate::ggml::{Buffer, Context, CpuDevice, Tensor};
use crate::model::loader::Loader;
use crate::model::placement::Placement;
use crate::model::Norm;
use crate::{Error, Result};

/// The longest side a dynamic-size encoder takes (beyond any preprocessing's output).
const MAX_ENCODED_SIDE: usize = 16384;

/// The positions of an audio encoder's piece: its frames halved by the stride-2
/// convolution (Whisper's 1500 for 30 s).
pub const AUDIO_POSITIONS: usize = FRAMES_PER_CHUNK / 2;

/// A layer's Q, K and V projections.
pub enum VitQkv {
    /// `attn_q`, `attn_k`, `attn_v`, each `[n_embd, n_embd]`, biases where the file has them.
    Separate {
        q_w: Tensor,
        q_b: Option<Tensor>,
        k_w: Tensor,
        k_b: Option<Tensor>,
        v_w: Tensor,
        v_b: Option<Tensor>,
    },
    /// Qwen3-VL's fused `attn_qkv` (`[n_embd, 3 · n_embd]`) and its bias: Q, K and V are
    /// views of one product.
    Fused { w: Tensor, b: Tensor },
}

/// One encoder layer's weights (clip.cpp's `clip_layer`, the parts SigLIP has).
pub struct VitLayer {
    pub ln_1: Option<Norm>,
    pub qkv: VitQkv,
    pub o_w: Tensor,
    pub o_b: Option<Tensor>,
    pub ln_2: Option<Norm>,
    /// Pixtral's, Gemma 4's and Qwen2.5-VL's gate ([`super::ProjectorType::gated_vit`]),
    /// and its bias where the file has one (Qwen2.5-VL's).
    pub ff_gate_w: Option<Tensor>,
    pub ff_gate_b: Option<Tensor>,
    /// Gemma 4's per-head Q and K norms (`[d_head]`) and its norms after the attention and
    /// after the feed-forward ([`super::ProjectorType::gemma4_vit`]).
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    pub attn_post_norm: Option<Tensor>,
    pub ffn_post_norm: Option<Tensor>,
    pub ff_up_w: Tensor,
    pub ff_up_b: Option<Tensor>,
    pub ff_down_w: Tensor,
    pub ff_down_b: Option<Tensor>,
    /// InternViT's layer scales (`ls1`, `ls2`): the attention's and the feed-forward's
    /// output multiplied by them before each residual.
    pub ls_1: Option<Tensor>,
    pub ls_2: Option<Tensor>,
}

/// The encoder's weights.
pub struct VitWeights {
    /// `v.patch_embd.weight`: `[patch, patch, 3, n_embd]`; Llama 4's `[3 · patch², n_embd]`;
    /// none for an audio encoder, whose stem is its type's convolutions
    /// ([`super::projector::qwen2a`]).
    pub patch_embd: Option<Tensor>,
    /// Qwen2-VL's second patch convolution, `v.patch_embd.weight.1` (the same shape), whose
    /// output is added to the first's.
    pub patch_embd_1: Option<Tensor>,
    pub patch_bias: Option<Tensor>,
    /// `v.class_embd`: `[n_embd]`, the class token of CLIP (LLaVA's), InternViT and Llama 4's
    /// ViT, appended after the patches.
    pub class_embd: Option<Tensor>,
    /// Gemma 4's position tables `v.position_embd.weight`: `[n_embd, n, 2]`, F32 (by
    /// column, then by row: `n` columns and rows at most).
    pub position_tables: Option<Tensor>,
    /// `v.position_embd.weight`: `[n_embd, n_pos]` (a position per patch, and the class
    /// token's); F32, or for CLIP any type, looked up by row; none where the positions are
    /// rotary (Qwen2-VL, Pixtral) or tables (Gemma 4). An audio encoder's
    /// `a.position_embd.weight`: `[n_embd, n]`, F32, of which the first positions of a
    /// piece ([`AUDIO_POSITIONS`]) are added.
    pub position_embd: Option<Tensor>,
    /// `v.pre_ln`: the norm before the first layer ([`super::ProjectorType::vit_pre_norm`]).
    pub pre_ln: Option<Norm>,
    pub layers: Vec<VitLayer>,
    pub post_ln: Option<Norm>,
}

/// A loaded projector file's encoder: its hyper-parameters and its weights in CPU memory
/// (a file with both encoders, Qwen2.5-Omni's, gives two, which share its memory).
pub struct Mmproj {
    pub hparams: ClipHParams,
    pub vit: VitWeights,
    pub projector: ProjectorWeights,
    weights: Arc<Weights>,
}

/// The memory of a projector file's weights: the mapped file and the buffers placed over it.
struct Weights {
    bytes: usize,
    _buffers: Vec<Buffer>,
    _contexts: Vec<Context>,
    _file: elelem_gguf::FileBytes,
}

/// A projector file's encoders, as clip.cpp's `clip_init` loads them (`ctx_v`, `ctx_a`):
/// one at least.
pub struct Encoders {
    pub vision: Option<Mmproj>,
    pub audio: Option<Mmproj>,
}

impl Mmproj {
    /// Opens and loads the projector GGUF at `path`: its vision encoder, or for a file with
    /// an audio encoder only, that one ([`Mmproj::open_encoders`] gives both).
    ///
    /// # Errors
    /// [`Error::Load`] for an unreadable file, a missing or mistyped key or tensor, a
    /// tensor of the wrong shape; [`Error::Unsupported`] for a projector type elelem does
    /// not run or a tensor its graph would not use.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Mmproj> {
        let encoders = Mmproj::open_encoders(path)?;
        Ok(encoders.vision.or(encoders.audio).expect("one encoder at least"))
    }

    /// Opens and loads every encoder of the projector GGUF at `path`.
    ///
    /// # Errors
    /// As [`Mmproj::open`].
    pub fn open_encoders(path: impl AsRef<std::path::Path>) -> Result<Encoders> {
        let path = path.as_ref();
        let gguf = Gguf::open(path).map_err(|e| Error::Load(format!("{}: {e}", path.display())))?;
        Mmproj::load_encoders(gguf)
    }

    /// Loads a projector from an opened GGUF, as [`Mmproj::open`].
    pub fn load(gguf: Gguf) -> Result<Mmproj> {
        let encoders = Mmproj::load_encoders(gguf)?;
        Ok(encoders.vision.or(encoders.audio).expect("one encoder at least"))
    }

    /// Loads every encoder of an opened GGUF: each modality's hyper-parameters and
    /// tensors (`v.*` and `mm.*`, `a.*` and `mm.a.*`), every tensor of the file used by one
    /// of them; both encoders' embeddings must be as wide (mtmd's "mismatch between vision
    /// and audio mmproj").
    pub fn load_encoders(gguf: Gguf) -> Result<Encoders> {
        let (vision, audio) = read_encoders_hparams(&gguf)?;
        let device = CpuDevice::get()?;
        let n_layer = vision.iter().chain(&audio).map(|hp| hp.n_layer).max().unwrap_or(0);
        let placement = Placement::cpu(n_layer as usize);
        let mut loader = Loader::new(&gguf, &device, &placement, false)?;
        let mut load = |hparams: ClipHParams| -> Result<(ClipHParams, VitWeights, ProjectorWeights)> {
            let vit = load_vit(&mut loader, &hparams)?;
            let projector = projector::load(&mut loader, &hparams)?;
            Ok((hparams, vit, projector))
        };
        let vision = vision.map(&mut load).transpose()?;
        let audio = audio.map(&mut load).transpose()?;
        if let (Some((_, _, v)), Some((_, _, a))) = (&vision, &audio) {
            if v.n_mmproj_embd() != a.n_mmproj_embd() {
                return Err(Error::Load(format!(
                    "mismatch between vision and audio mmproj (n_embd_v = {}, n_embd_a = {})",
                    v.n_mmproj_embd(),
                    a.n_mmproj_embd()
                )));
            }
        }
        let names: Vec<&str> = vision
            .iter()
            .chain(&audio)
            .map(|(hp, _, _)| hp.projector.name())
            .collect();
        loader.check_all_used(&format!("{} projector", names.join(" and ")))?;
        let placed = loader.place()?;
        gguf.release(0..gguf.data_offset() as usize);
        let weights = Arc::new(Weights {
            bytes: placed.weights_bytes,
            _buffers: placed.buffers,
            _contexts: placed.contexts,
            _file: gguf.into_file_bytes(),
        });
        let encoder = |(hparams, vit, projector)| Mmproj {
            hparams,
            vit,
            projector,
            weights: Arc::clone(&weights),
        };
        Ok(Encoders {
            vision: vision.map(encoder),
            audio: audio.map(encoder),
        })
    }

    /// The width of the embeddings it gives the language model (clip.cpp's
    /// `clip_n_mmproj_embd`).
    pub fn n_mmproj_embd(&self) -> u32 {
        self.projector.n_mmproj_embd()
    }

    /// Refuses a language model whose embeddings are `n_embd_text` wide where this
    /// projector's are not (mtmd's "mismatch between text model and mmproj").
    ///
    /// # Errors
    /// [`Error::Load`] naming both widths.
    pub fn check_text_model(&self, n_embd_text: u32) -> Result<()> {
        self.hparams.check_text_embd(self.n_mmproj_embd(), n_embd_text)
    }

    /// The embeddings one image of the encoder's native size (`image_size` square)
    /// becomes ([`ClipHParams::n_output_tokens`]).
    pub fn n_output_tokens(&self) -> u32 {
        self.hparams.n_output_tokens()
    }

    /// The embeddings a `width` x `height` image becomes ([`ClipHParams::n_image_tokens`]).
    pub fn n_image_tokens(&self, width: usize, height: usize) -> usize {
        self.hparams.n_image_tokens(width, height)
    }

    /// Refuses an image a dynamic-size encoder does not take: sides that are not positive
    /// multiples of [`ClipHParams::image_side_multiple`] (mtmd's preprocessing always aligns
    /// them; clip.cpp would drop the remainder, or assert), or more merged patches than
    /// `max_tokens` (the encoder's limit, [`ClipHParams::max_image_tokens`] or less).
    ///
    /// # Errors
    /// [`Error::Image`] naming the size.
    pub fn check_image_size(&self, width: usize, height: usize, max_tokens: u32) -> Result<()> {
        let hp = &self.hparams;
        let p = hp.image_side_multiple() as usize;
        if width == 0 || height == 0 || !width.is_multiple_of(p) || !height.is_multiple_of(p) {
            return Err(Error::Image(format!(
                "the {} encoder takes images whose sides are multiples of {p}, not {width}x{height}",
                hp.projector.name()
            )));
        }
        if let Some(tables) = self.vit.position_tables {
            let n = tables.ne()[1] as usize;
            if width / hp.patch_size as usize > n || height / hp.patch_size as usize > n {
                return Err(Error::Image(format!(
                    "a {width}x{height} image is too large for the {} encoder: at most {n} patches a side",
                    hp.projector.name()
                )));
            }
        }
        let max = max_tokens as usize;
        if width > MAX_ENCODED_SIDE || height > MAX_ENCODED_SIDE || hp.n_merged_patches(width, height) > max {
            return Err(Error::Image(format!(
                "a {width}x{height} image is too large for the {} encoder: at most {max} tokens",
                hp.projector.name()
            )));
        }
        Ok(())
    }

    /// The image sizes the encoder reserves its compute buffer for: a fixed-size
    /// projector's square; for a dynamic-size one, the most patches that
    /// [`Mmproj::check_image_size`] lets through at `max_tokens` (in whole merges), as the
    /// squarest grid and as a row and a column, so that no image it takes grows the buffer.
    pub fn largest_images(&self, max_tokens: u32) -> Vec<(usize, usize)> {
        let hp = &self.hparams;
        let side = hp.image_size as usize;
        if !hp.projector.dynamic_size() {
            return vec![(side, side)];
        }
        let out = (hp.patch_size * hp.n_merge) as usize;
        let max = max_tokens as usize;
        let longest = max.min(MAX_ENCODED_SIDE / out);
        let across = (1..=max).take_while(|a| a * a <= max).last().unwrap_or(1);
        vec![
            (across * out, (max / across).min(longest) * out),
            (longest * out, out),
            (out, longest * out),
        ]
    }

    /// Bytes of weight data: the file's, both encoders' where it holds two.
    pub fn weights_bytes(&self) -> usize {
        self.weights.bytes
    }
}

/// The tensors clip.cpp's `load_tensors` reads for the encoder, the ones SigLIP and
/// Qwen2-VL's ViT have, for LLaVA's CLIP, InternViT and Llama 4's ViT
/// ([`super::ProjectorType::class_token`]) a class embedding and a pre-norm, for InternViT
/// its layer scales, Pixtral's, Gemma 4's and Qwen2.5-VL's gate (and its bias), Gemma 4's Q/K
/// norms and post-norms, Llama 4's linear patch embedding, Qwen3-VL's fused QKV, patch bias
/// and position embeddings: every other one (a fused QKV, Q/K norms, a gate, a pre-norm or a
/// class token where the type has none; Qwen2-VL's and Qwen2.5-VL's patch bias and position
/// embeddings, which their graph does not read) is left undeclared, so that
/// [`Loader::check_all_used`] refuses the file. All `n_layer` layers are loaded, as clip.cpp
/// loads them, even where LLaVA's graph stops short of the last ([`ClipHParams::n_layer_run`]).
/// An audio encoder's are under `a.` (clip.cpp's prefix for audio): no patch embedding (its
/// convolutions are the projector's), position embeddings, and Whisper's layers, whose
/// LayerNorms and Q and V biases its graph asserts, and no K bias.
fn load_vit(l: &mut Loader, hp: &ClipHParams) -> Result<VitWeights> {
    let qwen = hp.projector.qwen_vit();
    let qwen3vl = hp.projector == ProjectorType::Qwen3vl;
    let gated = hp.projector.gated_vit();
    let d_head = u64::from(hp.d_head);
    let (embd, ff, p) = (u64::from(hp.n_embd), u64::from(hp.n_ff), u64::from(hp.patch_size));
    let n_patches = u64::from(hp.n_patches_side()).pow(2);
    let norm = |l: &mut Loader, prefix: &str| -> Result<Option<Norm>> {
        let weight = l.optional_vector(&format!("{prefix}.weight"), embd)?;
        let bias = l.optional_vector(&format!("{prefix}.bias"), embd)?;
        match (weight, bias) {
            (Some(weight), bias) => Ok(Some(Norm { weight, bias })),
            (None, None) => Ok(None),
            (None, Some(_)) => Err(Error::Unsupported(format!(
                "{prefix}.bias without {prefix}.weight is not supported"
            ))),
        }
    };
    let llama4 = hp.projector.llama4_vit();
    let audio = hp.projector.audio();
    let prefix = hp.projector.tensor_prefix();
    // F32 or F16: Llama 4's is reshaped to a kernel of `patch` wide rows, which no
    // quantized block divides.
    let patch_embd = if audio {
        None
    } else if llama4 {
        Some(l.values("v.patch_embd.weight", &[3 * p * p, embd])?)
    } else {
        Some(l.values("v.patch_embd.weight", &[p, p, 3, embd])?)
    };
    let gemma4 = hp.projector.gemma4_vit();
    let internvl = hp.projector == ProjectorType::Internvl;
    let class_embd = match hp.projector {
        // InternVL's graph asserts it.
        ProjectorType::Internvl => Some(l.vector("v.class_embd", embd)?),
        // F32 only: ggml's CPU backend concatenates no F16 to F32.
        ProjectorType::Llama4 => Some(l.f32_weight("v.class_embd", &[embd])?),
        p if p.class_token() => l.optional_vector("v.class_embd", embd)?,
        _ => None,
    };
    let n_pos = n_patches + u64::from(class_embd.is_some());
    // The Qwen ViTs' second convolution; Qwen2-VL's graph (Qwen2.5-VL's too) and Gemma 4's
    // have no patch bias (clip.cpp ignores one), Qwen3-VL's asserts one.
    let patch_embd_1 = qwen
        .then(|| l.values("v.patch_embd.weight.1", &[p, p, 3, embd]))
        .transpose()?;
    let patch_bias = if qwen3vl {
        Some(l.vector("v.patch_embd.bias", embd)?)
    } else if qwen || gemma4 || audio {
        None
    } else {
        l.optional_vector("v.patch_embd.bias", embd)?
    };
    let position_embd = if audio {
        // F32 (ggml's CPU backend adds no F16 to F32), at least a piece's positions
        // (clip.cpp's graph asserts it).
        let name = "a.position_embd.weight";
        let n = l
            .tensor_dims(name)
            .and_then(|dims| dims.get(1).copied())
            .filter(|&n| n >= AUDIO_POSITIONS as u64)
            .ok_or_else(|| {
                Error::Load(format!(
                    "tensor {name} is missing or short: [n_embd, n] of at least {AUDIO_POSITIONS} positions expected"
                ))
            })?;
        Some(l.f32_weight(name, &[embd, n])?)
    } else if hp.projector.llava_vit() {
        // Looked up by row (clip.cpp's `get_rows`), which reads any type as F32.
        Some(l.rows("v.position_embd.weight", &[embd, n_pos])?)
    } else if hp.projector.learned_positions() {
        // F32 only: ggml's CPU backend adds no F16 to F32 (clip.cpp would abort on it).
        Some(l.f32_weight("v.position_embd.weight", &[embd, n_pos])?)
    } else {
        None
    };
    let position_tables = if gemma4 {
        let n = l
            .tensor_dims("v.position_embd.weight")
            .and_then(|dims| dims.get(1).copied())
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::Load("tensor v.position_embd.weight is missing or empty: [n_embd, n, 2] expected".into())
            })?;
        Some(l.f32_weight("v.position_embd.weight", &[embd, n, 2])?)
    } else {
        None
    };
    let pre_ln = if hp.projector.vit_pre_norm() {
        norm(l, "v.pre_ln")?
    } else {
        None
    };
    // Qwen2-VL's graph (Qwen2.5-VL's too) adds Q, K and V's biases unconditionally
    // (clip.cpp would crash without them): required there. Whisper's graph asserts Q's and
    // V's, and that K has none: its K bias is left undeclared, and refused.
    let qkv_bias = |l: &mut Loader, name: &str| -> Result<Option<Tensor>> {
        if qwen || audio {
            l.vector(name, embd).map(Some)
        } else {
            l.optional_vector(name, embd)
        }
    };
    // Whisper's graph asserts both LayerNorms, weight and bias.
    let layer_norm = |l: &mut Loader, prefix: &str| -> Result<Option<Norm>> {
        if audio {
            l.layer_norm(prefix, embd).map(Some)
        } else {
            norm(l, prefix)
        }
    };
    let mut layers = Vec::with_capacity(hp.n_layer as usize);
    for il in 0..hp.n_layer {
        let n = |t: &str| format!("{prefix}.blk.{il}.{t}");
        // As clip.cpp fixes old conversions (Gemma 3's and Idefics3's among them): a
        // `ffn_down` whose rows are `n_embd` wide is the up projection, and `ffn_up` the
        // down one, biases too (even where `n_ff` is `n_embd`, as clip.cpp decides it; not
        // for the types whose conversions never swapped them, LFM2's and InternVL's).
        let swapped = hp.projector.swapped_ffn_fixed()
            && l.has(&n("ffn_up.weight"))
            && l.tensor_dims(&n("ffn_down.weight")).and_then(|d| d.first().copied()) == Some(embd);
        let (up, down) = if swapped {
            ("ffn_down", "ffn_up")
        } else {
            ("ffn_up", "ffn_down")
        };
        layers.push(VitLayer {
            ln_1: layer_norm(l, &n("ln1"))?,
            // Qwen3-VL's graph adds the fused bias unconditionally.
            qkv: if qwen3vl {
                VitQkv::Fused {
                    w: l.matrix(&n("attn_qkv.weight"), &[embd, 3 * embd])?,
                    b: l.vector(&n("attn_qkv.bias"), 3 * embd)?,
                }
            } else {
                VitQkv::Separate {
                    q_w: l.matrix(&n("attn_q.weight"), &[embd, embd])?,
                    q_b: qkv_bias(l, &n("attn_q.bias"))?,
                    k_w: l.matrix(&n("attn_k.weight"), &[embd, embd])?,
                    k_b: if audio { None } else { qkv_bias(l, &n("attn_k.bias"))? },
                    v_w: l.matrix(&n("attn_v.weight"), &[embd, embd])?,
                    v_b: qkv_bias(l, &n("attn_v.bias"))?,
                }
            },
            o_w: l.matrix(&n("attn_out.weight"), &[embd, embd])?,
            o_b: l.optional_vector(&n("attn_out.bias"), embd)?,
            ln_2: layer_norm(l, &n("ln2"))?,
            ff_gate_w: if gated {
                Some(l.matrix(&n("ffn_gate.weight"), &[embd, ff])?)
            } else {
                None
            },
            ff_gate_b: if gated {
                l.optional_vector(&n("ffn_gate.bias"), ff)?
            } else {
                None
            },
            q_norm: gemma4.then(|| l.vector(&n("attn_q_norm.weight"), d_head)).transpose()?,
            k_norm: gemma4.then(|| l.vector(&n("attn_k_norm.weight"), d_head)).transpose()?,
            attn_post_norm: gemma4
                .then(|| l.vector(&n("attn_post_norm.weight"), embd))
                .transpose()?,
            ffn_post_norm: gemma4.then(|| l.vector(&n("ffn_post_norm.weight"), embd)).transpose()?,
            ff_up_w: l.matrix(&n(&format!("{up}.weight")), &[embd, ff])?,
            ff_up_b: l.optional_vector(&n(&format!("{up}.bias")), ff)?,
            ff_down_w: l.matrix(&n(&format!("{down}.weight")), &[ff, embd])?,
            ff_down_b: l.optional_vector(&n(&format!("{down}.bias")), embd)?,
            ls_1: if internvl {
                l.optional_vector(&n("ls1.weight"), embd)?
            } else {
                None
            },
            ls_2: if internvl {
                l.optional_vector(&n("ls2.weight"), embd)?
            } else {
                None
            },
        });
    }
    let post_ln = norm(l, &format!("{prefix}.post_ln"))?;
    Ok(VitWeights {
        patch_embd,
        patch_embd_1,
        patch_bias,
        class_embd,
        position_tables,
        position_embd,
        pre_ln,
        layers,
        post_ln,
    })
}
