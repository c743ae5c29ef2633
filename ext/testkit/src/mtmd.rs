//! The pinned llama.cpp's image path, as a reference: its vision encoder (clip.cpp's
//! `clip_image_encode`, [`clip_encode`]) and the preprocessing parameters its loader sets
//! ([`clip_image_params`]), `stbi_load_from_memory` as
//! mtmd-helper calls it, and `tools/mtmd/mtmd-image.cpp`'s preprocessors, compiled by
//! `build.rs` with `native/mtmd_image.cpp` standing in for clip's hyper-parameters; and
//! its audio path: `tools/mtmd/mtmd-audio.cpp`'s whisper preprocessor ([`whisper_mel`])
//! and miniaudio's decoder ([`miniaudio_decode`]), through `native/mtmd_audio.cpp`.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

use elelem_engine::vision::{ImageParams, Pad, Preprocessor, ResizeAlgo};

#[repr(C)]
struct Params {
    image_size: i32,
    patch_size: i32,
    n_merge: i32,
    longest_edge: i32,
    min_pixels: i32,
    max_pixels: i32,
    resize_algo: i32,
    pad: i32,
    resize_algo_rf: i32,
    resize_algo_ov: i32,
    pad_rf: i32,
    pad_ov: i32,
    pad_color: [u8; 3],
    pad_color_rf: [u8; 3],
    pad_color_ov: [u8; 3],
    mean: [f32; 3],
    std: [f32; 3],
    n_candidates: i32,
    candidates: *const i32,
}

#[repr(C)]
struct Out {
    _private: [u8; 0],
}

extern "C" {
    fn elelem_stbi_load(buf: *const u8, len: usize, nx: *mut c_int, ny: *mut c_int) -> *mut u8;
    fn elelem_stbi_free(data: *mut u8);
    fn elelem_mtmd_preprocess(kind: c_int, p: *const Params, rgb: *const u8, nx: c_int, ny: c_int) -> *mut Out;
    fn elelem_mtmd_error(r: *const Out) -> *const c_char;
    fn elelem_mtmd_entries(r: *const Out) -> c_int;
    fn elelem_mtmd_grid_x(r: *const Out) -> c_int;
    fn elelem_mtmd_grid_y(r: *const Out) -> c_int;
    fn elelem_mtmd_image(r: *const Out, i: c_int, nx: *mut c_int, ny: *mut c_int) -> *const f32;
    fn elelem_mtmd_free(r: *mut Out);
}

/// An image decoded by stb_image to RGB8: `(width, height, pixels)`, or `None` where
/// stb_image fails.
pub fn stbi_load(bytes: &[u8]) -> Option<(usize, usize, Vec<u8>)> {
    let (mut nx, mut ny) = (0, 0);
    // SAFETY: stb reads `bytes` only; the result is nx*ny*3 bytes or null, freed below.
    unsafe {
        let data = elelem_stbi_load(bytes.as_ptr(), bytes.len(), &mut nx, &mut ny);
        if data.is_null() {
            return None;
        }
        let (w, h) = (nx as usize, ny as usize);
        let pixels = std::slice::from_raw_parts(data, w * h * 3).to_vec();
        elelem_stbi_free(data);
        Some((w, h, pixels))
    }
}

/// One preprocessed image: `(width, height, values)`.
pub type F32Image = (usize, usize, Vec<f32>);

/// mtmd's `mtmd_image_preproc_out`.
#[derive(Debug)]
pub struct Preprocessed {
    pub entries: Vec<F32Image>,
    pub overview: Option<F32Image>,
    pub grid_x: i32,
    pub grid_y: i32,
}

fn algo(a: ResizeAlgo) -> i32 {
    match a {
        ResizeAlgo::Bilinear => 0,
        ResizeAlgo::Bicubic => 1,
        ResizeAlgo::Lanczos => 2,
    }
}

fn pad(p: Pad) -> i32 {
    match p {
        Pad::None => 0,
        Pad::Ceil => 1,
        Pad::Nearest => 2,
    }
}

/// mtmd's preprocessor of that family on an RGB8 image, with those hyper-parameters;
/// its exception's message when it throws.
pub fn preprocess(
    kind: Preprocessor,
    p: &ImageParams,
    width: usize,
    height: usize,
    rgb: &[u8],
) -> Result<Preprocessed, String> {
    assert_eq!(rgb.len(), width * height * 3);
    let candidates: Vec<i32> = p.res_candidates.iter().flat_map(|&(w, h)| [w, h]).collect();
    let params = Params {
        image_size: p.image_size,
        patch_size: p.patch_size,
        n_merge: p.n_merge,
        longest_edge: p.longest_edge,
        min_pixels: p.min_pixels,
        max_pixels: p.max_pixels,
        resize_algo: algo(p.resize_algo),
        pad: pad(p.pad),
        resize_algo_rf: algo(p.resize_algo_rf),
        resize_algo_ov: algo(p.resize_algo_ov),
        pad_rf: pad(p.pad_rf),
        pad_ov: pad(p.pad_ov),
        pad_color: p.pad_color,
        pad_color_rf: p.pad_color_rf,
        pad_color_ov: p.pad_color_ov,
        mean: p.mean,
        std: p.std,
        n_candidates: p.res_candidates.len() as i32,
        candidates: candidates.as_ptr(),
    };
    let kind = match kind {
        Preprocessor::FixedSize => 0,
        Preprocessor::DynSize => 1,
        Preprocessor::LongestEdge => 2,
        Preprocessor::LlavaUhd => 3,
        Preprocessor::Idefics3 => 4,
        Preprocessor::Lfm2 => 5,
    };
    // SAFETY: the parameters and pixels outlive the call; the result is read, then freed.
    unsafe {
        let r = elelem_mtmd_preprocess(kind, &params, rgb.as_ptr(), width as c_int, height as c_int);
        let error = elelem_mtmd_error(r);
        if !error.is_null() {
            let message = CStr::from_ptr(error).to_string_lossy().into_owned();
            elelem_mtmd_free(r);
            return Err(message);
        }
        let image = |i: c_int| {
            let (mut nx, mut ny) = (0, 0);
            let data = elelem_mtmd_image(r, i, &mut nx, &mut ny);
            if data.is_null() {
                return None;
            }
            let (w, h) = (nx as usize, ny as usize);
            Some((w, h, std::slice::from_raw_parts(data, w * h * 3).to_vec()))
        };
        let out = Preprocessed {
            entries: (0..elelem_mtmd_entries(r)).map(|i| image(i).unwrap()).collect(),
            overview: image(-1),
            grid_x: elelem_mtmd_grid_x(r),
            grid_y: elelem_mtmd_grid_y(r),
        };
        elelem_mtmd_free(r);
        Ok(out)
    }
}

extern "C" {
    fn elelem_clip_encode(
        path: *const c_char,
        flash_attn: c_int,
        n_threads: c_int,
        rgb: *const f32,
        nx: c_int,
        ny: c_int,
        out: *mut f32,
        cap: i64,
    ) -> i64;
}

/// clip.cpp's `clip_image_encode` of the projector at `path` on one preprocessed image
/// (`RGBRGB...` floats, as mtmd's `clip_image_f32`), with flash attention or without (mtmd's
/// `flash_attn_type` enabled or disabled): the embeddings (at most `max_floats` of them are
/// read back, and more is a failure), or `None` where clip refuses the file or fails.
pub fn clip_encode(
    path: &std::path::Path,
    flash_attn: bool,
    n_threads: usize,
    (width, height, rgb): (usize, usize, &[f32]),
    max_floats: usize,
) -> Option<Vec<f32>> {
    assert_eq!(rgb.len(), width * height * 3);
    let path = std::ffi::CString::new(path.to_str().expect("a UTF-8 path")).unwrap();
    let mut out = vec![0.0; max_floats];
    // SAFETY: clip reads the path and pixels, writes at most `max_floats` floats to `out`.
    let n = unsafe {
        elelem_clip_encode(
            path.as_ptr(),
            c_int::from(flash_attn),
            n_threads as c_int,
            rgb.as_ptr(),
            width as c_int,
            height as c_int,
            out.as_mut_ptr(),
            max_floats as i64,
        )
    };
    if n < 0 || n as usize > max_floats {
        return None;
    }
    out.truncate(n as usize);
    Some(out)
}

extern "C" {
    fn elelem_clip_encode_audio(
        path: *const c_char,
        flash_attn: c_int,
        n_threads: c_int,
        mel: *const f32,
        n_mel: c_int,
        n_len: c_int,
        out: *mut f32,
        cap: i64,
    ) -> i64;
}

/// clip.cpp's encoding of one log-mel piece (`n_mel` rows of `mel.len() / n_mel` frames)
/// by the audio projector at `path`, as mtmd encodes an audio chunk, with flash attention
/// or without: the embeddings (at most `max_floats`; more is a failure), or `None` where
/// clip refuses the file or fails.
pub fn clip_encode_audio(
    path: &std::path::Path,
    flash_attn: bool,
    n_threads: usize,
    (n_mel, mel): (usize, &[f32]),
    max_floats: usize,
) -> Option<Vec<f32>> {
    assert_eq!(mel.len() % n_mel, 0);
    let path = std::ffi::CString::new(path.to_str().expect("a UTF-8 path")).unwrap();
    let mut out = vec![0.0; max_floats];
    // SAFETY: clip reads the path and the piece, writes at most `max_floats` floats to `out`.
    let n = unsafe {
        elelem_clip_encode_audio(
            path.as_ptr(),
            c_int::from(flash_attn),
            n_threads as c_int,
            mel.as_ptr(),
            n_mel as c_int,
            (mel.len() / n_mel) as c_int,
            out.as_mut_ptr(),
            max_floats as i64,
        )
    };
    if n < 0 || n as usize > max_floats {
        return None;
    }
    out.truncate(n as usize);
    Some(out)
}

/// `native/clip_encode.cpp`'s `elelem_clip_image_params`.
#[repr(C)]
struct ClipImageParams {
    image_size: i32,
    patch_size: i32,
    n_merge: i32,
    longest_edge: i32,
    min_pixels: i32,
    max_pixels: i32,
    resize_algo: i32,
    pad: i32,
    resize_algo_rf: i32,
    resize_algo_ov: i32,
    pad_rf: i32,
    pad_ov: i32,
    pad_color: [u8; 3],
    pad_color_rf: [u8; 3],
    pad_color_ov: [u8; 3],
    mean: [f32; 3],
    std: [f32; 3],
    n_candidates: i32,
    candidates: [i32; 2 * MAX_CANDIDATES],
}

/// The most grid pinpoints `clip_image_params` reads back (the shim's
/// `ELELEM_MAX_CANDIDATES`).
const MAX_CANDIDATES: usize = 64;

extern "C" {
    fn elelem_clip_image_params(path: *const c_char, out: *mut ClipImageParams) -> c_int;
}

fn algo_of(a: i32) -> ResizeAlgo {
    [ResizeAlgo::Bilinear, ResizeAlgo::Bicubic, ResizeAlgo::Lanczos][a as usize]
}

fn pad_of(p: i32) -> Pad {
    [Pad::None, Pad::Ceil, Pad::Nearest][p as usize]
}

/// The preprocessing parameters clip.cpp's loader (`load_hparams`) sets for the projector
/// at `path`, with mtmd's defaults (no custom token limits), or `None` where clip refuses
/// the file. It panics on a file of more than 64 grid pinpoints.
pub fn clip_image_params(path: &std::path::Path) -> Option<ImageParams> {
    let path = std::ffi::CString::new(path.to_str().expect("a UTF-8 path")).unwrap();
    // SAFETY: integers, floats and bytes, for which zeros are valid values.
    let mut p: ClipImageParams = unsafe { std::mem::zeroed() };
    // SAFETY: clip reads the path; the shim writes one struct of this layout.
    if unsafe { elelem_clip_image_params(path.as_ptr(), &mut p) } != 0 {
        return None;
    }
    let n_candidates = p.n_candidates as usize;
    assert!(n_candidates <= MAX_CANDIDATES, "{n_candidates} grid pinpoints");
    Some(ImageParams {
        image_size: p.image_size,
        patch_size: p.patch_size,
        n_merge: p.n_merge,
        longest_edge: p.longest_edge,
        min_pixels: p.min_pixels,
        max_pixels: p.max_pixels,
        resize_algo: algo_of(p.resize_algo),
        pad: pad_of(p.pad),
        pad_color: p.pad_color,
        res_candidates: p.candidates[..2 * n_candidates]
            .chunks_exact(2)
            .map(|wh| (wh[0], wh[1]))
            .collect(),
        resize_algo_rf: algo_of(p.resize_algo_rf),
        resize_algo_ov: algo_of(p.resize_algo_ov),
        pad_rf: pad_of(p.pad_rf),
        pad_ov: pad_of(p.pad_ov),
        pad_color_rf: p.pad_color_rf,
        pad_color_ov: p.pad_color_ov,
        mean: p.mean,
        std: p.std,
    })
}

extern "C" {
    fn elelem_mtmd_whisper_mel(n_mel: i32, samples: *const f32, n_samples: usize, out: *mut f32, cap: i64) -> i64;
    fn elelem_miniaudio_decode(buf: *const u8, len: usize, rate: i32, out: *mut f32, cap: i64) -> i64;
}

/// `tools/mtmd/mtmd-audio.cpp`'s whisper preprocessor (ultravox, qwen2a, voxtral) with
/// `n_mel` bands on 16 kHz `samples`: its 3000-frame pieces, `n_mel * 3000` floats each,
/// one after another, or `None` where mtmd refuses the audio.
pub fn whisper_mel(n_mel: usize, samples: &[f32]) -> Option<Vec<f32>> {
    // mtmd pads 30 s of silence and drops the last incomplete piece.
    let pieces = (samples.len().max(201) / 160 + 3001) / 3000;
    let mut out = vec![0.0; pieces * n_mel * 3000];
    // SAFETY: mtmd reads `samples`; the shim writes at most `out.len()` floats.
    let n = unsafe {
        elelem_mtmd_whisper_mel(
            n_mel as i32,
            samples.as_ptr(),
            samples.len(),
            out.as_mut_ptr(),
            out.len() as i64,
        )
    };
    assert_ne!(n, -2, "more pieces than expected");
    (n >= 0).then(|| {
        out.truncate(n as usize);
        out
    })
}

/// miniaudio's decoding of an audio file to mono floats at `rate`, as mtmd-helper's
/// `decode_audio_from_buf` asks for it (at most `max_samples`), or `None` where it fails.
pub fn miniaudio_decode(bytes: &[u8], rate: u32, max_samples: usize) -> Option<Vec<f32>> {
    let mut out = vec![0.0; max_samples];
    // SAFETY: miniaudio reads `bytes`; the shim writes at most `out.len()` floats.
    let n = unsafe {
        elelem_miniaudio_decode(
            bytes.as_ptr(),
            bytes.len(),
            rate as i32,
            out.as_mut_ptr(),
            out.len() as i64,
        )
    };
    (n >= 0).then(|| {
        out.truncate(n as usize);
        out
    })
}

/// elelem's samples of an audio file (`audio::decode_audio`) against mtmd-helper's
/// (miniaudio's decoder asked for f32, mono, 16 kHz): the count of samples where they are
/// the same, bit for bit, or what differs (the first difference named).
pub fn compare_decoding(bytes: &[u8]) -> Result<usize, String> {
    let ours = elelem_engine::audio::decode_audio(bytes).map_err(|e| e.to_string())?;
    let theirs = miniaudio_decode(bytes, 16_000, ours.len() + 16).ok_or("miniaudio does not decode it")?;
    if ours.len() != theirs.len() {
        return Err(format!("{} samples, miniaudio's {}", ours.len(), theirs.len()));
    }
    match (0..ours.len()).find(|&i| ours[i].to_bits() != theirs[i].to_bits()) {
        None => Ok(ours.len()),
        Some(i) => {
            let differ = ours
                .iter()
                .zip(&theirs)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            Err(format!(
                "{differ} of {} samples differ, the first at {i}: ours {:e}, miniaudio's {:e}",
                ours.len(),
                ours[i],
                theirs[i]
            ))
        }
    }
}
