//! Synthetic projector GGUFs (`mmproj`): seeded random weights of the shapes and keys
//! clip.cpp reads, written by our GGUF writer, for the encoder's comparison with mtmd
//! (`tests/vision_encoder.rs`) and the refusals.

use elelem_gguf::{GgufWriter, TensorType, Value};

use crate::canary::{add_weights, Rng};

/// The projector types written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gemma3,
    Idefics3,
    Lfm2,
    /// LLaVA's `mlp`: CLIP (a class embedding, the pre-LayerNorm, no post-LayerNorm,
    /// GELU-quick, position embeddings of the matrices' type) and a two-layer MLP.
    Llava,
    /// MobileVLM's `ldp`: LLaVA's CLIP, an MLP and two blocks of depthwise convolutions.
    Ldp,
    /// MobileVLM V2's `ldpv2`: LLaVA's CLIP, an MLP, pooling and a depthwise convolution.
    Ldpv2,
    /// InternVL: InternViT (a class embedding, layer scales, no post-LayerNorm), the pixel
    /// shuffle, the `mm.model.mlp.0` LayerNorm and a two-layer MLP (`mm.model.mlp.1`,
    /// `mm.model.mlp.3`).
    Internvl,
    Qwen2vl,
    /// Qwen2.5-VL: Qwen2-VL's ViT with RMS norms, a SiLU-gated feed-forward with biases
    /// and window attention (`clip.vision.n_wa_pattern`), and its merger.
    Qwen25vl,
    /// Qwen3-VL: Qwen2-VL's ViT with a fused QKV, a patch bias, learned position
    /// embeddings and GELU; the merger and the deepstack mergers of
    /// [`QWEN3VL_DEEPSTACK_LAYERS`].
    Qwen3vl,
    Pixtral,
    Llama4,
    Gemma4v,
}

/// A synthetic SigLIP projector's type and sizes.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub kind: Kind,
    pub n_embd: u64,
    pub n_head: u64,
    pub n_ff: u64,
    pub n_layer: u64,
    pub image_size: u64,
    pub patch_size: u64,
    /// `clip.vision.projector.scale_factor`: Gemma 3's pooling kernel (real files leave it
    /// out: 4), Idefics3's unshuffle (required); Pixtral's `clip.vision.spatial_merge_size`
    /// (with the patch merger; none: Pixtral 12B's, no merger).
    pub n_merge: Option<u32>,
    /// Idefics3's `clip.vision.preproc_image_size`.
    pub longest_edge: Option<u32>,
    /// The language model's width.
    pub n_text_embd: u64,
    /// The matrices' type (Q, K, V, output, feed-forward, the patch kernel, the input
    /// projection); norms, biases and position embeddings are F32 as in real files.
    pub matrix_type: TensorType,
    /// The feed-forward's tensors under each other's names, as old conversions have them
    /// (clip.cpp swaps them back).
    pub swapped_ffn: bool,
    /// LFM2's optional input LayerNorm: `mm.input_norm.weight` and `.bias` (real LFM2-VL
    /// files have both).
    pub input_norm: bool,
    /// LLaVA's `clip.vision.feature_layer` (Granite's several; none: the layer before
    /// the last).
    pub feature_layers: &'static [i32],
    /// LLaVA 1.6's `clip.vision.image_grid_pinpoints` (width, height, ...), and with them
    /// its `v.image_newline`.
    pub grid_pinpoints: &'static [i32],
    /// LLaVA's `mlp_norm` variant (Yi-VL's): `mm.0`, the norm `mm.1`, `mm.3`, the norm `mm.4`.
    pub mlp_norm: bool,
    /// Qwen2.5-VL's `clip.vision.n_wa_pattern`: every this many layers, one attends over the
    /// whole image (the others within their windows).
    pub n_wa_pattern: u32,
    /// Qwen3-VL's layers whose outputs go through deepstack mergers of their own (those
    /// below `n_layer`).
    pub deepstack_layers: &'static [u64],
    pub seed: u64,
}

impl Shape {
    /// Gemma 3, small: 16 x 16 patches of 8 pixels, two layers of 64 wide, 16 tokens out.
    pub const GEMMA3: Shape = Shape {
        kind: Kind::Gemma3,
        n_embd: 64,
        n_head: 4,
        n_ff: 128,
        n_layer: 2,
        image_size: 128,
        patch_size: 8,
        n_merge: None,
        longest_edge: None,
        n_text_embd: 96,
        matrix_type: TensorType::F16,
        swapped_ffn: false,
        input_norm: false,
        feature_layers: &[],
        grid_pinpoints: &[],
        mlp_norm: false,
        n_wa_pattern: QWEN25VL_WA_PATTERN,
        deepstack_layers: &QWEN3VL_DEEPSTACK_LAYERS,
        seed: 0x5167_11b5,
    };

    /// Idefics3 (SmolVLM), small: the same encoder, 2 x 2 patches unshuffled into one (64
    /// tokens of 256 values, projected to 96), images resized to 256 at most and cut into
    /// tiles of 128.
    pub const IDEFICS3: Shape = Shape {
        kind: Kind::Idefics3,
        n_merge: Some(2),
        longest_edge: Some(256),
        seed: 0x1de_f1c5,
        ..Shape::GEMMA3
    };

    /// LFM2-VL, small: the same encoder at any size (its 16 x 16 position embeddings
    /// resized to the image's grid), 2 x 2 patches unshuffled into one, the input
    /// LayerNorm, an MLP of 256 -> 128 -> 96.
    pub const LFM2: Shape = Shape {
        kind: Kind::Lfm2,
        n_merge: Some(2),
        input_norm: true,
        seed: 0x1f_3217,
        ..Shape::GEMMA3
    };

    /// Pixtral as Mistral Small 3.x has it, small: the same sizes at any size of image
    /// (images of up to 128 on a side: 16 x 16 patches), 2D RoPE, RMS norms, a SiLU-gated
    /// feed-forward, 2 x 2 patches merged into one, an MLP of 64 -> 128 -> 96 and
    /// `[IMG_BREAK]` after each row.
    pub const PIXTRAL: Shape = Shape {
        kind: Kind::Pixtral,
        n_merge: Some(2),
        seed: 0x9_1274,
        ..Shape::GEMMA3
    };

    /// Gemma 4, small: the same sizes at any size of image (position tables of 64 columns
    /// and rows of 8-pixel patches), 2D RoPE, RMS norms, a GELU-gated feed-forward, 3 x 3
    /// patches pooled into one token (its default), the standardization and the
    /// projection to 96.
    pub const GEMMA4V: Shape = Shape {
        kind: Kind::Gemma4v,
        n_merge: None,
        image_size: 96,
        seed: 0x0093_a40e,
        ..Shape::GEMMA3
    };

    /// Llama 4, small: the same encoder with a class token, 2D RoPE and a pre-LayerNorm,
    /// its patches unfolded through a linear map, 2 x 2 patches shuffled into one (64
    /// tokens a tile of 128), an adapter of 256 -> 128 -> 64 and the projection to 96;
    /// images cut into up to 3 x 3 tiles and an overview.
    pub const LLAMA4: Shape = Shape {
        kind: Kind::Llama4,
        n_merge: Some(2),
        seed: 0x11a_4a4,
        ..Shape::GEMMA3
    };

    /// Qwen2-VL, small: Qwen2-VL's 14-pixel patches (a token per 28 x 28 pixels), the
    /// same layers without position embeddings (rotary instead) and with GELU-quick (no
    /// `clip.use_gelu`, as converted Qwen2-VL files), two patch convolutions, 2 x 2 patches
    /// merged by an MLP of 256 -> 128 -> 96.
    pub const QWEN2VL: Shape = Shape {
        kind: Kind::Qwen2vl,
        image_size: 112,
        patch_size: 14,
        seed: 0x9e27_1001,
        ..Shape::GEMMA3
    };

    /// Qwen2.5-VL, small: Qwen2-VL's 14-pixel patches, so that its windows are Qwen2.5-VL's
    /// (112 pixels: 4 x 4 merged patches), three layers with RMS norms and a SiLU-gated
    /// feed-forward, every second attending over the whole image
    /// ([`QWEN25VL_WA_PATTERN`]) and the others within their windows, the merger's MLP of
    /// 256 -> 128 -> 96.
    pub const QWEN25VL: Shape = Shape {
        kind: Kind::Qwen25vl,
        n_layer: 3,
        seed: 0x9e25_1001,
        ..Shape::QWEN2VL
    };

    /// Qwen3-VL, small: 16-pixel patches (a token per 32 x 32 pixels), three layers 64 wide
    /// with a fused QKV, 8 x 8 position embeddings resized to the image, two patch
    /// convolutions and a patch bias, 2 x 2 patches merged by an MLP of 256 -> 128 -> 96,
    /// and the deepstack mergers of layers 1 and 2 beside it (each token 3 x 96 values).
    pub const QWEN3VL: Shape = Shape {
        kind: Kind::Qwen3vl,
        n_layer: 3,
        image_size: 128,
        patch_size: 16,
        seed: 0x9e3_0f11,
        ..Shape::GEMMA3
    };

    /// LLaVA 1.5, small: CLIP of three layers 64 wide (the MLP takes the second's output)
    /// on 8 x 8 patches of 8 pixels and its class token, an MLP of 64 -> 128 -> 96: 64
    /// tokens an image.
    pub const LLAVA: Shape = Shape {
        kind: Kind::Llava,
        n_layer: 3,
        image_size: 64,
        seed: 0x11a_7a15,
        ..Shape::GEMMA3
    };

    /// MobileVLM, small: CLIP of three layers 64 wide on the 24 x 24 patches clip.cpp builds
    /// its graph for (2 pixels each), an MLP of 64 -> 128 -> 96, then `ldp`'s blocks: 144
    /// tokens an image.
    pub const LDP: Shape = Shape {
        kind: Kind::Ldp,
        image_size: 48,
        patch_size: 2,
        seed: 0x1d_9001,
        ..Shape::LLAVA
    };

    /// MobileVLM V2, small: as [`Shape::LDP`], with `ldpv2`'s pooling and positional
    /// encoding generator.
    pub const LDPV2: Shape = Shape {
        kind: Kind::Ldpv2,
        seed: 0x1d_9002,
        ..Shape::LDP
    };

    /// InternVL, small: the same encoder with layer scales and a class token, 2 x 2 patches
    /// shuffled into one (16 tokens a tile of 64), a LayerNorm and an MLP of 256 -> 128 ->
    /// 96, tiles of up to 12 as clip.cpp's defaults.
    pub const INTERNVL: Shape = Shape {
        kind: Kind::Internvl,
        n_layer: 2,
        image_size: 64,
        n_merge: Some(2),
        seed: 0x1e7_e2f1,
        ..Shape::GEMMA3
    };

    /// The hidden states the MLP takes side by side (clip.cpp's feature stack).
    fn n_feature_stack(&self) -> u64 {
        let deepest = match self.feature_layers.iter().copied().max() {
            Some(d) if d >= 0 => d,
            _ => self.n_layer as i32 - 1,
        };
        ((0..=deepest).filter(|il| self.feature_layers.contains(il)).count() as u64).max(1)
    }
}

impl Kind {
    /// LLaVA's CLIP (`models/llava.cpp`): LLaVA's and MobileVLM's.
    fn llava_vit(self) -> bool {
        matches!(self, Kind::Llava | Kind::Ldp | Kind::Ldpv2)
    }
}

/// A seeded projector of `shape`, ready to write or to alter first: SigLIP's tensors
/// (LayerNorms with biases, separate Q/K/V with biases, a GELU feed-forward with biases,
/// the post-LayerNorm), the projector's (Gemma 3's soft-embedding norm and input
/// projection; Idefics3's `mm.model.fc`; LFM2's input norm and `mm.1`, `mm.2` with biases,
/// the MLP's hidden width `n_ff`), and the keys of a converted `mmproj` of that type.
/// Pixtral's and Gemma 4's are their own ([`pixtral_writer`], [`gemma4v_writer`]).
pub fn writer(shape: &Shape) -> GgufWriter {
    match shape.kind {
        Kind::Pixtral => return pixtral_writer(shape),
        Kind::Gemma4v => return gemma4v_writer(shape),
        Kind::Qwen25vl => return qwen25vl_writer(shape),
        Kind::Qwen3vl => return qwen3vl_writer(shape),
        _ => {}
    }
    let mut rng = Rng(shape.seed);
    let mut w = GgufWriter::new();
    let (embd, ff, p, ty) = (shape.n_embd, shape.n_ff, shape.patch_size, shape.matrix_type);
    let n_patches = (shape.image_size / p).pow(2);
    // GELU where the file says so; GELU-quick, clip.cpp's default, where LLaVA's says false
    // and where Qwen2-VL's (as converted) has no key.
    let gelu = (shape.kind != Kind::Qwen2vl).then_some(("clip.use_gelu", !shape.kind.llava_vit()));
    common_keys(
        &mut w,
        shape,
        match shape.kind {
            Kind::Gemma3 => "gemma3",
            Kind::Idefics3 => "idefics3",
            Kind::Lfm2 => "lfm2",
            Kind::Llama4 => "llama4",
            Kind::Llava => "mlp",
            Kind::Ldp => "ldp",
            Kind::Ldpv2 => "ldpv2",
            Kind::Internvl => "internvl",
            Kind::Qwen2vl => "qwen2vl_merger",
            Kind::Pixtral | Kind::Gemma4v | Kind::Qwen25vl | Kind::Qwen3vl => {
                unreachable!("written by their own writers")
            }
        },
        gelu,
        1e-6,
    );
    set_normalization(&mut w, [0.5; 3], [0.5; 3]);
    if let Some(k) = shape.n_merge {
        w.set("clip.vision.projector.scale_factor", Value::U32(k));
    }
    if let Some(edge) = shape.longest_edge {
        w.set("clip.vision.preproc_image_size", Value::U32(edge));
    }
    let ints = |values: &[i32]| Value::Array(values.iter().map(|&v| Value::I32(v)).collect());
    if !shape.feature_layers.is_empty() {
        w.set("clip.vision.feature_layer", ints(shape.feature_layers));
    }
    if !shape.grid_pinpoints.is_empty() {
        w.set("clip.vision.image_grid_pinpoints", ints(shape.grid_pinpoints));
    }
    let clip = shape.kind.llava_vit();
    let norm = |w: &mut GgufWriter, rng: &mut Rng, name: &str, n: u64| {
        w.add_f32(&format!("{name}.weight"), &[n], &rng.around_one(n));
        w.add_f32(&format!("{name}.bias"), &[n], &rng.small(n));
    };
    let internvl = shape.kind == Kind::Internvl;
    let llama4 = shape.kind == Kind::Llama4;
    if llama4 {
        // The unfolded patch's linear map (F16 at most, as converted: it is reshaped to a
        // kernel).
        let patch_type = if ty == TensorType::F32 { ty } else { TensorType::F16 };
        add_weights(&mut w, &mut rng, "v.patch_embd.weight", patch_type, &[3 * p * p, embd]);
    } else {
        add_weights(&mut w, &mut rng, "v.patch_embd.weight", ty, &[p, p, 3, embd]);
    }
    if shape.kind == Kind::Qwen2vl {
        add_weights(&mut w, &mut rng, "v.patch_embd.weight.1", ty, &[p, p, 3, embd]);
    } else if !llama4 {
        w.add_f32("v.patch_embd.bias", &[embd], &rng.small(embd));
    }
    if clip {
        w.add_f32("v.class_embd", &[embd], &rng.small(embd));
        // A position for the class token too, looked up by row: of any type.
        add_weights(&mut w, &mut rng, "v.position_embd.weight", ty, &[embd, n_patches + 1]);
        norm(&mut w, &mut rng, "v.pre_ln", embd);
    } else if internvl || llama4 {
        // The class token, F32 positions for it too; Llama 4's pre-LayerNorm.
        w.add_f32("v.class_embd", &[embd], &rng.small(embd));
        let n_pos = n_patches + 1;
        w.add_f32("v.position_embd.weight", &[embd, n_pos], &rng.small(embd * n_pos));
        if llama4 {
            norm(&mut w, &mut rng, "v.pre_ln", embd);
        }
    } else if shape.kind != Kind::Qwen2vl {
        w.add_f32(
            "v.position_embd.weight",
            &[embd, n_patches],
            &rng.small(embd * n_patches),
        );
    }
    for il in 0..shape.n_layer {
        let n = |t: &str| format!("v.blk.{il}.{t}");
        norm(&mut w, &mut rng, &n("ln1"), embd);
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            add_weights(&mut w, &mut rng, &n(&format!("{t}.weight")), ty, &[embd, embd]);
            w.add_f32(&n(&format!("{t}.bias")), &[embd], &rng.small(embd));
        }
        norm(&mut w, &mut rng, &n("ln2"), embd);
        let (up, down) = if shape.swapped_ffn {
            ("ffn_down", "ffn_up")
        } else {
            ("ffn_up", "ffn_down")
        };
        add_weights(&mut w, &mut rng, &n(&format!("{up}.weight")), ty, &[embd, ff]);
        w.add_f32(&n(&format!("{up}.bias")), &[ff], &rng.small(ff));
        add_weights(&mut w, &mut rng, &n(&format!("{down}.weight")), ty, &[ff, embd]);
        w.add_f32(&n(&format!("{down}.bias")), &[embd], &rng.small(embd));
        if internvl {
            w.add_f32(&n("ls1.weight"), &[embd], &rng.around_one(embd));
            w.add_f32(&n("ls2.weight"), &[embd], &rng.around_one(embd));
        }
    }
    if !clip && !internvl {
        norm(&mut w, &mut rng, "v.post_ln", embd);
    }
    match shape.kind {
        Kind::Gemma3 => {
            w.add_f32("mm.soft_emb_norm.weight", &[embd], &rng.around_one(embd));
            add_weights(
                &mut w,
                &mut rng,
                "mm.input_projection.weight",
                ty,
                &[shape.n_text_embd, embd],
            );
        }
        Kind::Idefics3 => {
            let merged = embd * u64::from(shape.n_merge.unwrap_or(1)).pow(2);
            add_weights(&mut w, &mut rng, "mm.model.fc.weight", ty, &[merged, shape.n_text_embd]);
        }
        Kind::Lfm2 => {
            let merged = embd * u64::from(shape.n_merge.unwrap_or(1)).pow(2);
            if shape.input_norm {
                norm(&mut w, &mut rng, "mm.input_norm", merged);
            }
            add_weights(&mut w, &mut rng, "mm.1.weight", ty, &[merged, ff]);
            w.add_f32("mm.1.bias", &[ff], &rng.small(ff));
            add_weights(&mut w, &mut rng, "mm.2.weight", ty, &[ff, shape.n_text_embd]);
            w.add_f32("mm.2.bias", &[shape.n_text_embd], &rng.small(shape.n_text_embd));
        }
        Kind::Llava => {
            let (features, text) = (embd * shape.n_feature_stack(), shape.n_text_embd);
            add_weights(&mut w, &mut rng, "mm.0.weight", ty, &[features, ff]);
            w.add_f32("mm.0.bias", &[ff], &rng.small(ff));
            if shape.mlp_norm {
                norm(&mut w, &mut rng, "mm.1", ff);
                add_weights(&mut w, &mut rng, "mm.3.weight", ty, &[ff, text]);
                w.add_f32("mm.3.bias", &[text], &rng.small(text));
                norm(&mut w, &mut rng, "mm.4", text);
            } else {
                add_weights(&mut w, &mut rng, "mm.2.weight", ty, &[ff, text]);
                w.add_f32("mm.2.bias", &[text], &rng.small(text));
            }
            if !shape.grid_pinpoints.is_empty() {
                w.add_f32("v.image_newline", &[text], &rng.small(text));
            }
        }
        Kind::Ldp | Kind::Ldpv2 => {
            let (features, text) = (embd * shape.n_feature_stack(), shape.n_text_embd);
            let ldp = shape.kind == Kind::Ldp;
            let (first, second) = if ldp { (1, 3) } else { (0, 2) };
            let mlp = |i: u32, part: &str| format!("mm.model.mlp.{i}.{part}");
            add_weights(&mut w, &mut rng, &mlp(first, "weight"), ty, &[features, ff]);
            w.add_f32(&mlp(first, "bias"), &[ff], &rng.small(ff));
            add_weights(&mut w, &mut rng, &mlp(second, "weight"), ty, &[ff, text]);
            w.add_f32(&mlp(second, "bias"), &[text], &rng.small(text));
            // Depthwise kernels in F16, the only type ggml's depthwise convolution takes.
            let dw = TensorType::F16;
            if ldp {
                let r = text / 4;
                for i in 1..=2 {
                    let n = |t: &str| format!("mm.model.mb_block.{i}.block.{t}");
                    add_weights(&mut w, &mut rng, &n("0.0.weight"), dw, &[3, 3, 1, text]);
                    norm(&mut w, &mut rng, &n("0.1"), text);
                    add_weights(&mut w, &mut rng, &n("1.fc1.weight"), ty, &[text, r]);
                    w.add_f32(&n("1.fc1.bias"), &[r], &rng.small(r));
                    add_weights(&mut w, &mut rng, &n("1.fc2.weight"), ty, &[r, text]);
                    w.add_f32(&n("1.fc2.bias"), &[text], &rng.small(text));
                    add_weights(&mut w, &mut rng, &n("2.0.weight"), ty, &[text, text]);
                    norm(&mut w, &mut rng, &n("2.1"), text);
                }
            } else {
                add_weights(&mut w, &mut rng, "mm.model.peg.0.weight", dw, &[3, 3, 1, text]);
                w.add_f32("mm.model.peg.0.bias", &[text], &rng.small(text));
            }
        }
        Kind::Internvl => {
            let merged = embd * u64::from(shape.n_merge.unwrap_or(1)).pow(2);
            let text = shape.n_text_embd;
            norm(&mut w, &mut rng, "mm.model.mlp.0", merged);
            add_weights(&mut w, &mut rng, "mm.model.mlp.1.weight", ty, &[merged, ff]);
            w.add_f32("mm.model.mlp.1.bias", &[ff], &rng.small(ff));
            add_weights(&mut w, &mut rng, "mm.model.mlp.3.weight", ty, &[ff, text]);
            w.add_f32("mm.model.mlp.3.bias", &[text], &rng.small(text));
        }
        Kind::Qwen2vl => {
            // clip.cpp merges 2 x 2 patches (`clip.vision.spatial_merge_size`, absent: 2).
            let merged = embd * 4;
            add_weights(&mut w, &mut rng, "mm.0.weight", ty, &[merged, ff]);
            w.add_f32("mm.0.bias", &[ff], &rng.small(ff));
            add_weights(&mut w, &mut rng, "mm.2.weight", ty, &[ff, shape.n_text_embd]);
            w.add_f32("mm.2.bias", &[shape.n_text_embd], &rng.small(shape.n_text_embd));
        }
        Kind::Llama4 => {
            let merged = embd * u64::from(shape.n_merge.unwrap_or(1)).pow(2);
            add_weights(&mut w, &mut rng, "mm.model.mlp.1.weight", ty, &[merged, ff]);
            add_weights(&mut w, &mut rng, "mm.model.mlp.2.weight", ty, &[ff, embd]);
            add_weights(&mut w, &mut rng, "mm.model.fc.weight", ty, &[embd, shape.n_text_embd]);
        }
        Kind::Pixtral | Kind::Gemma4v | Kind::Qwen25vl | Kind::Qwen3vl => unreachable!("written by their own writers"),
    }
    w
}

/// The layers of [`Shape::QWEN3VL`]'s projectors with deepstack mergers (of 3: the last
/// one's output taken before the post-LayerNorm).
pub const QWEN3VL_DEEPSTACK_LAYERS: [u64; 2] = [1, 2];

/// A seeded Qwen3-VL projector (`convert_hf_to_gguf.py`'s `Qwen3VLVisionModel`): two patch
/// convolutions and the patch bias, F32 position embeddings, each layer's LayerNorms with
/// biases, the fused `attn_qkv` and `attn_out` with biases, a GELU feed-forward with
/// biases; the deepstack mergers (`v.deepstack.<il>.norm`, `fc1`, `fc2`, with biases) of
/// the shape's `deepstack_layers` (those its layers reach), the post-LayerNorm and the merger `mm.0`, `mm.2`.
fn qwen3vl_writer(shape: &Shape) -> GgufWriter {
    let mut rng = Rng(shape.seed);
    let mut w = GgufWriter::new();
    let (embd, ff, p, ty) = (shape.n_embd, shape.n_ff, shape.patch_size, shape.matrix_type);
    let (merged, text) = (embd * 4, shape.n_text_embd);
    let n_patches = (shape.image_size / p).pow(2);
    common_keys(&mut w, shape, "qwen3vl_merger", Some(("clip.use_gelu", true)), 1e-6);
    set_normalization(&mut w, [0.5; 3], [0.5; 3]);
    let norm = |w: &mut GgufWriter, rng: &mut Rng, name: &str, n: u64| {
        w.add_f32(&format!("{name}.weight"), &[n], &rng.around_one(n));
        w.add_f32(&format!("{name}.bias"), &[n], &rng.small(n));
    };
    let linear = |w: &mut GgufWriter, rng: &mut Rng, name: &str, n_in: u64, n_out: u64| {
        add_weights(w, rng, &format!("{name}.weight"), ty, &[n_in, n_out]);
        w.add_f32(&format!("{name}.bias"), &[n_out], &rng.small(n_out));
    };
    add_weights(&mut w, &mut rng, "v.patch_embd.weight", ty, &[p, p, 3, embd]);
    add_weights(&mut w, &mut rng, "v.patch_embd.weight.1", ty, &[p, p, 3, embd]);
    w.add_f32("v.patch_embd.bias", &[embd], &rng.small(embd));
    w.add_f32(
        "v.position_embd.weight",
        &[embd, n_patches],
        &rng.small(embd * n_patches),
    );
    for il in 0..shape.n_layer {
        let n = |t: &str| format!("v.blk.{il}.{t}");
        norm(&mut w, &mut rng, &n("ln1"), embd);
        linear(&mut w, &mut rng, &n("attn_qkv"), embd, 3 * embd);
        linear(&mut w, &mut rng, &n("attn_out"), embd, embd);
        norm(&mut w, &mut rng, &n("ln2"), embd);
        linear(&mut w, &mut rng, &n("ffn_up"), embd, ff);
        linear(&mut w, &mut rng, &n("ffn_down"), ff, embd);
    }
    for &il in shape.deepstack_layers.iter().filter(|&&il| il < shape.n_layer) {
        let n = |t: &str| format!("v.deepstack.{il}.{t}");
        norm(&mut w, &mut rng, &n("norm"), merged);
        linear(&mut w, &mut rng, &n("fc1"), merged, ff);
        linear(&mut w, &mut rng, &n("fc2"), ff, text);
    }
    norm(&mut w, &mut rng, "v.post_ln", embd);
    linear(&mut w, &mut rng, "mm.0", merged, ff);
    linear(&mut w, &mut rng, "mm.2", ff, text);
    w
}

/// The keys common to every type, as a converter writes them, with the feed-forward's
/// activation flag (`clip.use_gelu`, `clip.use_silu`) and the norms' epsilon.
fn common_keys(w: &mut GgufWriter, shape: &Shape, projector_type: &str, activation: Option<(&str, bool)>, eps: f32) {
    let s = |v: &str| Value::String(v.to_string());
    w.set("general.architecture", s("clip"))
        .set("general.name", s("elelem synthetic mmproj"))
        .set("general.file_type", Value::U32(1))
        .set("clip.projector_type", s(projector_type))
        .set("clip.has_vision_encoder", Value::Bool(true))
        .set("clip.has_text_encoder", Value::Bool(false));
    if let Some((key, on)) = activation {
        w.set(key, Value::Bool(on));
    }
    w.set("clip.vision.embedding_length", Value::U32(shape.n_embd as u32))
        .set("clip.vision.feed_forward_length", Value::U32(shape.n_ff as u32))
        .set("clip.vision.block_count", Value::U32(shape.n_layer as u32))
        .set("clip.vision.projection_dim", Value::U32(shape.n_text_embd as u32))
        .set("clip.vision.attention.head_count", Value::U32(shape.n_head as u32))
        .set("clip.vision.attention.layer_norm_epsilon", Value::F32(eps))
        .set("clip.vision.image_size", Value::U32(shape.image_size as u32))
        .set("clip.vision.patch_size", Value::U32(shape.patch_size as u32));
}

/// The rows of Gemma 4's position tables (columns and rows of patches at most).
const GEMMA4V_POSITIONS: u64 = 64;

/// A seeded Gemma 4 projector (`convert_hf_to_gguf.py`'s `Gemma4VisionModel`): the ViT's RMS
/// norms (weights only: `ln1`, `ln2`, the per-head `attn_q_norm` and `attn_k_norm`,
/// `attn_post_norm`, `ffn_post_norm`), Q/K/V and output without biases, the GELU-gated
/// feed-forward without biases, no patch bias, position tables of
/// [`GEMMA4V_POSITIONS`] columns and rows; the standardization (`v.std_bias`,
/// `v.std_scale`) and `mm.input_projection.weight`. The pooling kernel is
/// `clip.vision.projector.scale_factor` where `n_merge` is given (else clip.cpp's 3).
fn gemma4v_writer(shape: &Shape) -> GgufWriter {
    let mut rng = Rng(shape.seed);
    let mut w = GgufWriter::new();
    let (embd, ff, p, ty) = (shape.n_embd, shape.n_ff, shape.patch_size, shape.matrix_type);
    let d_head = embd / shape.n_head;
    common_keys(&mut w, shape, "gemma4v", Some(("clip.use_gelu", true)), 1e-6);
    set_normalization(&mut w, [0.0; 3], [1.0; 3]);
    if let Some(k) = shape.n_merge {
        w.set("clip.vision.projector.scale_factor", Value::U32(k));
    }
    add_weights(&mut w, &mut rng, "v.patch_embd.weight", ty, &[p, p, 3, embd]);
    let n = GEMMA4V_POSITIONS;
    w.add_f32("v.position_embd.weight", &[embd, n, 2], &rng.small(embd * n * 2));
    for il in 0..shape.n_layer {
        let name = |t: &str| format!("v.blk.{il}.{t}");
        w.add_f32(&name("ln1.weight"), &[embd], &rng.around_one(embd));
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            add_weights(&mut w, &mut rng, &name(&format!("{t}.weight")), ty, &[embd, embd]);
        }
        w.add_f32(&name("attn_q_norm.weight"), &[d_head], &rng.around_one(d_head));
        w.add_f32(&name("attn_k_norm.weight"), &[d_head], &rng.around_one(d_head));
        w.add_f32(&name("attn_post_norm.weight"), &[embd], &rng.around_one(embd));
        w.add_f32(&name("ln2.weight"), &[embd], &rng.around_one(embd));
        add_weights(&mut w, &mut rng, &name("ffn_gate.weight"), ty, &[embd, ff]);
        add_weights(&mut w, &mut rng, &name("ffn_up.weight"), ty, &[embd, ff]);
        add_weights(&mut w, &mut rng, &name("ffn_down.weight"), ty, &[ff, embd]);
        w.add_f32(&name("ffn_post_norm.weight"), &[embd], &rng.around_one(embd));
    }
    w.add_f32("v.std_bias", &[embd], &rng.small(embd));
    w.add_f32("v.std_scale", &[embd], &rng.around_one(embd));
    add_weights(
        &mut w,
        &mut rng,
        "mm.input_projection.weight",
        ty,
        &[embd, shape.n_text_embd],
    );
    w
}

/// CLIP's per-channel mean and standard deviation (Pixtral's and Qwen2.5-VL's preprocessing).
const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

/// `clip.vision.image_mean` and `image_std`, the preprocessing's per-channel normalization.
fn set_normalization(w: &mut GgufWriter, mean: [f32; 3], std: [f32; 3]) {
    w.set("clip.vision.image_mean", Value::Array(mean.map(Value::F32).to_vec()))
        .set("clip.vision.image_std", Value::Array(std.map(Value::F32).to_vec()));
}

/// A seeded Pixtral projector (`convert_hf_to_gguf.py`'s `PixtralModel`): the ViT's RMS
/// norms (weights only: `v.pre_ln`, `ln1`, `ln2`), Q/K/V and output without biases, the
/// SiLU-gated feed-forward without biases, no position embeddings (2D RoPE) and no
/// post-norm; where `n_merge` is given, Mistral Small's `spatial_merge_size`, input norm
/// and patch merger; the MLP `mm.1`, `mm.2` with biases (hidden width `n_ff`); and the
/// `[IMG_BREAK]` embedding.
fn pixtral_writer(shape: &Shape) -> GgufWriter {
    let mut rng = Rng(shape.seed);
    let mut w = GgufWriter::new();
    let (embd, ff, p, ty, n_text) = (
        shape.n_embd,
        shape.n_ff,
        shape.patch_size,
        shape.matrix_type,
        shape.n_text_embd,
    );
    common_keys(&mut w, shape, "pixtral", Some(("clip.use_silu", true)), 1e-5);
    set_normalization(&mut w, CLIP_MEAN, CLIP_STD);
    if let Some(k) = shape.n_merge {
        w.set("clip.vision.spatial_merge_size", Value::U32(k));
    }
    add_weights(&mut w, &mut rng, "v.patch_embd.weight", ty, &[p, p, 3, embd]);
    w.add_f32("v.pre_ln.weight", &[embd], &rng.around_one(embd));
    for il in 0..shape.n_layer {
        let n = |t: &str| format!("v.blk.{il}.{t}");
        w.add_f32(&n("ln1.weight"), &[embd], &rng.around_one(embd));
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            add_weights(&mut w, &mut rng, &n(&format!("{t}.weight")), ty, &[embd, embd]);
        }
        w.add_f32(&n("ln2.weight"), &[embd], &rng.around_one(embd));
        add_weights(&mut w, &mut rng, &n("ffn_gate.weight"), ty, &[embd, ff]);
        add_weights(&mut w, &mut rng, &n("ffn_up.weight"), ty, &[embd, ff]);
        add_weights(&mut w, &mut rng, &n("ffn_down.weight"), ty, &[ff, embd]);
    }
    if let Some(k) = shape.n_merge {
        let merged = embd * u64::from(k).pow(2);
        w.add_f32("mm.input_norm.weight", &[embd], &rng.around_one(embd));
        add_weights(&mut w, &mut rng, "mm.patch_merger.weight", ty, &[merged, embd]);
    }
    add_weights(&mut w, &mut rng, "mm.1.weight", ty, &[embd, ff]);
    w.add_f32("mm.1.bias", &[ff], &rng.small(ff));
    add_weights(&mut w, &mut rng, "mm.2.weight", ty, &[ff, n_text]);
    w.add_f32("mm.2.bias", &[n_text], &rng.small(n_text));
    w.add_f32("v.token_embd.img_break", &[n_text], &rng.around_one(n_text));
    w
}

/// The synthetic Qwen2.5-VL projectors' `clip.vision.n_wa_pattern`: every second layer
/// attends over the whole image (Qwen2.5-VL's every eighth of 32).
pub const QWEN25VL_WA_PATTERN: u32 = 2;

/// A seeded Qwen2.5-VL projector (`convert_hf_to_gguf.py`'s `Qwen2VLVisionModel` for it):
/// CLIP's mean and std, `clip.use_silu`, `clip.vision.n_wa_pattern`
/// ([`QWEN25VL_WA_PATTERN`]); the two patch convolutions without bias, the ViT's RMS norms
/// (weights only: `ln1`, `ln2`, and the merger's `ln_q` as `v.post_ln`), Q/K/V and output
/// with biases, the SiLU-gated feed-forward with biases; the merger's `mm.0`, `mm.2` with
/// biases (hidden width `n_ff`).
fn qwen25vl_writer(shape: &Shape) -> GgufWriter {
    let mut rng = Rng(shape.seed);
    let mut w = GgufWriter::new();
    let (embd, ff, p, ty, n_text) = (
        shape.n_embd,
        shape.n_ff,
        shape.patch_size,
        shape.matrix_type,
        shape.n_text_embd,
    );
    common_keys(&mut w, shape, "qwen2.5vl_merger", Some(("clip.use_silu", true)), 1e-6);
    set_normalization(&mut w, CLIP_MEAN, CLIP_STD);
    w.set("clip.vision.n_wa_pattern", Value::U32(shape.n_wa_pattern));
    add_weights(&mut w, &mut rng, "v.patch_embd.weight", ty, &[p, p, 3, embd]);
    add_weights(&mut w, &mut rng, "v.patch_embd.weight.1", ty, &[p, p, 3, embd]);
    for il in 0..shape.n_layer {
        let n = |t: &str| format!("v.blk.{il}.{t}");
        w.add_f32(&n("ln1.weight"), &[embd], &rng.around_one(embd));
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            add_weights(&mut w, &mut rng, &n(&format!("{t}.weight")), ty, &[embd, embd]);
            w.add_f32(&n(&format!("{t}.bias")), &[embd], &rng.small(embd));
        }
        w.add_f32(&n("ln2.weight"), &[embd], &rng.around_one(embd));
        for t in ["ffn_gate", "ffn_up"] {
            add_weights(&mut w, &mut rng, &n(&format!("{t}.weight")), ty, &[embd, ff]);
            w.add_f32(&n(&format!("{t}.bias")), &[ff], &rng.small(ff));
        }
        add_weights(&mut w, &mut rng, &n("ffn_down.weight"), ty, &[ff, embd]);
        w.add_f32(&n("ffn_down.bias"), &[embd], &rng.small(embd));
    }
    w.add_f32("v.post_ln.weight", &[embd], &rng.around_one(embd));
    let merged = embd * 4;
    add_weights(&mut w, &mut rng, "mm.0.weight", ty, &[merged, ff]);
    w.add_f32("mm.0.bias", &[ff], &rng.small(ff));
    add_weights(&mut w, &mut rng, "mm.2.weight", ty, &[ff, n_text]);
    w.add_f32("mm.2.bias", &[n_text], &rng.small(n_text));
    w
}

/// A language model and its projector, for image and text prompts: `(name, model,
/// projector)`, written by `write_synthetic` as `vision/<name>.gguf` and
/// `vision/<name>.mmproj.gguf`, whose goldens come from mtmd (`tasks/vision_golden.rb`).
///
/// - `tiny-gemma3-vision`: a Gemma 3-shaped model of 6 layers (the last attending to all
///   of the context, the others through a window of 32), 128 wide, whose vocabulary ends
///   with the control tokens `<start_of_image>` and `<end_of_image>` that mtmd frames each
///   image with; its projector is [`Shape::GEMMA3`] projecting to 128 (16 tokens an image).
/// - `tiny-idefics3-vision`: the Llama 3-shaped canary (SmolVLM's language model is a
///   Llama), whose vocabulary ends with `"\n\n"` and the control tokens of Idefics3's
///   framing (`<fake_token_around_image>`, `<global-img>`, `<row_R_col_C>` for the grids of
///   up to 2 x 2 tiles its projector cuts); its projector is [`Shape::IDEFICS3`] projecting
///   to 128 (64 tokens a tile, and the overview's).
/// - `tiny-lfm2-vision`: the `tiny-lfm2` canary's shape (short convolutions on 4 of its 7
///   layers, attention on the others), whose vocabulary ends with the control tokens of
///   LFM2-VL's framing (`<|image_start|>`, `<|image_end|>`, `<|img_thumbnail|>`,
///   `<|img_row_R_col_C|>` for grids of up to 2 rows of 3 tiles); its projector is
///   [`Shape::LFM2`] with LFM2-VL's 16-pixel patches (a token per 32 x 32 pixels, so that
///   clip.cpp's budget of 64 to 256 tokens an image is LFM2-VL's: images of over twice
///   256 tokens are cut into tiles of 512 pixels, 256 tokens each, and a thumbnail),
///   projecting to 128.
/// - `tiny-llava-vision`: a Llama of the canary's kind (LLaVA's language models are Llama 2
///   and Vicuna), 4 layers 128 wide, whose vocabulary needs nothing of mtmd's (it frames no
///   image); its projector is [`Shape::LLAVA`] with LLaVA 1.6's grid pinpoints (64 x 128,
///   128 x 64, 128 x 128: up to four slices of 64 tokens and the overview's 64), projecting
///   to 128.
/// - `tiny-mobilevlm-vision`: the same Llama (MobileVLM's language models are
///   MobileLLaMA), whose vocabulary needs nothing of mtmd's; its projector is
///   [`Shape::LDPV2`] (MobileVLM V2: 144 tokens an image), projecting to 128.
/// - `tiny-internvl-vision`: a Qwen2 of the canary's kind (InternVL 2.5 and 3 answer with
///   Qwen2.5), 4 layers 128 wide, whose vocabulary ends with the control tokens `<img>` and
///   `</img>` that mtmd frames each image with; its projector is [`Shape::INTERNVL`] (grids
///   of up to 12 tiles of 64 pixels, 16 tokens each, then the overview's 16), projecting to
///   128.
/// - `tiny-qwen2vl-vision`: the `tiny-qwen2vl` canary's shape (Qwen2's block under M-RoPE),
///   whose vocabulary ends with the control tokens `<|vision_start|>` and `<|vision_end|>`
///   that mtmd frames each image with; its projector is [`Shape::QWEN2VL`] projecting to
///   128 (a token per 28 x 28 pixels of the smart-resized image, 8 to 4096 of them).
/// - `tiny-qwen25vl-vision`: the same language model (Qwen2.5-VL's is the `qwen2vl` arch
///   too), the same framing tokens; its projector is [`Shape::QWEN25VL`] projecting to 128
///   (the same tokens an image, attending within windows of 4 x 4 of them).
/// - `tiny-qwen3vl-vision`: the `tiny-qwen3vl` canary's shape (qwen3's block under
///   interleaved M-RoPE, 2 deepstack layers), framed as Qwen2-VL's; its projector is
///   [`Shape::QWEN3VL`] projecting to 128 and its deepstack mergers to 2 x 128 more (a token
///   per 32 x 32 pixels, 8 to 4096 of them).
/// - `tiny-qwen3vlmoe-vision`: the `tiny-qwen3vlmoe` canary's shape (8 experts, 2 per
///   token), framed the same; its projector is [`Shape::QWEN3VL`] with F32 matrices.
/// - `tiny-pixtral-vision`: a Mistral 3-shaped model (the Llama 3 canary's shape, with
///   Ministral 3's YaRN and attention temperature), whose vocabulary ends with the control
///   token `[IMG_END]` that mtmd closes each image with; its projector is
///   [`Shape::PIXTRAL`] with 16-pixel patches (a token per 32 x 32 pixels, 8 to 1024 of
///   them an image, and an `[IMG_BREAK]` embedding after each row), projecting to 128.
/// - `tiny-llama4-vision`: the `tiny-llama4` canary's shape (experts on 2 of its 5
///   layers, one without rope), whose vocabulary ends with the control tokens
///   `<|image_start|>` and `<|image_end|>` that mtmd frames each image with; its
///   projector is [`Shape::LLAMA4`] projecting to 128 (64 tokens a tile of 128, up to
///   3 x 3 tiles and the overview).
/// - `tiny-gemma4-vision`: the `tiny-gemma4` canary's shape (Gemma 4's dense layout, not an
///   E model: those take no embeddings), whose vocabulary ends with the control tokens
///   `<|image>` and `<image|>` that mtmd frames each image with; its projector is
///   [`Shape::GEMMA4V`] projecting to 128 (a token per 24 x 24 pixels, 70 to 1120 of them
///   an image, decoded non-causally as mtmd decodes them).
pub fn pairs() -> Vec<(String, GgufWriter, GgufWriter)> {
    use crate::canary;
    let idefics3 = canary::LLAMA3;
    let gemma3 = canary::Shape {
        family: canary::GEMMA3_VISION,
        n_layer: 6,
        ..idefics3
    };
    let lfm2 = canary::Shape {
        family: canary::LFM2,
        n_layer: 7,
        ..idefics3
    };
    let llava = canary::Shape {
        family: canary::LLAMA,
        ..idefics3
    };
    let internvl = canary::Shape {
        family: canary::QWEN2,
        ..idefics3
    };
    let qwen2vl = canary::Shape {
        family: canary::QWEN2VL,
        ..idefics3
    };
    let qwen3vl = canary::Shape {
        family: canary::QWEN3VL,
        ..idefics3
    };
    let qwen3vlmoe = canary::Shape {
        family: canary::QWEN3VLMOE,
        n_ff: 64,
        n_expert: 8,
        n_expert_used: 2,
        ..idefics3
    };
    let mistral3 = canary::Shape {
        family: canary::MISTRAL3,
        ..idefics3
    };
    let gemma4 = canary::Shape {
        family: canary::GEMMA4,
        n_layer: 6,
        n_head_kv: 4,
        ..idefics3
    };
    let llama4 = canary::Shape {
        family: canary::LLAMA4,
        n_layer: 5,
        n_ff: 64,
        n_expert: 8,
        n_expert_used: 1,
        ..idefics3
    };
    let lfm2_tiles: Vec<String> = (1..=2)
        .flat_map(|row| (1..=3).map(move |col| format!("<|img_row_{row}_col_{col}|>")))
        .collect();
    let lfm2_controls: Vec<&str> = ["<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"]
        .into_iter()
        .chain(lfm2_tiles.iter().map(String::as_str))
        .collect();
    vec![
        pair(
            "tiny-gemma3-vision",
            &gemma3,
            &[],
            &["<start_of_image>", "<end_of_image>"],
            Shape::GEMMA3,
        ),
        pair(
            "tiny-idefics3-vision",
            &idefics3,
            &["\n\n"],
            &idefics3_controls(2),
            Shape::IDEFICS3,
        ),
        pair(
            "tiny-lfm2-vision",
            &lfm2,
            &[],
            &lfm2_controls,
            Shape {
                patch_size: 16,
                image_size: 256,
                ..Shape::LFM2
            },
        ),
        pair(
            "tiny-llava-vision",
            &llava,
            &[],
            &[] as &[&str],
            Shape {
                grid_pinpoints: LLAVA_PINPOINTS,
                ..Shape::LLAVA
            },
        ),
        pair("tiny-mobilevlm-vision", &llava, &[], &[] as &[&str], Shape::LDPV2),
        pair(
            "tiny-internvl-vision",
            &internvl,
            &[],
            &["<img>", "</img>"],
            Shape::INTERNVL,
        ),
        pair(
            "tiny-qwen2vl-vision",
            &qwen2vl,
            &[],
            &["<|vision_start|>", "<|vision_end|>"],
            Shape::QWEN2VL,
        ),
        pair(
            "tiny-qwen25vl-vision",
            &qwen2vl,
            &[],
            &["<|vision_start|>", "<|vision_end|>"],
            Shape::QWEN25VL,
        ),
        pair(
            "tiny-qwen3vl-vision",
            &qwen3vl,
            &[],
            &["<|vision_start|>", "<|vision_end|>"],
            Shape::QWEN3VL,
        ),
        pair(
            "tiny-qwen3vlmoe-vision",
            &qwen3vlmoe,
            &[],
            &["<|vision_start|>", "<|vision_end|>"],
            Shape {
                matrix_type: TensorType::F32,
                seed: 0x9e3_0f12,
                ..Shape::QWEN3VL
            },
        ),
        pair(
            "tiny-pixtral-vision",
            &mistral3,
            &[],
            &["[IMG_END]"],
            Shape {
                patch_size: 16,
                image_size: 256,
                ..Shape::PIXTRAL
            },
        ),
        pair(
            "tiny-llama4-vision",
            &llama4,
            &[],
            &["<|image_start|>", "<|image_end|>"],
            Shape::LLAMA4,
        ),
        pair(
            "tiny-gemma4-vision",
            &gemma4,
            &[],
            &["<|image>", "<image|>"],
            Shape::GEMMA4V,
        ),
    ]
}

/// The grid pinpoints of `tiny-llava-vision`'s projector: LLaVA 1.6's (336 x 672, 672 x
/// 336, 672 x 672, ...) at [`Shape::LLAVA`]'s image size of 64.
pub const LLAVA_PINPOINTS: &[i32] = &[64, 128, 128, 64, 128, 128];

/// `rake bench`'s image rows' pair (`tasks/bench_vision.rb`), of SmolVLM-256M's sizes, not
/// a golden's: written by `write_bench_models` into its directory's `vision/` folder as
/// `<name>.gguf` and `<name>.mmproj.gguf`.
///
/// - `bench-smolvlm-256m`: a Llama of SmolLM2-135M's shape (30 layers 576 wide, 9 heads,
///   3 KV heads, a feed-forward 1536 wide, 49,152 tokens, the head tied to the embeddings),
///   its matrices and embeddings in Q8_0, whose vocabulary ends with Idefics3's framing
///   tokens for grids of up to 4 x 4 tiles; its projector is SigLIP-B/16 at 512 (12 layers
///   768 wide, 12 heads, a feed-forward 3072 wide: 1024 patches a tile) unshuffled by 4
///   into 64 tokens a tile, images resized to 2048 at most (SmolVLM's defaults), in F16
///   as converted projectors are.
/// - `bench-qwen25vl-3b`: Qwen2.5-VL-3B's projector (32 layers 1280 wide, 16 heads, a
///   SiLU-gated feed-forward 3420 wide, 14-pixel patches, every eighth layer attending over
///   the whole image and the others within windows of 112 pixels; its merger's hidden width
///   is the feed-forward's, where Qwen2.5-VL's is 5120) in F16, before a Qwen2.5-VL
///   language model of Qwen2.5-0.5B's shape (24 layers 896 wide, 14 heads, 2 KV heads, a
///   feed-forward 4864 wide, 151,936 tokens, the head tied to the embeddings, M-RoPE in
///   Qwen2-VL's sections scaled to its heads of 64) in Q8_0, whose vocabulary ends with
///   the control tokens `<|vision_start|>` and `<|vision_end|>`.
/// - `bench-qwen3vl-2b`: Qwen3-VL-2B's projector (24 layers 1024 wide, 16 heads, a GELU
///   feed-forward 4096 wide, 16-pixel patches, 48 x 48 position embeddings, the deepstack
///   mergers of layers 5, 11 and 17) in F16, before a Qwen3-VL language model of
///   Qwen3-0.6B's width and depth (28 layers 1024 wide, 8 heads of 128, 8 KV heads, a
///   feed-forward 3072 wide, 151,936 tokens, the head tied to the embeddings, interleaved
///   M-RoPE in Qwen3-VL's sections, 3 deepstack layers) in Q8_0, framed as Qwen2.5-VL's.
pub fn bench_pairs() -> Vec<(String, GgufWriter, GgufWriter)> {
    use crate::canary;
    let lm = canary::Shape {
        family: canary::Family {
            name: "elelem bench llama (SmolLM2-135M's shape)",
            tied_head: true,
            ..canary::LLAMA
        },
        n_vocab: 49_152,
        n_embd: 576,
        n_layer: 30,
        n_head: 9,
        n_head_kv: 3,
        n_ff: 1536,
        matrix_type: TensorType::Q8_0,
        embd_type: TensorType::Q8_0,
        n_expert: 0,
        n_expert_used: 0,
    };
    let siglip = Shape {
        kind: Kind::Idefics3,
        n_embd: 768,
        n_head: 12,
        n_ff: 3072,
        n_layer: 12,
        image_size: 512,
        patch_size: 16,
        n_merge: Some(4),
        longest_edge: Some(2048),
        n_text_embd: 576,
        matrix_type: TensorType::F16,
        swapped_ffn: false,
        input_norm: false,
        feature_layers: &[],
        grid_pinpoints: &[],
        mlp_norm: false,
        n_wa_pattern: QWEN25VL_WA_PATTERN,
        deepstack_layers: &QWEN3VL_DEEPSTACK_LAYERS,
        seed: 0x5_3001_256d,
    };
    let qwen2vl = canary::qwen25_05b_q8_0(canary::Family {
        name: "elelem bench qwen2vl (Qwen2.5-0.5B's shape)",
        keys: &[("rope.dimension_sections", canary::Key::U32s(&[8, 12, 12, 0]))],
        tied_head: true,
        ..canary::QWEN2VL
    });
    let qwen25vl = Shape {
        kind: Kind::Qwen25vl,
        n_embd: 1280,
        n_head: 16,
        n_ff: 3420,
        n_layer: 32,
        image_size: 560,
        patch_size: 14,
        n_merge: None,
        longest_edge: None,
        n_wa_pattern: 8,
        seed: 0x9e25_3b00,
        ..siglip
    };
    let qwen3vl = canary::Shape {
        family: canary::Family {
            name: "elelem bench qwen3vl (Qwen3-0.6B's width and depth)",
            keys: &[
                ("rope.dimension_sections", canary::Key::U32s(&[24, 20, 20, 0])),
                ("n_deepstack_layers", canary::Key::U32(3)),
            ],
            tied_head: true,
            ..canary::QWEN3VL
        },
        n_embd: 1024,
        n_layer: 28,
        n_head: 8,
        n_head_kv: 8,
        n_ff: 3072,
        ..qwen2vl
    };
    let qwen3vl_projector = Shape {
        kind: Kind::Qwen3vl,
        n_embd: 1024,
        n_head: 16,
        n_ff: 4096,
        n_layer: 24,
        image_size: 768,
        patch_size: 16,
        n_merge: None,
        longest_edge: None,
        deepstack_layers: &[5, 11, 17],
        seed: 0x9e3_2b00,
        ..siglip
    };
    vec![
        pair("bench-smolvlm-256m", &lm, &["\n\n"], &idefics3_controls(4), siglip),
        pair(
            "bench-qwen25vl-3b",
            &qwen2vl,
            &[],
            &["<|vision_start|>", "<|vision_end|>"],
            qwen25vl,
        ),
        pair(
            "bench-qwen3vl-2b",
            &qwen3vl,
            &[],
            &["<|vision_start|>", "<|vision_end|>"],
            qwen3vl_projector,
        ),
    ]
}

/// Idefics3's framing tokens: `<fake_token_around_image>`, `<global-img>` and
/// `<row_R_col_C>` for grids of up to `n` x `n` tiles.
fn idefics3_controls(n: u32) -> Vec<String> {
    let mut controls = vec!["<fake_token_around_image>".to_string(), "<global-img>".to_string()];
    for r in 1..=n {
        controls.extend((1..=n).map(|c| format!("<row_{r}_col_{c}>")));
    }
    controls
}

/// A language model whose vocabulary ends with `pieces` and `controls`, and a projector
/// of `projector`'s shape to its width.
fn pair<S: AsRef<str>>(
    name: &str,
    lm: &crate::canary::Shape,
    pieces: &[&str],
    controls: &[S],
    projector: Shape,
) -> (String, GgufWriter, GgufWriter) {
    use crate::canary;
    let mut model = canary::writer(lm);
    let controls: Vec<&str> = controls.iter().map(AsRef::as_ref).collect();
    canary::set_vocab_with(&mut model, lm.n_vocab, pieces, &controls);
    let projector = writer(&Shape {
        n_text_embd: lm.n_embd,
        ..projector
    });
    (name.to_string(), model, projector)
}
