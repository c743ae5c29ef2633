//! GGUF, the file format of ggml models: a validating reader over a memory
//! map and a writer.
//!
//! A GGUF downloaded from the internet is untrusted input, and ggml aborts the
//! whole process on a failed assert, so every count, length, dimension, type
//! and offset is checked here, in safe Rust, before anything else sees it.
//! Nothing in this crate knows ggml: the per-type block sizes it needs are in
//! [`TensorType`].

mod reader;
mod types;
mod value;
mod writer;

pub use reader::{FileBytes, Gguf, TensorInfo};
pub use types::TensorType;
pub use value::{Value, ValueType};
pub use writer::GgufWriter;

/// Why a file is not a GGUF we can use. Every message names the problem.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file (magic bytes are {0:02x?}, expected \"GGUF\")")]
    BadMagic([u8; 4]),
    #[error("unsupported GGUF version {0} (supported: 2 and 3)")]
    UnsupportedVersion(u32),
    #[error("truncated file: {what} at byte {offset} needs {needed} bytes, {available} left")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },
    #[error("malformed GGUF: {0}")]
    Malformed(String),
}

pub type Result<T> = std::result::Result<T, GgufError>;

/// The alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most four dimensions.
pub const MAX_DIMS: usize = 4;
