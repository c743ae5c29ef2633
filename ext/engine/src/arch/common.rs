//! What several architectures share: loading a llama-like model's weights, and the
//! loops of decoder and encoder blocks.

use crate::ggml::{Tensor, MROPE_SECTIONS};
use crate::model::hparams::ExpertGroups;
use crate::model::{
    Classifier, ExpertGating, Glu, GraphBuilder, HParams, Keys, LayerWeights, Loader, OutputHead, RopeFactors, Weights,
};
use crate::{Error, Result};

/// For architectures with no hyper-parameters beyond the common ones.
pub fn no_extra_hparams(_: &Keys, _: &mut HParams) -> Result<()> {
    Ok(())
}

/// Multi-dimensional rope's sections (`rope.dimension_sections`, required): how many
/// pairs of each head each coordinate of a position turns.
pub fn read_rope_sections(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let arch = hp.arch.name;
    let sections = keys
        .opt_u32s("rope.dimension_sections", MROPE_SECTIONS)?
        .ok_or_else(|| Error::Load(format!("missing required metadata key {arch}.rope.dimension_sections")))?;
    // ggml's kernel takes each pair's section modulo their sum, and asserts the sum is
    // at most a head's dimensions.
    let total = sections.iter().map(|&pairs| u64::from(pairs)).sum::<u64>();
    if total == 0 || total > u64::from(hp.head_dim_k) {
        return Err(Error::Load(format!(
            "{arch}.rope.dimension_sections {sections:?} must sum to 1 to the head size ({})",
            hp.head_dim_k
        )));
    }
    for (section, &pairs) in hp.rope.sections.iter_mut().zip(&sections) {
        *section = pairs as i32;
    }
    Ok(())
}

/// llama.cpp's `LLAMA_MAX_EXPERTS`.
const MAX_EXPERTS: u32 = 512;

/// A mixture of experts' counts, checked as llama.cpp asserts them: `expert_count`
/// (read with the common keys) and `expert_used_count`.
pub fn read_expert_counts(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let n_used = keys.opt_u32("expert_used_count")?.unwrap_or(0);
    if hp.n_expert == 0 || hp.n_expert > MAX_EXPERTS || n_used == 0 || n_used > hp.n_expert {
        return Err(Error::Load(format!(
            "{}: expert_count ({}) must be 1 to {MAX_EXPERTS} and expert_used_count ({n_used}) 1 to it",
            hp.arch.name, hp.n_expert
        )));
    }
    hp.n_expert_used = n_used;
    Ok(())
}

/// The experts' width as qwen2moe and qwen3moe read it: `expert_feed_forward_length`,
/// else `feed_forward_length` divided among the experts a token uses.
pub fn read_expert_width(keys: &Keys, hp: &mut HParams) -> Result<()> {
    hp.n_ff_exp = match keys.opt_u32("expert_feed_forward_length")? {
        Some(n) if n > 0 => n,
        _ => hp.n_ff / hp.n_expert_used,
    };
    if hp.n_ff_exp == 0 {
        return Err(Error::Load(format!(
            "{}: the experts' feed-forward width is 0",
            hp.arch.name
        )));
    }
    Ok(())
}

/// How a DeepSeek-V3-style mixture of experts weighs its experts, as llama.cpp reads it
/// (glm4moe's and deepseek2's `load_arch_hparams`): `expert_gating_func` (absent or
/// none: `default`), `expert_weights_norm` (absent: false) and `expert_weights_scale`;
/// and the expert groups llama.cpp's common reader asks for (`expert_group_count`,
/// `expert_group_used_count`: see [`ExpertGroups`]).
pub fn read_expert_gating(keys: &Keys, hp: &mut HParams, default: ExpertGating) -> Result<()> {
    let arch = hp.arch.name;
    hp.expert_gating = match keys.opt_u32("expert_gating_func")?.unwrap_or(0) {
        0 => default,
        1 => ExpertGating::Softmax,
        2 => ExpertGating::Sigmoid,
        3 => ExpertGating::SoftmaxWeight,
        4 => {
            return Err(Error::Unsupported(format!(
                "{arch}: expert_gating_func 4 (sqrt of softplus) is not one elelem runs; llama.cpp does"
            )))
        }
        n => {
            return Err(Error::Load(format!(
                "{arch}.expert_gating_func {n} is not one llama.cpp knows (0 to 4)"
            )))
        }
    };
    hp.expert_weights_norm = keys.opt_bool("expert_weights_norm")?.unwrap_or(false);
    let scale = keys.opt_f32("expert_weights_scale")?.unwrap_or(0.0);
    if !scale.is_finite() {
        return Err(Error::Load(format!(
            "{arch}.expert_weights_scale ({scale}) must be finite"
        )));
    }
    hp.expert_weights_scale = scale;
    let count = keys.opt_u32("expert_group_count")?.unwrap_or(0);
    let used = keys.opt_u32("expert_group_used_count")?.unwrap_or(0);
    // llama.cpp asserts these; its graph takes each group's two best experts.
    if count >= hp.n_expert
        || (count > 1 && (!hp.n_expert.is_multiple_of(count) || hp.n_expert / count < 2 || used == 0 || used >= count))
    {
        return Err(Error::Load(format!(
            "{arch}: expert_group_count ({count}) must be fewer than the experts ({}), and where above 1 divide \
             them into groups of 2 or more, expert_group_used_count ({used}) 1 to fewer than it",
            hp.n_expert
        )));
    }
    hp.expert_groups = (count > 1).then_some(ExpertGroups { count, used });
    Ok(())
}

/// llama.cpp's `nextn_predict_layers`: the file's last layers predict further tokens
/// (multi-token prediction); llama.cpp loads them and its decoding graph skips them.
/// They leave `n_layer` for `n_layer_nextn`, and the architecture declares their
/// tensors unused ([`Loader::unused`]).
pub fn read_nextn_layers(keys: &Keys, hp: &mut HParams) -> Result<()> {
    let nextn = keys.opt_u32("nextn_predict_layers")?.unwrap_or(0);
    if nextn >= hp.n_layer {
        return Err(Error::Load(format!(
            "{}: nextn_predict_layers ({nextn}) must leave some of the block_count ({}) layers to decode with",
            hp.arch.name, hp.n_layer
        )));
    }
    hp.n_layer -= nextn;
    hp.n_layer_nextn = nextn;
    hp.recurrent.truncate(hp.n_layer as usize);
    hp.ffn_only.truncate(hp.n_layer as usize);
    Ok(())
}

/// One multi-token-prediction layer being declared unused (see [`declare_nextn_layers`]).
pub struct NextnLayer<'l, 'a> {
    loader: &'l mut Loader<'a>,
    pub il: u32,
    /// Whether the file has them: otherwise none is required.
    present: bool,
}

impl NextnLayer<'_, '_> {
    /// `blk.{il}.{name}`, of that shape if the file has it; an error for a `needed` one it lacks.
    pub fn unused(&mut self, name: &str, shape: &[u64], needed: bool) -> Result<()> {
        let name = format!("blk.{}.{name}", self.il);
        self.loader.unused(&name, shape, needed && self.present)
    }

    /// A dense gated feed-forward's weights.
    pub fn dense_ffn(&mut self, hp: &HParams) -> Result<()> {
        let (embd, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
        self.unused("ffn_gate.weight", &[embd, ff], true)?;
        self.unused("ffn_down.weight", &[ff, embd], true)?;
        self.unused("ffn_up.weight", &[embd, ff], true)
    }
}

/// The multi-token-prediction layers after the `n_layer` decoding ones, declared as
/// llama.cpp's loader declares them without `load_mtp` (shapes checked, never placed): an
/// attention block whose Q projection is `q_width` wide (the Q, K and V projections all
/// optional; the per-head Q and K norms required when `qk_norms`), the feed-forward `ffn`
/// declares, then the layer's `nextn.*`. None is required when the file lacks the first
/// layer's `nextn.eh_proj`.
pub fn declare_nextn_layers(
    loader: &mut Loader,
    hp: &HParams,
    q_width: u64,
    qk_norms: bool,
    mut ffn: impl FnMut(&mut NextnLayer) -> Result<()>,
) -> Result<()> {
    let (embd, vocab, head) = (u64::from(hp.n_embd), u64::from(hp.n_vocab), u64::from(hp.head_dim_k));
    let q_dim = head * u64::from(hp.n_head);
    let (k_dim, v_dim) = (u64::from(hp.n_embd_k_gqa()), u64::from(hp.n_embd_v_gqa()));
    let present = loader.has(&format!("blk.{}.nextn.eh_proj.weight", hp.n_layer));
    for il in hp.n_layer..hp.n_layer + hp.n_layer_nextn {
        let mut layer = NextnLayer { loader, il, present };
        layer.unused("attn_norm.weight", &[embd], true)?;
        let qkv = q_width + k_dim + v_dim;
        layer.unused("attn_qkv.weight", &[embd, qkv], false)?;
        layer.unused("attn_qkv.bias", &[qkv], false)?;
        for (name, width) in [("attn_q", q_width), ("attn_k", k_dim), ("attn_v", v_dim)] {
            layer.unused(&format!("{name}.weight"), &[embd, width], false)?;
            layer.unused(&format!("{name}.bias"), &[width], false)?;
        }
        layer.unused("attn_output.weight", &[q_dim, embd], true)?;
        layer.unused("attn_q_norm.weight", &[head], qk_norms)?;
        layer.unused("attn_k_norm.weight", &[head], qk_norms)?;
        layer.unused("post_attention_norm.weight", &[embd], true)?;
        ffn(&mut layer)?;
        layer.unused("nextn.eh_proj.weight", &[2 * embd, embd], true)?;
        layer.unused("nextn.enorm.weight", &[embd], true)?;
        layer.unused("nextn.hnorm.weight", &[embd], true)?;
        layer.unused("nextn.embed_tokens.weight", &[embd, vocab], false)?;
        layer.unused("nextn.shared_head_head.weight", &[embd, vocab], false)?;
        layer.unused("nextn.shared_head_norm.weight", &[embd], false)?;
    }
    Ok(())
}

/// KV sharing (gemma3n's, gemma4's): the layers from `n_layer_kv` on keep no cache and
/// attend over the last cached layer of their kind ([`HParams::kv_source`]). Sharing
/// that would read a layer of another kind (sliding or not, its head size or KV heads)
/// is refused with `unsupported`.
pub fn share_kv(hp: &mut HParams, n_layer_kv: u32, unsupported: fn(&str) -> Error) -> Result<()> {
    hp.n_layer_kv = n_layer_kv;
    for il in hp.n_layer_kv as usize..hp.n_layer as usize {
        let src = hp.kv_source(il);
        let alike = |il: usize| (hp.is_swa(il), hp.head_dim_k_of(il), hp.n_head_kv_of(il));
        if alike(src) != alike(il) {
            return Err(unsupported(&format!(
                "KV sharing where layer {il} would read layer {src}'s cache, of another kind"
            )));
        }
    }
    Ok(())
}

/// Where an architecture's output head comes from.
#[derive(Clone, Copy)]
pub enum Head {
    /// `output.weight`, or the embeddings when the file has none.
    TiedIfAbsent,
    /// Always the embeddings.
    Tied,
    /// Always `output.weight`.
    Own,
}

/// The weights of a llama-like model: the embeddings, the output norm and `head`,
/// then `layer(loader, il)` for each block; no output bias and no rope factors (set
/// them after, where the architecture has them).
pub fn load_llama_like(
    loader: &mut Loader,
    hp: &HParams,
    head: Head,
    layer: impl FnMut(&mut Loader, u32) -> Result<LayerWeights>,
) -> Result<Weights> {
    load_llama_like_with_norm(loader, hp, head, "output_norm.weight", layer)
}

/// [`load_llama_like`] with the output norm under another name (lfm2's `token_embd_norm`).
pub fn load_llama_like_with_norm(
    loader: &mut Loader,
    hp: &HParams,
    head: Head,
    output_norm: &str,
    mut layer: impl FnMut(&mut Loader, u32) -> Result<LayerWeights>,
) -> Result<Weights> {
    let (embd, vocab) = (u64::from(hp.n_embd), u64::from(hp.n_vocab));
    let tok_embd = loader.rows("token_embd.weight", &[embd, vocab])?;
    let output_norm = loader.norm(output_norm, embd)?;
    let output = match head {
        Head::TiedIfAbsent => loader.optional_matrix("output.weight", &[embd, vocab])?,
        Head::Tied => None,
        Head::Own => Some(loader.matrix("output.weight", &[embd, vocab])?),
    };
    let output = match output {
        Some(t) => t,
        None => loader.matrix("token_embd.weight", &[embd, vocab])?,
    };
    let layers = (0..hp.n_layer).map(|il| layer(loader, il)).collect::<Result<_>>()?;
    Ok(Weights {
        layer_out_scales: Vec::new(),
        altup: None,
        laurel: Vec::new(),
        experts_beside_mlp: Vec::new(),
        per_layer_embd: None,
        tok_embd,
        input: None,
        head: Some(OutputHead {
            norm: output_norm,
            output,
            bias: None,
        }),
        classifier: Classifier::default(),
        rope_factors: RopeFactors::default(),
        layers,
    })
}

/// An encoder's graph: its input, then post-norm blocks (the residual added, then
/// LayerNormed, after attention and after the feed-forward) around the attention
/// `attend` builds from a block's input, then the pooling.
pub fn run_encoder(b: &GraphBuilder, attend: impl Fn(&LayerWeights, usize, Tensor) -> Tensor) -> Tensor {
    let g = b.graph;
    let x = b.layers().iter().enumerate().fold(b.embed_encoder(), |x, (il, layer)| {
        let attn = attend(layer, il, x);
        let (attn, x) = b.select_outputs_if_last(il, attn, x);
        let ffn_in = b.norm(g.add(attn, x), layer.attn_post_norm, "attn_out_norm", il);
        // SiLU for a gated feed-forward (nomic-bert's); bert's sequential one is GELU.
        let ffn = b.ffn(&layer.ffn, ffn_in, il, Glu::Silu);
        b.norm(g.add(ffn, ffn_in), layer.ffn_post_norm, "layer_out_norm", il)
    });
    b.output(x)
}

/// Runs `block` over every layer from the embeddings `x`, then the output head (or
/// the pooling of embeddings, see [`GraphBuilder::output`]).
pub fn run_layers(b: &GraphBuilder, x: Tensor, block: impl Fn(&LayerWeights, usize, Tensor) -> Tensor) -> Tensor {
    let x = b
        .layers()
        .iter()
        .enumerate()
        .fold(x, |x, (il, layer)| block(layer, il, x));
    b.output(x)
}
