//! elelem's inference engine: a GGUF model run as ggml graphs on the CPU
//! backend. Pure Rust over `ggml-sys`; it knows nothing of Ruby and is tested
//! with `cargo test` alone.
//!
//! - [`Model`]: a validated, memory-mapped GGUF with its weights in backend
//!   buffers (zero-copy, or repacked where the CPU backend has a faster layout).
//!   Immutable once open; share it with `Arc`.
//! - [`Context`]: one sequence: the KV cache, the graph allocator, the compute
//!   buffer. [`Context::decode`] is the hot path.
//! - [`arch`]: one graph builder per architecture over the shared pieces in
//!   [`model::layers`].
//! - [`ggml::kernels`]: matrix products of our own (AVX-512 VNNI) for passes of a few
//!   rows, each with the bits of the ggml kernel it stands in for.
//! - [`Embedder`]: embeddings and reranker scores (encoders such as BERT, or a
//!   decoder's last hidden state), pooled and normalized as llama.cpp's.
//! - [`Speculation`]: speculative decoding of one sequence, drafted by a smaller
//!   model or by prompt lookup ([`NgramCache`]), verified by the target in one pass.
//! - [`Constraint`]: structured output (JSON Schema, grammars, regexes,
//!   choices) as a token mask per step, through llguidance; [`text::tool_calls`]
//!   reads a reply's calls and gives the lazy constraint's triggers.
//!
//! The folders read bottom-up, each using only those below it: [`ggml`] (the tensor
//! library's wrappers, the CPU backend, our kernels), [`memory`] (the KV cache),
//! [`model`] (GGUF to placed weights, hyper-parameters, the graph's shared pieces),
//! [`arch`] (one file per architecture, and the registry); [`text`] stands alone
//! (sampling, constraints, chat templates), and so does [`audio`] (WAV files to the
//! log-mel spectrograms of mtmd's audio encoders); [`runtime`] (contexts, batching,
//! speculation, embeddings) sits on all of them. `script/imports` checks it. Two leaves at
//! the root serve every folder: the errors, and `contract` (`a * b + c` fused where GCC
//! fuses it in llama.cpp's build for the target, for mtmd's image and audio arithmetic).

pub mod arch;
pub mod audio;
mod contract;
mod error;
pub mod ggml;
pub mod memory;
pub mod model;
pub mod runtime;
pub mod text;
pub mod vision;

pub use elelem_tokenizer::Tokenizer;
pub use error::{Error, Result};
pub use ggml::{cpu_model, BuildProfile};
pub use memory::{CacheType, SeqId, MAX_SEQUENCES};
pub use model::{HParams, Model, ModelParams, Pooling, Split};
pub use runtime::{
    generate, BatchToken, Batcher, Chooser, Context, ContextParams, ContextSnapshot, DecodeStats, Draft, DraftLength,
    DraftSource, DraftStats, EmbedParams, Embedder, EmbedderGuard, Event, ImageGrid, Lease, Logprob, NgramCache,
    Normalize, OpenParams, PromptEmbeddings, Request, RequestId, Runtime, Scheduler, Speculation, SpeculativeParams,
    Summary,
};
/// The JSON values constraints and tool calls are made of.
pub use serde_json;
pub use text::{
    Constraint, ConstraintFactory, ConstraintSpec, FinishReason, GenerateParams, StopReason, TextParams, TextStream,
};

/// The tokenizer of a GGUF file's vocabulary alone (a vocab-only GGUF, as
/// llama.cpp's `vocab_only`, or any model file: no tensor is read). A file that is
/// not a GGUF, or a vocabulary llama.cpp would refuse, is an [`Error::Load`].
pub fn open_tokenizer(path: &std::path::Path) -> Result<Tokenizer> {
    let gguf = elelem_gguf::Gguf::open(path).map_err(|e| Error::Load(format!("{}: {e}", path.display())))?;
    Tokenizer::from_gguf(&gguf).map_err(|e| Error::Load(format!("{}: {e}", path.display())))
}

/// The vendored ggml's version.
pub fn ggml_version() -> &'static str {
    ggml_sys::GGML_VERSION
}

/// The CPU features ggml's CPU backend was compiled for, after the CPU variant in use in
/// a build with variants (`CPU_VARIANT=haswell SSE3 ...`).
///
/// # Errors
/// [`Error::Cpu`] when the CPU backend cannot be loaded.
pub fn system_info() -> Result<String> {
    ggml::system_info()
}
