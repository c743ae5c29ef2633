//! qwen3next (Qwen3-Next): qwen35moe's hybrid (gated delta nets beside gated attention;
//! see [`super::qwen35`], [`super::qwen35moe`]) as its predecessor, llama.cpp's
//! `src/models/qwen3next.cpp`, has it. What differs: the attention layers rotate with
//! plain NEOX rope (`rope.dimension_count` of each head, a quarter in the released
//! models; no sections); each delta net projects its betas and alphas in one `ssm_ba`,
//! grouped by key head ([`crate::model::BetaAlpha::Grouped`]); and where there are fewer
//! key heads than value heads, Q and K are repeated interleaved (value head `h` reads
//! key head `h / (n_v / n_k)`) before ggml's fused `gated_delta_net`, which the CPU runs
//! for one token and for many as for qwen35. The feed-forward is qwen35moe's: softmax
//! routed SwiGLU experts, renormalized, beside a shared expert scaled by its gate's
//! sigmoid. The multi-token-prediction layers are loaded and left unused. Older
//! conversions' `ssm_in` (Q, K, V and z in one projection, key head by key head) is
//! split by views as llama.cpp's legacy path splits it ([`crate::model::Qkvz`]).
//! Refused: a fused `attn_qkv` on the attention layers, and experts' gate and up
//! projections in one tensor.

use super::qwen35::{self, Layout};
use super::qwen35moe;
use crate::ggml::{RopeMode, Tensor};
use crate::model::{ArchSpec, GraphBuilder, HParams, Keys, Kind, Loader, NormType, Weights};
use crate::Result;

pub(crate) const ARCH: ArchSpec = ArchSpec {
    name: "qwen3next",
    models: "Qwen3-Next (80B-A3B)",
    rope_mode: RopeMode::Neox,
    read_hparams,
    load,
    build,
    experts: true,
    kind: Kind::Decoder,
    norm: NormType::Rms,
};

const QWEN3NEXT: Layout = Layout {
    grouped_beta_alpha: true,
    grouped_key_heads: true,
};

fn read_hparams(keys: &Keys, hp: &mut HParams) -> Result<()> {
    qwen35moe::read_experts(keys, hp)?;
    qwen35::read_delta_nets(keys, hp)
}

fn load(loader: &mut Loader, hp: &HParams) -> Result<Weights> {
    qwen35moe::load_with(loader, hp, QWEN3NEXT)
}

fn build(b: &GraphBuilder) -> Tensor {
    qwen35moe::build_with(b, QWEN3NEXT)
}
