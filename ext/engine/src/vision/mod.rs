//! Images in, as llama.cpp's `tools/mtmd` takes them: decoding to RGB8 (mtmd's
//! `clip_image_u8`, through stb_image there) and the preprocessing of
//! `tools/mtmd/mtmd-image.cpp` that turns one into the normalized `f32` images a vision
//! encoder reads, bit for bit (`ext/testkit/tests/vision.rs` compares them with mtmd's
//! own code).
//!
//! - [`decode`]: PNG, JPEG, WebP and GIF (its first frame) to an [`ImageU8`], with the
//!   size checked from the header before anything large is allocated ([`MAX_IMAGE_SIDE`],
//!   [`MAX_IMAGE_PIXELS`]).
//! - [`preprocess()`]: one [`Preprocessor`] (mtmd's families) with its [`ImageParams`]
//!   (mtmd's `clip_hparams`, the preprocessing share) to a [`Preprocessed`].
//! - [`image_layout`] and [`tokenize_prompt`]: where a preprocessed image's embeddings go
//!   in a prompt, the text and tokens around them, as mtmd's `mtmd_tokenize` lays them out
//!   ([`audio_layout`]: an audio file's pieces).
//! - [`Mmproj`]: a projector GGUF (`mmproj`), its `clip.*` hyper-parameters and weights, as
//!   clip.cpp's loader reads them; [`Encoder`]: its ViT and projector as one graph
//!   ([`encoder`], [`projector`]), giving the language model's input embeddings, bit for
//!   bit clip.cpp's (`ext/testkit/tests/vision_encoder.rs`).
//!
//! The runtime puts them together: [`crate::runtime::vision::VisionContext`], a projector
//! opened beside a language model, as mtmd's context.
//!
//! Decoding and preprocessing use nothing else of the engine; the encoder uses its ggml
//! wrappers and weight loader.

mod decode;
pub mod encoder;
pub mod hparams;
mod image;
mod layout;
pub mod mmproj;
mod preprocess;
pub mod projector;

pub use self::image::{ImageF32, ImageU8, MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};
pub use decode::decode;
pub use encoder::{Encoder, EncoderParams};
pub use hparams::{ClipHParams, FfnOp, ProjectorType};
pub use layout::{
    audio_layout, image_layout, tokenize_prompt, AudioChunk, Chunk, ImageChunk, ImagePart, ImageSource, MEDIA_MARKER,
};
pub use mmproj::{Encoders, Mmproj};
pub use preprocess::{preprocess, ImageParams, Pad, Preprocessed, Preprocessor, ResizeAlgo};
