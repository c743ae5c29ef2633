//! The images of the vision path (mtmd's `clip_image_u8` and `clip_image_f32`), and the
//! limits on their size.

use crate::{Error, Result};

/// The widest or tallest image accepted, in pixels (mtmd's resize refuses targets beyond
/// 65536 a side; no model reads more than a few thousand).
pub const MAX_IMAGE_SIDE: u64 = 1 << 15;

/// The most pixels an image may have (32 Mi: 8192x4096, or a 6000x5000 photograph);
/// its RGB8 copy is then at most 96 MiB.
pub const MAX_IMAGE_PIXELS: u64 = 1 << 25;

/// Checks an image's size against the limits.
pub(super) fn check_size(width: u64, height: u64) -> Result<()> {
    if width == 0 || height == 0 {
        return Err(Error::Image(format!("the image is empty ({width}x{height})")));
    }
    if width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE {
        return Err(Error::Image(format!(
            "the image is {width}x{height}: a side may be at most {MAX_IMAGE_SIDE} pixels"
        )));
    }
    if width * height > MAX_IMAGE_PIXELS {
        return Err(Error::Image(format!(
            "the image is {width}x{height} ({} pixels): at most {MAX_IMAGE_PIXELS} are accepted",
            width * height
        )));
    }
    Ok(())
}

/// Checks an RGB image's size and that it has `len` values (`unit`: bytes or floats), three
/// a pixel.
fn check_rgb(width: usize, height: usize, len: usize, unit: &str) -> Result<()> {
    check_size(width as u64, height as u64)?;
    if len != width * height * 3 {
        return Err(Error::Image(format!(
            "an RGB image of {width}x{height} holds {} {unit}, not {len}",
            width * height * 3
        )));
    }
    Ok(())
}

/// An RGB image, 8 bits a channel, rows top to bottom, `RGBRGB...` (mtmd's `clip_image_u8`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageU8 {
    pub(super) width: usize,
    pub(super) height: usize,
    pub(super) pixels: Vec<u8>,
}

impl ImageU8 {
    /// An image from its `width * height * 3` bytes.
    ///
    /// # Errors
    /// [`Error::Image`] when a side is 0 or beyond the limits, or the bytes are not
    /// `width * height * 3`.
    pub fn new(width: usize, height: usize, pixels: Vec<u8>) -> Result<Self> {
        check_rgb(width, height, pixels.len(), "bytes")?;
        Ok(Self { width, height, pixels })
    }

    /// An image of one colour (no size check: for the preprocessing's own canvases).
    pub(crate) fn filled(width: usize, height: usize, color: [u8; 3]) -> Self {
        let pixels = color.iter().copied().cycle().take(width * height * 3).collect();
        Self { width, height, pixels }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    /// The `RGBRGB...` bytes.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }
}

/// A preprocessed image: `RGBRGB...` floats, normalized (mtmd's `clip_image_f32`).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageF32 {
    width: usize,
    height: usize,
    data: Vec<f32>,
}

impl ImageF32 {
    /// An image already preprocessed elsewhere: `width * height * 3` interleaved `RGBRGB...`
    /// floats (what an encoder reads; for a projector whose preprocessing elelem does not
    /// implement, or to feed the same floats to another encoder).
    ///
    /// # Errors
    /// [`Error::Image`] when a side is 0 or beyond the limits, or the floats are not
    /// `width * height * 3`.
    pub fn new(width: usize, height: usize, data: Vec<f32>) -> Result<Self> {
        check_rgb(width, height, data.len(), "floats")?;
        Ok(Self { width, height, data })
    }

    /// mtmd's `from_u8` then `normalize`: `(v / 255 - mean) / std`, in `f32`, in that order.
    pub(super) fn normalized(img: &ImageU8, mean: &[f32; 3], std: &[f32; 3]) -> Self {
        let data = img
            .pixels
            .chunks_exact(3)
            .flat_map(|px| (0..3).map(move |c| (f32::from(px[c]) / 255.0 - mean[c]) / std[c]))
            .collect();
        Self {
            width: img.width,
            height: img.height,
            data,
        }
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    /// The `RGBRGB...` values.
    pub fn data(&self) -> &[f32] {
        &self.data
    }
}
