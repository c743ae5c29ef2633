//! A projector opened beside a language model, as mtmd's `mtmd_context`: it turns a
//! prompt whose text holds mtmd's media marker once per medium (an image, or for a
//! projector with an audio encoder an audio file; a file may hold both encoders, as
//! Qwen2.5-Omni's does: mtmd's `ctx_v` and `ctx_a`) into the language model's input, text
//! tokenized as `mtmd_tokenize` tokenizes it and each medium read and encoded into
//! embeddings the prompt carries ([`PromptEmbeddings`]), decoded as mtmd's helper decodes
//! them (`causal` or not). Each medium is an image or audio by its bytes, as mtmd's helper
//! tells them (a WAV, MP3 or FLAC file is audio), read and encoded by its own encoder: an
//! image decoded and preprocessed; an audio file (resampled to 16 kHz) cut into 30 s log-mel pieces,
//! a chunk each, whose tokens take a position each, under M-RoPE too (mtmd's helper places
//! them as text: `set_position_mrope_1d`).
//!
//! An image's (an audio file's) embeddings are kept by the hash of its bytes
//! ([`IMAGE_CACHE_ENTRIES`] of them), so that a conversation that sends the same picture
//! every turn encodes it once;
//! the prompt records each image's rows under ids made from that hash, so that a
//! sequence that already holds them (prefix reuse) is not given them again.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::batcher::PromptEmbeddings;
use crate::audio::{decode_audio, is_audio, Mel, WhisperMel};
use crate::vision::{
    audio_layout, decode, image_layout, preprocess, tokenize_prompt, Chunk, Encoder, EncoderParams, ImageParams,
    ImagePart, ImageSource, Mmproj, Preprocessed, Preprocessor, ProjectorType,
};
use crate::{Error, Model, Result};

/// How many images' (audio files') embeddings a [`VisionContext`] keeps.
pub const IMAGE_CACHE_ENTRIES: usize = 16;

/// A language model's projector, ready to encode images and/or audio into its prompts.
pub struct VisionContext {
    /// The vision encoder, where the projector has one: images decoded, then
    /// preprocessed by the projector type's preprocessor.
    vision: Option<Part<(Preprocessor, ImageParams)>>,
    /// The audio encoder, where the projector has one: a WAV, MP3 or FLAC file, its log-mel
    /// spectrogram in pieces of 30 s.
    audio: Option<Part<WhisperMel>>,
    /// Whether the language model places image tokens on their grid (mtmd's
    /// `mtmd_decode_use_mrope`: a model under multi-dimensional rope).
    mrope: bool,
    n_vocab: u32,
    /// The latest images by the hash of their bytes, oldest first.
    cache: Mutex<VecDeque<Arc<EncodedImage>>>,
}

/// One of the projector's encoders, and how its media are read before it (`reader`).
struct Part<R> {
    mmproj: Arc<Mmproj>,
    /// One medium is encoded at a time.
    encoder: Mutex<Encoder>,
    reader: R,
    /// Whether the language model decodes this encoder's tokens causally (mtmd's
    /// `mtmd_decode_use_non_causal` for the chunk's encoder: not Gemma 3's, nor Gemma 4's
    /// but its E2B's and E4B's).
    causal: bool,
}

impl<R> Part<R> {
    fn open(mmproj: Mmproj, params: EncoderParams, reader: R) -> Result<Part<R>> {
        let mmproj = Arc::new(mmproj);
        // mtmd_decode_use_non_causal: Gemma 3's images see each other both ways, and Gemma
        // 4's but for its E2B and E4B (by the projector's width, as mtmd tells them).
        let causal = match mmproj.hparams.projector {
            ProjectorType::Gemma3 => false,
            ProjectorType::Gemma4v => matches!(mmproj.n_mmproj_embd(), 1536 | 2560),
            _ => true,
        };
        let encoder = Encoder::new(Arc::clone(&mmproj), params)?;
        Ok(Part {
            mmproj,
            encoder: Mutex::new(encoder),
            reader,
            causal,
        })
    }

    fn encoder(&self) -> std::sync::MutexGuard<'_, Encoder> {
        self.encoder.lock().expect("encoder lock")
    }
}

/// An image (or an audio file) encoded: where its embeddings go ([`image_layout`],
/// [`audio_layout`]) and the embeddings of each of the layout's image (audio) chunks, in
/// order.
pub struct EncodedImage {
    pub hash: u64,
    pub layout: Vec<ImagePart>,
    pub embeddings: Vec<Arc<[f32]>>,
}

impl EncodedImage {
    /// The embeddings of the layout's chunk from `source`.
    fn chunk(&self, source: &ImageSource) -> &Arc<[f32]> {
        let mut chunks = self.layout.iter().filter_map(|part| match part {
            ImagePart::Image(chunk) => Some(&chunk.source),
            _ => None,
        });
        let index = chunks
            .position(|s| s == source)
            .expect("a chunk of the image's own layout");
        &self.embeddings[index]
    }
}

/// The embeddings of a medium's image (audio) chunks in order, and the seconds the
/// encoder's passes took.
type Encoded = (Vec<Arc<[f32]>>, f64);

/// A medium read and laid out, before its encoding: its preprocessed images or log-mel
/// pieces; or found encoded in the cache.
enum Read {
    Cached(Arc<EncodedImage>),
    Image {
        hash: u64,
        layout: Vec<ImagePart>,
        pre: Preprocessed,
    },
    Audio {
        hash: u64,
        layout: Vec<ImagePart>,
        pieces: Vec<Mel>,
    },
}

impl Read {
    fn layout(&self) -> &[ImagePart] {
        match self {
            Read::Cached(encoded) => &encoded.layout,
            Read::Image { layout, .. } | Read::Audio { layout, .. } => layout,
        }
    }
}

/// A prompt with images, as [`crate::runtime::Request`] takes it: ids (the image rows'
/// recorded in their place) and the images' embeddings, one run per image chunk.
#[derive(Clone)]
pub struct MultimodalPrompt {
    pub ids: Vec<u32>,
    pub embeddings: Vec<PromptEmbeddings>,
    /// The positions the prompt takes in its sequence: one per id, but an image's under
    /// multi-dimensional rope, which take the longer side of its grid (mtmd's `n_past`).
    pub n_pos: usize,
    /// Seconds the vision encoder's passes took for the images this prompt encoded (those
    /// not from the cache): what `mtmd_encode_chunk` does, not the decoding or
    /// preprocessing; `None` for a prompt without images.
    pub image_encode_seconds: Option<f64>,
    /// The same for the audio encoder and the prompt's audio files.
    pub audio_encode_seconds: Option<f64>,
}

impl VisionContext {
    /// Opens the projector at `path` for `model`: a vision encoder, an audio encoder, or
    /// both (each encoder's compute buffer planned with `params`).
    ///
    /// # Errors
    /// [`Error::Load`](crate::Error::Load) for a projector that cannot be read or whose
    /// embeddings are not the model's width; [`Error::Unsupported`](crate::Error::Unsupported)
    /// for a model that does not take embeddings.
    pub fn open(path: &Path, model: &Model, params: EncoderParams) -> Result<VisionContext> {
        let encoders = Mmproj::open_encoders(path)?;
        for mmproj in encoders.vision.iter().chain(&encoders.audio) {
            mmproj.check_text_model(model.hparams.n_embd_inp())?;
        }
        model.check_takes_embeddings()?;
        let vision = encoders
            .vision
            .map(|mmproj| {
                let reader = mmproj.hparams.preprocessing();
                Part::open(mmproj, params, reader)
            })
            .transpose()?;
        let audio = encoders
            .audio
            .map(|mmproj| {
                let mel = WhisperMel::new(mmproj.hparams.n_mel_bins as usize)?;
                Part::open(mmproj, params, mel)
            })
            .transpose()?;
        Ok(VisionContext {
            vision,
            audio,
            mrope: model.hparams.rope.mode.positions_per_token() > 1,
            n_vocab: model.hparams.n_vocab,
            cache: Mutex::new(VecDeque::new()),
        })
    }

    /// The vision encoder's projector, else (an audio projector) the audio encoder's.
    pub fn mmproj(&self) -> &Mmproj {
        match (&self.vision, &self.audio) {
            (Some(part), _) => &part.mmproj,
            (None, Some(part)) => &part.mmproj,
            (None, None) => unreachable!("opened with one encoder at least"),
        }
    }

    /// The projector types of its encoders, the vision encoder's first (Qwen2.5-Omni's:
    /// `qwen2.5vl_merger` and `qwen2a`).
    pub fn projector_names(&self) -> Vec<&'static str> {
        let vision = self.vision.iter().map(|p| p.mmproj.hparams.projector.name());
        vision
            .chain(self.audio.iter().map(|p| p.mmproj.hparams.projector.name()))
            .collect()
    }

    /// Whether the projector takes images (has a vision encoder).
    pub fn vision(&self) -> bool {
        self.vision.is_some()
    }

    /// Whether the projector takes audio files (WAV, MP3, FLAC): it has an audio encoder.
    pub fn audio(&self) -> bool {
        self.audio.is_some()
    }

    /// Bytes of the encoders' compute buffers.
    pub fn compute_bytes(&self) -> usize {
        let vision = self.vision.iter().map(|p| p.encoder().compute_bytes());
        vision
            .chain(self.audio.iter().map(|p| p.encoder().compute_bytes()))
            .sum()
    }

    /// An image file (PNG, JPEG, WebP or GIF bytes) decoded, preprocessed, laid out and
    /// encoded, chunk by chunk; a WAV, MP3 or FLAC file (by its bytes, for a projector with an audio
    /// encoder) decoded, cut into log-mel pieces, laid out and encoded, a chunk per piece;
    /// from the cache when it holds the same bytes.
    ///
    /// # Errors
    /// [`Error::Image`](crate::Error::Image) for bytes that are not an image elelem decodes,
    /// or one too large, and for an audio file where the projector has no audio encoder;
    /// [`Error::Audio`](crate::Error::Audio) for an audio file elelem does not read
    /// ([`crate::audio::decode_audio`]), and for anything but one where the projector has
    /// no vision encoder.
    pub fn encode(&self, image: &[u8]) -> Result<Arc<EncodedImage>> {
        Ok(self.encode_until(image, &AtomicBool::new(false))?.0)
    }

    /// [`VisionContext::encode`], and the seconds its encoder's passes took (0 from the
    /// cache); stopped once `abort` is set (by another thread, between graph nodes): then
    /// `Err(Aborted)`, and nothing is kept.
    pub fn encode_until(&self, image: &[u8], abort: &AtomicBool) -> Result<(Arc<EncodedImage>, f64)> {
        self.encode_read(self.read(image)?, abort)
    }

    /// A medium's bytes read and laid out, or found in the cache: all but the encoding.
    ///
    /// # Errors
    /// [`Error::Image`](crate::Error::Image) or [`Error::Audio`](crate::Error::Audio) as
    /// [`VisionContext::encode`].
    fn read(&self, bytes: &[u8]) -> Result<Read> {
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        let hash = hasher.finish();
        if let Some(cached) = self.cache.lock().expect("cache lock").iter().find(|e| e.hash == hash) {
            return Ok(Read::Cached(Arc::clone(cached)));
        }
        // mtmd's helper: audio by its bytes, an image otherwise; an encoder the projector
        // lacks refuses its kind.
        let audio = match (&self.vision, &self.audio) {
            (None, Some(audio)) => Some(audio),
            (Some(_), Some(audio)) if is_audio(bytes) => Some(audio),
            _ => None,
        };
        if let Some(audio) = audio {
            let pieces = audio.reader.preprocess(&decode_audio(bytes)?)?;
            let layout = audio_layout(&audio.mmproj.hparams, pieces.len())?;
            return Ok(Read::Audio { hash, layout, pieces });
        }
        let vision = self.vision.as_ref().expect("a projector without audio has vision");
        if is_audio(bytes) {
            return Err(Error::Image(format!(
                "a WAV, MP3 or FLAC file is audio, which the {} projector does not take: it has no audio encoder",
                vision.mmproj.hparams.projector.name()
            )));
        }
        let (kind, params) = &vision.reader;
        let pre = preprocess(*kind, params, &decode(bytes)?)?;
        let layout = image_layout(&vision.mmproj.hparams, &pre)?;
        Ok(Read::Image { hash, layout, pre })
    }

    /// A medium [`VisionContext::read`] encoded (a chunk at a time, as mtmd encodes them),
    /// kept in the cache, and the seconds the encoder's passes took.
    fn encode_read(&self, read: Read, abort: &AtomicBool) -> Result<(Arc<EncodedImage>, f64)> {
        // The part each was read by.
        let vision = || {
            self.vision
                .as_ref()
                .expect("an image read by the vision encoder's part")
        };
        let audio = || self.audio.as_ref().expect("audio read by the audio encoder's part");
        let (hash, layout, embeddings, seconds) = match read {
            Read::Cached(encoded) => return Ok((encoded, 0.0)),
            Read::Image { hash, layout, pre } => {
                let (embeddings, seconds) = encode_image(vision(), &layout, &pre, abort)?;
                (hash, layout, embeddings, seconds)
            }
            Read::Audio { hash, layout, pieces } => {
                let (embeddings, seconds) = encode_audio(audio(), &pieces, abort)?;
                (hash, layout, embeddings, seconds)
            }
        };
        let encoded = Arc::new(EncodedImage {
            hash,
            layout,
            embeddings,
        });
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.len() == IMAGE_CACHE_ENTRIES {
            cache.pop_front();
        }
        cache.push_back(Arc::clone(&encoded));
        Ok((encoded, seconds))
    }

    /// `text` with [`MEDIA_MARKER`](crate::vision::MEDIA_MARKER) once per medium of `media`
    /// (in marker order, each an image or a WAV file by its bytes, as
    /// [`VisionContext::encode`] reads it), as `mtmd_tokenize` chunks it
    /// ([`tokenize_prompt`]: special tokens parsed but in the byte ranges `plain`, a chat's
    /// message contents; BOS and EOS where the model adds them), each
    /// image (audio) chunk's rows given as its embeddings. Encoding stops once `abort` is set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the markers are not one
    /// per image; [`Error::Load`](crate::Error::Load) for a vocabulary without the tokens the
    /// projector frames images with; [`Error::ContextFull`] when the prompt's tokens, its
    /// media's included, are more than a sequence holds (`capacity`: how many, and that in
    /// words), found before anything is encoded; the errors of [`VisionContext::encode`].
    pub fn prompt(
        &self,
        model: &Model,
        text: &str,
        plain: &[Range<usize>],
        media: &[&[u8]],
        capacity: (usize, &str),
        abort: &AtomicBool,
    ) -> Result<MultimodalPrompt> {
        let tokenizer = model.tokenizer()?;
        let read = media
            .iter()
            .map(|medium| self.read(medium))
            .collect::<Result<Vec<_>>>()?;
        let layouts: Vec<Vec<ImagePart>> = read.iter().map(|r| r.layout().to_vec()).collect();
        let chunks = tokenize_prompt(tokenizer, &self.mmproj().hparams, text, &layouts, true, plain)?;
        // Refused before any encoding: an hour of audio is 120 pieces to encode, and their
        // embeddings (a gigabyte for Qwen2-Audio's width) would not fit anyway.
        let n_tokens: usize = chunks
            .iter()
            .map(|chunk| match chunk {
                Chunk::Text(tokens) => tokens.len(),
                Chunk::Image { chunk, .. } => chunk.n_tokens,
                Chunk::Audio { chunk, .. } => chunk.n_tokens,
            })
            .sum();
        if n_tokens > capacity.0 {
            return Err(Error::ContextFull(format!(
                "{n_tokens} tokens do not fit: the sequence holds 0 of {}",
                capacity.1
            )));
        }
        // Each encoder's seconds, where the prompt has its kind of media.
        let (mut image_encode_seconds, mut audio_encode_seconds) = (None, None);
        let mut encoded = Vec::with_capacity(read.len());
        for medium in read {
            let audio = medium.layout().iter().any(|part| matches!(part, ImagePart::Audio(_)));
            let (medium, seconds) = self.encode_read(medium, abort)?;
            encoded.push(medium);
            let total = if audio {
                &mut audio_encode_seconds
            } else {
                &mut image_encode_seconds
            };
            *total.get_or_insert(0.0) += seconds;
        }
        let n_embd = model.hparams.n_embd_inp() as usize;
        let mut ids = Vec::new();
        let mut embeddings = Vec::new();
        for chunk in chunks {
            match chunk {
                Chunk::Text(tokens) => ids.extend(tokens),
                Chunk::Image { image, chunk } => {
                    let embd = Arc::clone(encoded[image].chunk(&chunk.source));
                    let rows = embd.len() / n_embd;
                    let (nx, ny) = chunk.grid;
                    embeddings.push(PromptEmbeddings {
                        start: ids.len(),
                        embd,
                        causal: self.vision.as_ref().is_none_or(|p| p.causal),
                        grid: self.mrope.then_some((nx as u32, ny as u32)),
                    });
                    ids.extend(std::iter::repeat_n(self.image_id(encoded[image].hash), rows));
                }
                // A position each, on every axis under M-RoPE (`set_position_mrope_1d`).
                Chunk::Audio { audio, chunk } => {
                    let embd = Arc::clone(&encoded[audio].embeddings[chunk.piece]);
                    embeddings.push(PromptEmbeddings {
                        start: ids.len(),
                        causal: self.audio.as_ref().is_none_or(|p| p.causal),
                        grid: None,
                        embd,
                    });
                    ids.extend(std::iter::repeat_n(self.image_id(encoded[audio].hash), chunk.n_tokens));
                }
            }
        }
        let image_rows: usize = embeddings.iter().map(|e| e.embd.len() / n_embd).sum();
        let image_pos: usize = embeddings.iter().map(|e| e.n_pos(n_embd)).sum();
        Ok(MultimodalPrompt {
            n_pos: ids.len() - image_rows + image_pos,
            ids,
            embeddings,
            image_encode_seconds,
            audio_encode_seconds,
        })
    }

    /// The id an image's rows are recorded under: beyond the vocabulary, from its hash.
    fn image_id(&self, hash: u64) -> u32 {
        self.n_vocab + (hash % u64::from(u32::MAX - self.n_vocab)) as u32
    }
}

/// The embeddings of an image's chunks in its `layout`, and the seconds the encoder took.
fn encode_image(
    part: &Part<(Preprocessor, ImageParams)>,
    layout: &[ImagePart],
    pre: &Preprocessed,
    abort: &AtomicBool,
) -> Result<Encoded> {
    let mut encoder = part.encoder();
    let start = std::time::Instant::now();
    let mut embeddings = Vec::new();
    for part in layout {
        let ImagePart::Image(chunk) = part else { continue };
        let images = match &chunk.source {
            ImageSource::Overview => std::slice::from_ref(pre.overview.as_ref().expect("laid out with one")),
            ImageSource::Entries(range) => &pre.entries[range.clone()],
        };
        let mut embd = Vec::new();
        for img in images {
            embd.extend(encoder.encode_until(img, abort)?);
        }
        embeddings.push(embd.into());
    }
    Ok((embeddings, start.elapsed().as_secs_f64()))
}

/// The embeddings of an audio file's log-mel pieces (mtmd's whisper preprocessor's, a
/// chunk each), and the seconds the encoder took.
fn encode_audio(part: &Part<WhisperMel>, pieces: &[Mel], abort: &AtomicBool) -> Result<Encoded> {
    let mut encoder = part.encoder();
    let start = std::time::Instant::now();
    let embeddings = pieces
        .iter()
        .map(|piece| Ok(encoder.encode_audio_until(piece, abort)?.into()))
        .collect::<Result<_>>()?;
    Ok((embeddings, start.elapsed().as_secs_f64()))
}
