//! Converts a Hugging Face / sentence-transformers BERT checkpoint directory
//! (`config.json`, `model.safetensors`, `tokenizer.json`, and optionally
//! `tokenizer_config.json`, `special_tokens_map.json`, `modules.json` and the
//! pooling module's `config.json`) to a GGUF, as llama.cpp's
//! `convert_hf_to_gguf.py` does with its `BertModel` class and default output
//! type: the same metadata keys, in the same order, with the same values, and
//! the same tensors (names, order, types, bytes), so the file is byte-identical.
//!
//! ```no_run
//! let report = elelem_convert::convert(
//!     std::path::Path::new("all-MiniLM-L6-v2"),
//!     Some(std::path::Path::new("all-minilm-l6-v2-f16.gguf")),
//!     &elelem_convert::Options::default(),
//! )?;
//! println!("{} tensors, {} bytes", report.tensors, report.bytes);
//! # Ok::<(), elelem_convert::ConvertError>(())
//! ```

mod bert;
mod f16;
mod metadata;
mod safetensors;
mod sha256;
mod tables;
mod vocab;
mod wordpiece;

use std::path::{Path, PathBuf};

use elelem_gguf::Value;

pub use bert::convert;

/// Why a directory did not convert. Every message names the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: missing {what}")]
    Missing { path: String, what: String },
    #[error("{path}: not a valid safetensors file: {why}")]
    BadSafetensors { path: String, why: String },
    #[error("{path}: {why}")]
    Invalid { path: String, why: String },
    #[error("{path}: not supported: {why}")]
    Unsupported { path: String, why: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: elelem_gguf::GgufError,
    },
}

pub type Result<T> = std::result::Result<T, ConvertError>;

/// The output type, `convert_hf_to_gguf.py --outtype`: `F16` is its default
/// (`auto` on a float32 or float16 checkpoint: matrices in F16, vectors, norms,
/// position and token-type embeddings in F32); `F32` keeps every tensor float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutType {
    #[default]
    F16,
    F32,
}

impl OutType {
    /// The name in file names (`F16`).
    pub fn name(self) -> &'static str {
        match self {
            OutType::F16 => "F16",
            OutType::F32 => "F32",
        }
    }
}

/// How to convert.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub out_type: OutType,
    /// The `tokenizer.ggml.pre` to write instead of the one llama.cpp's converter
    /// finds by fingerprinting the tokenizer (`get_vocab_base_pre`), which refuses a
    /// tokenizer it does not know. For WordPiece vocabularies llama.cpp reads it only
    /// to name the vocabulary.
    pub pre_tokenizer: Option<String>,
}

/// What a conversion wrote.
#[derive(Debug, Clone)]
pub struct Report {
    pub path: PathBuf,
    pub tensors: usize,
    /// The file's size.
    pub bytes: u64,
    /// The parameter count (elements of every tensor written).
    pub parameters: u64,
    /// `general.name`.
    pub name: Option<String>,
    /// What the script would read that this converter does not (a model card, a
    /// generation config): the keys it would add are missing from this file.
    pub notes: Vec<String>,
}

/// Metadata in insertion order with Python-dict semantics (gguf-py's `kv_data`):
/// setting a key again replaces its value where it stands.
#[derive(Default)]
pub(crate) struct Kv(Vec<(String, Value)>);

impl Kv {
    pub(crate) fn add(&mut self, key: &str, value: Value) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    /// `add_string`: an empty string is not written.
    pub(crate) fn add_string(&mut self, key: &str, value: &str) {
        if !value.is_empty() {
            self.add(key, Value::String(value.to_string()));
        }
    }

    /// `add_array`: an empty array is not written.
    pub(crate) fn add_array(&mut self, key: &str, items: Vec<Value>) {
        if !items.is_empty() {
            self.add(key, Value::Array(items));
        }
    }

    pub(crate) fn entries(&self) -> &[(String, Value)] {
        &self.0
    }
}

/// The file name `convert_hf_to_gguf.py` picks when given a directory to write
/// into (`gguf.naming_convention`), for the model in `dir`.
pub fn default_file_name(dir: &Path, out_type: OutType) -> Result<String> {
    bert::default_file_name(dir, out_type)
}

/// Where [`convert`] writes without an output path: `dir`/[`default_file_name`].
pub fn default_output(dir: &Path, out_type: OutType) -> Result<PathBuf> {
    Ok(dir.join(default_file_name(dir, out_type)?))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Io {
        path: path.display().to_string(),
        source,
    }
}
