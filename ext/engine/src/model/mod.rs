//! A model: the GGUF mapped, its hyper-parameters read, every tensor the
//! architecture needs checked and placed in a backend buffer before any graph
//! is built.

use std::sync::Arc;

use elelem_gguf::{FileBytes, Gguf, Value};
use elelem_tokenizer::Tokenizer;

use crate::ggml::{self, Buffer, CpuDevice};
use crate::{Error, Result};

mod altup;
pub mod hparams;
pub mod inputs;
pub mod layers;
pub(crate) mod loader;
pub mod placement;
mod spec;
pub mod weights;

pub(crate) use hparams::{read_ssm, read_swa, Keys};
pub use hparams::{ArchTraits, AttnTemperature, ExpertGating, HParams, Kind, Mla, NormType, Pooling, Ssm, Swa};
pub use layers::{Glu, GraphBuilder};
pub(crate) use loader::Loader;
pub use placement::Split;
pub use spec::{Arch, ArchSpec};
pub use weights::{
    AltUp, AltUpLayer, AttentionWeights, BetaAlpha, Classifier, DeltaNetWeights, EncoderInput, ExpertBiases,
    ExpertGateUp, ExpertsBesideMlp, FfnWeights, Laurel, LayerWeights, Mamba2Weights, Mixer, MlaQuery, MlaWeights, Norm,
    OutputHead, PerLayerEmbeddings, QkvWeights, Qkvz, RopeFactors, SharedExpert, SharedGate, ShortConvWeights, Weights,
};

#[derive(Debug, Clone)]
pub struct ModelParams {
    /// How many layers, the output layer counted, go to the devices (the last ones), as
    /// llama.cpp's `n_gpu_layers`; `None`: all. Without a device everything runs on the CPU.
    pub n_gpu_layers: Option<u32>,
    /// RPC workers (`host:port`) whose devices take the offloaded layers, before this
    /// machine's GPUs (see [`ggml::local_devices`]).
    pub rpc: Vec<String>,
    /// The share of the offloaded layers each device takes; empty: in proportion to
    /// each one's free memory.
    pub tensor_split: Vec<f32>,
    /// The longest any network wait on an RPC worker may last.
    pub rpc_timeout: std::time::Duration,
    /// How the offloaded layers are shared among the devices.
    pub split: Split,
    /// Copy the weights whose type and shape the CPU has faster kernels for into those
    /// kernels' interleaved layouts, as llama.cpp does (on by default). Their products
    /// take one path for a few rows and another for more, so a batch-invariant context
    /// (`ContextParams::batch_invariant`) needs a model opened without.
    pub repack: bool,
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams {
            n_gpu_layers: None,
            rpc: Vec::new(),
            tensor_split: Vec::new(),
            rpc_timeout: ggml::rpc::DEFAULT_TIMEOUT,
            split: Split::default(),
            repack: true,
        }
    }
}

/// A loaded model. Immutable after `Model::open`; share it across contexts with `Arc`.
pub struct Model {
    arch: Arch,
    pub hparams: HParams,
    pub(crate) weights: Weights,
    /// The tokenizer, or why the file's vocabulary cannot be used (ids still work then).
    tokenizer: std::result::Result<Arc<Tokenizer>, String>,
    chat_template: Option<String>,
    weights_bytes: usize,
    repacked_bytes: usize,
    n_weights: usize,
    /// Per device of `placement`, the bytes of weights it holds.
    device_bytes: Vec<usize>,
    // Declared after `weights` so the tensors' buffers and the mapping outlive nothing
    // that points into them: buffers reference the file's mapping.
    _buffers: Vec<Buffer>,
    _contexts: Vec<ggml::Context>,
    /// Where the layers are, and the RPC workers that hold some.
    placement: placement::Placement,
    _file: FileBytes,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("hparams", &self.hparams).finish()
    }
}

impl Model {
    /// Loads `gguf` as a model of `arch` (which `crate::arch::lookup` finds by name;
    /// `Model::open` does both).
    pub fn load(gguf: Gguf, arch: Arch, params: &ModelParams) -> Result<Model> {
        let embd = gguf
            .tensor("token_embd.weight")
            .ok_or_else(|| Error::Load("missing tensor token_embd.weight".into()))?;
        let n_vocab = embd
            .dims
            .get(1)
            .and_then(|&n| u32::try_from(n).ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::Load(format!(
                    "tensor token_embd.weight has shape {:?}, expected [n_embd, n_vocab]",
                    embd.dims
                ))
            })?;
        let hparams = HParams::read(&gguf, arch.traits(), n_vocab, arch.read_extra_hparams())?;
        validate_vocab(&gguf, n_vocab)?;

        let device = CpuDevice::get()?;
        let workers = params
            .rpc
            .iter()
            .map(|endpoint| ggml::rpc::RpcWorker::connect(endpoint, params.rpc_timeout))
            .collect::<Result<Vec<_>>>()?;
        // This machine's GPUs (a build with ELELEM_VULKAN=1), unless nothing is offloaded.
        let local = if params.n_gpu_layers == Some(0) {
            Vec::new()
        } else {
            ggml::local_devices()?
        };
        let n_layer = hparams.n_layer as usize;
        let placement = placement::Placement::new(
            workers,
            local,
            n_layer,
            params.n_gpu_layers,
            &params.tensor_split,
            params.split,
        )?;
        let mut loader = Loader::new(&gguf, &device, &placement, params.repack)?;
        let weights = arch.load(&mut loader, &hparams)?;
        loader.check_all_used(arch.name())?;
        let placed = loader.place()?;
        let tokenizer = Tokenizer::from_gguf(&gguf)
            .map(Arc::new)
            .map_err(|e| format!("this model's tokenizer is not supported: {e}"));
        let chat_template = gguf
            .get("tokenizer.chat_template")
            .and_then(Value::as_str)
            .map(str::to_string);
        // Everything before the tensor data has been read into our own structures.
        gguf.release(0..gguf.data_offset() as usize);
        Ok(Model {
            arch,
            hparams,
            weights,
            tokenizer,
            chat_template,
            weights_bytes: placed.weights_bytes,
            repacked_bytes: placed.repacked_bytes,
            n_weights: placed.n_weights,
            device_bytes: placed.device_bytes,
            _buffers: placed.buffers,
            _contexts: placed.contexts,
            placement,
            _file: gguf.into_file_bytes(),
        })
    }

    /// Whether a pass may start from given embeddings (an image's) instead of token ids:
    /// a decoder whose only per-token input is its embedding row (not Gemma 4's or Gemma
    /// 3n's per-layer embeddings, looked up by token).
    pub fn takes_embeddings(&self) -> bool {
        self.hparams.arch.kind == Kind::Decoder && self.weights.per_layer_embd.is_none()
    }

    /// [`Model::takes_embeddings`] as a check.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the architecture where it does not.
    pub fn check_takes_embeddings(&self) -> Result<()> {
        if self.takes_embeddings() {
            return Ok(());
        }
        Err(Error::Unsupported(format!(
            "{} does not take embeddings as input (its per-layer inputs are looked up by token)",
            self.hparams.arch.name
        )))
    }

    /// Bytes of weight data the graphs read (mapped plus repacked).
    pub fn weights_bytes(&self) -> usize {
        self.weights_bytes
    }

    /// Bytes of weights copied into repacked layouts (the rest is the mapping itself).
    pub fn repacked_bytes(&self) -> usize {
        self.repacked_bytes
    }

    /// Where its layers are.
    pub fn placement(&self) -> &placement::Placement {
        &self.placement
    }

    /// Per device of [`Model::placement`], the bytes of weights it holds.
    pub fn device_bytes(&self) -> &[usize] {
        &self.device_bytes
    }

    /// `Err(Error::Backend)` once an RPC worker holding some of its layers has failed: the
    /// model cannot compute again (reopen it once the worker is back).
    pub fn check_workers(&self) -> Result<()> {
        self.placement.workers.iter().try_for_each(ggml::rpc::RpcWorker::check)
    }

    /// How many weight tensors the graphs use.
    pub fn n_weights(&self) -> usize {
        self.n_weights
    }

    /// Whether `token` ends a generation (llama.cpp's end-of-generation set).
    pub fn is_eog(&self, token: u32) -> bool {
        self.tokenizer.as_ref().is_ok_and(|t| t.is_eog(token))
    }

    /// The model's tokenizer, shared: it outlives the model in whoever clones it.
    pub fn tokenizer(&self) -> Result<&Arc<Tokenizer>> {
        self.tokenizer.as_ref().map_err(|e| Error::Tokenizer(e.clone()))
    }

    /// The GGUF's Jinja chat template, if it has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    pub(crate) fn weights(&self) -> &Weights {
        &self.weights
    }

    /// Its architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }
}

fn validate_vocab(gguf: &Gguf, n_vocab: u32) -> Result<()> {
    let Some(tokens) = gguf.get("tokenizer.ggml.tokens") else {
        return Ok(());
    };
    let n_tokens = tokens.as_array().map(<[Value]>::len).unwrap_or(0);
    if n_tokens != n_vocab as usize {
        return Err(Error::Load(format!(
            "tokenizer.ggml.tokens has {n_tokens} entries but token_embd.weight has {n_vocab} rows"
        )));
    }
    for key in ["tokenizer.ggml.scores", "tokenizer.ggml.token_type"] {
        if let Some(v) = gguf.get(key) {
            let n = v.as_array().map(<[Value]>::len).unwrap_or(0);
            if n != n_tokens {
                return Err(Error::Load(format!(
                    "{key} has {n} entries, tokenizer.ggml.tokens has {n_tokens}"
                )));
            }
        }
    }
    Ok(())
}
