//! The vision encoder: clip.cpp's `build_inp` (the patch embedding, a convolution) and
//! `build_vit` (the ViT: LayerNorms, bidirectional attention, the feed-forward), then the
//! projector of the file's type ([`super::projector`]), built like the text graphs: in a
//! `no_alloc` context, allocated by a `ggml_gallocr` held for the encoder's life and
//! reserved once for the largest input it takes ([`Mmproj::largest_images`]: a dynamic-size
//! projector's, LFM2's, most patches). The ops are clip.cpp's, in its order, so that on the
//! same ggml the embeddings are its embeddings, bit for bit (`ext/testkit/tests/vision_encoder.rs`).
//!
//! Attention runs as mtmd runs it on the CPU by default (`flash_attn_type` "auto" resolves
//! to flash attention there: K and V cast to F16, F32 accumulation), or without flash
//! attention (`soft_max_ext` over `K·Q`) when [`EncoderParams::flash_attn`] is off, as
//! clip.cpp's `CLIP_FLASH_ATTN_TYPE_DISABLED`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ggml_sys as sys;

use super::hparams::{ClipHParams, FfnOp, VitNorm, VitRope2d};
use super::image::ImageF32;
use super::mmproj::{Mmproj, VitLayer};
use crate::ggml::{Backend, Gallocr, Graph, GraphArena, Rope, RopeMode, Tensor, MROPE_SECTIONS};
use crate::model::Norm;
use crate::{Error, Result};

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
        // Each reservation keeps the buffer at least as large as it was.
        for (width, height) in encoder.mmproj.largest_images() {
            let graph = encoder.arena.graph()?;
            build(&graph, &encoder.mmproj, encoder.flash_attn, width, height);
            encoder.gallocr.reserve(&graph)?;
        }
        Ok(encoder)
    }

    pub fn mmproj(&self) -> &Mmproj {
        &self.mmproj
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
    /// projector's: one [`Mmproj::check_image_size`] refuses).
    pub fn encode(&mut self, img: &ImageF32) -> Result<Vec<f32>> {
        let hp = &self.mmproj.hparams;
        let side = hp.image_size as usize;
        if hp.projector.dynamic_size() {
            self.mmproj.check_image_size(img.width(), img.height())?;
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
        self.gallocr.alloc(&graph)?;
        inputs.write(img, hp.patch_size as usize);
        self.backend.compute(&graph)?;
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

/// The inputs of an encoder's graph: the image's planes and, under 2D RoPE, each patch's
/// row and column.
struct Inputs {
    raw: Tensor,
    rows_cols: Option<(Tensor, Tensor)>,
    /// Llama 4's class token: the patches' positions from 1, then the token's 0.
    class_token: bool,
}

impl Inputs {
    /// Writes `img` and the patches' positions (clip.cpp's `pos_h`, `pos_w`: row-major over
    /// a grid `img.width() / patch` wide).
    fn write(&self, img: &ImageF32, patch: usize) {
        self.raw.write(&planar(img));
        if let Some((rows, cols)) = self.rows_cols {
            let per_row = img.width() / patch;
            let n = per_row * (img.height() / patch);
            let from = i32::from(self.class_token);
            let positions = |of: fn(usize, usize) -> usize| -> Vec<i32> {
                let patches = (0..n).map(|i| of(i, per_row) as i32 + from);
                patches.chain(self.class_token.then_some(0)).collect()
            };
            rows.write(&positions(|i, per_row| i / per_row));
            cols.write(&positions(|i, per_row| i % per_row));
        }
    }
}

/// The whole graph of one `nx` x `ny` image: its inputs and its output.
fn build(g: &Graph, m: &Mmproj, flash_attn: bool, nx: usize, ny: usize) -> (Inputs, Tensor) {
    let hp = &m.hparams;
    let (nx, ny) = (nx as i64, ny as i64);
    let p = i64::from(hp.patch_size);
    let n_patches = (nx / p) * (ny / p);
    let n_embd = i64::from(hp.n_embd);
    let n_pos = n_patches + i64::from(m.vit.class_embd.is_some());

    let rope = hp.projector.rope_2d().map(|params| {
        let rows = g.input("pos_h", sys::GGML_TYPE_I32, &[n_pos]);
        let cols = g.input("pos_w", sys::GGML_TYPE_I32, &[n_pos]);
        Rope2d { rows, cols, params }
    });

    // build_inp_raw, then build_inp (a convolution) or Llama 4's unfolded patches through
    // a linear map (its kernel's shape for the im2col).
    let inp_raw = g.input("inp_raw", sys::GGML_TYPE_F32, &[nx, ny, 3, 1]);
    let p32 = hp.patch_size as i32;
    // Gemma 4's pixels to [-1, 1] (`2 · (x - 0.5)`, as `x · 2 - 1`).
    let pixels = if hp.projector.gemma4_vit() {
        g.scale_bias(inp_raw, 2.0, -1.0)
    } else {
        inp_raw
    };
    let mut inp = if hp.projector.llama4_vit() {
        let kernel = g.reshape_4d(m.vit.patch_embd, [p, p, 3, n_embd]);
        let cols = g.im2col_2d(kernel, pixels, p32, p32, pixels.ggml_type());
        let inp = g.mul_mat(m.vit.patch_embd, cols);
        g.reshape_2d(inp, n_embd, n_patches)
    } else {
        let inp = g.conv_2d(m.vit.patch_embd, pixels, p32, p32, 0, 0, 1, 1);
        let inp = g.reshape_3d(inp, n_patches, n_embd, 1);
        g.cont(g.transpose(inp))
    };
    if let Some(bias) = m.vit.patch_bias {
        inp = g.add(inp, bias);
    }
    if let Some(class) = m.vit.class_embd {
        inp = g.concat(inp, class, 1);
    }
    if let (Some(tables), Some(rope)) = (m.vit.position_tables, &rope) {
        // Gemma 4's: the column's row of the first table, the row's of the second.
        let n = tables.ne()[1];
        let nb1 = tables.nb()[1];
        let by_column = g.view_2d(tables, n_embd, n, nb1, 0);
        let by_row = g.view_2d(tables, n_embd, n, nb1, n as usize * nb1);
        inp = g.add(inp, g.get_rows(by_column, rope.cols));
        inp = g.add(inp, g.get_rows(by_row, rope.rows));
    }

    let (width, height) = (nx / p, ny / p);
    let pos_embd = m.vit.position_embd.map(|pos| {
        if hp.projector.dynamic_size() {
            resize_position_embeddings(g, m, pos, width, height)
        } else {
            pos
        }
    });
    let mut cur = build_vit(g, m, flash_attn, inp, pos_embd, rope.as_ref(), n_pos);
    if n_pos != n_patches {
        // The class token (last) left out.
        cur = g.view_2d(cur, n_embd, n_patches, cur.nb()[1], 0);
    }
    let out = m.projector.build(g, hp, cur, (width, height));
    g.mark_output(out);
    g.expand(out);
    let inputs = Inputs {
        raw: inp_raw,
        rows_cols: rope.map(|r| (r.rows, r.cols)),
        class_token: n_pos != n_patches,
    };
    (inputs, out)
}

/// clip.cpp's `resize_position_embeddings` (LFM2's, with its default mode: bilinear with
/// antialiasing): the learned `n × n` grid of position embeddings `pos` resized to the
/// image's `width × height` patches, or as it is where the grid is that already.
fn resize_position_embeddings(g: &Graph, m: &Mmproj, pos: Tensor, width: i64, height: i64) -> Tensor {
    let n_embd = pos.ne()[0];
    let n_per_side = i64::from(m.hparams.n_patches_side());
    if width == n_per_side && height == n_per_side {
        return pos;
    }
    let mode = sys::GGML_SCALE_MODE_BILINEAR | sys::GGML_SCALE_FLAG_ANTIALIAS;
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

/// clip.cpp's `build_vit` (one image): learned position embeddings or a 2D RoPE, the
/// pre-norm where the file has one.
fn build_vit(
    g: &Graph,
    m: &Mmproj,
    flash_attn: bool,
    inp: Tensor,
    pos_embd: Option<Tensor>,
    rope: Option<&Rope2d>,
    n_pos: i64,
) -> Tensor {
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
    for layer in &m.vit.layers {
        let cur = norm(g, kind, inp_l, layer.ln_1.as_ref(), hp.eps);
        let mut cur = attention(g, hp, layer, flash_attn, rope, cur, n_pos, batch);
        if let Some(weight) = layer.attn_post_norm {
            cur = norm(g, kind, cur, Some(&Norm { weight, bias: None }), hp.eps);
        }
        let cur = g.add(cur, inp_l);
        inp_l = cur;

        let cur = norm(g, kind, cur, layer.ln_2.as_ref(), hp.eps);
        let mut cur = ffn(g, hp, layer, cur);
        if let Some(weight) = layer.ffn_post_norm {
            cur = norm(g, kind, cur, Some(&Norm { weight, bias: None }), hp.eps);
        }
        inp_l = g.add(inp_l, cur);
    }
    if let Some(post) = &m.vit.post_ln {
        inp_l = norm(g, kind, inp_l, Some(post), hp.eps);
    }
    g.reshape_3d(inp_l, n_embd, inp_l.ne()[1] / batch, batch)
}

/// The attention of `build_vit` (separate Q, K, V; the 2D RoPE on Q and K where given) and
/// clip.cpp's `build_attn`.
#[allow(clippy::too_many_arguments)]
fn attention(
    g: &Graph,
    hp: &ClipHParams,
    l: &VitLayer,
    flash_attn: bool,
    rope: Option<&Rope2d>,
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
    let q = add_bias(g, g.mul_mat(l.q_w, cur), l.q_b);
    let k = add_bias(g, g.mul_mat(l.k_w, cur), l.k_b);
    let v = add_bias(g, g.mul_mat(l.v_w, cur), l.v_b);
    let mut q = g.reshape_4d(q, [d_head, n_head, n_pos, b]);
    let mut k = g.reshape_4d(k, [d_head, n_head_kv, n_pos, b]);
    let mut v = g.reshape_4d(v, [d_head, n_head_kv, n_pos, b]);
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
        let cur = g.flash_attn_unmasked(q, k, v, kq_scale);
        let ne = cur.ne();
        g.reshape_2d(cur, ne[0] * ne[1], ne[2] * ne[3])
    } else {
        let v = g.cont(g.permute(v, [1, 2, 0, 3]));
        let kq = g.mul_mat(k, q);
        let kq = g.soft_max_scaled(kq, kq_scale);
        let kqv = g.mul_mat(v, kq);
        let cur = g.permute(kqv, [0, 2, 1, 3]);
        let ne = cur.ne();
        g.cont_2d(cur, ne[0] * ne[1], ne[2] * ne[3])
    };
    add_bias(g, g.mul_mat(l.o_w, cur), l.o_b)
}

/// clip.cpp's `build_ffn`: the activation alone, or gating the up projection where the
/// layer has a gate (SwiGLU, GeGLU, GeGLU-quick).
fn ffn(g: &Graph, hp: &ClipHParams, l: &VitLayer, cur: Tensor) -> Tensor {
    let up = add_bias(g, g.mul_mat(l.ff_up_w, cur), l.ff_up_b);
    let cur = match l.ff_gate_w {
        Some(gate) => {
            let gate = g.mul_mat(gate, cur);
            match hp.ffn_op {
                FfnOp::Gelu => g.geglu_split(gate, up),
                FfnOp::Silu => g.swiglu_split(gate, up),
                FfnOp::GeluQuick => g.geglu_quick_split(gate, up),
            }
        }
        None => match hp.ffn_op {
            FfnOp::Gelu => g.gelu(up),
            FfnOp::Silu => g.silu(up),
            FfnOp::GeluQuick => g.gelu_quick(up),
        },
    };
    add_bias(g, g.mul_mat(l.ff_down_w, cur), l.ff_down_b)
}
