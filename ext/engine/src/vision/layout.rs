//! Where an image's embeddings go in a prompt, as llama.cpp's `tools/mtmd/mtmd.cpp` lays
//! them out (line numbers are the pinned llama.cpp's):
//! - [`image_layout`]: one preprocessed image, for its projector type, to mtmd's ordered
//!   parts: text around it, single tokens found by their text, image chunks of so many
//!   embeddings. The strings and tokens are `mtmd_context::init_vision`'s (lines 738-863);
//!   their order is `mtmd_tokenizer::add_media`'s (lines 1346-1561).
//! - [`audio_layout`]: one audio file's log-mel pieces, for an audio projector type, to
//!   mtmd's parts: its `aud_beg` text, a chunk per piece, its `aud_end` (`init_audio`,
//!   lines 928-1008; `add_media`'s audio branch, lines 1562-1652).
//! - [`tokenize_prompt`]: a prompt with one [`MEDIA_MARKER`] per image to mtmd's chunks,
//!   as `mtmd_tokenize` makes them (`mtmd_tokenizer`, lines 1151-1344): the text split at
//!   the markers, each piece tokenized by itself, consecutive text merged into one chunk,
//!   BOS and EOS where the vocabulary asks. The result compares with mtmd's chunks as a
//!   sequence of (text token ids | image of `n_tokens` embeddings).

use std::ops::Range;

use elelem_tokenizer::Tokenizer;

use super::hparams::{ClipHParams, ProjectorType};
use super::image::ImageF32;
use super::preprocess::Preprocessed;
use crate::{Error, Result};

/// mtmd's default media marker (`mtmd_default_marker`): where each image goes in a
/// prompt's text.
pub const MEDIA_MARKER: &str = "<__media__>";

/// The images of a [`Preprocessed`] one image chunk holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// `overview`: a sliced image's downscaled whole (LFM2's thumbnail, Idefics3's global
    /// image).
    Overview,
    /// `entries[range]`, encoded into one run of embeddings.
    Entries(Range<usize>),
}

/// One of mtmd's image chunks: the embeddings of `source`, `n_tokens` of them
/// (clip.cpp's `clip_n_output_tokens`), on a `grid` of (across, down) tokens
/// ([`ClipHParams::output_grid`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageChunk {
    pub source: ImageSource,
    pub n_tokens: usize,
    pub grid: (usize, usize),
}

/// One of mtmd's audio chunks: the embeddings of an audio file's `piece`-th log-mel piece
/// (from 0), `n_tokens` of them (clip.cpp's `clip_n_output_tokens`), a position each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AudioChunk {
    pub piece: usize,
    pub n_tokens: usize,
}

/// One part of an image's (or an audio file's) layout, in mtmd's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImagePart {
    /// Text mtmd tokenizes by itself, special tokens parsed and none added
    /// (`add_text(text, true)`).
    Text(String),
    /// One token mtmd finds by its text (`lookup_token`): the first in the vocabulary
    /// whose piece, special tokens rendered, is this.
    Token(&'static str),
    Image(ImageChunk),
    Audio(AudioChunk),
}

/// One of mtmd's chunks of a prompt (`mtmd_input_chunk`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Text tokens.
    Text(Vec<u32>),
    /// Embeddings of the prompt's `image`-th image (0-based, in marker order).
    Image { image: usize, chunk: ImageChunk },
    /// Embeddings of a piece of the prompt's `audio`-th medium (0-based, in marker order:
    /// mtmd takes an image or an audio file at each).
    Audio { audio: usize, chunk: AudioChunk },
}

/// The fields of `mtmd_context` that frame a projector type's images. The others
/// (`tok_slices_start`, `tok_sli_img_start`, `tok_sli_img_end`, `tok_sli_img_mid`,
/// `tok_row_end_trail`) are empty or false for the types elelem runs.
struct Framing {
    /// `img_beg`, `img_end`: text around the whole image.
    img_beg: &'static str,
    img_end: &'static str,
    /// `tok_ov_img_start`, `tok_ov_img_end`: tokens around the overview.
    ov_img_start: &'static [&'static str],
    ov_img_end: &'static [&'static str],
    /// `tok_row_end`: tokens after each row of slices but the last.
    row_end: &'static [&'static str],
    /// `sli_img_start_tmpl` formatted with the slice's row and column (from 1): text
    /// before each slice.
    slice_start: Option<fn(usize, usize) -> String>,
    /// `ov_img_first`: the overview before the slices rather than after.
    ov_img_first: bool,
}

impl Framing {
    fn of(projector: ProjectorType) -> Framing {
        let none = Framing {
            img_beg: "",
            img_end: "",
            ov_img_start: &[],
            ov_img_end: &[],
            row_end: &[],
            slice_start: None,
            ov_img_first: false,
        };
        match projector {
            // mtmd.cpp 738-745: <start_of_image> (embeddings) <end_of_image>.
            ProjectorType::Gemma3 => Framing {
                img_beg: "<start_of_image>",
                img_end: "<end_of_image>",
                ..none
            },
            // mtmd.cpp 746-755, after transformers' Idefics3 processor: each tile after
            // its <fake_token_around_image><row_R_col_C>, "\n" between rows, then the
            // overview as "\n\n" <fake_token_around_image> <global-img> (overview)
            // <fake_token_around_image>.
            ProjectorType::Idefics3 => Framing {
                ov_img_start: &["\n\n", "<fake_token_around_image>", "<global-img>"],
                ov_img_end: &["<fake_token_around_image>"],
                row_end: &["\n"],
                slice_start: Some(|row, col| format!("<fake_token_around_image><row_{row}_col_{col}>")),
                ..none
            },
            // mtmd.cpp 847-863: <|image_start|>, each tile after its
            // <|img_row_R_col_C|>, the thumbnail after <|img_thumbnail|>, <|image_end|>;
            // one tile (no overview): <|image_start|> (image) <|image_end|>.
            ProjectorType::Lfm2 => Framing {
                img_beg: "<|image_start|>",
                img_end: "<|image_end|>",
                ov_img_start: &["<|img_thumbnail|>"],
                slice_start: Some(|row, col| format!("<|img_row_{row}_col_{col}|>")),
                ..none
            },
            // mtmd.cpp 634-646: nothing around the image; LLaVA 1.6's slices one chunk each,
            // row by row, then the overview (LLaVA-UHD's layout without a template).
            ProjectorType::Mlp | ProjectorType::Ldp | ProjectorType::Ldpv2 => none,
            // mtmd.cpp 793-800: <img> (the slices, one chunk each, then the overview) </img>.
            ProjectorType::Internvl => Framing {
                img_beg: "<img>",
                img_end: "</img>",
                ..none
            },
            // mtmd.cpp 694-703: <|vision_start|> (embeddings) <|vision_end|>.
            ProjectorType::Qwen2vl | ProjectorType::Qwen25vl | ProjectorType::Qwen3vl => Framing {
                img_beg: "<|vision_start|>",
                img_end: "<|vision_end|>",
                ..none
            },
            // mtmd.cpp 756-761: (embeddings, their [IMG_BREAK] rows included) [IMG_END].
            ProjectorType::Pixtral => Framing {
                img_end: "[IMG_END]",
                ..none
            },
            // mtmd.cpp 767-776: <|image_start|>, LLaVA-UHD's slices then the overview, each
            // a chunk without tokens of its own, <|image_end|>.
            ProjectorType::Llama4 => Framing {
                img_beg: "<|image_start|>",
                img_end: "<|image_end|>",
                ..none
            },
            // mtmd.cpp 885-891: <|image> (embeddings) <image|>.
            ProjectorType::Gemma4v => Framing {
                img_beg: "<|image>",
                img_end: "<image|>",
                ..none
            },
            // An audio encoder lays out no images (the runtime opens none for them).
            ProjectorType::Qwen2a => none,
        }
    }
}

/// mtmd's parts for one preprocessed image of a `hparams` projector, in order
/// (`add_media`, mtmd.cpp 1346-1561).
///
/// # Errors
/// [`Error::InvalidArgument`] where `image` is not what mtmd's preprocessing gives (a
/// grid without an overview, a grid its slices do not fill, no image at all), where mtmd
/// throws or asserts.
pub fn image_layout(hparams: &ClipHParams, image: &Preprocessed) -> Result<Vec<ImagePart>> {
    let framing = Framing::of(hparams.projector);
    let n_tokens = |img: &ImageF32| hparams.n_image_tokens(img.width(), img.height());
    // mtmd places a chunk's tokens by its first image's grid.
    let chunk = |source, first: &ImageF32, n_tokens| ImageChunk {
        source,
        n_tokens,
        grid: hparams.output_grid(first.width(), first.height(), n_tokens),
    };
    let tokens = |texts: &'static [&'static str]| texts.iter().map(|&t| ImagePart::Token(t));
    let invalid = |what: String| Err(Error::InvalidArgument(format!("image layout: {what}")));
    let mut parts = Vec::new();
    if !framing.img_beg.is_empty() {
        parts.push(ImagePart::Text(framing.img_beg.to_owned()));
    }
    // mtmd.cpp 1410: an overview or a grid is llava-uhd's layout, one chunk per image.
    let has_tiling_grid = (image.grid_x > 0 && image.grid_y > 0) || image.overview.is_some();
    if has_tiling_grid {
        // `split_batch_to_chunk` (mtmd.cpp 1657-1694) throws without an overview.
        let Some(overview) = &image.overview else {
            return invalid("a grid of slices without an overview".into());
        };
        let overview = ImagePart::Image(chunk(ImageSource::Overview, overview, n_tokens(overview)));
        let (n_col, n_row) = (image.grid_x.max(0) as usize, image.grid_y.max(0) as usize);
        if !image.entries.is_empty() && image.entries.len() != n_col * n_row {
            return invalid(format!(
                "{} slices for a grid of {n_col} x {n_row}",
                image.entries.len()
            ));
        }
        // mtmd.cpp 1430-1435.
        if framing.ov_img_first {
            parts.extend(tokens(framing.ov_img_start));
            parts.push(overview.clone());
            parts.extend(tokens(framing.ov_img_end));
        }
        // mtmd.cpp 1437-1474: row by row; a row's end after every row but the last.
        if !image.entries.is_empty() {
            for row in 0..n_row {
                for col in 0..n_col {
                    if let Some(slice_start) = framing.slice_start {
                        parts.push(ImagePart::Text(slice_start(row + 1, col + 1)));
                    }
                    let i = row * n_col + col;
                    let entry = &image.entries[i];
                    parts.push(ImagePart::Image(chunk(
                        ImageSource::Entries(i..i + 1),
                        entry,
                        n_tokens(entry),
                    )));
                }
                if row != n_row - 1 {
                    parts.extend(tokens(framing.row_end));
                }
            }
        }
        // mtmd.cpp 1476-1481.
        if !framing.ov_img_first {
            parts.extend(tokens(framing.ov_img_start));
            parts.push(overview);
            parts.extend(tokens(framing.ov_img_end));
        }
    } else {
        // mtmd.cpp 1484-1553: every entry in one chunk, their tokens summed.
        if image.entries.is_empty() {
            return invalid("no image".into());
        }
        let n = image.entries.iter().map(n_tokens).sum();
        parts.push(ImagePart::Image(chunk(
            ImageSource::Entries(0..image.entries.len()),
            &image.entries[0],
            n,
        )));
    }
    if !framing.img_end.is_empty() {
        parts.push(ImagePart::Text(framing.img_end.to_owned()));
    }
    Ok(parts)
}

/// mtmd's parts for one audio file of `n_pieces` log-mel pieces
/// ([`crate::audio::WhisperMel::preprocess`]) for an audio projector (`add_media`'s audio
/// branch, mtmd.cpp 1562-1652): the type's `aud_beg` text (Qwen2-Audio's `<|audio_bos|>`,
/// mtmd.cpp 939-946), a chunk of [`ClipHParams::n_output_tokens`] embeddings per piece, and
/// its `aud_end` (`<|audio_eos|>`).
///
/// # Errors
/// [`Error::InvalidArgument`] for a projector that takes no audio, or no pieces (mtmd's
/// "empty audio data").
pub fn audio_layout(hparams: &ClipHParams, n_pieces: usize) -> Result<Vec<ImagePart>> {
    let (aud_beg, aud_end) = match hparams.projector {
        ProjectorType::Qwen2a => ("<|audio_bos|>", "<|audio_eos|>"),
        p => {
            return Err(Error::InvalidArgument(format!(
                "audio layout: the {} projector takes no audio",
                p.name()
            )))
        }
    };
    if n_pieces == 0 {
        return Err(Error::InvalidArgument("audio layout: no audio".into()));
    }
    let n_tokens = hparams.n_output_tokens() as usize;
    let pieces = (0..n_pieces).map(|piece| ImagePart::Audio(AudioChunk { piece, n_tokens }));
    let mut parts = vec![ImagePart::Text(aud_beg.to_owned())];
    parts.extend(pieces);
    parts.push(ImagePart::Text(aud_end.to_owned()));
    Ok(parts)
}

/// A prompt's text between media markers (with its byte offset in the prompt), or a marker.
#[derive(Debug, PartialEq, Eq)]
enum Segment<'a> {
    Text(usize, &'a str),
    Marker,
}

/// `mtmd_tokenizer::split_text` (mtmd.cpp 1697-1715): the text between markers, where
/// there is any, and the markers.
fn split_at_markers(text: &str) -> Vec<Segment<'_>> {
    let mut segments = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(at) = rest.find(MEDIA_MARKER) {
        if at > 0 {
            segments.push(Segment::Text(offset, &rest[..at]));
        }
        segments.push(Segment::Marker);
        rest = &rest[at + MEDIA_MARKER.len()..];
        offset += at + MEDIA_MARKER.len();
    }
    if !rest.is_empty() {
        segments.push(Segment::Text(offset, rest));
    }
    segments
}

/// `mtmd_context::lookup_token` (mtmd.cpp 1060-1073): the first token whose piece, special
/// tokens rendered, is `text`.
fn lookup_token(tokenizer: &Tokenizer, text: &str) -> Option<u32> {
    (0..tokenizer.n_vocab() as u32).find(|&id| tokenizer.token_to_piece(id, true) == text.as_bytes())
}

/// `add_text`'s merge (mtmd.cpp 1325-1344): tokens join a text chunk that ends the list,
/// else start one; none adds nothing.
fn push_text(chunks: &mut Vec<Chunk>, tokens: Vec<u32>) {
    if tokens.is_empty() {
        return;
    }
    match chunks.last_mut() {
        Some(Chunk::Text(last)) => last.extend(tokens),
        _ => chunks.push(Chunk::Text(tokens)),
    }
}

/// The chunks of the prompt's `index`-th image, its layout's text tokenized with special
/// tokens parsed and its single tokens looked up.
fn push_image(
    chunks: &mut Vec<Chunk>,
    tokenizer: &Tokenizer,
    hparams: &ClipHParams,
    index: usize,
    layout: &[ImagePart],
) -> Result<()> {
    for part in layout.iter().cloned() {
        match part {
            ImagePart::Text(text) => push_text(chunks, tokenizer.tokenize(&text, false, true)),
            ImagePart::Token(text) => {
                let id = lookup_token(tokenizer, text).ok_or_else(|| {
                    Error::Load(format!(
                        "the vocabulary has no token {text:?}, which {} images are framed with: \
                         this mmproj is not the model's",
                        hparams.projector.name()
                    ))
                })?;
                push_text(chunks, vec![id]);
            }
            ImagePart::Image(chunk) => chunks.push(Chunk::Image { image: index, chunk }),
            ImagePart::Audio(chunk) => chunks.push(Chunk::Audio { audio: index, chunk }),
        }
    }
    Ok(())
}

/// mtmd's chunks of a prompt whose text holds one [`MEDIA_MARKER`] per image, given by
/// their [`image_layout`]s (`mtmd_tokenize`): the text between markers tokenized piece by
/// piece without BOS or EOS (special tokens parsed but in the byte ranges `plain` of
/// `text`: mtmd's `parse_special` false is the whole text), each image's layout in its
/// place; then, if `add_special`, BOS before everything and EOS after where the vocabulary
/// adds them (mtmd.cpp 1280-1303).
///
/// # Errors
/// [`Error::InvalidArgument`] where the markers are not as many as the images, or an
/// image is not what mtmd's preprocessing gives; [`Error::Load`] where the vocabulary
/// lacks a token the projector's layout needs (mtmd would feed an invalid token): the
/// mmproj is not the model's.
pub fn tokenize_prompt(
    tokenizer: &Tokenizer,
    hparams: &ClipHParams,
    text: &str,
    images: &[Vec<ImagePart>],
    add_special: bool,
    plain: &[Range<usize>],
) -> Result<Vec<Chunk>> {
    let segments = split_at_markers(text);
    let n_markers = segments.iter().filter(|s| **s == Segment::Marker).count();
    if n_markers != images.len() {
        return Err(Error::InvalidArgument(format!(
            "number of media markers in text ({n_markers}) does not match number of images ({})",
            images.len()
        )));
    }
    let mut chunks = Vec::new();
    let mut next_image = 0;
    for segment in segments {
        match segment {
            Segment::Text(offset, piece) => {
                // The plain ranges within the piece, from its start.
                let end = offset + piece.len();
                let within: Vec<Range<usize>> = plain
                    .iter()
                    .filter(|r| r.start < end && r.end > offset)
                    .map(|r| r.start.max(offset) - offset..r.end.min(end) - offset)
                    .collect();
                push_text(&mut chunks, tokenizer.tokenize_with_plain(piece, false, &within));
            }
            Segment::Marker => {
                push_image(&mut chunks, tokenizer, hparams, next_image, &images[next_image])?;
                next_image += 1;
            }
        }
    }
    if add_special && tokenizer.add_bos() {
        // A vocabulary without BOS adds none, as `Tokenizer::tokenize` does.
        if let Some(bos) = tokenizer.bos() {
            match chunks.first_mut() {
                Some(Chunk::Text(first)) => first.insert(0, bos),
                _ => chunks.insert(0, Chunk::Text(vec![bos])),
            }
        }
    }
    if add_special && tokenizer.add_eos_flag() {
        push_text(&mut chunks, tokenizer.eos().into_iter().collect());
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::hparams::FfnOp;
    use elelem_tokenizer::{SpecialIds, VocabKind, VocabSpec};

    fn hparams(projector: ProjectorType, image_size: u32, patch_size: u32, n_merge: u32) -> ClipHParams {
        ClipHParams {
            projector,
            n_embd: 64,
            n_head: 4,
            n_head_kv: 4,
            d_head: 16,
            n_ff: 128,
            n_layer: 1,
            projection_dim: 64,
            eps: 1e-6,
            image_size,
            patch_size,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            ffn_op: FfnOp::Gelu,
            n_merge,
            longest_edge: 0,
            feature_layers: Vec::new(),
            grid_pinpoints: Vec::new(),
            n_wa_pattern: 0,
            n_mel_bins: 0,
        }
    }

    /// Gemma 3's: 896 squares of 14-pixel patches pooled 4 x 4, 256 tokens.
    fn gemma3() -> ClipHParams {
        hparams(ProjectorType::Gemma3, 896, 14, 4)
    }

    /// SmolVLM's: tiles of 512, 16-pixel patches unshuffled 4 x 4, 64 tokens each.
    fn idefics3() -> ClipHParams {
        hparams(ProjectorType::Idefics3, 512, 16, 4)
    }

    /// LFM2-VL's: 16-pixel patches merged 2 x 2, a token per 32 x 32 pixels.
    fn lfm2() -> ClipHParams {
        hparams(ProjectorType::Lfm2, 256, 16, 2)
    }

    fn blank(width: usize, height: usize) -> ImageF32 {
        ImageF32::new(width, height, vec![0.0; width * height * 3]).unwrap()
    }

    /// A sliced image as mtmd's preprocessing gives it: `grid_x * grid_y` slices of
    /// `slice` pixels, and the overview.
    fn sliced((grid_x, grid_y): (i32, i32), slice: usize, overview: (usize, usize)) -> Preprocessed {
        Preprocessed {
            entries: (0..grid_x * grid_y).map(|_| blank(slice, slice)).collect(),
            overview: Some(blank(overview.0, overview.1)),
            grid_x,
            grid_y,
        }
    }

    fn whole(width: usize, height: usize) -> Preprocessed {
        Preprocessed {
            entries: vec![blank(width, height)],
            ..Preprocessed::default()
        }
    }

    fn text(s: &str) -> ImagePart {
        ImagePart::Text(s.to_owned())
    }

    fn entry(i: usize, n_tokens: usize) -> ImagePart {
        ImagePart::Image(ImageChunk {
            source: ImageSource::Entries(i..i + 1),
            n_tokens,
            grid: (n_tokens, 1),
        })
    }

    fn overview(n_tokens: usize) -> ImagePart {
        ImagePart::Image(ImageChunk {
            source: ImageSource::Overview,
            n_tokens,
            grid: (n_tokens, 1),
        })
    }

    #[test]
    fn gemma3_is_one_chunk_framed() {
        assert_eq!(
            image_layout(&gemma3(), &whole(896, 896)).unwrap(),
            [text("<start_of_image>"), entry(0, 256), text("<end_of_image>")]
        );
    }

    #[test]
    fn idefics3_tiles_by_row_then_the_global_image() {
        let global = [
            ImagePart::Token("\n\n"),
            ImagePart::Token("<fake_token_around_image>"),
            ImagePart::Token("<global-img>"),
            overview(64),
            ImagePart::Token("<fake_token_around_image>"),
        ];
        // One tile: mtmd still lays out the grid of one, then the overview.
        let mut one = vec![text("<fake_token_around_image><row_1_col_1>"), entry(0, 64)];
        one.extend(global.iter().cloned());
        assert_eq!(
            image_layout(&idefics3(), &sliced((1, 1), 512, (512, 512))).unwrap(),
            one
        );
        // Two columns, three rows: "\n" after each row but the last.
        let mut grid = Vec::new();
        for row in 1..=3 {
            for col in 1..=2 {
                grid.push(text(&format!("<fake_token_around_image><row_{row}_col_{col}>")));
                grid.push(entry((row - 1) * 2 + col - 1, 64));
            }
            if row < 3 {
                grid.push(ImagePart::Token("\n"));
            }
        }
        grid.extend(global.iter().cloned());
        assert_eq!(
            image_layout(&idefics3(), &sliced((2, 3), 512, (512, 512))).unwrap(),
            grid
        );
    }

    #[test]
    fn lfm2_is_one_image_or_tiles_then_the_thumbnail() {
        // One tile: no thumbnail token, its tokens by its size (16 x 12 merged patches).
        assert_eq!(
            image_layout(&lfm2(), &whole(512, 384)).unwrap(),
            [text("<|image_start|>"), entry(0, 192), text("<|image_end|>")]
        );
        // Three columns, two rows of 512-pixel tiles (256 tokens each), no row ends; the
        // thumbnail (544 x 448: 17 x 14 tokens) last.
        let mut tiles = vec![text("<|image_start|>")];
        for row in 1..=2 {
            for col in 1..=3 {
                tiles.push(text(&format!("<|img_row_{row}_col_{col}|>")));
                tiles.push(entry((row - 1) * 3 + col - 1, 256));
            }
        }
        tiles.extend([
            ImagePart::Token("<|img_thumbnail|>"),
            overview(238),
            text("<|image_end|>"),
        ]);
        assert_eq!(image_layout(&lfm2(), &sliced((3, 2), 512, (544, 448))).unwrap(), tiles);
    }

    #[test]
    fn layouts_mtmd_would_refuse_are_errors() {
        let no_overview = Preprocessed {
            overview: None,
            ..sliced((2, 1), 512, (512, 512))
        };
        let too_few = Preprocessed {
            grid_x: 3,
            ..sliced((2, 1), 512, (512, 512))
        };
        for image in [no_overview, too_few, Preprocessed::default()] {
            assert!(matches!(
                image_layout(&idefics3(), &image),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn the_text_splits_at_markers_dropping_empty_pieces() {
        assert_eq!(split_at_markers(""), []);
        assert_eq!(split_at_markers("<__media__>"), [Segment::Marker]);
        assert_eq!(
            split_at_markers("a<__media__><__media__> b<__media_"),
            [
                Segment::Text(0, "a"),
                Segment::Marker,
                Segment::Marker,
                Segment::Text(23, " b<__media_")
            ]
        );
    }

    /// A SentencePiece vocabulary: `<unk> <s> </s>`, LFM2's and Gemma 3's image tokens,
    /// Qwen2-Audio's audio tokens
    /// (control), `a` and `b`, then the byte tokens; BOS added, no space prefix.
    fn tokenizer() -> (Tokenizer, Vec<String>) {
        let specials = [
            "<|image_start|>",
            "<|image_end|>",
            "<|img_thumbnail|>",
            "<|img_row_1_col_1|>",
            "<|img_row_1_col_2|>",
            "<start_of_image>",
            "<end_of_image>",
            "<|audio_bos|>",
            "<|audio_eos|>",
        ];
        let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(str::to_owned).to_vec();
        let mut types = vec![2, 3, 3];
        tokens.extend(specials.map(str::to_owned));
        types.extend([3; 9]);
        tokens.extend(["a", "b"].map(str::to_owned));
        types.extend([1, 1]);
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        let spec = VocabSpec {
            kind: VocabKind::Spm,
            scores: Some(vec![0.0; tokens.len()]),
            tokens: tokens.clone(),
            token_types: Some(types),
            ids: SpecialIds {
                bos: Some(1),
                eos: Some(2),
                unk: Some(0),
                ..SpecialIds::default()
            },
            add_bos: Some(true),
            add_eos: Some(false),
            add_space_prefix: Some(false),
            ..VocabSpec::default()
        };
        (Tokenizer::new(&spec).unwrap(), tokens)
    }

    #[test]
    fn a_prompt_is_text_and_image_chunks_in_order() {
        let (tok, tokens) = tokenizer();
        let id = |t: &str| tokens.iter().position(|x| x == t).unwrap() as u32;
        let image = sliced((2, 1), 512, (544, 448));
        let layout = image_layout(&lfm2(), &image).unwrap();
        let chunks = tokenize_prompt(&tok, &lfm2(), "a<__media__>b", &[layout], true, &[]).unwrap();
        let image_chunk = |source, n_tokens| Chunk::Image {
            image: 0,
            chunk: ImageChunk {
                source,
                n_tokens,
                grid: (n_tokens, 1),
            },
        };
        // BOS first; each run of text one chunk, the layout's text merged with the prompt's.
        assert_eq!(
            chunks,
            [
                Chunk::Text(vec![1, id("a"), id("<|image_start|>"), id("<|img_row_1_col_1|>")]),
                image_chunk(ImageSource::Entries(0..1), 256),
                Chunk::Text(vec![id("<|img_row_1_col_2|>")]),
                image_chunk(ImageSource::Entries(1..2), 256),
                Chunk::Text(vec![id("<|img_thumbnail|>")]),
                image_chunk(ImageSource::Overview, 238),
                Chunk::Text(vec![id("<|image_end|>"), id("b")]),
            ]
        );
        // Without add_special, no BOS; the prompt's own text with special tokens as text
        // in the plain ranges (the layout's are parsed regardless).
        let text = "<__media__><end_of_image>";
        let layout = image_layout(&gemma3(), &whole(896, 896)).unwrap();
        let all = 0..text.len();
        let chunks = tokenize_prompt(&tok, &gemma3(), text, &[layout], false, std::slice::from_ref(&all)).unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0], Chunk::Text(vec![id("<start_of_image>")]));
        let Chunk::Text(last) = &chunks[2] else {
            panic!("{chunks:?}")
        };
        assert_eq!(last[0], id("<end_of_image>"));
        assert!(last.len() > 2 && !last[1..].contains(&id("<end_of_image>")), "{last:?}");
    }

    /// Qwen2-Audio's: 30 s pieces of 750 tokens each.
    fn qwen2a() -> ClipHParams {
        ClipHParams {
            n_mel_bins: 80,
            ..hparams(ProjectorType::Qwen2a, 0, 1, 1)
        }
    }

    #[test]
    fn audio_is_a_chunk_per_piece_between_its_types_tokens() {
        let (tok, tokens) = tokenizer();
        let id = |t: &str| tokens.iter().position(|x| x == t).unwrap() as u32;
        let layout = audio_layout(&qwen2a(), 2).unwrap();
        let piece = |piece| AudioChunk { piece, n_tokens: 750 };
        assert_eq!(
            layout,
            [
                ImagePart::Text("<|audio_bos|>".into()),
                ImagePart::Audio(piece(0)),
                ImagePart::Audio(piece(1)),
                ImagePart::Text("<|audio_eos|>".into()),
            ]
        );
        // After an image, as the second medium.
        let image = image_layout(&gemma3(), &whole(896, 896)).unwrap();
        let chunks = tokenize_prompt(&tok, &qwen2a(), "a<__media__>b<__media__>", &[image, layout], true, &[]).unwrap();
        assert_eq!(chunks.len(), 6, "{chunks:?}");
        assert_eq!(
            chunks[2],
            Chunk::Text(vec![id("<end_of_image>"), id("b"), id("<|audio_bos|>")])
        );
        assert_eq!(
            chunks[3],
            Chunk::Audio {
                audio: 1,
                chunk: piece(0)
            }
        );
        assert_eq!(
            chunks[4],
            Chunk::Audio {
                audio: 1,
                chunk: piece(1)
            }
        );
        assert_eq!(chunks[5], Chunk::Text(vec![id("<|audio_eos|>")]));

        for (hparams, n_pieces) in [(qwen2a(), 0), (gemma3(), 1)] {
            assert!(matches!(
                audio_layout(&hparams, n_pieces),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn markers_must_match_the_images_and_the_vocabulary_the_layout() {
        let (tok, _) = tokenizer();
        for (text, n_images) in [("<__media__><__media__>", 1), ("no marker", 1), ("<__media__>", 0)] {
            let images = vec![image_layout(&gemma3(), &whole(896, 896)).unwrap(); n_images];
            assert!(matches!(
                tokenize_prompt(&tok, &gemma3(), text, &images, true, &[]),
                Err(Error::InvalidArgument(_))
            ));
        }
        // Idefics3's tokens are not in this vocabulary.
        let layout = image_layout(&idefics3(), &sliced((1, 1), 512, (512, 512))).unwrap();
        let e = tokenize_prompt(&tok, &idefics3(), "<__media__>", &[layout], true, &[]).unwrap_err();
        assert!(matches!(&e, Error::Load(m) if m.contains("idefics3")), "{e:?}");
    }
}
