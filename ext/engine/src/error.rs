/// Everything the engine can refuse or fail at. Each variant maps to one Ruby
/// exception class in the extension.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The file is missing, unreadable, not a GGUF, malformed, or not a model we support.
    #[error("{0}")]
    Load(String),
    /// A well-formed model that elelem would not decode as llama.cpp does: an
    /// architecture it does not run, or a tensor or `<arch>.` key its architecture
    /// would ignore. Refused rather than loaded and mis-decoded.
    #[error("{0}")]
    Unsupported(String),
    /// A caller passed something out of range (token IDs, sizes, options).
    #[error("{0}")]
    InvalidArgument(String),
    /// The sequence does not fit the context window.
    #[error("{0}")]
    ContextFull(String),
    /// Every sequence is busy and the queue of waiting requests is full.
    #[error("{0}")]
    Busy(String),
    /// A draft model's vocabulary is not the target's: it cannot draft for it.
    #[error("{0}")]
    IncompatibleDraft(String),
    /// The model was closed.
    #[error("the model is closed")]
    Closed,
    /// The abort flag stopped the computation (an interrupt).
    #[error("interrupted")]
    Aborted,
    /// A chat template failed to compile or render.
    #[error("{0}")]
    Template(String),
    #[error("{0}")]
    Tokenizer(String),
    /// ggml's CPU backend cannot be loaded: in a build with CPU variants, one that
    /// `ELELEM_CPU_VARIANT` forces but this CPU cannot run (or that was not built), or
    /// variant libraries that are missing.
    #[error("{0}")]
    Cpu(String),
    /// A backend beyond the CPU failed: an RPC worker that is down, died, timed out,
    /// answered garbage or speaks another protocol version.
    #[error("{0}")]
    Backend(String),
    /// An image that cannot be read: not PNG, JPEG, WebP or GIF, corrupt, empty, beyond the
    /// size limits, or preprocessing parameters that do not fit it.
    #[error("{0}")]
    Image(String),
    /// Audio that cannot be read: not a WAV file elelem decodes (16-bit PCM or 32-bit float,
    /// at a rate from 1 Hz to 384 kHz, resampled to 16 kHz as miniaudio does), corrupt, too
    /// short, or up-sampled to more than two hours.
    #[error("{0}")]
    Audio(String),
    /// ggml could not allocate memory.
    #[error("out of memory allocating {0}")]
    OutOfMemory(String),
    /// A broken invariant in the engine itself.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<elelem_gguf::GgufError> for Error {
    fn from(e: elelem_gguf::GgufError) -> Self {
        Error::Load(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
