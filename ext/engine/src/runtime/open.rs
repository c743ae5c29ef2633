//! A model opened for use: its weights, the context of its sequences and their
//! scheduler, a draft model's context for speculative decoding, and the embedding
//! context made on first use. The Ruby extension converts `Elelem.open`'s options
//! into an [`OpenParams`] and calls [`Runtime::open`]; it assembles nothing itself.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ggml::threads::available_cpus;
use crate::memory::kv_cache::CacheType;
use crate::model::{Kind, Model, ModelParams, Pooling, Split};
use crate::runtime::context::{Context, ContextParams, DEFAULT_N_CTX, MAX_THREADS};
use crate::runtime::embed::{EmbedParams, Embedder};
use crate::runtime::scheduler::Scheduler;
use crate::runtime::speculative::{
    check_compatible, check_speculable, DraftLength, DraftSource, SpeculativeParams, MAX_DRAFT_TOKENS,
};
use crate::runtime::vision::VisionContext;
use crate::vision::EncoderParams;
use crate::{Error, Result};

/// How many requests may wait for a free sequence unless told otherwise.
pub const DEFAULT_QUEUE: usize = 256;

/// What drafts for speculative decoding.
#[derive(Clone)]
pub enum Draft {
    /// A draft model's file, opened with the default parameters.
    File(PathBuf),
    /// An open model, whose weights are shared.
    Model(Arc<Model>),
    /// Prompt lookup, with no second model.
    Lookup,
    /// Copying from the prompt and the text so far, with no second model.
    Copy,
}

/// How to open a model: `Elelem.open`'s options, checked and converted. The
/// defaults are `Elelem.open`'s (the extension hands them to Ruby as `Elelem::Defaults`).
#[derive(Clone)]
pub struct OpenParams {
    /// The most tokens the context holds, all sequences together (or each its share
    /// when `batch_invariant`).
    pub n_ctx: u32,
    pub n_threads: usize,
    /// As [`ContextParams::adaptive_threads`].
    pub adaptive_threads: bool,
    /// How many sequences generate at once.
    pub parallel: u32,
    /// How many requests may wait for a sequence (see [`Scheduler::new`]).
    pub max_queue: usize,
    /// As [`ContextParams::flash_attn`].
    pub flash_attn: bool,
    pub type_k: CacheType,
    pub type_v: CacheType,
    /// How every generation speculates unless a call says otherwise; `None`: it does not.
    pub draft: Option<Draft>,
    /// How many tokens a draft holds.
    pub draft_tokens: DraftLength,
    /// As [`ContextParams::batch_invariant`]; the weights are then opened unrepacked.
    pub batch_invariant: bool,
    /// As [`ContextParams::own_kernels`], for every context the model gets.
    pub own_kernels: bool,
    /// As [`ModelParams::n_gpu_layers`].
    pub n_gpu_layers: Option<u32>,
    /// As [`ModelParams::rpc`].
    pub rpc: Vec<String>,
    /// As [`ModelParams::tensor_split`].
    pub tensor_split: Vec<f32>,
    /// As [`ModelParams::rpc_timeout`].
    pub rpc_timeout: std::time::Duration,
    /// As [`ModelParams::split`].
    pub split: Split,
    /// As [`ContextParams::kv_offload`], for every context the model gets.
    pub kv_offload: bool,
    /// A projector GGUF (`mmproj`) whose images the prompts may hold.
    pub mmproj: Option<PathBuf>,
}

impl Default for OpenParams {
    fn default() -> Self {
        OpenParams {
            n_ctx: DEFAULT_N_CTX,
            n_threads: available_cpus().min(MAX_THREADS),
            adaptive_threads: true,
            parallel: 1,
            max_queue: DEFAULT_QUEUE,
            // llama.cpp's `-fa auto` picks flash attention on the CPU.
            flash_attn: true,
            type_k: CacheType::default(),
            type_v: CacheType::default(),
            draft: None,
            draft_tokens: DraftLength::Adaptive,
            batch_invariant: false,
            own_kernels: true,
            n_gpu_layers: None,
            rpc: Vec::new(),
            tensor_split: Vec::new(),
            rpc_timeout: crate::ggml::rpc::DEFAULT_TIMEOUT,
            split: Split::default(),
            kv_offload: true,
            mmproj: None,
        }
    }
}

/// A model and everything that runs it: the scheduler of its sequences (none for an
/// embedding model), the draft model's context, and the embedding context.
pub struct Runtime {
    model: Arc<Model>,
    scheduler: Option<Scheduler>,
    /// Made by the first [`Runtime::embedder`], for the pooling it asked for (another
    /// pooling makes another). One embedding call runs at a time.
    embedder: Mutex<Option<Embedder>>,
    params: OpenParams,
    path: String,
    /// The draft model's context; a speculation holds the target's lease while it drafts.
    draft: Option<Mutex<Context>>,
    /// The draft model's name (its file's, else its architecture's).
    draft_name: Option<String>,
    speculation: Option<SpeculativeParams>,
    /// The projector, when opened with one.
    vision: Option<VisionContext>,
}

impl Runtime {
    /// Opens the model at `path` and assembles its contexts as `params` say.
    ///
    /// # Errors
    /// [`Error::Load`] for a file that cannot be opened; [`Error::InvalidArgument`] for
    /// parameters the model or the contexts refuse; [`Error::IncompatibleDraft`] for a
    /// draft model of another vocabulary, or for an embedding model given one.
    pub fn open(path: &Path, params: &OpenParams) -> Result<Runtime> {
        let model_params = ModelParams {
            repack: !params.batch_invariant,
            n_gpu_layers: params.n_gpu_layers,
            rpc: params.rpc.clone(),
            tensor_split: params.tensor_split.clone(),
            rpc_timeout: params.rpc_timeout,
            split: params.split,
        };
        let model = Arc::new(Model::open(path, &model_params)?);
        if params.batch_invariant && model.hparams.arch.kind == Kind::Encoder {
            return Err(Error::InvalidArgument(
                "batch_invariant applies to generating text, and this is an embedding model".into(),
            ));
        }
        let context = ContextParams {
            n_ctx: params.n_ctx,
            n_threads: params.n_threads,
            adaptive_threads: params.adaptive_threads,
            flash_attn: params.flash_attn,
            own_kernels: params.own_kernels,
            kv_offload: params.kv_offload,
            ..Default::default()
        };
        let draft_model = match &params.draft {
            Some(Draft::File(path)) => Some(Arc::new(Model::open(path, &ModelParams::default())?)),
            Some(Draft::Model(model)) => Some(Arc::clone(model)),
            Some(Draft::Lookup | Draft::Copy) | None => None,
        };
        let draft_name = draft_model.as_ref().map(|m| {
            let hp = &m.hparams;
            hp.name.clone().unwrap_or_else(|| hp.arch.name.to_string())
        });
        let (scheduler, draft) = match model.hparams.arch.kind {
            Kind::Decoder => {
                let target = ContextParams {
                    n_seq_max: params.parallel,
                    type_k: params.type_k,
                    type_v: params.type_v,
                    batch_invariant: params.batch_invariant,
                    // A speculative verification pass has a row per drafted token, and one more.
                    n_outputs_max: MAX_DRAFT_TOKENS + 1,
                    ..context.clone()
                };
                let ctx = Context::new(Arc::clone(&model), target)?;
                if params.draft.is_some() {
                    check_speculable(&ctx, "model")?;
                }
                let draft = match draft_model {
                    Some(draft_model) => {
                        check_compatible(&model, &draft_model)?;
                        let mut draft = Context::new(draft_model, context)?;
                        check_speculable(&draft, "draft model")?;
                        // A speculation holds the target's lease while it drafts.
                        draft.share_workers(&ctx);
                        Some(Mutex::new(draft))
                    }
                    None => None,
                };
                (Some(Scheduler::new(ctx, params.max_queue)), draft)
            }
            Kind::Encoder if params.draft.is_some() => {
                return Err(Error::IncompatibleDraft(
                    "an embedding model generates no text to draft".into(),
                ))
            }
            Kind::Encoder => (None, None),
        };
        let vision = match &params.mmproj {
            Some(path) if model.hparams.arch.kind == Kind::Decoder => Some(VisionContext::open(
                path,
                &model,
                EncoderParams {
                    n_threads: params.n_threads,
                    ..EncoderParams::default()
                },
            )?),
            Some(_) => {
                return Err(Error::InvalidArgument(
                    "an embedding model takes text only: it has no use for a projector (mmproj)".into(),
                ))
            }
            None => None,
        };
        let source = match params.draft {
            Some(Draft::File(_) | Draft::Model(_)) => Some(DraftSource::Model),
            Some(Draft::Lookup) => Some(DraftSource::Lookup),
            Some(Draft::Copy) => Some(DraftSource::Copy),
            None => None,
        };
        Ok(Runtime {
            model,
            scheduler,
            embedder: Mutex::new(None),
            params: params.clone(),
            path: path.display().to_string(),
            draft,
            draft_name,
            speculation: source.map(|source| SpeculativeParams {
                source,
                length: params.draft_tokens,
            }),
            vision,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The scheduler of the model's sequences; `None` for an embedding model, which
    /// generates no text.
    pub fn scheduler(&self) -> Option<&Scheduler> {
        self.scheduler.as_ref()
    }

    /// What the model was opened with.
    pub fn params(&self) -> &OpenParams {
        &self.params
    }

    /// The projector the prompts' images go through, when opened with one.
    pub fn vision(&self) -> Option<&VisionContext> {
        self.vision.as_ref()
    }

    /// The model's file, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The draft model's name (its file's, else its architecture's), if it has one.
    pub fn draft_name(&self) -> Option<&str> {
        self.draft_name.as_deref()
    }

    /// How generations speculate unless a call says otherwise.
    pub fn speculation(&self) -> Option<SpeculativeParams> {
        self.speculation
    }

    /// The draft model's context, locked, for a speculation that drafts with it.
    pub fn draft_context(&self) -> Option<MutexGuard<'_, Context>> {
        self.draft.as_ref().map(|d| d.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// How one call speculates: `draft` is its drafter (`None`: the model's default;
    /// `Some(None)`: plain decoding) and `draft_tokens` its draft length (`None`: the
    /// model's default). A constrained call does not speculate by default, and
    /// refuses to when asked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a drafter the model cannot use, a length with no
    /// drafter, or a drafter with a constraint.
    pub fn speculation_for(
        &self,
        draft: Option<Option<DraftSource>>,
        draft_tokens: Option<u32>,
        constrained: bool,
    ) -> Result<Option<SpeculativeParams>> {
        let invalid = |message: &str| Error::InvalidArgument(message.to_string());
        let source = match draft {
            None if constrained => return Ok(None),
            None => self.speculation.map(|s| s.source),
            Some(Some(DraftSource::Model)) if self.draft.is_none() => {
                return Err(invalid(
                    "draft: :model needs a draft model: open the model with Elelem.open(path, draft: draft_path)",
                ))
            }
            Some(source) => source,
        };
        let Some(source) = source else {
            if draft_tokens.is_some() {
                return Err(invalid(
                    "draft_tokens: is the length of speculative drafts: give draft: :lookup or :copy too, or open the \
                     model with a draft model",
                ));
            }
            return Ok(None);
        };
        if constrained {
            return Err(invalid(
                "speculative decoding takes no constraint (json_schema:, grammar:, lark:, regex:, choice:, tools:): \
                 pass draft: false",
            ));
        }
        let length = match draft_tokens {
            Some(k) => DraftLength::Fixed(k),
            None => self.speculation.map_or(DraftLength::Adaptive, |s| s.length),
        };
        Ok(Some(SpeculativeParams { source, length }))
    }

    /// The embedding context for `pooling` (`None`: the model's own) packing at most
    /// `batch_texts` texts into a pass, made now unless the last call's fits; held
    /// until the guard drops.
    ///
    /// # Errors
    /// As [`Embedder::new`].
    pub fn embedder(&self, pooling: Option<Pooling>, batch_texts: u32) -> Result<EmbedderGuard<'_>> {
        let mut slot = self.embedder.lock().unwrap_or_else(|p| p.into_inner());
        let wanted = pooling.or(self.model.hparams.pooling).unwrap_or(Pooling::None);
        let reusable = slot
            .as_ref()
            .is_some_and(|e| e.pooling() == wanted && e.batch_texts() == batch_texts);
        if !reusable {
            *slot = None;
            let params = EmbedParams {
                n_ctx: self.params.n_ctx,
                n_threads: self.params.n_threads,
                adaptive_threads: self.params.adaptive_threads,
                own_kernels: self.params.own_kernels,
                pooling: Some(wanted),
                batch_texts,
            };
            *slot = Some(Embedder::new(Arc::clone(&self.model), params)?);
        }
        Ok(EmbedderGuard(slot))
    }

    /// Ends every generation (a pass in flight finishes first): those still running
    /// fail with [`Error::Closed`]. The memory goes with the last reference.
    pub fn close(&self) {
        if let Some(scheduler) = &self.scheduler {
            scheduler.close();
        }
    }
}

/// The embedding context [`Runtime::embedder`] made or kept, locked.
pub struct EmbedderGuard<'a>(MutexGuard<'a, Option<Embedder>>);

impl Deref for EmbedderGuard<'_> {
    type Target = Embedder;

    fn deref(&self) -> &Embedder {
        self.0.as_ref().expect("made by Runtime::embedder")
    }
}

impl DerefMut for EmbedderGuard<'_> {
    fn deref_mut(&mut self) -> &mut Embedder {
        self.0.as_mut().expect("made by Runtime::embedder")
    }
}
