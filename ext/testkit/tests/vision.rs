//! The engine's image decoding and preprocessing (`elelem_engine::vision`) against the
//! pinned llama.cpp's (`elelem_testkit::mtmd`: stb_image as mtmd-helper calls it, and
//! `tools/mtmd/mtmd-image.cpp`'s preprocessors): generated images of many sizes and
//! kinds, in each format, must decode to the same pixels and preprocess to the same
//! `f32` bits, for the preprocessing of each family with the parameters of the models
//! that use it.

use std::io::Cursor;

use elelem_engine::vision::{self, ImageU8, Preprocessor};
use elelem_engine::Error;
use elelem_testkit::xorshift::XorShift;
use elelem_testkit::{mtmd, preprocessors};
use image::{DynamicImage, ImageBuffer, ImageFormat, Luma, LumaA, Rgb, Rgba};

/// Sizes: tiny, odd, square, the usual, and extreme aspect ratios.
const SIZES: &[(u32, u32)] = &[
    (1, 1),
    (2, 3),
    (7, 5),
    (16, 16),
    (33, 17),
    (224, 224),
    (301, 199),
    (479, 853),
    (640, 480),
    (1000, 37),
    (37, 1000),
    (1, 300),
    (300, 1),
    (1283, 961),
];

/// RGB pixels: gradients, a few hard edges and noise (so that resampling over- and
/// undershoots and clamps).
fn pixels(w: u32, h: u32, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut out = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let edge = if (x / 7 + y / 5) % 4 == 0 { 255 } else { 0 };
            let noise = rng.byte();
            let r = ((x * 255) / w.max(2)) as u8;
            let g = ((y * 255) / h.max(2)) as u8;
            let b = edge ^ (noise & 0x3F);
            out.extend_from_slice(&[r.wrapping_add(noise >> 4), g, b]);
        }
    }
    out
}

fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut bytes = Cursor::new(Vec::new());
    match format {
        ImageFormat::WebP => img
            .write_with_encoder(image::codecs::webp::WebPEncoder::new_lossless(&mut bytes))
            .unwrap(),
        ImageFormat::Jpeg => img
            .write_with_encoder(image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 90))
            .unwrap(),
        f => img.write_to(&mut bytes, f).unwrap(),
    }
    bytes.into_inner()
}

/// The test files: `(name, bytes, the pixels they hold when the format is lossless)`.
fn corpus() -> Vec<(String, Vec<u8>, Option<Vec<u8>>)> {
    let mut files = Vec::new();
    for (i, &(w, h)) in SIZES.iter().enumerate() {
        let rgb = pixels(w, h, i as u64);
        let rgb_img = ImageBuffer::<Rgb<u8>, _>::from_raw(w, h, rgb.clone()).unwrap();
        let grey: Vec<u8> = rgb.chunks_exact(3).map(|p| p[0] / 2 + p[2] / 2).collect();
        let alpha: Vec<u8> = rgb.chunks_exact(3).map(|p| p[1] ^ p[2]).collect();
        let rgba: Vec<u8> = rgb
            .chunks_exact(3)
            .zip(&alpha)
            .flat_map(|(p, &a)| [p[0], p[1], p[2], a])
            .collect();
        let grey_alpha: Vec<u8> = grey.iter().zip(&alpha).flat_map(|(&g, &a)| [g, a]).collect();
        let rgb16: Vec<u16> = rgb
            .iter()
            .enumerate()
            .map(|(j, &v)| u16::from(v) << 8 | (j as u16 * 37) & 0xFF)
            .collect();
        let grey_rgb = |g: &[u8]| g.iter().flat_map(|&v| [v, v, v]).collect::<Vec<u8>>();
        let kinds: Vec<(&str, DynamicImage, Vec<u8>)> = vec![
            ("rgb", DynamicImage::ImageRgb8(rgb_img), rgb.clone()),
            (
                "rgba",
                DynamicImage::ImageRgba8(ImageBuffer::<Rgba<u8>, _>::from_raw(w, h, rgba).unwrap()),
                rgb.clone(),
            ),
            (
                "grey",
                DynamicImage::ImageLuma8(ImageBuffer::<Luma<u8>, _>::from_raw(w, h, grey.clone()).unwrap()),
                grey_rgb(&grey),
            ),
            (
                "grey-alpha",
                DynamicImage::ImageLumaA8(ImageBuffer::<LumaA<u8>, _>::from_raw(w, h, grey_alpha).unwrap()),
                grey_rgb(&grey),
            ),
            (
                "rgb16",
                DynamicImage::ImageRgb16(ImageBuffer::<Rgb<u16>, _>::from_raw(w, h, rgb16).unwrap()),
                rgb.clone(),
            ),
        ];
        for (kind, img, lossless) in kinds {
            let formats: &[ImageFormat] = match kind {
                "rgb16" => &[ImageFormat::Png],
                "grey-alpha" => &[ImageFormat::Png, ImageFormat::WebP],
                "rgb" | "grey" => &[ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::WebP, ImageFormat::Gif],
                _ => &[ImageFormat::Png, ImageFormat::WebP, ImageFormat::Gif],
            };
            for &format in formats {
                // GIF's 256 colours: only the small ones (the encoder's quantizer is slow).
                if format == ImageFormat::Gif && w * h > 400 * 400 {
                    continue;
                }
                let img = if format == ImageFormat::Jpeg && kind == "grey" {
                    img.clone()
                } else if format == ImageFormat::Gif {
                    DynamicImage::ImageRgba8(img.to_rgba8())
                } else if format == ImageFormat::Jpeg || format == ImageFormat::WebP && kind == "grey" {
                    DynamicImage::ImageRgb8(img.to_rgb8())
                } else {
                    img.clone()
                };
                let bytes = encode(&img, format);
                let exact = matches!(format, ImageFormat::Png | ImageFormat::WebP).then(|| lossless.clone());
                files.push((format!("{w}x{h}-{kind}.{}", format.extensions_str()[0]), bytes, exact));
            }
        }
        files.push((format!("{w}x{h}-palette.png"), palette_png(w, h, i as u64, false), None));
        files.push((
            format!("{w}x{h}-palette-trns.png"),
            palette_png(w, h, i as u64, true),
            None,
        ));
        files.push((format!("{w}x{h}-grey2.png"), grey_png(w, h, 2, i as u64), None));
    }
    // GIFs whose first frame leaves some of the screen uncovered, with a transparent
    // colour, and a background colour or none.
    for (i, (bg, frame)) in [
        (5u8, (7, 4, 20, 15)),
        (0, (3, 0, 37, 30)),
        (200, (0, 0, 40, 30)),
        (17, (39, 29, 1, 1)),
    ]
    .into_iter()
    .enumerate()
    {
        files.push((
            format!("40x30-frame{i}-bg{bg}.gif"),
            gif_by_hand((40, 30), bg, frame, i as u64),
            None,
        ));
    }
    // What the `image` crate does not write (ImageMagick's): JPEGs with chroma subsampled
    // 4:2:0 and 4:2:2, progressive, grey, CMYK; PNGs interlaced (8 and 16 bits), 16-bit
    // grey and RGBA, a 4-bit palette.
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vision");
    let mut names: Vec<_> = std::fs::read_dir(&fixtures)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for path in names {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        files.push((name, std::fs::read(&path).unwrap(), None));
    }
    files
}

/// A PNG by hand, for what the `image` crate does not write: stored (uncompressed)
/// deflate blocks, each row with filter 0.
fn png(w: u32, h: u32, depth: u8, color: u8, chunks: &[(&[u8; 4], Vec<u8>)], rows: &[Vec<u8>]) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let raw: Vec<u8> = rows
        .iter()
        .flat_map(|r| std::iter::once(0).chain(r.iter().copied()))
        .collect();
    let mut z = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65535).collect();
    for (i, block) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == blocks.len()));
        z.extend_from_slice(&(block.len() as u16).to_le_bytes());
        z.extend_from_slice(&(!(block.len() as u16)).to_le_bytes());
        z.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in &raw {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    z.extend_from_slice(&(b << 16 | a).to_be_bytes());
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    for (kind, data) in chunks {
        chunk(&mut out, kind, data);
    }
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// A GIF with a global palette of 256 colours, background index `bg`, and one frame at
/// `(x, y, w, h)` of random indices, index 9 transparent. Its LZW stream is plain: a
/// clear code every 100 literals, so that codes stay 9 bits wide.
fn gif_by_hand(screen: (u16, u16), bg: u8, (x, y, w, h): (u16, u16, u16, u16), seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed + 1234);
    let mut out = b"GIF89a".to_vec();
    out.extend_from_slice(&screen.0.to_le_bytes());
    out.extend_from_slice(&screen.1.to_le_bytes());
    out.extend_from_slice(&[0xF7, bg, 0]);
    out.extend((0..256 * 3).map(|_| rng.byte()));
    out.extend_from_slice(&[0x21, 0xF9, 4, 1, 0, 0, 9, 0]);
    out.push(0x2C);
    for v in [x, y, w, h] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&[0, 8]);
    let (mut bits, mut nbits, mut data) = (0u32, 0u32, Vec::new());
    let mut put = |code: u32, data: &mut Vec<u8>| {
        bits |= code << nbits;
        nbits += 9;
        while nbits >= 8 {
            data.push(bits as u8);
            bits >>= 8;
            nbits -= 8;
        }
    };
    let pixels = usize::from(w) * usize::from(h);
    for i in 0..pixels {
        if i % 100 == 0 {
            put(256, &mut data);
        }
        put(
            u32::from(if rng.byte().is_multiple_of(7) { 9 } else { rng.byte() }),
            &mut data,
        );
    }
    put(257, &mut data);
    if nbits > 0 {
        data.push(bits as u8);
    }
    for block in data.chunks(255) {
        out.push(block.len() as u8);
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&[0, 0x3B]);
    out
}

/// An 8-bit palette PNG of 200 colours, with a transparency table if `trns`.
fn palette_png(w: u32, h: u32, seed: u64, trns: bool) -> Vec<u8> {
    let mut rng = XorShift(seed + 77);
    let plte: Vec<u8> = (0..200 * 3).map(|_| rng.byte()).collect();
    let rows: Vec<Vec<u8>> = (0..h).map(|_| (0..w).map(|_| rng.byte() % 200).collect()).collect();
    let mut chunks = vec![(b"PLTE", plte)];
    if trns {
        chunks.push((b"tRNS", (0..100).map(|i| (i * 5) as u8).collect()));
    }
    png(w, h, 8, 3, &chunks, &rows)
}

/// A grey PNG of `depth` bits a pixel (below 8: packed, scaled up on decoding).
fn grey_png(w: u32, h: u32, depth: u8, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed + 99);
    let per_byte = 8 / depth as u32;
    let rows: Vec<Vec<u8>> = (0..h)
        .map(|_| (0..w.div_ceil(per_byte)).map(|_| rng.byte()).collect())
        .collect();
    png(w, h, depth, 0, &[], &rows)
}

/// Compares two preprocessed images bit for bit; returns how many values.
fn same_bits(what: &str, ours: &vision::ImageF32, theirs: &mtmd::F32Image) -> usize {
    assert_eq!((ours.width(), ours.height()), (theirs.0, theirs.1), "{what}: size");
    let (a, b) = (ours.data(), &theirs.2);
    assert_eq!(a.len(), b.len(), "{what}: length");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!(
            "{what}: value {i} (pixel {}, channel {}) is {} here, {} in mtmd",
            i / 3,
            i % 3,
            a[i],
            b[i]
        );
    }
    a.len()
}

/// Our preprocessing of `ours` against mtmd's of `reference`, for every family.
fn compare_preprocessing(name: &str, ours: &ImageU8, reference: &ImageU8) -> (usize, usize) {
    let (mut values, mut refusals) = (0, 0);
    for (config, kind, params) in preprocessors::configs() {
        let what = format!("{name}, {config}");
        let theirs = mtmd::preprocess(kind, &params, reference.width(), reference.height(), reference.pixels());
        let mine = vision::preprocess(kind, &params, ours);
        match (mine, theirs) {
            (Ok(mine), Ok(theirs)) => {
                assert_eq!(mine.entries.len(), theirs.entries.len(), "{what}: entries");
                assert_eq!(
                    (mine.grid_x, mine.grid_y),
                    (theirs.grid_x, theirs.grid_y),
                    "{what}: grid"
                );
                for (i, (a, b)) in mine.entries.iter().zip(&theirs.entries).enumerate() {
                    values += same_bits(&format!("{what}, entry {i}"), a, b);
                }
                match (&mine.overview, &theirs.overview) {
                    (Some(a), Some(b)) => values += same_bits(&format!("{what}, overview"), a, b),
                    (None, None) => {}
                    (a, b) => panic!("{what}: overview {:?} here, {:?} in mtmd", a.is_some(), b.is_some()),
                }
            }
            (Err(Error::Image(_)), Err(_)) => refusals += 1,
            (mine, theirs) => panic!(
                "{what}: {:?} here, {:?} in mtmd",
                mine.map(|m| m.entries.len()),
                theirs.map(|t| t.entries.len())
            ),
        }
    }
    (values, refusals)
}

/// Every file decoded, and preprocessed by every family. (Named for `rake memcheck`'s
/// `--skip matches_llama_cpp`: too slow under valgrind.) Every format's pixels are
/// stb_image's, JPEG's too (decoded by stb_image itself: its IDCT and chroma upsampling
/// are the decoder's to choose).
#[test]
fn vision_matches_llama_cpp_mtmd() {
    let files = corpus();
    let (mut values, mut refusals, mut jpeg_files) = (0usize, 0usize, 0usize);
    let mut formats = std::collections::BTreeMap::<String, usize>::new();
    for (name, bytes, lossless) in &files {
        let ours = vision::decode(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let reference = match mtmd::stbi_load(bytes) {
            Some((w, h, px)) => ImageU8::new(w, h, px).unwrap(),
            // stb_image reads no WebP: mtmd hands those to ffmpeg. Lossless, so the
            // pixels written are the reference.
            None if name.ends_with(".webp") => {
                ImageU8::new(ours.width(), ours.height(), lossless.clone().unwrap()).unwrap()
            }
            None => panic!("{name}: stb_image fails"),
        };
        if let Some(px) = lossless {
            assert_eq!(ours.pixels(), px.as_slice(), "{name}: the pixels written");
        }
        if name.ends_with(".jpg") {
            jpeg_files += 1;
        }
        assert_eq!(
            (ours.width(), ours.height()),
            (reference.width(), reference.height()),
            "{name}: size"
        );
        assert!(
            ours.pixels() == reference.pixels(),
            "{name}: pixels differ from stb_image's"
        );
        // Every family on every small file; the large ones through each format once.
        let preprocess = ours.width() * ours.height() <= 400 * 400
            || ["-rgb.png", "-rgb.jpg", "-rgba.webp", "-palette.png"]
                .iter()
                .any(|s| name.ends_with(s));
        let (v, r) = if preprocess {
            compare_preprocessing(name, &ours, &reference)
        } else {
            (0, 0)
        };
        values += v;
        refusals += r;
        *formats.entry(name.rsplit('.').next().unwrap().to_string()).or_default() += 1;
    }
    eprintln!(
        "{} files ({formats:?}; {jpeg_files} JPEG), every pixel stb_image's; {} families: {values} f32 values \
         identical to mtmd's, {refusals} refused by both",
        files.len(),
        preprocessors::configs().len()
    );
    assert!(values > 10_000_000);
}

/// LFM2-VL's preprocessing on sizes either side of its tiling threshold (twice 256 tokens
/// after rounding, ties to even: 720 x 720 is one image, 736 x 736 tiles), grids of
/// every shape, and grids equally close to the image's aspect ratio, which its area
/// decides between (1.25: 2 x 2 or 3 x 2; 16:9, 2 x 1 or 4 x 2; 1: 2 x 2 or 3 x 3).
#[test]
fn lfm2_matches_llama_cpp_mtmd() {
    const LFM2_SIZES: &[(u32, u32, (i32, i32))] = &[
        (1, 300, (0, 0)),
        (300, 1, (0, 0)),
        (100, 60, (0, 0)),
        (640, 480, (0, 0)),
        (720, 720, (0, 0)),
        (16, 3000, (0, 0)),
        (736, 736, (2, 2)),
        (800, 700, (2, 2)),
        (960, 768, (2, 2)),
        (1000, 800, (3, 2)),
        (1024, 768, (3, 2)),
        (1283, 961, (3, 2)),
        (1500, 1500, (3, 3)),
        (1920, 1080, (4, 2)),
        (2000, 300, (7, 1)),
        (300, 2000, (1, 7)),
        (700, 1400, (1, 2)),
        (8000, 100, (10, 1)),
    ];
    let params = preprocessors::lfm2_params();
    let (mut values, mut tiled, mut single) = (0, 0, 0);
    for (i, &(w, h, grid)) in LFM2_SIZES.iter().enumerate() {
        let img = ImageU8::new(w as usize, h as usize, pixels(w, h, 100 + i as u64)).unwrap();
        let what = format!("lfm2, {w}x{h}");
        let theirs = mtmd::preprocess(Preprocessor::Lfm2, &params, img.width(), img.height(), img.pixels())
            .unwrap_or_else(|e| panic!("{what}: mtmd: {e}"));
        let mine = vision::preprocess(Preprocessor::Lfm2, &params, &img).unwrap();
        assert_eq!((theirs.grid_x, theirs.grid_y), grid, "{what}: mtmd's grid");
        assert_eq!((mine.grid_x, mine.grid_y), grid, "{what}: grid");
        assert_eq!(mine.entries.len(), theirs.entries.len(), "{what}: entries");
        assert_eq!(mine.overview.is_some(), theirs.overview.is_some(), "{what}: overview");
        for (j, (a, b)) in mine.entries.iter().zip(&theirs.entries).enumerate() {
            values += same_bits(&format!("{what}, entry {j}"), a, b);
        }
        if let (Some(a), Some(b)) = (&mine.overview, &theirs.overview) {
            values += same_bits(&format!("{what}, thumbnail"), a, b);
        }
        if grid == (0, 0) {
            assert_eq!(mine.entries.len(), 1, "{what}: one image");
            single += 1;
        } else {
            assert_eq!(mine.entries.len() as i32, grid.0 * grid.1, "{what}: tiles");
            assert!(
                mine.entries.iter().all(|t| (t.width(), t.height()) == (512, 512)),
                "{what}: tiles of 512"
            );
            tiled += 1;
        }
    }
    eprintln!("lfm2: {single} images whole, {tiled} tiled: {values} f32 values identical to mtmd's");
}
