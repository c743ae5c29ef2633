//! LLaVA's projectors (`PROJECTOR_TYPE_MLP`, `_MLP_NORM`, `_LDP` and `_LDPV2`, the `llava`
//! graph of `tools/mtmd/models/llava.cpp`): the CLIP encoder's hidden states (of its
//! feature layers, side by side, or of the layer before the last: see
//! [`crate::vision::encoder`]) of each patch, then LLaVA 1.5's two-layer MLP with GELU
//! between (`mm.0`, `mm.2`, with biases), or Yi-VL's (`mm_norm`: the file has `mm.3`, as
//! clip.cpp tells the two apart): `mm.0`, a LayerNorm (`mm.1`), GELU, `mm.3`, a LayerNorm
//! (`mm.4`), both norms with the encoder's `eps`; or MobileVLM's, whose MLP
//! (`mm.model.mlp.*`) is followed by convolutions over the 24 x 24 grid: `ldp`'s two blocks
//! (a depthwise 3 x 3 convolution, stride 1 then 2, a LayerNorm, hardswish, a
//! squeeze-and-excitation, a pointwise projection, a LayerNorm; the first with a
//! residual), `ldpv2`'s 2 x 2 average pooling plus a depthwise convolution of it (the
//! positional encoding generator, `mm.model.peg.0`). Their depthwise kernels must be F16,
//! as ggml's `conv_2d_dw` multiplies its F16 columns by them.
//!
//! What is special: clip.cpp appends the class token after the patches, then keeps the rows
//! from 1 on (its `patches` input, meant to skip a class token in front): the first patch
//! is dropped and the class token kept, and so it is here. `v.image_newline` (LLaVA 1.6's)
//! is read and never used, as mtmd lays a sliced image out without it.

use ggml_sys as sys;

use super::common::{required_dim, GeluMlp};
use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::{ClipHParams, ProjectorType, LDP_GRID};
use crate::{Error, Result};

/// The MLP's weights, by variant.
pub enum LlavaWeights {
    /// `mm.0.*` (`[n_embd · n_feature_stack, n_hidden]`) and `mm.2.*`
    /// (`[n_hidden, n_text_embd]`).
    Mlp(GeluMlp),
    /// `mm.0.*`, the LayerNorm `mm.1.*`, `mm.3.*` and the LayerNorm `mm.4.*`.
    MlpNorm {
        mm_0_w: Tensor,
        mm_0_b: Tensor,
        mm_1_w: Tensor,
        mm_1_b: Tensor,
        mm_3_w: Tensor,
        mm_3_b: Tensor,
        mm_4_w: Tensor,
        mm_4_b: Tensor,
    },
    /// `mm.model.mlp.1.*`, `mm.model.mlp.3.*` (to `C`, the language model's width) and the
    /// two blocks `mm.model.mb_block.{1,2}.*`.
    Ldp { mlp: GeluMlp, blocks: Box<[LdpBlock; 2]> },
    /// `mm.model.mlp.0.*`, `mm.model.mlp.2.*` and the depthwise kernel `mm.model.peg.0.weight`
    /// (`[3, 3, 1, C]`, F16) with its bias.
    Ldpv2 { mlp: GeluMlp, peg_w: Tensor, peg_b: Tensor },
}

/// One of `ldp`'s blocks, `mm.model.mb_block.N.block.*`: `0.0` the depthwise kernel
/// (`[3, 3, 1, C]`, F16), `0.1` its LayerNorm, `1.fc1` and `1.fc2` the
/// squeeze-and-excitation (`[C, r]`, `[r, C]`), `2.0` the pointwise projection (`[C, C]`),
/// `2.1` its LayerNorm.
pub struct LdpBlock {
    dw_w: Tensor,
    dw_norm_w: Tensor,
    dw_norm_b: Tensor,
    fc1_w: Tensor,
    fc1_b: Tensor,
    fc2_w: Tensor,
    fc2_b: Tensor,
    pw_w: Tensor,
    pw_norm_w: Tensor,
    pw_norm_b: Tensor,
}

impl LlavaWeights {
    pub fn n_mmproj_embd(&self) -> u32 {
        match self {
            LlavaWeights::Mlp(mlp) | LlavaWeights::Ldp { mlp, .. } => mlp.n_out(),
            LlavaWeights::MlpNorm { mm_3_w, .. } => (*mm_3_w).ne()[1] as u32,
            LlavaWeights::Ldpv2 { peg_b, .. } => (*peg_b).ne()[0] as u32,
        }
    }
}

/// A depthwise kernel of `c` channels: 3 x 3, F16 only (ggml's CPU backend would abort on
/// another type, and clip.cpp with it).
fn depthwise_kernel(l: &mut Loader, name: &str, c: u64) -> Result<Tensor> {
    let kernel = l.values(name, &[3, 3, 1, c])?;
    if kernel.ggml_type() != sys::GGML_TYPE_F16 {
        return Err(Error::Unsupported(format!(
            "tensor {name}: a depthwise convolution's kernel must be F16"
        )));
    }
    Ok(kernel)
}

fn load_ldp_block(l: &mut Loader, i: u32, c: u64) -> Result<LdpBlock> {
    let n = |t: &str| format!("mm.model.mb_block.{i}.block.{t}");
    let r = required_dim(l, &n("1.fc1.weight"), 1, "[C, n_squeezed]")?;
    Ok(LdpBlock {
        dw_w: depthwise_kernel(l, &n("0.0.weight"), c)?,
        dw_norm_w: l.vector(&n("0.1.weight"), c)?,
        dw_norm_b: l.vector(&n("0.1.bias"), c)?,
        fc1_w: l.matrix(&n("1.fc1.weight"), &[c, r])?,
        fc1_b: l.vector(&n("1.fc1.bias"), r)?,
        fc2_w: l.matrix(&n("1.fc2.weight"), &[r, c])?,
        fc2_b: l.vector(&n("1.fc2.bias"), c)?,
        pw_w: l.matrix(&n("2.0.weight"), &[c, c])?,
        pw_norm_w: l.vector(&n("2.1.weight"), c)?,
        pw_norm_b: l.vector(&n("2.1.bias"), c)?,
    })
}

/// MobileVLM's projectors' tensors.
fn load_mobilevlm(l: &mut Loader, hp: &ClipHParams) -> Result<LlavaWeights> {
    let features = u64::from(hp.n_embd) * u64::from(hp.n_feature_stack());
    // ldp's MLP is mlp.1 and mlp.3, ldpv2's mlp.0 and mlp.2.
    let ldp = hp.projector == ProjectorType::Ldp;
    let (first, second) = if ldp { (1, 3) } else { (0, 2) };
    let mlp = GeluMlp::load(
        l,
        &format!("mm.model.mlp.{first}"),
        &format!("mm.model.mlp.{second}"),
        features,
    )?;
    let c = u64::from(mlp.n_out());
    if ldp {
        return Ok(LlavaWeights::Ldp {
            mlp,
            blocks: Box::new([load_ldp_block(l, 1, c)?, load_ldp_block(l, 2, c)?]),
        });
    }
    Ok(LlavaWeights::Ldpv2 {
        mlp,
        peg_w: depthwise_kernel(l, "mm.model.peg.0.weight", c)?,
        peg_b: l.vector("mm.model.peg.0.bias", c)?,
    })
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<LlavaWeights> {
    if hp.projector.mobilevlm() {
        return load_mobilevlm(l, hp);
    }
    let features = u64::from(hp.n_embd) * u64::from(hp.n_feature_stack());
    let weights = if l.has("mm.3.weight") {
        let hidden = required_dim(l, "mm.0.weight", 1, "[n_embd * feature layers, n_hidden]")?;
        let mm_0_w = l.matrix("mm.0.weight", &[features, hidden])?;
        let mm_0_b = l.vector("mm.0.bias", hidden)?;
        let n_text_embd = required_dim(l, "mm.3.weight", 1, "[n_hidden, n_text_embd]")?;
        LlavaWeights::MlpNorm {
            mm_0_w,
            mm_0_b,
            mm_1_w: l.vector("mm.1.weight", hidden)?,
            mm_1_b: l.vector("mm.1.bias", hidden)?,
            mm_3_w: l.matrix("mm.3.weight", &[hidden, n_text_embd])?,
            mm_3_b: l.vector("mm.3.bias", n_text_embd)?,
            mm_4_w: l.vector("mm.4.weight", n_text_embd)?,
            mm_4_b: l.vector("mm.4.bias", n_text_embd)?,
        }
    } else {
        LlavaWeights::Mlp(GeluMlp::load(l, "mm.0", "mm.2", features)?)
    };
    let n_text_embd = u64::from(weights.n_mmproj_embd());
    l.unused("v.image_newline", &[n_text_embd], false)?;
    Ok(weights)
}

/// `clip_graph_llava`'s projector over the encoder's `[n_features, n_pos]` output of a
/// `grid` of patches.
pub fn build(g: &Graph, hp: &ClipHParams, w: &LlavaWeights, cur: Tensor, (width, height): (i64, i64)) -> Tensor {
    let n_patches = width * height;
    let cur = g.reshape_2d(cur, cur.ne()[0], cur.ne()[1]);
    // clip.cpp's rows `1 + i` where there is a class token (its `get_rows` of consecutive
    // rows: the same values as this view of them).
    let first = cur.ne()[1] - n_patches;
    let nb1 = cur.nb()[1];
    let cur = g.view_2d(cur, cur.ne()[0], n_patches, nb1, first as usize * nb1);
    match w {
        LlavaWeights::Mlp(mlp) => mlp.build(g, cur),
        LlavaWeights::MlpNorm {
            mm_0_w,
            mm_0_b,
            mm_1_w,
            mm_1_b,
            mm_3_w,
            mm_3_b,
            mm_4_w,
            mm_4_b,
        } => {
            // Both LayerNorms with the encoder's eps.
            let cur = g.add(g.mul_mat(*mm_0_w, cur), *mm_0_b);
            let cur = g.add(g.mul(g.layer_norm(cur, hp.eps), *mm_1_w), *mm_1_b);
            let cur = g.gelu(cur);
            let cur = g.add(g.mul_mat(*mm_3_w, cur), *mm_3_b);
            g.add(g.mul(g.layer_norm(cur, hp.eps), *mm_4_w), *mm_4_b)
        }
        LlavaWeights::Ldp { mlp, blocks } => ldp_blocks(g, hp, blocks, mlp.build(g, cur)),
        LlavaWeights::Ldpv2 { mlp, peg_w, peg_b } => {
            let cur = mlp.build(g, cur);
            // [C, 24 · 24] to the grid [24, 24, C], pooled 2 x 2.
            let cur = g.permute(cur, [1, 0, 2, 3]);
            let grid = i64::from(LDP_GRID);
            let cur = g.cont_4d(cur, [grid, grid, cur.ne()[1], cur.ne()[2]]);
            let pooled = g.pool_2d_avg(cur, 2, 2, 2, 2);
            // The positional encoding generator, added to what it reads.
            let peg = g.conv_2d_dw(*peg_w, pooled, 1, 1, 1, 1, 1, 1);
            let peg = g.cont(g.permute(peg, [1, 2, 0, 3]));
            let peg = g.add(peg, *peg_b);
            let pooled = g.cont(g.permute(pooled, [1, 2, 0, 3]));
            let peg = g.add(peg, pooled);
            let ne = peg.ne();
            g.reshape_3d(peg, ne[0], ne[1] * ne[2], ne[3])
        }
    }
}
/// MobileVLM's `ldp` after the MLP: two blocks of a depthwise 3 x 3 convolution (stride 1,
/// then 2), a LayerNorm, hardswish, a squeeze-and-excitation (global average pooling, fc1,
/// ReLU, fc2, hardsigmoid, the product), a pointwise projection and a LayerNorm; the first
/// block with a residual. `cur` is `[C, 24 · 24]`.
fn ldp_blocks(g: &Graph, hp: &ClipHParams, blocks: &[LdpBlock; 2], mlp_3: Tensor) -> Tensor {
    let eps = hp.eps;
    let c = mlp_3.ne()[0];
    let mlp_3 = g.permute(mlp_3, [1, 0, 2, 3]);
    let grid = i64::from(LDP_GRID);
    let mlp_3 = g.cont_4d(mlp_3, [grid, grid, c, 1]);
    let mut cur = mlp_3;
    for (i, b) in blocks.iter().enumerate() {
        let stride = if i == 0 { 1 } else { 2 };
        cur = g.conv_2d_dw(b.dw_w, cur, stride, stride, 1, 1, 1, 1);
        // The LayerNorm over channels: [w, h, C] to [C, w, h] and back.
        cur = g.cont(g.permute(cur, [1, 2, 0, 3]));
        cur = g.add(g.mul(g.layer_norm(cur, eps), b.dw_norm_w), b.dw_norm_b);
        cur = g.cont(g.permute(cur, [2, 0, 1, 3]));
        let hw = g.hardswish(cur);
        // Squeeze and excitation.
        let (w, h) = (hw.ne()[0], hw.ne()[1]);
        let se = g.pool_2d_avg(hw, w as i32, h as i32, w as i32, h as i32);
        let ne = se.ne();
        let se = g.reshape_2d(se, ne[0] * ne[1] * ne[2], ne[3]);
        let se = g.relu(g.add(g.mul_mat(b.fc1_w, se), b.fc1_b));
        let se = g.hardsigmoid(g.add(g.mul_mat(b.fc2_w, se), b.fc2_b));
        let se = g.reshape_4d(se, [1, 1, se.ne()[0], se.ne()[1]]);
        cur = g.mul(hw, se);
        // The pointwise projection.
        cur = g.reshape_3d(cur, w * h, cur.ne()[2], cur.ne()[3]);
        cur = g.cont(g.permute(cur, [1, 0, 2, 3]));
        cur = g.mul_mat(b.pw_w, cur);
        cur = g.reshape_4d(cur, [cur.ne()[0], w, h, cur.ne()[3]]);
        cur = g.add(g.mul(g.layer_norm(cur, eps), b.pw_norm_w), b.pw_norm_b);
        if i == 0 {
            cur = g.cont(g.permute(cur, [2, 0, 1, 3]));
            cur = g.add(mlp_3, cur);
        }
    }
    let ne = cur.ne();
    g.reshape_3d(cur, ne[0], ne[1] * ne[2], ne[3])
}
