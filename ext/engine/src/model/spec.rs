//! What makes an architecture, as loading and graph building see it: an `arch/`
//! file's `ARCH`. Which architectures exist is the registry's business (`arch/`).

use super::hparams::{ArchTraits, HParams, Keys, Kind, NormType};
use super::layers::GraphBuilder;
use super::loader::Loader;
use super::weights::Weights;
use crate::ggml::{RopeMode, Tensor};
use crate::Result;

/// What makes an architecture: each `arch/` file's `ARCH`.
pub struct ArchSpec {
    /// Its `general.architecture` in GGUF files, and the prefix of its keys.
    pub name: &'static str,
    /// The model families its files hold, for people (the README's table).
    pub models: &'static str,
    pub rope_mode: RopeMode,
    /// Reads the hyper-parameters beyond the common ones into `hp` (sliding
    /// windows, soft-caps, multipliers).
    pub(crate) read_hparams: fn(&Keys, &mut HParams) -> Result<()>,
    /// Declares its weights (a missing or misshapen one is a load error).
    pub(crate) load: fn(&mut Loader, &HParams) -> Result<Weights>,
    /// Builds the forward pass and returns the logits of the output rows.
    pub(crate) build: fn(&GraphBuilder) -> Tensor,
    /// Whether its feed-forwards may be a mixture of experts (`expert_count` > 0);
    /// elsewhere such a file is refused.
    pub experts: bool,
    pub kind: Kind,
    pub norm: NormType,
}

/// An architecture: a handle on its `ArchSpec`.
#[derive(Clone, Copy)]
pub struct Arch(&'static ArchSpec);

impl std::fmt::Debug for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl PartialEq for Arch {
    fn eq(&self, other: &Arch) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Arch {}

impl Arch {
    pub const fn new(spec: &'static ArchSpec) -> Arch {
        Arch(spec)
    }

    /// What the common hyper-parameters take from it.
    pub fn traits(self) -> ArchTraits {
        ArchTraits {
            name: self.0.name,
            kind: self.0.kind,
            norm: self.0.norm,
            rope_mode: self.0.rope_mode,
            experts: self.0.experts,
        }
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn models(self) -> &'static str {
        self.0.models
    }

    pub fn rope_mode(self) -> RopeMode {
        self.0.rope_mode
    }

    pub fn has_experts(self) -> bool {
        self.0.experts
    }

    pub fn kind(self) -> Kind {
        self.0.kind
    }

    /// Its reader of the hyper-parameters beyond the common ones.
    pub(crate) fn read_extra_hparams(self) -> fn(&Keys, &mut HParams) -> Result<()> {
        self.0.read_hparams
    }

    pub(crate) fn load(self, loader: &mut Loader, hp: &HParams) -> Result<Weights> {
        (self.0.load)(loader, hp)
    }

    pub(crate) fn build(self, b: &GraphBuilder) -> Tensor {
        (self.0.build)(b)
    }
}
