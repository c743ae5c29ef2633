//! Running a model: a [`Context`] of sequences over its KV cache, continuous batching
//! of requests ([`Batcher`], [`Scheduler`]), speculative decoding, embeddings, and the
//! one-sequence generation loop; [`Runtime`] assembles them for an opened model.

pub mod batcher;
pub mod context;
pub mod embed;
pub mod generate;
pub mod ngram_cache;
pub mod open;
pub mod scheduler;
pub mod speculative;
pub mod vision;

pub use batcher::{Batcher, Chooser, DraftStats, Event, Logprob, PromptEmbeddings, Request, RequestId, Summary};
pub use context::{BatchToken, Context, ContextParams, DecodeStats, ImageGrid};
pub use embed::{EmbedParams, Embedder, Normalize};
pub use generate::generate;
pub use ngram_cache::NgramCache;
pub use open::{Draft, EmbedderGuard, OpenParams, Runtime};
pub use scheduler::{ContextSnapshot, Lease, Scheduler};
pub use speculative::{DraftLength, DraftSource, Speculation, SpeculativeParams};
