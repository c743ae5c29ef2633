//! Qwen2-Audio's encoder ends (`PROJECTOR_TYPE_QWEN2A`, `tools/mtmd/models/whisper-enc.cpp`):
//! Whisper's convolution stem before the shared ViT ([`crate::vision::encoder`], clip.cpp's
//! `build_vit`, which pools the positions in pairs before its post-LayerNorm for this type),
//! and the projector after it.
//!
//! - The stem: a log-mel piece (`[n_frames, n_mel]`, mtmd's `mtmd_audio_mel` as clip.cpp's
//!   `inp_raw` of one channel) through `ggml_conv_1d_ph` of kernel 3, stride 1, then stride
//!   2, each plus its bias (`[1, n_embd]`) and GELU-erf; transposed to one row of `n_embd`
//!   per position (`n_frames / 2`), the first rows of `a.position_embd` added by the ViT.
//! - The projector: one matrix with a bias (`mm.a.fc`), whose width is the language
//!   model's.
//!
//! What is special: the convolutions run in ggml's F16 im2col whatever the kernel's type
//! (`ggml_conv_1d`), as clip.cpp's do; there is no stacking of frames (Ultravox's and
//! Voxtral's, which the pinned clip.cpp cannot run), so a 30 s piece of 3000 frames is 1500
//! positions, 750 tokens.

use crate::ggml::{Graph, Tensor};
use crate::model::loader::Loader;
use crate::vision::hparams::ClipHParams;
use crate::Result;

use super::common::required_dim;

/// Whisper's kernel width.
const KERNEL: u64 = 3;

/// The convolutions `a.conv1d.{1,2}` and the projection `mm.a.fc`.
pub struct Qwen2aWeights {
    /// `a.conv1d.1.weight`: `[3, n_mel, n_embd]`, F32 or F16.
    pub conv1_w: Tensor,
    /// `a.conv1d.1.bias`: `[1, n_embd]`, F32.
    pub conv1_b: Tensor,
    /// `a.conv1d.2.weight`: `[3, n_embd, n_embd]`, F32 or F16.
    pub conv2_w: Tensor,
    /// `a.conv1d.2.bias`: `[1, n_embd]`, F32.
    pub conv2_b: Tensor,
    /// `mm.a.fc.weight`: `[n_embd, n_text_embd]`.
    pub fc_w: Tensor,
    /// `mm.a.fc.bias`: `[n_text_embd]`.
    pub fc_b: Tensor,
}

impl Qwen2aWeights {
    pub fn n_mmproj_embd(&self) -> u32 {
        self.fc_w.ne()[1] as u32
    }
}

pub(crate) fn load(l: &mut Loader, hp: &ClipHParams) -> Result<Qwen2aWeights> {
    let (embd, n_mel) = (u64::from(hp.n_embd), u64::from(hp.n_mel_bins));
    let n_text_embd = required_dim(l, "mm.a.fc.weight", 1, &format!("[{embd}, n_text_embd]"))?;
    Ok(Qwen2aWeights {
        // F32 or F16: ggml's 1D im2col takes no quantized kernel.
        conv1_w: l.values("a.conv1d.1.weight", &[KERNEL, n_mel, embd])?,
        conv1_b: l.f32_weight("a.conv1d.1.bias", &[1, embd])?,
        conv2_w: l.values("a.conv1d.2.weight", &[KERNEL, embd, embd])?,
        conv2_b: l.f32_weight("a.conv1d.2.bias", &[1, embd])?,
        fc_w: l.matrix("mm.a.fc.weight", &[embd, n_text_embd])?,
        fc_b: l.vector("mm.a.fc.bias", n_text_embd)?,
    })
}

/// whisper-enc.cpp's conv1d block over the piece `mel` (`[n_frames, n_mel]`): the ViT's
/// input, `[n_embd, n_frames / 2]`.
pub fn build_stem(g: &Graph, w: &Qwen2aWeights, mel: Tensor) -> Tensor {
    let cur = g.conv_1d_ph(w.conv1_w, mel, 1, 1);
    let cur = g.gelu_erf(g.add(cur, w.conv1_b));
    let cur = g.conv_1d_ph(w.conv2_w, cur, 2, 1);
    let cur = g.gelu_erf(g.add(cur, w.conv2_b));
    g.cont(g.transpose(cur))
}

/// The projection of the ViT's pooled, post-normed output `cur` (`[n_embd, n_tokens]`).
pub fn build(g: &Graph, w: &Qwen2aWeights, cur: Tensor) -> Tensor {
    g.add(g.mul_mat(w.fc_w, cur), w.fc_b)
}
