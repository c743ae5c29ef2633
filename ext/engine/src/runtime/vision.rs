//! A projector opened beside a language model, as mtmd's `mtmd_context`: it turns a
//! prompt whose text holds mtmd's media marker once per image (or, for an audio
//! projector, once per audio file) into the language model's input, text tokenized as
//! `mtmd_tokenize` tokenizes it and each image decoded, preprocessed and encoded into
//! embeddings the prompt carries ([`PromptEmbeddings`]), decoded as mtmd's helper decodes
//! them (`causal` or not). An audio file (a WAV, resampled to 16 kHz) is cut into 30 s
//! log-mel pieces, a chunk each, whose tokens take a position each, under M-RoPE too
//! (mtmd's helper places them as text: `set_position_mrope_1d`).
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
use crate::audio::{decode_wav, Mel, WhisperMel};
use crate::vision::{
    audio_layout, decode, image_layout, preprocess, tokenize_prompt, Chunk, Encoder, EncoderParams, ImageParams,
    ImagePart, ImageSource, Mmproj, Preprocessed, Preprocessor, ProjectorType,
};
use crate::{Error, Model, Result};

/// How many images' (audio files') embeddings a [`VisionContext`] keeps.
pub const IMAGE_CACHE_ENTRIES: usize = 16;

/// A language model's projector, ready to encode images (or audio) into its prompts.
pub struct VisionContext {
    mmproj: Arc<Mmproj>,
    /// One image is encoded at a time.
    encoder: Mutex<Encoder>,
    media: Media,
    /// Whether the language model decodes image tokens causally (mtmd's
    /// `mtmd_decode_use_non_causal`: not Gemma 3's, nor Gemma 4's but its E2B's and E4B's).
    causal: bool,
    /// Whether the language model places image tokens on their grid (mtmd's
    /// `mtmd_decode_use_mrope`: a model under multi-dimensional rope).
    mrope: bool,
    n_vocab: u32,
    /// The latest images by the hash of their bytes, oldest first.
    cache: Mutex<VecDeque<Arc<EncodedImage>>>,
}

/// How a projector's media are read before its encoder.
enum Media {
    /// Images: decoded, then preprocessed by the projector type's preprocessor.
    Images(Preprocessor, ImageParams),
    /// Audio: a WAV file, its log-mel spectrogram in pieces of 30 s.
    Audio(WhisperMel),
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
    /// Seconds the encoder's passes took for the images this prompt encoded (those not
    /// from the cache): what `mtmd_encode_chunk` does, not the decoding or preprocessing.
    pub encode_seconds: f64,
}

impl VisionContext {
    /// Opens the projector at `path` for `model`: a vision or an audio encoder.
    ///
    /// # Errors
    /// [`Error::Load`](crate::Error::Load) for a projector that cannot be read or whose
    /// embeddings are not the model's width; [`Error::Unsupported`](crate::Error::Unsupported)
    /// for a model that does not take embeddings.
    pub fn open(path: &Path, model: &Model, params: EncoderParams) -> Result<VisionContext> {
        let mmproj = Arc::new(Mmproj::open(path)?);
        mmproj.check_text_model(model.hparams.n_embd_inp())?;
        model.check_takes_embeddings()?;
        let hp = &mmproj.hparams;
        let media = if hp.projector.audio() {
            Media::Audio(WhisperMel::new(hp.n_mel_bins as usize)?)
        } else {
            let (kind, params) = hp.preprocessing();
            Media::Images(kind, params)
        };
        // mtmd_decode_use_non_causal: Gemma 3's images see each other both ways, and Gemma
        // 4's but for its E2B and E4B (by the projector's width, as mtmd tells them).
        let causal = match hp.projector {
            ProjectorType::Gemma3 => false,
            ProjectorType::Gemma4v => matches!(mmproj.n_mmproj_embd(), 1536 | 2560),
            _ => true,
        };
        let encoder = Encoder::new(Arc::clone(&mmproj), params)?;
        Ok(VisionContext {
            mmproj,
            encoder: Mutex::new(encoder),
            media,
            causal,
            mrope: model.hparams.rope.mode.positions_per_token() > 1,
            n_vocab: model.hparams.n_vocab,
            cache: Mutex::new(VecDeque::new()),
        })
    }

    pub fn mmproj(&self) -> &Mmproj {
        &self.mmproj
    }

    /// Whether the projector takes audio files (WAV) where others take images.
    pub fn audio(&self) -> bool {
        matches!(self.media, Media::Audio(_))
    }

    /// Bytes of the encoder's compute buffer.
    pub fn compute_bytes(&self) -> usize {
        self.encoder.lock().expect("encoder lock").compute_bytes()
    }

    /// An image file (PNG, JPEG, WebP or GIF bytes) decoded, preprocessed, laid out and
    /// encoded, chunk by chunk; for an audio projector, a WAV file decoded, cut into log-mel
    /// pieces, laid out and encoded, a chunk per piece; from the cache when it holds the
    /// same bytes.
    ///
    /// # Errors
    /// [`Error::Image`](crate::Error::Image) for bytes that are not an image elelem decodes,
    /// or one too large; [`Error::Audio`](crate::Error::Audio) for bytes that are not a WAV
    /// file elelem reads (16-bit PCM or 32-bit float, 1 Hz to 384 kHz).
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
        Ok(match &self.media {
            Media::Images(kind, params) => {
                let pre = preprocess(*kind, params, &decode(bytes)?)?;
                let layout = image_layout(&self.mmproj.hparams, &pre)?;
                Read::Image { hash, layout, pre }
            }
            Media::Audio(mel) => {
                let pieces = mel.preprocess(&decode_wav(bytes)?)?;
                let layout = audio_layout(&self.mmproj.hparams, pieces.len())?;
                Read::Audio { hash, layout, pieces }
            }
        })
    }

    /// A medium [`VisionContext::read`] encoded (a chunk at a time, as mtmd encodes them),
    /// kept in the cache, and the seconds the encoder's passes took.
    fn encode_read(&self, read: Read, abort: &AtomicBool) -> Result<(Arc<EncodedImage>, f64)> {
        let (hash, layout, embeddings, seconds) = match read {
            Read::Cached(encoded) => return Ok((encoded, 0.0)),
            Read::Image { hash, layout, pre } => {
                let (embeddings, seconds) = self.encode_image(&layout, &pre, abort)?;
                (hash, layout, embeddings, seconds)
            }
            Read::Audio { hash, layout, pieces } => {
                let (embeddings, seconds) = self.encode_audio(&pieces, abort)?;
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

    /// The embeddings of an image's chunks in its `layout`, and the seconds the encoder took.
    fn encode_image(&self, layout: &[ImagePart], pre: &Preprocessed, abort: &AtomicBool) -> Result<Encoded> {
        let mut encoder = self.encoder.lock().expect("encoder lock");
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
    fn encode_audio(&self, pieces: &[Mel], abort: &AtomicBool) -> Result<Encoded> {
        let mut encoder = self.encoder.lock().expect("encoder lock");
        let start = std::time::Instant::now();
        let embeddings = pieces
            .iter()
            .map(|piece| Ok(encoder.encode_audio_until(piece, abort)?.into()))
            .collect::<Result<_>>()?;
        Ok((embeddings, start.elapsed().as_secs_f64()))
    }

    /// `text` with [`MEDIA_MARKER`](crate::vision::MEDIA_MARKER) once per image, as `mtmd_tokenize` chunks it
    /// ([`tokenize_prompt`]: special tokens parsed but in the byte ranges `plain`, a chat's
    /// message contents; BOS and EOS where the model adds them), each
    /// image chunk's rows given as its embeddings. Encoding stops once `abort` is set.
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
        images: &[&[u8]],
        capacity: (usize, &str),
        abort: &AtomicBool,
    ) -> Result<MultimodalPrompt> {
        let tokenizer = model.tokenizer()?;
        let read = images
            .iter()
            .map(|image| self.read(image))
            .collect::<Result<Vec<_>>>()?;
        let layouts: Vec<Vec<ImagePart>> = read.iter().map(|r| r.layout().to_vec()).collect();
        let chunks = tokenize_prompt(tokenizer, &self.mmproj.hparams, text, &layouts, true, plain)?;
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
        let mut encode_seconds = 0.0;
        let mut encoded = Vec::with_capacity(read.len());
        for medium in read {
            let (medium, seconds) = self.encode_read(medium, abort)?;
            encoded.push(medium);
            encode_seconds += seconds;
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
                        causal: self.causal,
                        grid: self.mrope.then_some((nx as u32, ny as u32)),
                    });
                    ids.extend(std::iter::repeat_n(self.image_id(encoded[image].hash), rows));
                }
                // A position each, on every axis under M-RoPE (`set_position_mrope_1d`).
                Chunk::Audio { audio, chunk } => {
                    let embd = Arc::clone(&encoded[audio].embeddings[chunk.piece]);
                    embeddings.push(PromptEmbeddings {
                        start: ids.len(),
                        causal: self.causal,
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
            encode_seconds,
        })
    }

    /// The id an image's rows are recorded under: beyond the vocabulary, from its hash.
    fn image_id(&self, hash: u64) -> u32 {
        self.n_vocab + (hash % u64::from(u32::MAX - self.n_vocab)) as u32
    }
}
