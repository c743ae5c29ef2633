//! The vision encoder: clip.cpp's `build_inp` (the patch embedding, a convolution) and
//! `build_vit` (the ViT: LayerNorms, bidirectional attention, the feed-forward; for LLaVA's
//! CLIP, `clip_graph_llava`'s: a class token, positions looked up by row, a pre-LayerNorm,
//! the feature layers; InternViT's class token), then the
//! projector of the file's type ([`super::projector`]), built like the text graphs: in a
//! `no_alloc` context, allocated by a `ggml_gallocr` held for the encoder's life and
//! reserved once for the largest input it takes ([`Mmproj::largest_images`]: a dynamic-size
//! projector's, LFM2's, most patches). The ops are clip.cpp's, in its order, so that on the
//! same ggml the embeddings are its embeddings, bit for bit (`ext/testkit/tests/vision_encoder.rs`).
//!
//! An audio encoder (Qwen2-Audio's, `whisper-enc.cpp`) is built here too: its type's
//! convolution stem ([`super::projector::qwen2a`]) over one log-mel piece, the same ViT with
//! the positions average-pooled in pairs after its layers, and its projector; its graph is
//! the same for every piece (3000 frames), reserved once.
//!
//! Qwen2.5-VL's window attention is shared here too: the merged patches grouped by window
//! (`Windows`, clip.cpp's `window_idx` and `inv_window_idx`) before the first layer, its
//! mask in the layers that do not attend over the whole image, and the order put back after
//! the projector.
//!
//! Attention runs as mtmd runs it on the CPU by default (`flash_attn_type` "auto" resolves
//! to flash attention there: K and V cast to F16, F32 accumulation), or without flash
//! attention (`soft_max_ext` over `K·Q`) when [`EncoderParams::flash_attn`] is off, as
//! clip.cpp's `CLIP_FLASH_ATTN_TYPE_DISABLED`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ggml_sys as sys;

use super::hparams::{ClipHParams, FfnOp, ProjectorType, VitNorm, VitRope2d, WindowAttention};
use super::image::ImageF32;
use super::mmproj::{Mmproj, VitLayer, VitQkv, AUDIO_POSITIONS};
use super::projector::{qwen2a, ProjectorWeights};
use crate::audio::{Mel, FRAMES_PER_CHUNK};
use crate::ggml::{Backend, Gallocr, Graph, GraphArena, Rope, RopeMode, Tensor, MROPE_SECTIONS};
use crate::model::Norm;
use crate::{Error, Result};

/// Without flash attention, the most tokens one image may give a dynamic-size encoder:
/// `soft_max` over `K·Q` holds `n_head × n_patches²` floats, which at Qwen2-VL's limit of
/// 4096 tokens (16,384 patches) and its 16 heads would be a compute buffer of 16 GiB; at
/// 1024 tokens it is 1 GiB. Images within it are mtmd's; larger ones are refused, not
/// preprocessed otherwise (flash attention, the default, takes them all).
pub const MAX_IMAGE_TOKENS_WITHOUT_FLASH_ATTN: u32 = 1024;

/// The abort flag of an encode that cannot be stopped.
static NEVER: AtomicBool = AtomicBool::new(false);

/// How an [`Encoder`] runs.
#[derive(Debug, Clone, Copy)]
pub struct EncoderParams {
    pub n_threads: usize,
    /// Flash attention (mtmd's default on the CPU); off: `soft_max` over `K·Q`.
    pub flash_attn: bool,
}

impl Default for EncoderParams {
    fn default() -> Self {
        EncoderParams {
            n_threads: std::thread::available_parallelism().map_or(1, usize::from),
            flash_attn: true,
        }
    }
}

/// A projector ready to encode images: its backend, graph arena and compute buffer.
pub struct Encoder {
    mmproj: Arc<Mmproj>,
    flash_attn: bool,
    backend: Backend,
    gallocr: Gallocr,
    arena: GraphArena,
}

impl Encoder {
    /// Readies `mmproj`, reserving the compute buffer for the largest images it takes
    /// ([`Mmproj::largest_images`]): no image grows it afterwards.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] where the compute buffer cannot be had.
    pub fn new(mmproj: Arc<Mmproj>, params: EncoderParams) -> Result<Encoder> {
        if params.n_threads == 0 {
            return Err(Error::InvalidArgument("n_threads must be at least 1".into()));
        }
        let backend = Backend::cpu(params.n_threads)?;
        let gallocr = Gallocr::new(backend.default_buft())?;
        // Each layer makes about 40 tensors (views included); the rest is the input,
        // the patch embedding and the projector.
        let arena = GraphArena::new(64 * mmproj.hparams.n_layer as usize + 256);
        let mut encoder = Encoder {
            mmproj,
            flash_attn: params.flash_attn,
            backend,
            gallocr,
            arena,
        };
        if encoder.mmproj.hparams.projector.audio() {
            let graph = encoder.arena.graph()?;
            build_audio(&graph, &encoder.mmproj, encoder.flash_attn)?;
            encoder.gallocr.reserve(&graph)?;
            return Ok(encoder);
        }
        // Each reservation keeps the buffer at least as large as it was.
        for (width, height) in encoder.mmproj.largest_images(encoder.max_image_tokens()) {
            let graph = encoder.arena.graph()?;
            build(&graph, &encoder.mmproj, encoder.flash_attn, width, height);
            encoder.gallocr.reserve(&graph)?;
        }
        Ok(encoder)
    }

    pub fn mmproj(&self) -> &Mmproj {
        &self.mmproj
    }

    /// The most tokens one image may give this encoder: the projector's
    /// ([`ClipHParams::max_image_tokens`]), or without flash attention at most
    /// [`MAX_IMAGE_TOKENS_WITHOUT_FLASH_ATTN`].
    pub fn max_image_tokens(&self) -> u32 {
        let max = self.mmproj.hparams.max_image_tokens();
        if self.flash_attn {
            max
        } else {
            max.min(MAX_IMAGE_TOKENS_WITHOUT_FLASH_ATTN)
        }
    }

    /// Bytes of the compute buffer.
    pub fn compute_bytes(&self) -> usize {
        self.gallocr.buffer_size()
    }

    /// [`Encoder::encode`], stopped between graph nodes once `abort` is set (by another
    /// thread): then `Err(Aborted)`.
    pub fn encode_until(&mut self, img: &ImageF32, abort: &AtomicBool) -> Result<Vec<f32>> {
        // SAFETY: the flag outlives this compute, and the backend forgets it before returning.
        unsafe { self.backend.set_abort_flag(abort) };
        let embd = self.encode(img);
        unsafe { self.backend.set_abort_flag(&NEVER) };
        embd
    }

    /// The embeddings of one preprocessed image: `n_output_tokens` rows of
    /// `n_mmproj_embd` floats (clip.cpp's `clip_image_encode`).
    ///
    /// # Errors
    /// [`Error::Image`] for an image of another size than the encoder's input (a dynamic-size
    /// projector's: one [`Mmproj::check_image_size`] refuses at [`Encoder::max_image_tokens`]).
    pub fn encode(&mut self, img: &ImageF32) -> Result<Vec<f32>> {
        let hp = &self.mmproj.hparams;
        let side = hp.image_size as usize;
        if hp.projector.audio() {
            return Err(Error::Image(format!(
                "the {} encoder takes audio, not images",
                hp.projector.name()
            )));
        }
        if hp.projector.dynamic_size() {
            self.mmproj
                .check_image_size(img.width(), img.height(), self.max_image_tokens())?;
        } else if img.width() != side || img.height() != side {
            return Err(Error::Image(format!(
                "the {} encoder takes {side}x{side} images, not {}x{}",
                hp.projector.name(),
                img.width(),
                img.height()
            )));
        }
        let graph = self.arena.graph()?;
        let (inputs, out) = build(&graph, &self.mmproj, self.flash_attn, img.width(), img.height());
        self.run(&graph, &inputs, &planar(img), out)
    }

    /// [`Encoder::encode_audio`], stopped between graph nodes once `abort` is set (by
    /// another thread): then `Err(Aborted)`.
    pub fn encode_audio_until(&mut self, mel: &Mel, abort: &AtomicBool) -> Result<Vec<f32>> {
        // SAFETY: the flag outlives this compute, and the backend forgets it before returning.
        unsafe { self.backend.set_abort_flag(abort) };
        let embd = self.encode_audio(mel);
        unsafe { self.backend.set_abort_flag(&NEVER) };
        embd
    }

    /// The embeddings of one log-mel piece by an audio encoder: `n_output_tokens` (750)
    /// rows of `n_mmproj_embd` floats (clip.cpp's `clip_image_batch_encode` of a batch
    /// marked as audio, as mtmd encodes an audio chunk).
    ///
    /// # Errors
    /// [`Error::Audio`] for a vision encoder, or a piece of other bands than the encoder's
    /// or of other than [`FRAMES_PER_CHUNK`] frames.
    pub fn encode_audio(&mut self, mel: &Mel) -> Result<Vec<f32>> {
        let hp = &self.mmproj.hparams;
        if !hp.projector.audio() {
            return Err(Error::Audio(format!(
                "the {} encoder takes images, not audio",
                hp.projector.name()
            )));
        }
        let n_mel = hp.n_mel_bins as usize;
        if mel.n_mel != n_mel || mel.n_len != FRAMES_PER_CHUNK || mel.data.len() != n_mel * FRAMES_PER_CHUNK {
            return Err(Error::Audio(format!(
                "the {} encoder takes pieces of {n_mel} mel bands x {FRAMES_PER_CHUNK} frames, not {} x {}",
                hp.projector.name(),
                mel.n_mel,
                mel.n_len
            )));
        }
        let graph = self.arena.graph()?;
        let (inputs, out) = build_audio(&graph, &self.mmproj, self.flash_attn)?;
        self.run(&graph, &inputs, &mel.data, out)
    }

    /// Allocates `graph`, fills its inputs (`raw` the image's planes or the mel piece),
    /// computes it and reads its output `out`.
    fn run(&mut self, graph: &Graph, inputs: &Inputs, raw: &[f32], out: Tensor) -> Result<Vec<f32>> {
        self.gallocr.alloc(graph)?;
        inputs.raw.write(raw);
        for (input, values) in &inputs.positions {
            input.write(values);
        }
        if let Some((mask, windows)) = &inputs.window_mask {
            mask.write(&windows.mask());
        }
        let computed = self.backend.compute(graph);
        // The pool sleeps now rather than poll for a next graph: the prompt's passes that
        // follow run on the context's own pool, and this one polling beside them took
        // their cores (prompts with images evaluated 10-20 % slower than llama.cpp's).
        self.backend.rest();
        computed?;
        let n = (out.ne()[0] * out.ne()[1]) as usize;
        let mut embd = vec![0.0; n];
        out.read_f32(0, &mut embd);
        Ok(embd)
    }
}

/// clip.cpp's `inp_raw`: the interleaved `RGBRGB...` image as three planes, R, G, B.
fn planar(img: &ImageF32) -> Vec<f32> {
    let n = img.width() * img.height();
    let data = img.data();
    let mut out = vec![0.0; 3 * n];
    for (i, px) in data.chunks_exact(3).enumerate() {
        out[i] = px[0];
        out[n + i] = px[1];
        out[2 * n + i] = px[2];
    }
    out
}

/// A graph's inputs: the image or the log-mel piece (clip.cpp's `inp_raw`) and its integer
/// inputs with the values they take: CLIP's rows of the position embeddings it looks up (0, 1, ..., n_pos - 1), a 2D
/// RoPE's patch rows and columns, Qwen2-VL's rotary positions, Qwen2.5-VL's window order;
/// and Qwen2.5-VL's window mask with the windows it is made of (its `n_pos²` floats made
/// only when an image is encoded, not for the reservations).
struct Inputs {
    raw: Tensor,
    positions: Vec<(Tensor, Vec<i32>)>,
    window_mask: Option<(Tensor, Windows)>,
}

/// Qwen2.5-VL's grouping of a grid of merged patches by window, as clip.cpp's
/// `clip_image_batch_encode` makes it: windows of `grid_window` x `grid_window` merged
/// patches from the top left (partial at the right and bottom edges), row by row, each
/// window's merged patches together in row-major order.
struct Windows {
    /// clip.cpp's `window_idx`: the place in the grouped order of each merged patch
    /// (row-major).
    place_of: Vec<i32>,
    /// clip.cpp's `inv_window_idx`: the merged patch at each place.
    patch_at: Vec<i32>,
    /// Each window's merged patches, in order.
    sizes: Vec<usize>,
}

impl Windows {
    fn new(width: usize, height: usize, grid_window: usize) -> Windows {
        let mut place_of = vec![0; width * height];
        let mut patch_at = vec![0; width * height];
        let mut sizes = Vec::new();
        let mut place = 0;
        for y in (0..height).step_by(grid_window) {
            for x in (0..width).step_by(grid_window) {
                let (win_h, win_w) = (grid_window.min(height - y), grid_window.min(width - x));
                for dy in 0..win_h {
                    for dx in 0..win_w {
                        let patch = (y + dy) * width + x + dx;
                        place_of[patch] = place as i32;
                        patch_at[place] = patch as i32;
                        place += 1;
                    }
                }
                sizes.push(win_h * win_w);
            }
        }
        Windows {
            place_of,
            patch_at,
            sizes,
        }
    }

    /// clip.cpp's `window_mask` over the grouped patches (four a merged patch): 0 where a
    /// query's patch and a key's are in the same window, the lowest float elsewhere.
    fn mask(&self) -> Vec<f32> {
        let n_pos = 4 * self.patch_at.len();
        let mut mask = vec![f32::MIN; n_pos * n_pos];
        let mut start = 0;
        for &size in &self.sizes {
            let window = 4 * start..4 * (start + size);
            for query in window.clone() {
                mask[query * n_pos + window.start..query * n_pos + window.end].fill(0.0);
            }
            start += size;
        }
        mask
    }
}

/// How a ViT turns Q and K by each patch's place: clip.cpp's `build_rope_2d` (Pixtral's,
/// Llama 4's, Gemma 4's), or qwen2vl.cpp's (and qwen3vl.cpp's) `ggml_rope_multi` in vision mode.
enum VitRope {
    TwoD(Rope2d),
    Multi { positions: Tensor, rope: Rope },
}

impl VitRope {
    fn apply(&self, g: &Graph, cur: Tensor) -> Tensor {
        match self {
            VitRope::TwoD(rope) => rope.apply(g, cur),
            VitRope::Multi { positions, rope } => g.rope(cur, *positions, rope, None),
        }
    }
}

/// The whole graph of one `nx` x `ny` image: its inputs and its output.
fn build(g: &Graph, m: &Mmproj, flash_attn: bool, nx: usize, ny: usize) -> (Inputs, Tensor) {
    let hp = &m.hparams;
    let (nx, ny) = (nx as i64, ny as i64);
    let p = i64::from(hp.patch_size);
    let (width, height) = (nx / p, ny / p);
    let n_patches = width * height;
    let n_embd = i64::from(hp.n_embd);
    let n_pos = n_patches + i64::from(m.vit.class_embd.is_some());

    // Qwen2.5-VL's windows over the merged patches (2 x 2 patches each).
    let windows = hp.window_attention().map(|wa| {
        (
            wa,
            Windows::new((width / 2) as usize, (height / 2) as usize, wa.grid_window as usize),
        )
    });

    let mut positions = Vec::new();
    let rope = if let Some(params) = hp.projector.rope_2d() {
        let (row_of, col_of) = rope_2d_positions(width as usize, height as usize, m.vit.class_embd.is_some());
        let rows = g.input("pos_h", sys::GGML_TYPE_I32, &[n_pos]);
        let cols = g.input("pos_w", sys::GGML_TYPE_I32, &[n_pos]);
        positions.extend([(rows, row_of), (cols, col_of)]);
        Some(VitRope::TwoD(Rope2d { rows, cols, params }))
    } else if hp.projector.qwen_vit() {
        let rotary = g.input("positions", sys::GGML_TYPE_I32, &[4 * n_patches]);
        let place_of = windows.as_ref().map(|(_, w)| &w.place_of[..]);
        positions.push((rotary, rotary_positions(width as usize, height as usize, place_of)));
        Some(VitRope::Multi {
            positions: rotary,
            rope: vision_rope(hp),
        })
    } else {
        None
    };

    // build_inp_raw, then build_inp: a convolution (Qwen2-VL's and Qwen3-VL's two, added, the
    // patches reordered in 2 x 2 blocks), or Llama 4's unfolded patches through a linear map (its
    // kernel's shape for the im2col).
    let raw = g.input("inp_raw", sys::GGML_TYPE_F32, &[nx, ny, 3, 1]);
    let p32 = hp.patch_size as i32;
    // Gemma 4's pixels to [-1, 1] (`2 · (x - 0.5)`, as `x · 2 - 1`).
    let pixels = if hp.projector.gemma4_vit() {
        g.scale_bias(raw, 2.0, -1.0)
    } else {
        raw
    };
    let patch_embd = m.vit.patch_embd.expect("a vision encoder has a patch embedding");
    let conv = |kernel| g.conv_2d(kernel, pixels, p32, p32, 0, 0, 1, 1);
    let mut inp = if hp.projector.llama4_vit() {
        let kernel = g.reshape_4d(patch_embd, [p, p, 3, n_embd]);
        let cols = g.im2col_2d(kernel, pixels, p32, p32, pixels.ggml_type());
        let inp = g.mul_mat(patch_embd, cols);
        g.reshape_2d(inp, n_embd, n_patches)
    } else if let Some(patch_embd_1) = m.vit.patch_embd_1 {
        let inp = g.add(conv(patch_embd), conv(patch_embd_1));
        in_2x2_blocks(g, g.permute(inp, [1, 2, 0, 3]), width, height)
    } else {
        let inp = g.reshape_3d(conv(patch_embd), n_patches, n_embd, 1);
        g.cont(g.transpose(inp))
    };
    if let Some(bias) = m.vit.patch_bias {
        inp = g.add(inp, bias);
    }
    if let Some(class) = m.vit.class_embd {
        inp = g.concat(inp, class, 1);
    }
    if let (Some(tables), Some(VitRope::TwoD(rope))) = (m.vit.position_tables, &rope) {
        // Gemma 4's: the column's row of the first table, the row's of the second.
        let n = tables.ne()[1];
        let nb1 = tables.nb()[1];
        let by_column = g.view_2d(tables, n_embd, n, nb1, 0);
        let by_row = g.view_2d(tables, n_embd, n, nb1, n as usize * nb1);
        inp = g.add(inp, g.get_rows(by_column, rope.cols));
        inp = g.add(inp, g.get_rows(by_row, rope.rows));
    }

    let pos_embd = match m.vit.position_embd {
        // Qwen3-VL's: bilinear with aligned corners, then in the patches' 2 x 2 blocks.
        Some(pos) if hp.projector == ProjectorType::Qwen3vl => {
            let mode = sys::GGML_SCALE_MODE_BILINEAR | sys::GGML_SCALE_FLAG_ALIGN_CORNERS;
            let pos = resize_position_embeddings(g, m, pos, width, height, mode);
            Some(in_2x2_blocks(g, pos, width, height))
        }
        Some(pos) if hp.projector.dynamic_size() => {
            let mode = sys::GGML_SCALE_MODE_BILINEAR | sys::GGML_SCALE_FLAG_ANTIALIAS;
            Some(resize_position_embeddings(g, m, pos, width, height, mode))
        }
        Some(pos) if hp.projector.llava_vit() => {
            let rows = g.input("positions", sys::GGML_TYPE_I32, &[n_pos]);
            positions.push((rows, (0..n_pos as i32).collect()));
            Some(g.get_rows(pos, rows))
        }
        pos => pos,
    };
    // Qwen2.5-VL's merged patches grouped by window (`inv_window_idx`), and the mask that
    // keeps each patch's attention within its window (F16 for flash attention).
    let mut window_mask = None;
    let mut window = None;
    if let Some((wa, windows)) = windows {
        let n_merged = n_patches / 4;
        let patch_at = g.input("inv_window_idx", sys::GGML_TYPE_I32, &[n_merged]);
        let mask = g.input("window_mask", sys::GGML_TYPE_F32, &[n_patches, n_patches]);
        let attn_mask = if flash_attn {
            g.cast(mask, sys::GGML_TYPE_F16)
        } else {
            mask
        };
        inp = g.reshape_2d(inp, n_embd * 4, n_merged);
        inp = g.get_rows(inp, patch_at);
        inp = g.reshape_3d(inp, n_embd, n_patches, 1);
        positions.push((patch_at, windows.patch_at.clone()));
        window = Some((attn_mask, wa));
        window_mask = Some((mask, windows));
    }

    let taken = m.projector.layer_outputs_taken();
    let (mut cur, layer_outputs) = build_vit(g, m, flash_attn, inp, pos_embd, rope.as_ref(), window, n_pos, &taken);
    if hp.projector.llama4_vit() {
        // Llama 4's class token (last) left out; LLaVA's and InternVL's projectors take
        // theirs as clip.cpp's do.
        cur = g.view_2d(cur, n_embd, n_patches, cur.nb()[1], 0);
    }
    let mut out = m.projector.build(g, hp, cur, (width, height), &layer_outputs);
    // Qwen2.5-VL's merged patches back in row-major order (`window_idx`), after the merger
    // as clip.cpp orders them, as rows of `projection_dim` (the loader checked it is the
    // merger's width).
    if let Some((_, windows)) = &window_mask {
        let n_merged = n_patches / 4;
        let place_of = g.input("window_idx", sys::GGML_TYPE_I32, &[n_merged]);
        out = g.reshape_2d(out, i64::from(hp.projection_dim), n_merged);
        out = g.get_rows(out, place_of);
        positions.push((place_of, windows.place_of.clone()));
    }
    g.mark_output(out);
    g.expand(out);
    (
        Inputs {
            raw,
            positions,
            window_mask,
        },
        out,
    )
}

/// The whole graph of an audio encoder's log-mel piece (whisper-enc.cpp's): its input
/// (`[FRAMES_PER_CHUNK, n_mel]`) and its output.
///
/// # Errors
/// [`Error::Unsupported`] for a projector whose stem is not built here (only Qwen2-Audio's
/// loads as audio).
fn build_audio(g: &Graph, m: &Mmproj, flash_attn: bool) -> Result<(Inputs, Tensor)> {
    let hp = &m.hparams;
    let ProjectorWeights::Qwen2a(w) = &m.projector else {
        return Err(Error::Unsupported(format!(
            "the {} projector is not an audio encoder",
            hp.projector.name()
        )));
    };
    let n_pos = AUDIO_POSITIONS as i64;
    let raw = g.input(
        "inp_raw",
        sys::GGML_TYPE_F32,
        &[FRAMES_PER_CHUNK as i64, i64::from(hp.n_mel_bins), 1, 1],
    );
    let inp = qwen2a::build_stem(g, w, raw);
    // The loader checked there are at least a piece's positions.
    let pos_embd = m
        .vit
        .position_embd
        .map(|pos| g.view_2d(pos, pos.ne()[0], n_pos, pos.nb()[1], 0));
    let (cur, _) = build_vit(g, m, flash_attn, inp, pos_embd, None, None, n_pos, &[]);
    let out = m.projector.build(g, hp, cur, (n_pos / 2, 1), &[]);
    g.mark_output(out);
    g.expand(out);
    let inputs = Inputs {
        raw,
        positions: Vec::new(),
        window_mask: None,
    };
    Ok((inputs, out))
}

/// clip.cpp's `pos_h` and `pos_w` for a 2D RoPE over a `width` x `height` grid of patches,
/// row-major; with a class token (Llama 4's, after the patches) the patches' from 1, then
/// the token's 0.
fn rope_2d_positions(width: usize, height: usize, class_token: bool) -> (Vec<i32>, Vec<i32>) {
    let from = i32::from(class_token);
    let coordinates = |of: fn(usize, usize) -> usize| -> Vec<i32> {
        let patches = (0..width * height).map(|i| of(i, width) as i32 + from);
        patches.chain(class_token.then_some(0)).collect()
    };
    (coordinates(|i, width| i / width), coordinates(|i, width| i % width))
}

/// clip.cpp's `positions` for Qwen2-VL's rotary embedding of a `width` x `height` grid of
/// patches, in the encoder's 2 x 2 block order (under Qwen2.5-VL's window attention, each
/// block at its place in the window order, `place_of`): for each patch its row, column, row
/// and column, section by section.
fn rotary_positions(width: usize, height: usize, place_of: Option<&[i32]>) -> Vec<i32> {
    let n = width * height;
    let mut positions = vec![0; 4 * n];
    let mut block = 0;
    for y in (0..height).step_by(2) {
        for x in (0..width).step_by(2) {
            let place = place_of.map_or(block, |place_of| place_of[block] as usize);
            for (k, (dy, dx)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
                let i = 4 * place + k;
                let (row, col) = ((y + dy) as i32, (x + dx) as i32);
                positions[i] = row;
                positions[n + i] = col;
                positions[2 * n + i] = row;
                positions[3 * n + i] = col;
            }
            block += 1;
        }
    }
    positions
}

/// Qwen2-VL's and Qwen3-VL's reorder of `[n_embd, width, height]` values (the patches, or
/// their position embeddings) into 2 x 2 blocks: `[n_embd, width · height]`, each block's
/// four patches consecutive, the blocks row by row.
fn in_2x2_blocks(g: &Graph, t: Tensor, width: i64, height: i64) -> Tensor {
    let n_embd = t.ne()[0];
    let t = g.cont_4d(t, [n_embd * 2, width / 2, height, 1]);
    let t = g.reshape_4d(t, [n_embd * 2, width / 2, 2, height / 2]);
    let t = g.permute(t, [0, 2, 1, 3]);
    g.cont_3d(t, n_embd, width * height, 1)
}

/// clip.cpp's `resize_position_embeddings` with the type's `mode` (LFM2's default: bilinear
/// with antialiasing; Qwen3-VL's: bilinear with aligned corners): the learned `n × n` grid
/// of position embeddings `pos` resized to the image's `width × height` patches, or as it
/// is where the grid is that already.
fn resize_position_embeddings(g: &Graph, m: &Mmproj, pos: Tensor, width: i64, height: i64, mode: u32) -> Tensor {
    let n_embd = pos.ne()[0];
    let n_per_side = i64::from(m.hparams.n_patches_side());
    if width == n_per_side && height == n_per_side {
        return pos;
    }
    let pos = g.reshape_3d(pos, n_embd, n_per_side, n_per_side);
    let pos = g.permute(pos, [2, 0, 1, 3]);
    let pos = g.interpolate(pos, [width, height, n_embd, 1], mode);
    let pos = g.permute(pos, [1, 2, 0, 3]);
    g.cont_2d(pos, n_embd, width * height)
}

/// A 2D RoPE's inputs: each patch's row and column, and the type's parameters.
struct Rope2d {
    rows: Tensor,
    cols: Tensor,
    params: VitRope2d,
}

impl Rope2d {
    /// clip.cpp's `build_rope_2d`: the first half of each head of `cur`
    /// (`[d_head, n_head, n_pos, 1]`) turned by one coordinate, the second half by the
    /// other (with `interleave_freq`, at the odd frequencies: the even ones scaled by
    /// `theta^(-2/d_head)`), each half as a rope of half the width, in consecutive pairs.
    fn apply(&self, g: &Graph, cur: Tensor) -> Tensor {
        let VitRope2d {
            theta,
            interleave_freq,
            columns_first,
            neox,
        } = self.params;
        let (first, second) = if columns_first {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        };
        let n_dim = cur.ne()[0];
        // As clip.cpp computes it: `std::pow` of two floats.
        let freq_scale_odd = if interleave_freq {
            theta.powf(-2.0 / n_dim as f32)
        } else {
            1.0
        };
        let half = Rope {
            mode: if neox { RopeMode::Neox } else { RopeMode::Norm },
            n_dims: (n_dim / 2) as u32,
            n_ctx_orig: 0,
            freq_base: theta,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 0.0,
            beta_slow: 0.0,
            sections: [0; MROPE_SECTIONS],
        };
        let cur = g.rope(cur, first, &half, None);
        let odd = Rope {
            freq_scale: freq_scale_odd,
            ..half
        };
        let cur = g.rope(cur, second, &odd, None);
        g.rope_set_offset(cur, (n_dim / 2) as i32)
    }
}

/// clip.cpp's `build_norm`: LayerNorm or RMS norm as the projector type's ViT has it,
/// then the weight and bias where the file has them.
fn norm(g: &Graph, kind: VitNorm, cur: Tensor, norm: Option<&Norm>, eps: f32) -> Tensor {
    let mut cur = match kind {
        VitNorm::Layer => g.layer_norm(cur, eps),
        VitNorm::Rms => g.rms_norm(cur, eps),
    };
    if let Some(n) = norm {
        cur = g.mul(cur, n.weight);
        if let Some(b) = n.bias {
            cur = g.add(cur, b);
        }
    }
    cur
}

fn add_bias(g: &Graph, cur: Tensor, bias: Option<Tensor>) -> Tensor {
    match bias {
        Some(b) => g.add(cur, b),
        None => cur,
    }
}

/// clip.cpp's `build_vit` (one image): learned position embeddings, a 2D RoPE or Qwen2-VL's
/// rotary positions; the pre-norm where the file has one; InternViT's layer scales and
/// Gemma 4's post-norms where the file has them; and LLaVA's variant of it
/// (`clip_graph_llava`: only the layers up to its feature layer, the hidden states of its
/// feature layers side by side, [`ClipHParams::n_layer_run`]); Qwen2.5-VL's `window` mask
/// in the layers that do not attend over the whole image; an audio encoder's positions
/// average-pooled in pairs before the post-norm. Besides its output, the outputs of the
/// layers `taken` (Qwen3-VL's deepstack layers), in their order.
#[allow(clippy::too_many_arguments)]
fn build_vit(
    g: &Graph,
    m: &Mmproj,
    flash_attn: bool,
    inp: Tensor,
    pos_embd: Option<Tensor>,
    rope: Option<&VitRope>,
    window: Option<(Tensor, WindowAttention)>,
    n_pos: i64,
    taken: &[usize],
) -> (Tensor, Vec<Tensor>) {
    let hp = &m.hparams;
    let kind = hp.projector.vit_norm();
    let n_embd = i64::from(hp.n_embd);
    let batch = inp.ne()[2];
    let inp = match pos_embd {
        Some(pos) => g.add(inp, pos),
        None => inp,
    };
    let mut inp_l = g.reshape_2d(inp, n_embd, n_pos * batch);
    if let Some(pre) = &m.vit.pre_ln {
        inp_l = norm(g, kind, inp_l, Some(pre), hp.eps);
    }
    let n_layer_run = hp.n_layer_run() as usize;
    let is_feature_layer = |il: usize| hp.feature_layers.contains(&(il as i32));
    let mut features = Vec::new();
    let mut layer_outputs = Vec::new();
    for (il, layer) in m.vit.layers[..n_layer_run].iter().enumerate() {
        // Layer 0's "hidden state" is the encoder's input.
        if is_feature_layer(il) {
            features.push(inp_l);
        }
        let cur = norm(g, kind, inp_l, layer.ln_1.as_ref(), hp.eps);
        let mask = window.filter(|(_, wa)| !wa.full_attention(il)).map(|(mask, _)| mask);
        let mut cur = attention(g, hp, layer, flash_attn, rope, mask, cur, n_pos, batch);
        if let Some(weight) = layer.attn_post_norm {
            cur = norm(g, kind, cur, Some(&Norm { weight, bias: None }), hp.eps);
        }
        if let Some(ls_1) = layer.ls_1 {
            cur = g.mul(cur, ls_1);
        }
        let cur = g.add(cur, inp_l);
        inp_l = cur;

        let cur = norm(g, kind, cur, layer.ln_2.as_ref(), hp.eps);
        let mut cur = ffn(g, hp, layer, cur);
        if let Some(weight) = layer.ffn_post_norm {
            cur = norm(g, kind, cur, Some(&Norm { weight, bias: None }), hp.eps);
        }
        if let Some(ls_2) = layer.ls_2 {
            cur = g.mul(cur, ls_2);
        }
        inp_l = g.add(inp_l, cur);
        if taken.contains(&il) {
            layer_outputs.push(inp_l);
        }
    }
    if hp.projector.audio() {
        // clip.cpp's `audio_has_avgpool` (Qwen2-Audio's): the positions' mean in pairs.
        let cur = g.cont(g.transpose(inp_l));
        let cur = g.pool_1d_avg(cur, 2, 2);
        inp_l = g.cont(g.transpose(cur));
    }
    if let Some(post) = &m.vit.post_ln {
        inp_l = norm(g, kind, inp_l, Some(post), hp.eps);
    }
    if is_feature_layer(n_layer_run) {
        features.push(inp_l);
    }
    if let Some((&first, rest)) = features.split_first() {
        inp_l = rest.iter().fold(first, |stacked, &t| g.concat(stacked, t, 0));
    }
    let out = g.reshape_3d(inp_l, inp_l.ne()[0], inp_l.ne()[1] / batch, batch);
    (out, layer_outputs)
}

/// qwen2vl.cpp's rotary embedding: `ggml_rope_multi` in vision mode over half of each
/// head, a quarter of the head's width per section, with its fixed frequencies.
fn vision_rope(hp: &ClipHParams) -> Rope {
    let quarter = (hp.d_head / 4) as i32;
    Rope {
        mode: RopeMode::Vision,
        n_dims: hp.d_head / 2,
        n_ctx_orig: 32768,
        freq_base: 10000.0,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        sections: [quarter; MROPE_SECTIONS],
    }
}

/// The attention of `build_vit` (separate Q, K, V, or views of Qwen3-VL's fused product; Q
/// and K rotated where `rope` is given) and clip.cpp's `build_attn` (through `mask` where
/// given: F16 for flash attention).
#[allow(clippy::too_many_arguments)]
fn attention(
    g: &Graph,
    hp: &ClipHParams,
    l: &VitLayer,
    flash_attn: bool,
    rope: Option<&VitRope>,
    mask: Option<Tensor>,
    cur: Tensor,
    n_pos: i64,
    b: i64,
) -> Tensor {
    let (d_head, n_head, n_head_kv) = (i64::from(hp.d_head), i64::from(hp.n_head), i64::from(hp.n_head_kv));
    // Gemma 4's attention is unscaled (its Q and K are normed).
    let kq_scale = if hp.projector.gemma4_vit() {
        1.0
    } else {
        1.0f32 / (hp.d_head as f32).sqrt()
    };
    let (mut q, mut k, mut v) = match l.qkv {
        VitQkv::Separate {
            q_w,
            q_b,
            k_w,
            k_b,
            v_w,
            v_b,
        } => {
            let q = add_bias(g, g.mul_mat(q_w, cur), q_b);
            let k = add_bias(g, g.mul_mat(k_w, cur), k_b);
            let v = add_bias(g, g.mul_mat(v_w, cur), v_b);
            (
                g.reshape_4d(q, [d_head, n_head, n_pos, b]),
                g.reshape_4d(k, [d_head, n_head_kv, n_pos, b]),
                g.reshape_4d(v, [d_head, n_head_kv, n_pos, b]),
            )
        }
        // qwen3vl.cpp's (one image): Q, K and V the first, second and third `n_embd` F32
        // values of each row of the product, its heads `d_head` apart.
        VitQkv::Fused { w, b } => {
            let cur = g.add(g.mul_mat(w, cur), b);
            let f32_size = std::mem::size_of::<f32>();
            let (head, part) = (d_head as usize * f32_size, hp.n_embd as usize * f32_size);
            let view = |i: usize| g.view_3d(cur, [d_head, n_head, n_pos], head, cur.nb()[1], i * part);
            (view(0), view(1), view(2))
        }
    };
    // Gemma 4's per-head norms.
    if let Some(q_norm) = l.q_norm {
        q = g.mul(g.rms_norm(q, hp.eps), q_norm);
    }
    if let Some(k_norm) = l.k_norm {
        k = g.mul(g.rms_norm(k, hp.eps), k_norm);
    }
    if let Some(rope) = rope {
        q = rope.apply(g, q);
        k = rope.apply(g, k);
    }
    if hp.projector.gemma4_vit() {
        v = g.rms_norm(v, hp.eps);
    }

    // build_attn: Q, K and V enter the graph together, in that order.
    g.order(q);
    g.order(k);
    g.order(v);
    let q = g.permute(q, [0, 2, 1, 3]);
    let k = g.permute(k, [0, 2, 1, 3]);
    let cur = if flash_attn {
        let v = g.permute(v, [0, 2, 1, 3]);
        let k = g.cast(k, sys::GGML_TYPE_F16);
        let v = g.cast(v, sys::GGML_TYPE_F16);
        let cur = match mask {
            Some(mask) => g.flash_attn(q, k, v, mask, kq_scale, 0.0, None),
            None => g.flash_attn_unmasked(q, k, v, kq_scale),
        };
        let ne = cur.ne();
        g.reshape_2d(cur, ne[0] * ne[1], ne[2] * ne[3])
    } else {
        let v = g.cont(g.permute(v, [1, 2, 0, 3]));
        let kq = g.mul_mat(k, q);
        let kq = match mask {
            Some(mask) => g.soft_max_ext(kq, mask, kq_scale, None),
            None => g.soft_max_scaled(kq, kq_scale),
        };
        let kqv = g.mul_mat(v, kq);
        let cur = g.permute(kqv, [0, 2, 1, 3]);
        let ne = cur.ne();
        g.cont_2d(cur, ne[0] * ne[1], ne[2] * ne[3])
    };
    add_bias(g, g.mul_mat(l.o_w, cur), l.o_b)
}

/// clip.cpp's `build_ffn`: the activation alone, or gating the up projection where the
/// layer has a gate (SwiGLU, GeGLU, GeGLU-quick; the gate's bias where it has one).
fn ffn(g: &Graph, hp: &ClipHParams, l: &VitLayer, cur: Tensor) -> Tensor {
    let up = add_bias(g, g.mul_mat(l.ff_up_w, cur), l.ff_up_b);
    let cur = match l.ff_gate_w {
        Some(gate) => {
            let gate = add_bias(g, g.mul_mat(gate, cur), l.ff_gate_b);
            match hp.ffn_op {
                FfnOp::Gelu => g.geglu_split(gate, up),
                FfnOp::Silu => g.swiglu_split(gate, up),
                FfnOp::GeluQuick => g.geglu_quick_split(gate, up),
                FfnOp::GeluErf => g.geglu_erf_split(gate, up),
            }
        }
        None => match hp.ffn_op {
            FfnOp::Gelu => g.gelu(up),
            FfnOp::Silu => g.silu(up),
            FfnOp::GeluQuick => g.gelu_quick(up),
            FfnOp::GeluErf => g.gelu_erf(up),
        },
    };
    add_bias(g, g.mul_mat(l.ff_down_w, cur), l.ff_down_b)
}
