//! Image files to RGB8, as mtmd-helper loads them (`stbi_load_from_memory(..., 3)`):
//! alpha dropped (never blended), grey repeated into R, G and B, palettes expanded,
//! 16 bits a channel cut to their high byte, no colour profile, gamma or orientation
//! applied. Decoding is the `image` crate's (PNG, WebP, GIF's first frame), but JPEG's:
//! the standard leaves its IDCT's last bits and chroma upsampling to the decoder, so a
//! JPEG is decoded by mtmd's own, stb_image (compiled from the pinned package by
//! `ggml-sys`), for the pixels mtmd sees, bit for bit.
//!
//! Untrusted bytes: the format is told by its signature, the size is read from the header
//! and checked against [`MAX_IMAGE_SIDE`] and [`MAX_IMAGE_PIXELS`] before anything the
//! size of the image is allocated, and the decoder itself runs under those limits and an
//! allocation budget. Every failure is an [`Error::Image`], never a panic.

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};

use super::image::{check_size, ImageU8, MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};
use crate::{Error, Result};

/// What the decoder may allocate at once: the image at 8 bytes a pixel (RGBA, 16 bits a
/// channel, the widest PNG) and room for its own tables.
const MAX_DECODER_ALLOC: u64 = MAX_IMAGE_PIXELS * 8 + (64 << 20);

/// The format its first bytes say, among those accepted.
fn sniff(bytes: &[u8]) -> Result<ImageFormat> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Ok(ImageFormat::Png)
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Ok(ImageFormat::Jpeg)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Ok(ImageFormat::Gif)
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Ok(ImageFormat::WebP)
    } else if bytes.is_empty() {
        Err(Error::Image("the image is empty (0 bytes)".into()))
    } else {
        Err(Error::Image(
            "not an image in a format elelem reads (PNG, JPEG, WebP or GIF)".into(),
        ))
    }
}

fn decode_error(format: ImageFormat, e: image::ImageError) -> Error {
    let name = format!("{format:?}").to_uppercase();
    match e {
        image::ImageError::Limits(l) => Error::Image(format!(
            "{name} image beyond the limits ({MAX_IMAGE_SIDE} pixels a side, {MAX_IMAGE_PIXELS} in all): {l}"
        )),
        e => Error::Image(format!("invalid {name} image: {e}")),
    }
}

/// Decodes a PNG, JPEG, WebP or GIF (its first frame) to RGB8 as mtmd loads it.
///
/// # Errors
/// [`Error::Image`] for another format, corrupt or truncated data, an empty image, or one
/// beyond [`MAX_IMAGE_SIDE`] or [`MAX_IMAGE_PIXELS`].
pub fn decode(bytes: &[u8]) -> Result<ImageU8> {
    let format = sniff(bytes)?;
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_SIDE as u32);
    limits.max_image_height = Some(MAX_IMAGE_SIDE as u32);
    limits.max_alloc = Some(MAX_DECODER_ALLOC);
    reader.limits(limits);
    // The header alone: its size is checked before the pixels are read.
    let decoder = reader.into_decoder().map_err(|e| decode_error(format, e))?;
    let (width, height) = decoder.dimensions();
    check_size(u64::from(width), u64::from(height))?;
    if format == ImageFormat::Jpeg {
        return stb_jpeg(bytes, (width as usize, height as usize));
    }
    let image = DynamicImage::from_decoder(decoder).map_err(|e| decode_error(format, e))?;
    let gif = format == ImageFormat::Gif;
    let mut rgb = to_rgb8(image, gif)?;
    if gif {
        gif_background(bytes, &mut rgb);
    }
    Ok(rgb)
}

/// A JPEG of the size its header gave (checked), decoded by stb_image to RGB8.
fn stb_jpeg(bytes: &[u8], (width, height): (usize, usize)) -> Result<ImageU8> {
    let len = i32::try_from(bytes.len()).map_err(|_| Error::Image("the JPEG is larger than 2 GiB".into()))?;
    let (mut w, mut h) = (0, 0);
    // SAFETY: stb reads `len` bytes of `bytes` and writes the two sizes; the pixels it
    // returns are `w * h * 3` bytes, copied out and freed here.
    unsafe {
        let pixels = ggml_sys::elelem_stb_jpeg(bytes.as_ptr(), len, &mut w, &mut h);
        if pixels.is_null() {
            let why = std::ffi::CStr::from_ptr(ggml_sys::elelem_stb_failure()).to_string_lossy();
            return Err(Error::Image(format!("invalid JPEG image: {why}")));
        }
        let size = (w as usize, h as usize);
        let copied = std::slice::from_raw_parts(pixels, size.0 * size.1 * 3).to_vec();
        ggml_sys::elelem_stb_free(pixels.cast());
        if size != (width, height) {
            return Err(Error::Image(format!(
                "invalid JPEG image: its header says {width}x{height}, its frame {}x{}",
                size.0, size.1
            )));
        }
        Ok(ImageU8 {
            width,
            height,
            pixels: copied,
        })
    }
}

/// stb_image's conversion to 3 channels: grey repeated, alpha dropped, 16 bits to their
/// high byte. A GIF's transparent pixels (`gif`) are black there: stb leaves them unwritten.
fn to_rgb8(image: DynamicImage, gif: bool) -> Result<ImageU8> {
    let (width, height) = (image.width() as usize, image.height() as usize);
    let pixels: Vec<u8> = match image {
        DynamicImage::ImageRgb8(i) => i.into_raw(),
        DynamicImage::ImageRgba8(i) => i
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| {
                if gif && p[3] == 0 {
                    [0, 0, 0]
                } else {
                    [p[0], p[1], p[2]]
                }
            })
            .collect(),
        DynamicImage::ImageLuma8(i) => i.into_raw().iter().flat_map(|&l| [l, l, l]).collect(),
        DynamicImage::ImageLumaA8(i) => i.into_raw().chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
        DynamicImage::ImageRgb16(i) => i.into_raw().iter().map(|&v| (v >> 8) as u8).collect(),
        DynamicImage::ImageRgba16(i) => i
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| [(p[0] >> 8) as u8, (p[1] >> 8) as u8, (p[2] >> 8) as u8])
            .collect(),
        DynamicImage::ImageLuma16(i) => i.into_raw().iter().flat_map(|&l| [(l >> 8) as u8; 3]).collect(),
        DynamicImage::ImageLumaA16(i) => i
            .into_raw()
            .chunks_exact(2)
            .flat_map(|p| [(p[0] >> 8) as u8; 3])
            .collect(),
        other => return Err(Error::Image(format!("unsupported pixel type {:?}", other.color()))),
    };
    Ok(ImageU8 { width, height, pixels })
}

/// stb_image paints the pixels of a GIF's logical screen that its first frame does not
/// cover with the background colour when the background index is not 0, and copies that
/// colour from its palette, which it keeps in BGR order, as it is: red and blue swapped.
/// The `image` crate leaves them transparent black. Reads the screen descriptor, the global
/// palette and the first frame's rectangle from the bytes that decoded already.
fn gif_background(bytes: &[u8], rgb: &mut ImageU8) {
    let Some(&[flags, bg_index]) = bytes.get(10..12).map(|b| <&[u8; 2]>::try_from(b).unwrap()) else {
        return;
    };
    if bg_index == 0 {
        return;
    }
    let mut at = 13;
    let mut color = [0u8; 3];
    if flags & 0x80 != 0 {
        let entries = 1usize << ((flags & 7) + 1);
        if let Some(c) = bytes.get(at + 3 * bg_index as usize..at + 3 * bg_index as usize + 3) {
            if (bg_index as usize) < entries {
                color = [c[2], c[1], c[0]];
            }
        }
        at += 3 * entries;
    }
    // Extensions up to the first image descriptor.
    let rect = loop {
        match bytes.get(at) {
            Some(0x21) => {
                at += 2;
                while let Some(&len) = bytes.get(at) {
                    at += 1 + len as usize;
                    if len == 0 {
                        break;
                    }
                }
            }
            Some(0x2C) => {
                let Some(d) = bytes.get(at + 1..at + 9) else { return };
                let v = |i: usize| usize::from(u16::from_le_bytes([d[i], d[i + 1]]));
                break (v(0), v(2), v(4), v(6));
            }
            _ => return,
        }
    };
    let (x0, y0, w, h) = rect;
    for y in 0..rgb.height {
        for x in 0..rgb.width {
            if x < x0 || x >= x0 + w || y < y0 || y >= y0 + h {
                let i = (y * rgb.width + x) * 3;
                rgb.pixels[i..i + 3].copy_from_slice(&color);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_their_signature() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n....").unwrap(), ImageFormat::Png);
        assert_eq!(sniff(b"\xFF\xD8\xFF\xE0").unwrap(), ImageFormat::Jpeg);
        assert_eq!(sniff(b"GIF87a").unwrap(), ImageFormat::Gif);
        assert_eq!(sniff(b"RIFF\x10\0\0\0WEBPVP8L").unwrap(), ImageFormat::WebP);
        for bytes in [&b""[..], b"BM6\0", b"RIFF\x10\0\0\0WAVE", b"\0\0\0\x0cjP  "] {
            assert!(matches!(sniff(bytes), Err(Error::Image(_))), "{bytes:?}");
        }
    }

    #[test]
    fn sizes_are_checked() {
        assert!(check_size(1, 1).is_ok());
        assert!(check_size(MAX_IMAGE_SIDE, 1).is_ok());
        for (w, h) in [
            (0, 5),
            (5, 0),
            (MAX_IMAGE_SIDE + 1, 1),
            (1, MAX_IMAGE_SIDE + 1),
            (8192, 8192),
        ] {
            assert!(matches!(check_size(w, h), Err(Error::Image(_))), "{w}x{h}");
        }
    }

    #[test]
    fn conversion_is_stb_images() {
        use image::{ImageBuffer, LumaA, Rgb, Rgba};
        let la = ImageBuffer::<LumaA<u8>, _>::from_raw(1, 1, vec![77, 0]).unwrap();
        assert_eq!(
            to_rgb8(DynamicImage::ImageLumaA8(la), false).unwrap().pixels,
            [77, 77, 77]
        );
        // Alpha dropped, never blended; a GIF's transparent pixel black.
        let rgba = ImageBuffer::<Rgba<u8>, _>::from_raw(1, 1, vec![10, 20, 30, 0]).unwrap();
        assert_eq!(
            to_rgb8(DynamicImage::ImageRgba8(rgba.clone()), false).unwrap().pixels,
            [10, 20, 30]
        );
        assert_eq!(to_rgb8(DynamicImage::ImageRgba8(rgba), true).unwrap().pixels, [0, 0, 0]);
        // 16 bits to the high byte (stb's `>> 8`, not a rounding).
        let rgb16 = ImageBuffer::<Rgb<u16>, _>::from_raw(1, 1, vec![0x12FF, 0x0080, 0xFFFF]).unwrap();
        assert_eq!(
            to_rgb8(DynamicImage::ImageRgb16(rgb16), false).unwrap().pixels,
            [0x12, 0x00, 0xFF]
        );
    }
}
