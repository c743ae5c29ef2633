//! The projectors: what turns the encoder's patch embeddings into the language model's
//! input embeddings, one file per clip.cpp `projector_type` (the part of
//! `tools/mtmd/models/*.cpp` after `build_vit`), each with its weights, their loading and
//! its graph.

pub mod common;
pub mod gemma3;
pub mod gemma4v;
pub mod idefics3;
pub mod internvl;
pub mod lfm2;
pub mod llama4;
pub mod llava;
pub mod pixtral;
pub mod qwen2a;
pub mod qwen2vl;
pub mod qwen3vl;

use super::hparams::{ClipHParams, ProjectorType};
use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::Result;

/// A projector's weights, by type.
pub enum ProjectorWeights {
    Gemma3(gemma3::Gemma3Weights),
    Idefics3(idefics3::Idefics3Weights),
    Lfm2(lfm2::Lfm2Weights),
    Llava(llava::LlavaWeights),
    Internvl(internvl::InternvlWeights),
    Qwen2vl(qwen2vl::Qwen2vlWeights),
    Qwen3vl(qwen3vl::Qwen3vlWeights),
    Pixtral(pixtral::PixtralWeights),
    Llama4(llama4::Llama4Weights),
    Gemma4v(gemma4v::Gemma4vWeights),
    Qwen2a(qwen2a::Qwen2aWeights),
}

impl ProjectorWeights {
    /// The width of the embeddings it gives the language model.
    pub fn n_mmproj_embd(&self) -> u32 {
        match self {
            ProjectorWeights::Gemma3(w) => w.n_mmproj_embd(),
            ProjectorWeights::Idefics3(w) => w.n_mmproj_embd(),
            ProjectorWeights::Lfm2(w) => w.n_mmproj_embd(),
            ProjectorWeights::Llava(w) => w.n_mmproj_embd(),
            ProjectorWeights::Internvl(w) => w.n_mmproj_embd(),
            ProjectorWeights::Qwen2vl(w) => w.n_mmproj_embd(),
            ProjectorWeights::Qwen3vl(w) => w.n_mmproj_embd(),
            ProjectorWeights::Pixtral(w) => w.n_mmproj_embd(),
            ProjectorWeights::Llama4(w) => w.n_mmproj_embd(),
            ProjectorWeights::Gemma4v(w) => w.n_mmproj_embd(),
            ProjectorWeights::Qwen2a(w) => w.n_mmproj_embd(),
        }
    }

    /// The ViT layers whose outputs the projector takes besides the last (Qwen3-VL's
    /// deepstack layers), in order.
    pub fn layer_outputs_taken(&self) -> Vec<usize> {
        match self {
            ProjectorWeights::Qwen3vl(w) => w.deepstack_layers(),
            _ => Vec::new(),
        }
    }

    /// The projector's graph over the encoder's output `cur` (`[n_embd, n_patches]`; an
    /// audio encoder's `[n_embd, n_positions]`) of a
    /// `grid` of patches (width, height; the fixed-size types' is always `image_size`'s),
    /// and the outputs of the layers of [`ProjectorWeights::layer_outputs_taken`].
    pub fn build(
        &self,
        g: &Graph,
        hp: &ClipHParams,
        cur: Tensor,
        grid: (i64, i64),
        layer_outputs: &[Tensor],
    ) -> Tensor {
        match self {
            ProjectorWeights::Gemma3(w) => gemma3::build(g, hp, w, cur),
            ProjectorWeights::Idefics3(w) => idefics3::build(g, hp, w, cur),
            ProjectorWeights::Lfm2(w) => lfm2::build(g, hp, w, cur, grid),
            ProjectorWeights::Llava(w) => llava::build(g, hp, w, cur, grid),
            ProjectorWeights::Internvl(w) => internvl::build(g, hp, w, cur, grid),
            ProjectorWeights::Qwen2vl(w) => qwen2vl::build(g, hp, w, cur),
            ProjectorWeights::Qwen3vl(w) => qwen3vl::build(g, hp, w, cur, layer_outputs),
            ProjectorWeights::Pixtral(w) => pixtral::build(g, hp, w, cur, grid),
            ProjectorWeights::Llama4(w) => llama4::build(g, hp, w, cur),
            ProjectorWeights::Gemma4v(w) => gemma4v::build(g, hp, w, cur, grid),
            ProjectorWeights::Qwen2a(w) => qwen2a::build(g, w, cur),
        }
    }
}

/// Declares the projector's tensors (clip.cpp's `load_tensors`, its share).
pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<ProjectorWeights> {
    match hp.projector {
        ProjectorType::Gemma3 => gemma3::load(l, hp).map(ProjectorWeights::Gemma3),
        ProjectorType::Idefics3 => idefics3::load(l, hp).map(ProjectorWeights::Idefics3),
        ProjectorType::Lfm2 => lfm2::load(l, hp).map(ProjectorWeights::Lfm2),
        ProjectorType::Mlp | ProjectorType::Ldp | ProjectorType::Ldpv2 => {
            llava::load(l, hp).map(ProjectorWeights::Llava)
        }
        ProjectorType::Internvl => internvl::load(l, hp).map(ProjectorWeights::Internvl),
        ProjectorType::Qwen2vl | ProjectorType::Qwen25vl => qwen2vl::load(l, hp).map(ProjectorWeights::Qwen2vl),
        ProjectorType::Qwen3vl => qwen3vl::load(l, hp).map(ProjectorWeights::Qwen3vl),
        ProjectorType::Pixtral => pixtral::load(l, hp).map(ProjectorWeights::Pixtral),
        ProjectorType::Llama4 => llama4::load(l, hp).map(ProjectorWeights::Llama4),
        ProjectorType::Gemma4v => gemma4v::load(l, hp).map(ProjectorWeights::Gemma4v),
        ProjectorType::Qwen2a => qwen2a::load(l, hp).map(ProjectorWeights::Qwen2a),
    }
}
