//! A projector opened beside a language model, as mtmd's `mtmd_context`: it turns a
//! prompt whose text holds mtmd's media marker once per image into the language
//! model's input, text tokenized as `mtmd_tokenize` tokenizes it and each image
//! decoded, preprocessed and encoded into embeddings the prompt carries
//! ([`PromptEmbeddings`]), decoded as mtmd's helper decodes them (`causal` or not).
//!
//! An image's embeddings are kept by the hash of its bytes ([`IMAGE_CACHE_ENTRIES`] of
//! them), so that a conversation that sends the same picture every turn encodes it once;
//! the prompt records each image's rows under ids made from that hash, so that a
//! sequence that already holds them (prefix reuse) is not given them again.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::encoder::{Encoder, EncoderParams};
use super::hparams::ProjectorType;
use super::mmproj::Mmproj;
use super::preprocess::{preprocess, ImageParams, Preprocessor};
use crate::runtime::batcher::PromptEmbeddings;
use crate::{Error, Model, Result};

/// mtmd's default media marker (`mtmd_default_marker`): where a prompt's text places an image.
pub const MEDIA_MARKER: &str = "<__media__>";
/// How many images' embeddings a [`VisionContext`] keeps.
pub const IMAGE_CACHE_ENTRIES: usize = 16;

/// A language model's projector, ready to encode images into its prompts.
pub struct VisionContext {
    mmproj: Arc<Mmproj>,
    /// One image is encoded at a time.
    encoder: Mutex<Encoder>,
    preprocessing: (Preprocessor, ImageParams),
    /// The text around an image's embeddings (mtmd's `img_beg` / `img_end`).
    frame: (&'static str, &'static str),
    /// Whether the language model decodes image tokens causally (mtmd's
    /// `mtmd_decode_use_non_causal`).
    causal: bool,
    n_vocab: u32,
    /// The latest images' embeddings by the hash of their bytes, oldest first.
    cache: Mutex<VecDeque<(u64, Arc<[f32]>)>>,
}

/// A prompt with images, as [`crate::runtime::Request`] takes it: ids (the image rows'
/// recorded in their place) and the images' embeddings.
#[derive(Clone)]
pub struct MultimodalPrompt {
    pub ids: Vec<u32>,
    pub embeddings: Vec<PromptEmbeddings>,
}

impl VisionContext {
    /// Opens the projector at `path` for `model`.
    ///
    /// # Errors
    /// [`Error::Load`] for a projector that cannot be read or whose embeddings are not the
    /// model's width; [`Error::Unsupported`] for a projector type elelem does not lay out
    /// in a prompt, or a model that does not take embeddings.
    pub fn open(path: &Path, model: &Model, params: EncoderParams) -> Result<VisionContext> {
        let mmproj = Arc::new(Mmproj::open(path)?);
        mmproj.check_text_model(model.hparams.n_embd)?;
        if !model.takes_embeddings() {
            return Err(Error::Unsupported(format!(
                "{} does not take image embeddings (its per-layer inputs are looked up by token)",
                model.hparams.arch.name
            )));
        }
        let hp = &mmproj.hparams;
        // mtmd_context's choices by projector type (mtmd.cpp, `init_vision`).
        let (frame, causal) = match hp.projector {
            ProjectorType::Gemma3 => (("<start_of_image>", "<end_of_image>"), false),
            other => {
                return Err(Error::Unsupported(format!(
                    "images through a {} projector are not laid out in prompts yet (elelem does: gemma3)",
                    other.name()
                )))
            }
        };
        let preprocessing = hp.preprocessing()?;
        let encoder = Encoder::new(Arc::clone(&mmproj), params)?;
        Ok(VisionContext {
            mmproj,
            encoder: Mutex::new(encoder),
            preprocessing,
            frame,
            causal,
            n_vocab: model.hparams.n_vocab,
            cache: Mutex::new(VecDeque::new()),
        })
    }

    pub fn mmproj(&self) -> &Mmproj {
        &self.mmproj
    }

    /// Bytes of the encoder's compute buffer.
    pub fn compute_bytes(&self) -> usize {
        self.encoder.lock().expect("encoder lock").compute_bytes()
    }

    /// An image file's embeddings (PNG, JPEG, WebP or GIF bytes), from the cache when it
    /// holds them, with the hash they are kept by.
    ///
    /// # Errors
    /// [`Error::Image`] for bytes that are not an image elelem decodes, or one too large.
    pub fn encode(&self, image: &[u8]) -> Result<(u64, Arc<[f32]>)> {
        let mut hasher = DefaultHasher::new();
        image.hash(&mut hasher);
        let hash = hasher.finish();
        if let Some((_, embd)) = self.cache.lock().expect("cache lock").iter().find(|(h, _)| *h == hash) {
            return Ok((hash, Arc::clone(embd)));
        }
        let decoded = super::decode(image)?;
        let (kind, params) = &self.preprocessing;
        let pre = preprocess(*kind, params, &decoded)?;
        let mut encoder = self.encoder.lock().expect("encoder lock");
        let mut embd = Vec::new();
        for entry in &pre.entries {
            embd.extend(encoder.encode(entry)?);
        }
        drop(encoder);
        let embd: Arc<[f32]> = embd.into();
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.len() == IMAGE_CACHE_ENTRIES {
            cache.pop_front();
        }
        cache.push_back((hash, Arc::clone(&embd)));
        Ok((hash, embd))
    }

    /// `text` with [`MEDIA_MARKER`] once per image as `mtmd_tokenize` lays it out: each
    /// piece of text tokenized alone (special tokens parsed, none added, but in the byte
    /// ranges `plain` of `text`: a chat's message contents), each image between its
    /// frame's texts, then the beginning-of-sequence token first when `add_special` and
    /// the model adds one (and the end-of-sequence token last likewise).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the markers are not one per image; the errors of
    /// [`VisionContext::encode`].
    pub fn prompt(
        &self,
        model: &Model,
        text: &str,
        plain: &[Range<usize>],
        images: &[&[u8]],
        add_special: bool,
    ) -> Result<MultimodalPrompt> {
        let n_markers = text.matches(MEDIA_MARKER).count();
        if n_markers != images.len() {
            return Err(Error::InvalidArgument(format!(
                "the prompt places {n_markers} images ({MEDIA_MARKER}) but {} were given",
                images.len()
            )));
        }
        let tokenizer = model.tokenizer()?;
        let n_embd = model.hparams.n_embd as usize;
        let mut ids = Vec::new();
        let mut embeddings = Vec::new();
        // Each piece with the plain ranges within it, from its own start.
        let tokenize_piece = |start: usize, piece: &str| {
            let end = start + piece.len();
            let within: Vec<Range<usize>> = plain
                .iter()
                .filter(|r| r.start < end && r.end > start)
                .map(|r| r.start.max(start) - start..r.end.min(end) - start)
                .collect();
            tokenizer.tokenize_with_plain(piece, false, &within)
        };
        let mut starts = text.match_indices(MEDIA_MARKER).map(|(at, _)| at + MEDIA_MARKER.len());
        let mut pieces = text.split(MEDIA_MARKER);
        ids.extend(tokenize_piece(0, pieces.next().unwrap_or("")));
        for ((piece, start), image) in pieces.zip(&mut starts).zip(images) {
            let (hash, embd) = self.encode(image)?;
            ids.extend(tokenizer.tokenize(self.frame.0, false, true));
            let rows = embd.len() / n_embd;
            embeddings.push(PromptEmbeddings {
                start: ids.len(),
                embd,
                causal: self.causal,
            });
            ids.extend(std::iter::repeat_n(self.image_id(hash), rows));
            ids.extend(tokenizer.tokenize(self.frame.1, false, true));
            ids.extend(tokenize_piece(start, piece));
        }
        if add_special {
            if let (true, Some(bos)) = (tokenizer.add_bos(), tokenizer.bos()) {
                ids.insert(0, bos);
                embeddings.iter_mut().for_each(|e| e.start += 1);
            }
            if let (true, Some(eos)) = (tokenizer.add_eos(), tokenizer.eos()) {
                ids.push(eos);
            }
        }
        Ok(MultimodalPrompt { ids, embeddings })
    }

    /// The id an image's rows are recorded under: beyond the vocabulary, from its hash.
    fn image_id(&self, hash: u64) -> u32 {
        self.n_vocab + (hash % u64::from(u32::MAX - self.n_vocab)) as u32
    }
}
