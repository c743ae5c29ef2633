//! Hostile images into `elelem_engine::vision`: random and mutated bytes, lying headers,
//! decompression bombs, cut files and impossible preprocessing parameters must each be an
//! `Error::Image`, never a panic, and nothing may allocate beyond what the size limits
//! allow (a header over them: nothing the size of the image at all). A property test over
//! many seeds, with this binary's allocator keeping each thread's largest allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Cursor;

use elelem_engine::vision::{self, ImageParams, ImageU8, Pad, Preprocessor, ResizeAlgo, MAX_IMAGE_PIXELS};
use elelem_engine::Error;
use elelem_testkit::xorshift::XorShift;
use image::{DynamicImage, ImageFormat, RgbImage, RgbaImage};

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, noting each thread's largest request.
struct Watch;

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Watch = Watch;

/// The largest allocation `f` makes on this thread.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

/// What decoding may allocate at once: the image at 8 bytes a pixel, and slack.
const BUDGET: usize = MAX_IMAGE_PIXELS as usize * 8 + (64 << 20);

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let rgb = RgbImage::from_fn(23, 17, |x, y| {
        image::Rgb([(x * 11) as u8, (y * 15) as u8, ((x ^ y) * 7) as u8])
    });
    let rgba = RgbaImage::from_fn(9, 30, |x, y| {
        image::Rgba([(x * 27) as u8, (y * 8) as u8, 99, (x * y) as u8])
    });
    let mut out = Vec::new();
    for (name, format, img) in [
        ("png", ImageFormat::Png, DynamicImage::ImageRgb8(rgb.clone())),
        ("png-rgba", ImageFormat::Png, DynamicImage::ImageRgba8(rgba.clone())),
        ("jpeg", ImageFormat::Jpeg, DynamicImage::ImageRgb8(rgb.clone())),
        ("gif", ImageFormat::Gif, DynamicImage::ImageRgba8(rgba.clone())),
        ("webp", ImageFormat::WebP, DynamicImage::ImageRgba8(rgba)),
    ] {
        let mut bytes = Cursor::new(Vec::new());
        if format == ImageFormat::WebP {
            img.write_with_encoder(image::codecs::webp::WebPEncoder::new_lossless(&mut bytes))
                .unwrap();
        } else {
            img.write_to(&mut bytes, format).unwrap();
        }
        out.push((name, bytes.into_inner()));
    }
    out
}

/// Decoded, then preprocessed by a family: any outcome but a panic or an allocation
/// beyond the budget.
fn survive(what: &str, bytes: &[u8]) {
    let (result, largest) = largest_allocation(|| {
        let img = vision::decode(bytes)?;
        let params = ImageParams {
            image_size: 64,
            patch_size: 8,
            n_merge: 2,
            min_pixels: 256,
            max_pixels: 64 * 64,
            ..ImageParams::default()
        };
        vision::preprocess(Preprocessor::DynSize, &params, &img)?;
        vision::preprocess(Preprocessor::FixedSize, &params, &img)
    });
    assert!(largest <= BUDGET, "{what}: an allocation of {largest} bytes");
    if let Err(e) = result {
        assert!(matches!(e, Error::Image(_)), "{what}: {e:?}");
    }
}

#[test]
fn mutated_and_random_bytes_are_errors_not_panics() {
    let mut rng = XorShift(0x5EED);
    let seeds = seeds();
    for (name, seed) in &seeds {
        assert!(vision::decode(seed).is_ok(), "{name}");
        // Every cut.
        for len in 0..seed.len() {
            survive(&format!("{name} cut at {len}"), &seed[..len]);
        }
        // Bytes flipped, overwritten, inserted, removed; 400 mutants a seed.
        for i in 0..400 {
            let mut bytes = seed.clone();
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(bytes.len());
                match rng.below(4) {
                    0 => bytes[at] ^= 1 << rng.below(8),
                    1 => bytes[at] = rng.next_u64() as u8,
                    2 => bytes.insert(at, rng.next_u64() as u8),
                    _ => {
                        bytes.remove(at);
                    }
                }
                if bytes.is_empty() {
                    break;
                }
            }
            survive(&format!("{name} mutant {i}"), &bytes);
        }
    }
    // Random bytes, alone and behind each format's signature.
    let signatures: [&[u8]; 5] = [
        b"",
        b"\x89PNG\r\n\x1a\n",
        b"\xFF\xD8\xFF",
        b"GIF89a",
        b"RIFF\0\0\0\0WEBP",
    ];
    for i in 0..500 {
        let mut bytes = signatures[i % signatures.len()].to_vec();
        bytes.extend((0..rng.below(300)).map(|_| rng.next_u64() as u8));
        survive(&format!("random {i}"), &bytes);
    }
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    let mut crc = !0u32;
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    for &b in kind.iter().chain(data) {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&(!crc).to_be_bytes());
}

/// A PNG whose header says `w x h` (8-bit RGB), with `idat` as its data.
fn png_claiming(w: u32, h: u32, depth: u8, color: u8, idat: &[u8]) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, 0]);
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(&mut out, b"IDAT", idat);
    png_chunk(&mut out, b"IEND", &[]);
    out
}

/// A baseline JPEG's start of frame claiming `w x h`, and nothing after it.
fn jpeg_claiming(w: u16, h: u16) -> Vec<u8> {
    let mut out = vec![0xFF, 0xD8, 0xFF, 0xC0, 0, 17, 8];
    out.extend_from_slice(&h.to_be_bytes());
    out.extend_from_slice(&w.to_be_bytes());
    out.extend_from_slice(&[3, 1, 0x11, 0, 2, 0x11, 1, 3, 0x11, 1]);
    out
}

/// A GIF whose logical screen is `w x h`, with a 1x1 frame.
fn gif_claiming(w: u16, h: u16) -> Vec<u8> {
    let mut out = b"GIF89a".to_vec();
    out.extend_from_slice(&w.to_le_bytes());
    out.extend_from_slice(&h.to_le_bytes());
    out.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 255, 255, 255]);
    out.extend_from_slice(&[0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0, 0x3B]);
    out
}

/// A WebP (VP8X) whose canvas is `w x h`.
fn webp_claiming(w: u32, h: u32) -> Vec<u8> {
    let mut chunk = b"VP8X".to_vec();
    chunk.extend_from_slice(&10u32.to_le_bytes());
    chunk.extend_from_slice(&[0, 0, 0, 0]);
    chunk.extend_from_slice(&(w - 1).to_le_bytes()[..3]);
    chunk.extend_from_slice(&(h - 1).to_le_bytes()[..3]);
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(4 + chunk.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WEBP");
    out.extend_from_slice(&chunk);
    out
}

/// zlib's stream of `n` zero bytes, compressed (a decompression bomb's payload).
fn zeros_deflated(n: usize) -> Vec<u8> {
    // Fixed Huffman: a literal 0, then <length 258, distance 1> over and over.
    let mut bits: Vec<bool> = Vec::new();
    let put = |value: u32, count: u32, bits: &mut Vec<bool>| (0..count).for_each(|i| bits.push(value >> i & 1 == 1));
    let put_rev =
        |code: u32, len: u32, bits: &mut Vec<bool>| (0..len).rev().for_each(|i| bits.push(code >> i & 1 == 1));
    put(1, 1, &mut bits); // final
    put(1, 2, &mut bits); // fixed Huffman
    put_rev(0x30, 8, &mut bits); // literal 0
    let mut left = n - 1;
    while left >= 258 {
        put_rev(0b1100_0101, 8, &mut bits); // length code 285: 258
        put_rev(0, 5, &mut bits); // distance code 0: 1
        left -= 258;
    }
    for _ in 0..left {
        put_rev(0x30, 8, &mut bits);
    }
    put_rev(0, 7, &mut bits); // end of block
    let mut out = vec![0x78, 0x01];
    out.extend(
        bits.chunks(8)
            .map(|c| c.iter().enumerate().fold(0u8, |b, (i, &on)| b | (u8::from(on) << i))),
    );
    out.extend_from_slice(&1u32.to_be_bytes()); // adler32 of zeros: a = 1, b = 0 (wrong for n, read last)
    out
}

/// Each lying header, with its error, and the largest allocation decoding it made.
#[test]
fn headers_over_the_limits_are_refused_before_allocating() {
    let bomb = zeros_deflated(1 << 20);
    let seeds = seeds();
    let seed = |name: &str| seeds.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    // A real JPEG whose frame header says 40000x40000.
    let mut jpeg_big = seed("jpeg");
    let sof = jpeg_big.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    jpeg_big[sof + 5..sof + 9].copy_from_slice(&[0x9C, 0x40, 0x9C, 0x40]);
    // A real lossless WebP whose header says 16383x16383 (14 bits each, less one).
    let mut webp_big = seed("webp");
    let vp8l = webp_big.windows(4).position(|w| w == b"VP8L").unwrap();
    webp_big[vp8l + 9..vp8l + 12].copy_from_slice(&[0xFE, 0xBF, 0xFF]);
    webp_big[vp8l + 12] |= 0x0F;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("nothing", Vec::new()),
        ("not an image", b"BM\x36\0\0\0 a bitmap".to_vec()),
        ("PNG 0x10", png_claiming(0, 10, 8, 2, &[])),
        ("PNG 100000x100000", png_claiming(100_000, 100_000, 8, 2, &bomb)),
        ("PNG 32769x1", png_claiming(32_769, 1, 8, 2, &bomb)),
        ("PNG 30000x30000, 1-bit bomb", png_claiming(30_000, 30_000, 1, 0, &bomb)),
        ("PNG 8000x8000", png_claiming(8_000, 8_000, 8, 2, &bomb)),
        ("JPEG 65535x65535", jpeg_claiming(65_535, 65_535)),
        ("JPEG 0x0", jpeg_claiming(0, 0)),
        ("JPEG 40000x40000 (a real file's frame header)", jpeg_big),
        ("GIF 65535x65535", gif_claiming(65_535, 65_535)),
        ("GIF 0x0", gif_claiming(0, 0)),
        ("WebP 16777216x16777216", webp_claiming(1 << 24, 1 << 24)),
        ("WebP 40000x40000", webp_claiming(40_000, 40_000)),
        ("WebP lossless 16383x16383 (a real file's header)", webp_big),
    ];
    for (what, bytes) in cases {
        let (result, largest) = largest_allocation(|| vision::decode(&bytes));
        let Err(Error::Image(message)) = result else {
            panic!("{what}: {result:?}");
        };
        eprintln!("{what}: {message} (largest allocation: {largest} bytes)");
        assert!(largest < 4 << 20, "{what}: an allocation of {largest} bytes");
    }
}

/// Parameters mtmd would assert on, and sizes it would refuse, are errors here.
#[test]
fn impossible_preprocessing_is_an_error() {
    let img = ImageU8::new(40, 30, vec![7; 40 * 30 * 3]).unwrap();
    let sliver = ImageU8::new(32_768, 1, vec![200; 32_768 * 3]).unwrap();
    let good = ImageParams {
        image_size: 64,
        patch_size: 8,
        n_merge: 2,
        longest_edge: 64,
        min_pixels: 256,
        max_pixels: 4096,
        mean: [0.5; 3],
        std: [0.5; 3],
        ..ImageParams::default()
    };
    let bad = [
        (
            Preprocessor::FixedSize,
            ImageParams {
                image_size: 0,
                ..good.clone()
            },
        ),
        (
            Preprocessor::FixedSize,
            ImageParams {
                image_size: 100_000,
                ..good.clone()
            },
        ),
        (
            Preprocessor::FixedSize,
            ImageParams {
                std: [0.5, 0.0, 0.5],
                ..good.clone()
            },
        ),
        (
            Preprocessor::DynSize,
            ImageParams {
                min_pixels: -1,
                ..good.clone()
            },
        ),
        (
            Preprocessor::DynSize,
            ImageParams {
                patch_size: 0,
                ..good.clone()
            },
        ),
        (
            Preprocessor::LongestEdge,
            ImageParams {
                longest_edge: 0,
                ..good.clone()
            },
        ),
        (
            Preprocessor::LlavaUhd,
            ImageParams {
                res_candidates: vec![(0, 64)],
                ..good.clone()
            },
        ),
        (
            Preprocessor::Idefics3,
            ImageParams {
                image_size: -3,
                ..good.clone()
            },
        ),
        (
            Preprocessor::LongestEdge,
            ImageParams {
                longest_edge: i32::MAX,
                ..good.clone()
            },
        ),
        (
            Preprocessor::DynSize,
            ImageParams {
                min_pixels: i32::MAX,
                max_pixels: i32::MAX,
                ..good.clone()
            },
        ),
        (
            Preprocessor::DynSize,
            ImageParams {
                n_merge: i32::MAX,
                ..good.clone()
            },
        ),
        (
            Preprocessor::LlavaUhd,
            ImageParams {
                patch_size: i32::MIN,
                ..good.clone()
            },
        ),
        (
            Preprocessor::Lfm2,
            ImageParams {
                n_merge: 0,
                ..good.clone()
            },
        ),
    ];
    for (kind, params) in bad {
        let result = vision::preprocess(kind, &params, &img);
        assert!(
            matches!(result, Err(Error::Image(_))),
            "{kind:?} {params:?}: {result:?}"
        );
    }
    // The widest parameters accepted, on a 1x1 image and a small one: results or errors.
    let dot = ImageU8::new(1, 1, vec![1, 2, 3]).unwrap();
    let widest = ImageParams {
        image_size: 8192,
        patch_size: 8192,
        n_merge: 64,
        longest_edge: 65536,
        min_pixels: 1 << 30,
        max_pixels: 1 << 30,
        res_candidates: vec![(8192, 8192), (1, 8192)],
        ..good.clone()
    };
    let unit_patches = ImageParams {
        patch_size: 1,
        n_merge: 1,
        ..widest.clone()
    };
    let kinds = [
        Preprocessor::FixedSize,
        Preprocessor::DynSize,
        Preprocessor::LongestEdge,
        Preprocessor::LlavaUhd,
        Preprocessor::Idefics3,
        Preprocessor::Lfm2,
    ];
    for kind in kinds {
        for (params, image) in [(&widest, &dot), (&widest, &img), (&unit_patches, &dot)] {
            let (result, largest) = largest_allocation(|| vision::preprocess(kind, params, image));
            assert!(largest <= BUDGET, "{kind:?}: an allocation of {largest} bytes");
            if let Err(e) = result {
                assert!(matches!(e, Error::Image(_)), "{kind:?}: {e:?}");
            }
        }
    }
    // A 32768x1 sliver through every family: a result or an error, within the limits.
    for kind in [
        Preprocessor::FixedSize,
        Preprocessor::DynSize,
        Preprocessor::LongestEdge,
        Preprocessor::LlavaUhd,
        Preprocessor::Idefics3,
        Preprocessor::Lfm2,
    ] {
        for (algo, pad) in [(ResizeAlgo::Bicubic, Pad::Ceil), (ResizeAlgo::Lanczos, Pad::Nearest)] {
            let params = ImageParams {
                resize_algo: algo,
                pad,
                min_pixels: -1,
                max_pixels: -1,
                longest_edge: if kind == Preprocessor::Idefics3 { 1536 } else { 64 },
                ..good.clone()
            };
            let params = if matches!(kind, Preprocessor::DynSize | Preprocessor::Lfm2) {
                good.clone()
            } else {
                params
            };
            let (result, largest) = largest_allocation(|| vision::preprocess(kind, &params, &sliver));
            assert!(largest <= BUDGET, "{kind:?}: an allocation of {largest} bytes");
            if let Err(e) = result {
                assert!(matches!(e, Error::Image(_)), "{kind:?}: {e:?}");
            }
        }
    }
}
