//! The preprocessing of llama.cpp's `tools/mtmd/mtmd-image.cpp`, operation for operation:
//! its Pillow-compatible resampling (fixed-point weights of 22 fractional bits, a
//! horizontal pass then a vertical one, Pillow's rounding), its padding, cropping and
//! slicing, and `clip_image_f32`'s normalization, in the same types (`f32` where mtmd
//! has `float`, `f64` where it has `double`, truncation where it casts), so that the
//! normalized floats are the same bits.
//!
//! The families implemented, with the projectors mtmd gives them (`mtmd.cpp`,
//! `init_vision`; their parameters are set by `clip.cpp` from the projector file):
//! - [`Preprocessor::FixedSize`]: one square of `image_size`, padded to keep the aspect
//!   ratio (`PAD_CEIL`) or stretched: Gemma 3, LLaVA 1.5 and other MLP projectors without
//!   grid pinpoints, Nemotron V2 VL, Yasa2.
//! - [`Preprocessor::DynSize`]: "smart resize" to multiples of `patch_size * n_merge`
//!   within `min_pixels..=max_pixels`: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Pixtral, Kimi-VL,
//!   GLM-4V, Gemma 4 and others.
//! - [`Preprocessor::LongestEdge`]: the same, scaled so the longer side is
//!   `longest_edge` first (LightOnOCR).
//! - [`Preprocessor::LlavaUhd`]: an overview and slices, by grid pinpoints (LLaVA 1.6,
//!   Llama 4) or by MiniCPM-V's grid search.
//! - [`Preprocessor::Idefics3`]: an overview and tiles of `image_size` (SmolVLM, Idefics3).
//! - [`Preprocessor::Lfm2`]: LFM2-VL's: the smart resize alone where it is small enough,
//!   else tiles of 512 by the closest of its grids and a smart-resized thumbnail.

use super::image::{ImageF32, ImageU8, MAX_IMAGE_PIXELS};
use crate::contract::mul_add_f64;
use crate::{Error, Result};

/// mtmd's `resize_algo`: Pillow's filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeAlgo {
    Bilinear,
    Bicubic,
    Lanczos,
}

/// mtmd's `pad_style`: how a resize to a size of another aspect ratio fills the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pad {
    /// Stretched to the target.
    None,
    /// Scaled to fit, its sides rounded up, centred on the pad colour (mtmd's default).
    Ceil,
    /// Scaled to fit, its sides and offsets rounded to the nearest.
    Nearest,
}

/// The preprocessing share of mtmd's `clip_hparams`, with its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageParams {
    pub image_size: i32,
    pub patch_size: i32,
    /// Patches merged per side after the encoder.
    pub n_merge: i32,
    /// 0: none.
    pub longest_edge: i32,
    /// -1 or 0: none.
    pub min_pixels: i32,
    /// -1 or 0: none.
    pub max_pixels: i32,
    pub resize_algo: ResizeAlgo,
    pub pad: Pad,
    pub pad_color: [u8; 3],
    /// LLaVA-UHD's grid pinpoints (width, height).
    pub res_candidates: Vec<(i32, i32)>,
    /// LLaVA-UHD's refined image (before slicing) and overview.
    pub resize_algo_rf: ResizeAlgo,
    pub resize_algo_ov: ResizeAlgo,
    pub pad_rf: Pad,
    pub pad_ov: Pad,
    pub pad_color_rf: [u8; 3],
    pub pad_color_ov: [u8; 3],
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl Default for ImageParams {
    fn default() -> Self {
        Self {
            image_size: 0,
            patch_size: 0,
            n_merge: 1,
            longest_edge: 0,
            min_pixels: -1,
            max_pixels: -1,
            resize_algo: ResizeAlgo::Bicubic,
            pad: Pad::Ceil,
            pad_color: [0; 3],
            res_candidates: Vec::new(),
            resize_algo_rf: ResizeAlgo::Bicubic,
            resize_algo_ov: ResizeAlgo::Bicubic,
            pad_rf: Pad::Ceil,
            pad_ov: Pad::None,
            pad_color_rf: [0; 3],
            pad_color_ov: [0; 3],
            mean: [0.0; 3],
            std: [1.0; 3],
        }
    }
}

/// mtmd's preprocessor families (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preprocessor {
    FixedSize,
    DynSize,
    LongestEdge,
    LlavaUhd,
    Idefics3,
    Lfm2,
}

/// mtmd's `mtmd_image_preproc_out`: the images the encoder reads, in order, and for the
/// sliced families the overview and the grid of slices.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Preprocessed {
    pub entries: Vec<ImageF32>,
    pub overview: Option<ImageF32>,
    pub grid_x: i32,
    pub grid_y: i32,
}

/// Preprocesses a decoded image as mtmd's preprocessor of that family does with those
/// parameters.
///
/// # Errors
/// [`Error::Image`] where mtmd would assert or throw: parameters its family needs that are
/// missing, or a size it cannot resize to.
pub fn preprocess(kind: Preprocessor, params: &ImageParams, img: &ImageU8) -> Result<Preprocessed> {
    check_params(kind, params)?;
    let (width, height) = (img.width as i32, img.height as i32);
    let mut out = Preprocessed::default();
    match kind {
        Preprocessor::FixedSize => {
            let sz = params.image_size;
            let resized = resize(img, (sz, sz), params.resize_algo, params.pad, params.pad_color)?;
            out.append(params, &resized);
        }
        Preprocessor::DynSize | Preprocessor::LongestEdge => {
            let longest = kind == Preprocessor::LongestEdge;
            let merge = if longest && params.n_merge == 0 {
                1
            } else {
                params.n_merge
            };
            let target = calc_size_preserved_ratio(
                (width, height),
                SizeOpts {
                    align: params.patch_size * merge,
                    min_pixels: if longest {
                        params.min_pixels.max(0)
                    } else {
                        params.min_pixels
                    },
                    max_pixels: if longest {
                        params.max_pixels.max(0)
                    } else {
                        params.max_pixels
                    },
                    longest_edge: if longest { params.longest_edge } else { 0 },
                },
            );
            let resized = resize(img, target, params.resize_algo, params.pad, params.pad_color)?;
            out.append(params, &resized);
        }
        Preprocessor::LlavaUhd => {
            let inst = slice_instructions(params, (width, height));
            slice(params, img, &inst, &mut out)?;
        }
        Preprocessor::Idefics3 => idefics3(params, img, &mut out)?,
        Preprocessor::Lfm2 => lfm2(params, img, &mut out)?,
    }
    Ok(out)
}

impl Preprocessed {
    fn append(&mut self, params: &ImageParams, img: &ImageU8) {
        self.entries.push(ImageF32::normalized(img, &params.mean, &params.std));
    }

    fn set_overview(&mut self, params: &ImageParams, img: &ImageU8) {
        self.overview = Some(ImageF32::normalized(img, &params.mean, &params.std));
    }
}

/// What mtmd asserts of the parameters (an abort there), and sizes it would overflow on.
fn check_params(kind: Preprocessor, p: &ImageParams) -> Result<()> {
    let bad = |what: &str| Err(Error::Image(format!("image preprocessing: {what}")));
    if !(0..=8192).contains(&p.image_size) || !(0..=8192).contains(&p.patch_size) || !(0..=64).contains(&p.n_merge) {
        return bad("image_size, patch_size or n_merge out of range");
    }
    if p.longest_edge > 65536 || p.min_pixels > 1 << 30 || p.max_pixels > 1 << 30 {
        return bad("longest_edge, min_pixels or max_pixels out of range");
    }
    if p.std.contains(&0.0) {
        return bad("a standard deviation of 0");
    }
    match kind {
        Preprocessor::FixedSize | Preprocessor::LlavaUhd | Preprocessor::Idefics3 if p.image_size <= 0 => {
            bad("image_size must be positive")
        }
        Preprocessor::DynSize if p.min_pixels <= 0 || p.max_pixels <= 0 => {
            bad("min_pixels and max_pixels must be positive")
        }
        Preprocessor::DynSize if p.patch_size * p.n_merge <= 0 => bad("patch_size * n_merge must be positive"),
        Preprocessor::LongestEdge if p.longest_edge <= 0 => bad("longest_edge must be positive"),
        Preprocessor::LongestEdge if p.patch_size * p.n_merge.max(1) <= 0 => bad("patch_size must be positive"),
        Preprocessor::LlavaUhd | Preprocessor::Lfm2 if p.patch_size * p.n_merge <= 0 => {
            bad("patch_size * n_merge must be positive")
        }
        Preprocessor::LlavaUhd
            if p.res_candidates
                .iter()
                .any(|&(w, h)| !(1..=8192).contains(&w) || !(1..=8192).contains(&h)) =>
        {
            bad("a grid pinpoint out of range")
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// img_tool

/// `img_tool::resize`.
fn resize(src: &ImageU8, target: (i32, i32), algo: ResizeAlgo, pad: Pad, pad_color: [u8; 3]) -> Result<ImageU8> {
    let (tw, th) = target;
    let (sw, sh) = (src.width as i32, src.height as i32);
    if (tw, th) == (sw, sh) {
        return Ok(src.clone());
    }
    if pad == Pad::None {
        return resize_pillow(src, tw, th, algo);
    }
    let scale_w = tw as f32 / sw as f32;
    let scale_h = th as f32 / sh as f32;
    let scale = scale_w.min(scale_h);
    let (new_w, new_h) = if pad == Pad::Nearest {
        (
            ((sw as f32 * scale).round() as i32).min(tw),
            ((sh as f32 * scale).round() as i32).min(th),
        )
    } else {
        (
            ((sw as f32 * scale).ceil() as i32).min(tw),
            ((sh as f32 * scale).ceil() as i32).min(th),
        )
    };
    let resized = resize_pillow(src, new_w, new_h, algo)?;
    check_target(tw, th)?;
    let mut dst = ImageU8::filled(tw as usize, th as usize, pad_color);
    let (ox, oy) = if pad == Pad::Nearest {
        (
            ((tw - new_w) as f32 / 2.0).round() as i32,
            ((th - new_h) as f32 / 2.0).round() as i32,
        )
    } else {
        ((tw - new_w) / 2, (th - new_h) / 2)
    };
    composite(&mut dst, &resized, ox, oy);
    Ok(dst)
}

fn check_target(w: i32, h: i32) -> Result<()> {
    if w <= 0 || w > 65536 || h <= 0 || h > 65536 {
        return Err(Error::Image(format!(
            "resize target {w}x{h} is out of range (max 65536)"
        )));
    }
    if w as u64 * h as u64 > MAX_IMAGE_PIXELS {
        return Err(Error::Image(format!(
            "resize target {w}x{h} is beyond {} pixels",
            MAX_IMAGE_PIXELS
        )));
    }
    Ok(())
}

/// `img_tool::crop` (its bounds asserted by the callers' arithmetic).
fn crop(img: &ImageU8, x: i32, y: i32, w: i32, h: i32) -> Result<ImageU8> {
    if x < 0 || y < 0 || w <= 0 || h <= 0 || x + w > img.width as i32 || y + h > img.height as i32 {
        return Err(Error::Image(format!(
            "crop {w}x{h}+{x}+{y} outside an image of {}x{}",
            img.width, img.height
        )));
    }
    let (x, y, w, h) = (x as usize, y as usize, w as usize, h as usize);
    let mut pixels = Vec::with_capacity(w * h * 3);
    for row in y..y + h {
        let start = (row * img.width + x) * 3;
        pixels.extend_from_slice(&img.pixels[start..start + w * 3]);
    }
    Ok(ImageU8 {
        width: w,
        height: h,
        pixels,
    })
}

/// `img_tool::composite`: `src` drawn into `dst` at an offset, clipped.
fn composite(dst: &mut ImageU8, src: &ImageU8, ox: i32, oy: i32) {
    for y in 0..src.height as i32 {
        for x in 0..src.width as i32 {
            let (dx, dy) = (x + ox, y + oy);
            if dx < 0 || dy < 0 || dx >= dst.width as i32 || dy >= dst.height as i32 {
                continue;
            }
            let s = (y as usize * src.width + x as usize) * 3;
            let d = (dy as usize * dst.width + dx as usize) * 3;
            dst.pixels[d..d + 3].copy_from_slice(&src.pixels[s..s + 3]);
        }
    }
}

struct SizeOpts {
    align: i32,
    min_pixels: i32,
    max_pixels: i32,
    longest_edge: i32,
}

/// `img_tool::calc_size_preserved_ratio` (transformers' "smart resize").
fn calc_size_preserved_ratio((width, height): (i32, i32), o: SizeOpts) -> (i32, i32) {
    if width <= 0 || height <= 0 {
        return (0, 0);
    }
    let f = o.align;
    let round_by = |x: f32| (x / f as f32).round() as i32 * f;
    let ceil_by = |x: f32| (x / f as f32).ceil() as i32 * f;
    let floor_by = |x: f32| (x / f as f32).floor() as i32 * f;
    let (mut w_bar, mut h_bar);
    if o.longest_edge > 0 {
        let scale = (o.longest_edge as f32 / width as f32).min(o.longest_edge as f32 / height as f32);
        w_bar = ceil_by(width as f32 * scale);
        h_bar = ceil_by(height as f32 * scale);
    } else {
        w_bar = f.max(round_by(width as f32));
        h_bar = f.max(round_by(height as f32));
    }
    if o.max_pixels > 0 && i64::from(h_bar) * i64::from(w_bar) > i64::from(o.max_pixels) {
        let beta = (height as f32 * width as f32 / o.max_pixels as f32).sqrt();
        h_bar = f.max(floor_by(height as f32 / beta));
        w_bar = f.max(floor_by(width as f32 / beta));
    } else if o.min_pixels > 0 && i64::from(h_bar) * i64::from(w_bar) < i64::from(o.min_pixels) {
        let beta = (o.min_pixels as f32 / (height as f32 * width as f32)).sqrt();
        h_bar = ceil_by(height as f32 * beta);
        w_bar = ceil_by(width as f32 * beta);
    }
    (w_bar, h_bar)
}

// ---------------------------------------------------------------------------------------
// Pillow's resampling (img_tool::resize_pillow)

const PRECISION_BITS: u32 = 32 - 8 - 2;

fn filter_support(algo: ResizeAlgo) -> f64 {
    match algo {
        ResizeAlgo::Bilinear => 1.0,
        ResizeAlgo::Bicubic => 2.0,
        ResizeAlgo::Lanczos => 3.0,
    }
}

fn resample_filter(algo: ResizeAlgo, x: f64) -> f64 {
    if algo == ResizeAlgo::Lanczos {
        if (-3.0..3.0).contains(&x) {
            let sinc = |v: f64| {
                if v == 0.0 {
                    1.0
                } else {
                    let pi_v = v * std::f64::consts::PI;
                    pi_v.sin() / pi_v
                }
            };
            return sinc(x) * sinc(x / 3.0);
        }
        return 0.0;
    }
    let x = if x < 0.0 { -x } else { x };
    if algo == ResizeAlgo::Bilinear {
        return if x < 1.0 { 1.0 - x } else { 0.0 };
    }
    // `((a + 2) x - (a + 3)) x x + 1` and `(((x - 5) x + 8) x - 4) a`, with the products
    // GCC fuses on aarch64 fused there too ([`crate::contract`]).
    const A: f64 = -0.5;
    if x < 1.0 {
        return mul_add_f64(mul_add_f64(A + 2.0, x, -(A + 3.0)) * x, x, 1.0);
    }
    if x < 2.0 {
        return mul_add_f64(mul_add_f64(x - 5.0, x, 8.0), x, -4.0) * A;
    }
    0.0
}

/// The fixed-point weights of one dimension: `(ksize, bounds, weights)`.
fn precompute_weights(algo: ResizeAlgo, in_size: i32, out_size: i32) -> (usize, Vec<(usize, usize)>, Vec<i32>) {
    let scale = f64::from(in_size) / f64::from(out_size);
    let filterscale = if scale < 1.0 { 1.0 } else { scale };
    let support = filter_support(algo) * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let out = out_size as usize;
    let mut pre = vec![0f64; out * ksize];
    let mut bounds = Vec::with_capacity(out);
    for xx in 0..out {
        let center = (xx as f64 + 0.5) * scale;
        let mut ww = 0.0;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i32).max(0);
        let xmax = ((center + support + 0.5) as i32).min(in_size) - xmin;
        // At most `ksize` input pixels by construction (the window is 2 * support wide).
        let count = (xmax.max(0) as usize).min(ksize);
        let row = &mut pre[xx * ksize..xx * ksize + count];
        for (x, slot) in row.iter_mut().enumerate() {
            let w = resample_filter(algo, (x as f64 + f64::from(xmin) - center + 0.5) * ss);
            *slot = w;
            ww += w;
        }
        for w in row.iter_mut() {
            if ww != 0.0 {
                *w /= ww;
            }
        }
        bounds.push((xmin as usize, count));
    }
    let fxp_scale = f64::from(1u32 << PRECISION_BITS);
    let weights = pre
        .iter()
        .map(|&w| mul_add_f64(w, fxp_scale, if w < 0.0 { -0.5 } else { 0.5 }) as i32)
        .collect();
    (ksize, bounds, weights)
}

fn clip8(v: i32) -> u8 {
    v.clamp(0, 255) as u8
}

fn resample_horizontal(
    src: &[u8],
    in_nx: usize,
    in_ny: usize,
    out_nx: usize,
    (ksize, bounds, weights): &(usize, Vec<(usize, usize)>, Vec<i32>),
) -> Vec<u8> {
    let mut out = vec![0u8; out_nx * in_ny * 3];
    for yy in 0..in_ny {
        let src_row = &src[yy * in_nx * 3..(yy + 1) * in_nx * 3];
        let dst_row = &mut out[yy * out_nx * 3..(yy + 1) * out_nx * 3];
        for (xx, &(xmin, xcnt)) in bounds.iter().enumerate() {
            let k = &weights[xx * ksize..xx * ksize + xcnt];
            let mut ss = [1i32 << (PRECISION_BITS - 1); 3];
            for (x, &w) in k.iter().enumerate() {
                let p = &src_row[(xmin + x) * 3..(xmin + x) * 3 + 3];
                for c in 0..3 {
                    ss[c] = ss[c].wrapping_add(i32::from(p[c]).wrapping_mul(w));
                }
            }
            for c in 0..3 {
                dst_row[xx * 3 + c] = clip8(ss[c] >> PRECISION_BITS);
            }
        }
    }
    out
}

fn resample_vertical(
    src: &[u8],
    in_nx: usize,
    (ksize, bounds, weights): &(usize, Vec<(usize, usize)>, Vec<i32>),
) -> Vec<u8> {
    let row_elems = in_nx * 3;
    let mut out = vec![0u8; row_elems * bounds.len()];
    let mut acc = vec![0i32; row_elems];
    for (yy, &(ymin, ycnt)) in bounds.iter().enumerate() {
        acc.fill(1 << (PRECISION_BITS - 1));
        for y in 0..ycnt {
            let src_row = &src[(ymin + y) * row_elems..(ymin + y + 1) * row_elems];
            let w = weights[yy * ksize + y];
            for (a, &s) in acc.iter_mut().zip(src_row) {
                *a = a.wrapping_add(i32::from(s).wrapping_mul(w));
            }
        }
        for (d, &a) in out[yy * row_elems..(yy + 1) * row_elems].iter_mut().zip(&acc) {
            *d = clip8(a >> PRECISION_BITS);
        }
    }
    out
}

/// `img_tool::resize_pillow`: Pillow's separable resampling, horizontal pass first.
fn resize_pillow(img: &ImageU8, tw: i32, th: i32, algo: ResizeAlgo) -> Result<ImageU8> {
    check_target(tw, th)?;
    let (sw, sh) = (img.width as i32, img.height as i32);
    let horizontal = (tw != sw).then(|| precompute_weights(algo, sw, tw));
    let vertical = (th != sh).then(|| precompute_weights(algo, sh, th));
    let pixels = match (&horizontal, &vertical) {
        (Some(hw), Some(vw)) => {
            let temp = resample_horizontal(&img.pixels, img.width, img.height, tw as usize, hw);
            resample_vertical(&temp, tw as usize, vw)
        }
        (Some(hw), None) => resample_horizontal(&img.pixels, img.width, img.height, tw as usize, hw),
        (None, Some(vw)) => resample_vertical(&img.pixels, img.width, vw),
        (None, None) => img.pixels.clone(),
    };
    Ok(ImageU8 {
        width: tw as usize,
        height: th as usize,
        pixels,
    })
}

// ---------------------------------------------------------------------------------------
// LLaVA-UHD

struct Slice {
    x: i32,
    y: i32,
    w: i32,
    h: i32,
}

struct SliceInstructions {
    overview: (i32, i32),
    refined: (i32, i32),
    grid: (i32, i32),
    slices: Vec<Slice>,
}

/// `ensure_divide`.
fn ensure_divide(length: i32, patch: i32) -> i32 {
    (((length as f32 / patch as f32).round() * patch as f32) as i32).max(patch)
}

/// `get_best_resize`.
fn best_resize(
    (mut width, mut height): (i32, i32),
    scale_resolution: i32,
    patch: i32,
    allow_upscale: bool,
) -> (i32, i32) {
    if i64::from(width) * i64::from(height) > i64::from(scale_resolution) * i64::from(scale_resolution) || allow_upscale
    {
        let r = width as f32 / height as f32;
        height = (scale_resolution as f32 / r.sqrt()) as i32;
        width = (height as f32 * r) as i32;
    }
    (ensure_divide(width, patch), ensure_divide(height, patch))
}

/// `resize_maintain_aspect_ratio`.
fn resize_keep_ratio((w, h): (i32, i32), (tw, th): (i32, i32)) -> (i32, i32) {
    let scale = (tw as f32 / w as f32).min(th as f32 / h as f32);
    ((w as f32 * scale) as i32, (h as f32 * scale) as i32)
}

/// `select_best_resolution`.
fn select_best_resolution(original: (i32, i32), candidates: &[(i32, i32)]) -> (i32, i32) {
    let mut best = (0, 0);
    let mut min_wasted = i64::from(i32::MAX);
    let mut max_effective = 0i64;
    for &candidate in candidates {
        let target = resize_keep_ratio(original, candidate);
        let effective = (i64::from(target.0) * i64::from(target.1)).min(i64::from(original.0) * i64::from(original.1));
        let wasted = i64::from(candidate.0) * i64::from(candidate.1) - effective;
        if effective > max_effective || (effective == max_effective && wasted < min_wasted) {
            max_effective = effective;
            min_wasted = wasted;
            best = candidate;
        }
    }
    best
}

/// `get_refine_size`.
fn refine_size(
    original: (i32, i32),
    grid: (i32, i32),
    scale_resolution: i32,
    patch: i32,
    allow_upscale: bool,
) -> (i32, i32) {
    let refine_w = ensure_divide(original.0, grid.0);
    let refine_h = ensure_divide(original.1, grid.1);
    let cell = (refine_w / grid.0, refine_h / grid.1);
    let best = best_resize(cell, scale_resolution, patch, allow_upscale);
    (best.0 * grid.0, best.1 * grid.1)
}

/// `get_best_grid`.
fn best_grid(max_slice_nums: i32, multiple: i32, log_ratio: f32) -> (i32, i32) {
    let mut candidates = Vec::new();
    for i in [multiple - 1, multiple, multiple + 1] {
        if i == 1 || i > max_slice_nums {
            continue;
        }
        for m in 1..=i.max(0) {
            if i % m == 0 {
                candidates.push((m, i / m));
            }
        }
    }
    let mut best = (1, 1);
    let mut min_error = f32::INFINITY;
    for (w, h) in candidates {
        let error = (f64::from(log_ratio) - (1.0 * f64::from(w) / f64::from(h)).ln()).abs() as f32;
        if error < min_error {
            best = (w, h);
            min_error = error;
        }
    }
    best
}

/// `mtmd_image_preprocessor_llava_uhd::get_slice_instructions`.
fn slice_instructions(p: &ImageParams, original: (i32, i32)) -> SliceInstructions {
    let patch = p.patch_size * p.n_merge;
    let slice_size = p.image_size;
    let (ow, oh) = original;
    let has_slices = ow > slice_size || oh > slice_size;
    let mut res = SliceInstructions {
        overview: (slice_size, slice_size),
        refined: (0, 0),
        grid: (0, 0),
        slices: Vec::new(),
    };
    if !has_slices {
        return res;
    }
    if !p.res_candidates.is_empty() {
        let refine = select_best_resolution(original, &p.res_candidates);
        res.refined = refine;
        for y in (0..refine.1).step_by(slice_size as usize) {
            for x in (0..refine.0).step_by(slice_size as usize) {
                res.slices.push(Slice {
                    x,
                    y,
                    w: slice_size.min(refine.0 - x),
                    h: slice_size.min(refine.1 - y),
                });
            }
        }
        res.grid = (refine.0 / slice_size, refine.1 / slice_size);
        return res;
    }
    res.overview = best_resize(original, slice_size, patch, !has_slices);
    let max_slice_nums = 9;
    let log_ratio = f64::from(ow as f32 / oh as f32).ln() as f32;
    let ratio = ow as f32 * oh as f32 / (slice_size * slice_size) as f32;
    let multiple = f64::from(ratio.ceil()).min(f64::from(max_slice_nums)) as i32;
    let grid = best_grid(max_slice_nums, multiple, log_ratio);
    let refine = refine_size(original, grid, slice_size, patch, true);
    res.grid = grid;
    res.refined = refine;
    let (grid_x, grid_y) = (refine.0 / grid.0, refine.1 / grid.1);
    let (mut y, mut ic) = (0, 0);
    while y < refine.1 && ic < grid.1 {
        let (mut x, mut jc) = (0, 0);
        while x < refine.0 && jc < grid.0 {
            res.slices.push(Slice {
                x,
                y,
                w: grid_x,
                h: grid_y,
            });
            x += grid_x;
            jc += 1;
        }
        y += grid_y;
        ic += 1;
    }
    res
}

/// `slice_image`, then the overview and the slices normalized.
fn slice(p: &ImageParams, img: &ImageU8, inst: &SliceInstructions, out: &mut Preprocessed) -> Result<()> {
    let overview = resize(img, inst.overview, p.resize_algo_ov, p.pad_ov, p.pad_color_ov)?;
    out.set_overview(p, &overview);
    if !inst.slices.is_empty() {
        let refined = resize(img, inst.refined, p.resize_algo_rf, p.pad_rf, p.pad_color_rf)?;
        for s in &inst.slices {
            let piece = crop(&refined, s.x, s.y, s.w, s.h)?;
            out.append(p, &piece);
        }
    }
    out.grid_x = inst.grid.0;
    out.grid_y = inst.grid.1;
    Ok(())
}

/// `mtmd_image_preprocessor_idefics3::preprocess`.
fn idefics3(p: &ImageParams, img: &ImageU8, out: &mut Preprocessed) -> Result<()> {
    let original = (img.width as i32, img.height as i32);
    let tile = p.image_size;
    if p.longest_edge > 0 && p.min_pixels <= 0 && p.max_pixels <= 0 {
        let longest = p.longest_edge;
        let aspect = f64::from(original.0) / f64::from(original.1);
        let resized_size = if original.0 >= original.1 {
            let h = (f64::from(longest) / aspect) as i32;
            (longest, h + h % 2)
        } else {
            let w = (f64::from(longest) * aspect) as i32;
            (w + w % 2, longest)
        };
        let grid_x = (resized_size.0 + tile - 1) / tile;
        let grid_y = (resized_size.1 + tile - 1) / tile;
        let refined_size = (grid_x * tile, grid_y * tile);
        let resized = resize(img, resized_size, p.resize_algo, Pad::None, [0; 3])?;
        let refined = resize(&resized, refined_size, p.resize_algo, Pad::None, [0; 3])?;
        let overview = resize(&refined, (tile, tile), p.resize_algo, Pad::None, [0; 3])?;
        out.set_overview(p, &overview);
        for y in 0..grid_y {
            for x in 0..grid_x {
                let piece = crop(&refined, x * tile, y * tile, tile, tile)?;
                out.append(p, &piece);
            }
        }
        out.grid_x = grid_x;
        out.grid_y = grid_y;
        return Ok(());
    }
    let refined = calc_size_preserved_ratio(
        original,
        SizeOpts {
            align: tile,
            min_pixels: p.min_pixels.max(0),
            max_pixels: p.max_pixels.max(0),
            longest_edge: p.longest_edge,
        },
    );
    let mut inst = SliceInstructions {
        overview: (tile, tile),
        refined,
        grid: (
            (refined.0 as f32 / tile as f32).ceil() as i32,
            (refined.1 as f32 / tile as f32).ceil() as i32,
        ),
        slices: Vec::new(),
    };
    for y in (0..refined.1).step_by(tile as usize) {
        for x in (0..refined.0).step_by(tile as usize) {
            inst.slices.push(Slice {
                x,
                y,
                w: tile.min(refined.0 - x),
                h: tile.min(refined.1 - y),
            });
        }
    }
    slice(p, img, &inst, out)
}

// ---------------------------------------------------------------------------------------
// LFM2-VL (mtmd_image_preprocessor_lfm2, after transformers' Lfm2VlImageProcessorFast)

/// `mtmd_image_preprocessor_lfm2`'s constants (LFM2.5-VL's `processor_config.json`): the
/// grids it tiles by have 2 to 10 tiles of 512 pixels a side, and an image is tiled when
/// its smart resize would be over twice `max_pixels`.
const LFM2_MIN_TILES: i32 = 2;
const LFM2_MAX_TILES: i32 = 10;
const LFM2_MAX_PIXELS_TOLERANCE: f32 = 2.0;
const LFM2_TILE_SIZE: i32 = 512;

/// `mtmd_image_preprocessor_lfm2::preprocess`.
fn lfm2(p: &ImageParams, img: &ImageU8, out: &mut Preprocessed) -> Result<()> {
    let inst = lfm2_slice_instructions(p, (img.width as i32, img.height as i32));
    if !inst.slices.is_empty() {
        // The tiles and the thumbnail as the overview (llava-uhd's `preprocess`).
        return slice(p, img, &inst, out);
    }
    // One tile: the resized image is an entry, not an overview, so that mtmd frames it
    // without LFM2's thumbnail token (its `slice_image` of no slices, then `append`).
    let resized = resize(img, inst.overview, p.resize_algo_ov, p.pad_ov, p.pad_color_ov)?;
    out.append(p, &resized);
    Ok(())
}

/// `mtmd_image_preprocessor_lfm2::should_tile`: the smart resize's sides rounded to the
/// merged patch (`nearbyint` in `double`, ties to even; the lower bound is the unmerged
/// patch, as mtmd has it), against `max_pixels` with its tolerance.
fn lfm2_should_tile(p: &ImageParams, (width, height): (i32, i32)) -> bool {
    let align = p.patch_size * p.n_merge;
    let round_by_factor = |x: f32| (f64::from(x) / f64::from(align)).round_ties_even() as i32 * align;
    let h_bar = p.patch_size.max(round_by_factor(height as f32));
    let w_bar = p.patch_size.max(round_by_factor(width as f32));
    f64::from(h_bar) * f64::from(w_bar) > f64::from(p.max_pixels) * f64::from(LFM2_MAX_PIXELS_TOLERANCE)
}

/// `mtmd_image_preprocessor_lfm2::get_slice_instructions`: the thumbnail (or the one
/// image) smart-resized within `min_pixels..=max_pixels`; tiles of 512 only where
/// [`lfm2_should_tile`] says so.
fn lfm2_slice_instructions(p: &ImageParams, original: (i32, i32)) -> SliceInstructions {
    let overview = calc_size_preserved_ratio(
        original,
        SizeOpts {
            align: p.patch_size * p.n_merge,
            min_pixels: p.min_pixels,
            max_pixels: p.max_pixels,
            longest_edge: 0,
        },
    );
    let mut inst = SliceInstructions {
        overview,
        refined: (0, 0),
        grid: (0, 0),
        slices: Vec::new(),
    };
    if !lfm2_should_tile(p, original) {
        return inst;
    }
    let grid = lfm2_grid_layout(original, &lfm2_target_ratios());
    inst.grid = grid;
    inst.refined = (LFM2_TILE_SIZE * grid.0, LFM2_TILE_SIZE * grid.1);
    for row in 0..grid.1 {
        for col in 0..grid.0 {
            inst.slices.push(Slice {
                x: col * LFM2_TILE_SIZE,
                y: row * LFM2_TILE_SIZE,
                w: LFM2_TILE_SIZE,
                h: LFM2_TILE_SIZE,
            });
        }
    }
    inst
}

/// `get_target_ratios`: the grids (columns, rows) of 2 to 10 tiles, by their number of
/// tiles. mtmd sorts with `std::sort`, which does not keep the order of grids with as many
/// tiles (libstdc++ puts 2x1 before 1x2); this stable sort does. The choice below cannot
/// tell: grids of the same number of tiles differ in aspect ratio, and never by little
/// enough to be equally close to an image's (`ties_are_not_between_grids_of_equal_area`).
fn lfm2_target_ratios() -> Vec<(i32, i32)> {
    let mut ratios = Vec::new();
    for n in LFM2_MIN_TILES..=LFM2_MAX_TILES {
        for w in 1..=n {
            for h in 1..=n {
                if (LFM2_MIN_TILES..=LFM2_MAX_TILES).contains(&(w * h)) && !ratios.contains(&(w, h)) {
                    ratios.push((w, h));
                }
            }
        }
    }
    ratios.sort_by_key(|&(w, h)| w * h);
    ratios
}

/// `get_grid_layout` and `find_closest_aspect_ratio`: the grid whose aspect ratio is the
/// closest to the image's (`float`); of grids as close, a later (larger) one where the
/// image has over half its pixels.
fn lfm2_grid_layout((width, height): (i32, i32), ratios: &[(i32, i32)]) -> (i32, i32) {
    let aspect_ratio = width as f32 / height as f32;
    let area = (width * height) as f32;
    let mut best_ratio_diff = f32::MAX;
    let mut best = (1, 1);
    for &(w, h) in ratios {
        let target_aspect_ratio = w as f32 / h as f32;
        let ratio_diff = (aspect_ratio - target_aspect_ratio).abs();
        if ratio_diff < best_ratio_diff {
            best_ratio_diff = ratio_diff;
            best = (w, h);
        } else if ratio_diff == best_ratio_diff {
            let target_area = (LFM2_TILE_SIZE * LFM2_TILE_SIZE * w * h) as f32;
            if area > 0.5 * target_area {
                best = (w, h);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(w: usize, h: usize) -> ImageU8 {
        let pixels = (0..w * h * 3).map(|i| (i * 37 % 251) as u8).collect();
        ImageU8::new(w, h, pixels).unwrap()
    }

    #[test]
    fn smart_resize_is_transformers() {
        // Qwen2-VL's factor 28: sides rounded to multiples, then scaled into the budget.
        let opts = |min, max| SizeOpts {
            align: 28,
            min_pixels: min,
            max_pixels: max,
            longest_edge: 0,
        };
        assert_eq!(
            calc_size_preserved_ratio((1280, 720), opts(3136, 12_845_056)),
            (1288, 728)
        );
        assert_eq!(calc_size_preserved_ratio((1280, 720), opts(3136, 200_704)), (588, 336));
        assert_eq!(calc_size_preserved_ratio((10, 10), opts(6272, 3_211_264)), (84, 84));
        assert_eq!(calc_size_preserved_ratio((0, 10), opts(6272, 3_211_264)), (0, 0));
    }

    #[test]
    fn fixed_size_pads_to_the_square() {
        let params = ImageParams {
            image_size: 16,
            pad_color: [1, 2, 3],
            ..ImageParams::default()
        };
        let out = preprocess(Preprocessor::FixedSize, &params, &image(32, 8)).unwrap();
        assert_eq!(out.entries.len(), 1);
        let img = &out.entries[0];
        assert_eq!((img.width(), img.height()), (16, 16));
        // The top row is padding: the colour, normalized with mean 0 and std 1.
        assert_eq!(&img.data()[..3], &[1.0 / 255.0, 2.0 / 255.0, 3.0 / 255.0]);
    }

    #[test]
    fn same_size_is_a_copy() {
        let img = image(5, 7);
        for algo in [ResizeAlgo::Bilinear, ResizeAlgo::Bicubic, ResizeAlgo::Lanczos] {
            assert_eq!(resize(&img, (5, 7), algo, Pad::None, [0; 3]).unwrap(), img);
        }
    }

    #[test]
    fn a_flat_image_stays_flat() {
        let img = ImageU8::filled(13, 9, [200, 10, 99]);
        for algo in [ResizeAlgo::Bilinear, ResizeAlgo::Bicubic, ResizeAlgo::Lanczos] {
            let out = resize_pillow(&img, 31, 4, algo).unwrap();
            assert!(out.pixels.chunks_exact(3).all(|p| p == [200, 10, 99]), "{algo:?}");
        }
    }

    #[test]
    fn targets_out_of_range_are_errors() {
        let img = image(3, 3);
        for (w, h) in [(0, 3), (3, -1), (65_537, 1), (8192, 8192)] {
            assert!(
                matches!(resize_pillow(&img, w, h, ResizeAlgo::Bicubic), Err(Error::Image(_))),
                "{w}x{h}"
            );
        }
        // PAD_NEAREST rounds a 1-pixel side to 0 here, as mtmd does, and refuses.
        let sliver = image(1000, 1);
        let params = ImageParams {
            image_size: 100,
            pad: Pad::Nearest,
            ..ImageParams::default()
        };
        assert!(matches!(
            preprocess(Preprocessor::FixedSize, &params, &sliver),
            Err(Error::Image(_))
        ));
    }

    #[test]
    fn pinpoints_pick_the_least_waste() {
        // The most of the original's pixels kept, then the least padding. (mtmd-image.h's
        // comment says 100x200 for 111x200; its code, and so this, says 200x200, which
        // keeps all 22200 pixels where 100x200 keeps 18000.)
        let candidates = [(100, 100), (200, 100), (100, 200), (200, 200)];
        assert_eq!(select_best_resolution((111, 200), &candidates), (200, 200));
        assert_eq!(select_best_resolution((90, 180), &candidates), (100, 200));
        assert_eq!(select_best_resolution((400, 150), &candidates), (200, 100));
    }

    #[test]
    fn ties_are_not_between_grids_of_equal_area() {
        // mtmd's grids in the order libstdc++'s std::sort leaves them (printed by a C++
        // program sorting get_target_ratios' list with mtmd's comparison).
        const LIBSTDCXX: [(i32, i32); 26] = [
            (2, 1),
            (1, 2),
            (1, 3),
            (3, 1),
            (2, 2),
            (4, 1),
            (1, 4),
            (1, 5),
            (5, 1),
            (3, 2),
            (2, 3),
            (1, 6),
            (6, 1),
            (1, 7),
            (7, 1),
            (2, 4),
            (4, 2),
            (1, 8),
            (8, 1),
            (3, 3),
            (1, 9),
            (9, 1),
            (10, 1),
            (1, 10),
            (5, 2),
            (2, 5),
        ];
        let ours = lfm2_target_ratios();
        let mut sorted = ours.clone();
        let mut theirs = LIBSTDCXX.to_vec();
        sorted.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(sorted, theirs);
        for w in (1..=3000).step_by(3) {
            for h in (1..=3000).step_by(7) {
                assert_eq!(
                    lfm2_grid_layout((w, h), &ours),
                    lfm2_grid_layout((w, h), &LIBSTDCXX),
                    "{w}x{h}"
                );
            }
        }
    }

    #[test]
    fn lfm2_tiles_past_twice_its_budget_rounding_ties_to_even() {
        let params = ImageParams {
            patch_size: 16,
            n_merge: 2,
            min_pixels: 64 * 1024,
            max_pixels: 256 * 1024,
            ..ImageParams::default()
        };
        // 720 / 32 = 22.5 rounds to 22: 704 x 704 is under 2 x 256 x 1024 pixels.
        assert!(!lfm2_should_tile(&params, (720, 720)));
        assert!(lfm2_should_tile(&params, (736, 736)));
        assert!(lfm2_should_tile(&params, (752, 720)));
        let inst = lfm2_slice_instructions(&params, (1000, 800));
        assert_eq!((inst.grid, inst.refined, inst.slices.len()), ((3, 2), (1536, 1024), 6));
        assert_eq!(inst.overview, (544, 448));
    }
}
