//! Declaring the model's tensors (each validated against the file) and placing them
//! in backend buffers: over the mapping where they can stay as stored, repacked where
//! the CPU has a faster layout.

use std::collections::HashMap;

use elelem_gguf::{Gguf, TensorInfo, TensorType};
use ggml_sys as sys;

use super::hparams::HParams;
use super::placement::Placement;
use super::weights::{
    AltUp, AltUpLayer, AttentionWeights, BetaAlpha, DeltaNetWeights, ExpertBiases, FfnWeights, Laurel, LayerWeights,
    Mamba2Weights, Mixer, MlaQuery, MlaWeights, Norm, PerLayerEmbeddings, QkvWeights, Qkvz, SharedExpert, SharedGate,
};
use crate::ggml::{self, Buffer, BufferType, CpuDevice, Tensor};
use crate::{Error, Result};

/// How a weight is used, which decides the types it may have and where it may live.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Usage {
    /// The `a` of `ggml_mul_mat(a, x)`: may be repacked.
    Matrix,
    /// Read with `ggml_get_rows` (the embeddings): never repacked.
    Rows,
    /// Multiplied or added element-wise (norms, biases), or read as values (a
    /// convolution's kernel): F32.
    Vector,
    /// The `a` of `ggml_mul_mat_id(a, x, ids)`, experts stacked: may be repacked.
    Experts { n_used: u32 },
    /// Read as values in F32 or F16 (a vision encoder's patch kernel, its position
    /// embeddings): never repacked.
    Values,
}

struct Planned {
    tensor: Tensor,
    info: TensorInfo,
    buft: usize,
}

/// Declares the model's tensors (validating each against the file) and then
/// places them in buffers. Tensors are keyed by name and buffer type, so a tied
/// output head shares the embeddings unless it needs a repacked copy.
pub(crate) struct Loader<'a> {
    gguf: &'a Gguf,
    device: &'a CpuDevice,
    placement: &'a Placement,
    /// The buffer types tensors go to: the CPU's weight buffer types (`device.weight_bufts`,
    /// the plain one last), then each of `placement`'s devices'.
    bufts: Vec<BufferType>,
    /// One descriptor context per buffer type of `bufts`.
    contexts: Vec<ggml::Context>,
    planned: Vec<Planned>,
    by_key: HashMap<(String, usize), Tensor>,
    /// Tensors declared unused: their shapes checked, never placed (see [`Loader::unused`]).
    unused: Vec<String>,
    /// Whether matrices may go to a repacking buffer type (`ModelParams::repack`).
    repack: bool,
}

pub(crate) struct Placed {
    pub(crate) buffers: Vec<Buffer>,
    pub(crate) contexts: Vec<ggml::Context>,
    pub(crate) weights_bytes: usize,
    pub(crate) repacked_bytes: usize,
    pub(crate) n_weights: usize,
    /// Per device of the placement, the bytes of weights it holds.
    pub(crate) device_bytes: Vec<usize>,
}

impl<'a> Loader<'a> {
    pub(crate) fn new(
        gguf: &'a Gguf,
        device: &'a CpuDevice,
        placement: &'a Placement,
        repack: bool,
    ) -> Result<Loader<'a>> {
        // A tied output head can add one descriptor per buffer type beyond the file's tensors.
        let n = gguf.tensors().len() + 1;
        let bufts: Vec<BufferType> = device
            .weight_bufts
            .iter()
            .copied()
            .chain(placement.devices.iter().map(|d| d.buft))
            .collect();
        let contexts = bufts
            .iter()
            .map(|_| ggml::Context::new_no_alloc(n))
            .collect::<Result<_>>()?;
        Ok(Loader {
            gguf,
            device,
            placement,
            bufts,
            contexts,
            planned: Vec::new(),
            by_key: HashMap::new(),
            unused: Vec::new(),
            repack,
        })
    }

    fn declare(&mut self, name: &str, shape: &[u64], usage: Usage) -> Result<Option<Tensor>> {
        self.declare_on(name, shape, usage, self.device_of(name, usage))
    }

    /// [`Loader::declare`] on `device` of the placement (`None`: the CPU), where the name
    /// alone does not say which layer the tensor belongs to.
    fn declare_on(&mut self, name: &str, shape: &[u64], usage: Usage, device: Option<usize>) -> Result<Option<Tensor>> {
        let Some(info) = self.gguf.tensor(name) else {
            return Ok(None);
        };
        check_shape(name, info, shape)?;
        let ty = info.tensor_type;
        let ggml_type = ty.id() as sys::ggml_type;
        let type_ok = match usage {
            Usage::Vector => ty == TensorType::F32,
            Usage::Values => ty == TensorType::F32 || ty == TensorType::F16,
            // Rows too: a tied output head multiplies the embeddings.
            Usage::Matrix | Usage::Rows | Usage::Experts { .. } => ggml::cpu_has_vec_dot(ggml_type),
        };
        if !type_ok {
            return Err(Error::Load(format!(
                "tensor {name} has type {ty}, which is not usable here"
            )));
        }
        let ne: Vec<i64> = info.ne().iter().map(|&d| d as i64).collect();
        let buft = match (device, usage) {
            // A product this machine's GPU cannot run with that weight stays on the CPU, as
            // llama.cpp's `select_weight_buft` falls back to the CPU's buffer types.
            (Some(d), Usage::Matrix) if !self.device_takes(d, ggml_type, &ne, None)? => {
                self.matmul_buft(ggml_type, &ne, None)?
            }
            (Some(d), Usage::Experts { n_used }) if !self.device_takes(d, ggml_type, &ne, Some(n_used))? => {
                self.matmul_buft(ggml_type, &ne, Some(n_used))?
            }
            (Some(d), _) => self.device.weight_bufts.len() + d,
            (None, Usage::Matrix) => self.matmul_buft(ggml_type, &ne, None)?,
            (None, Usage::Experts { n_used }) => self.matmul_buft(ggml_type, &ne, Some(n_used))?,
            (None, Usage::Rows | Usage::Vector | Usage::Values) => self.device.weight_bufts.len() - 1,
        };
        if let Some(&t) = self.by_key.get(&(name.to_string(), buft)) {
            return Ok(Some(t));
        }
        let tensor = self.contexts[buft].new_tensor(ggml_type, &ne)?.set_name(name);
        self.by_key.insert((name.to_string(), buft), tensor);
        self.planned.push(Planned {
            tensor,
            info: info.clone(),
            buft,
        });
        Ok(Some(tensor))
    }

    /// The device of the placement that holds tensor `name`, as llama.cpp assigns it: a
    /// layer's (`blk.N.`) its layer's, a block beyond the layers (a next-token head's) the
    /// output layer's, the embeddings the CPU (the input layer), anything else the output
    /// layer's. `None`: the CPU.
    fn device_of(&self, name: &str, usage: Usage) -> Option<usize> {
        if let Some(rest) = name.strip_prefix("blk.") {
            let il: Option<usize> = rest.split('.').next().and_then(|n| n.parse().ok());
            return match il.and_then(|il| self.placement.layers.get(il)) {
                Some(&device) => device,
                None => self.placement.output,
            };
        }
        // The embeddings are read by row on the CPU; a tied head multiplies them where
        // the output layer is. `token_embd_norm` is none of them: lfm2's output norm
        // (llama.cpp's `LLM_TENSOR_OUTPUT_NORM_LFM2`), or an encoder's input norm, which
        // [`Loader::input_layer_norm`] places.
        let embeddings = ["token_embd.", "token_types.", "position_embd."]
            .iter()
            .any(|p| name.starts_with(p));
        if usage == Usage::Rows || (embeddings && usage != Usage::Matrix) {
            None
        } else {
            self.placement.output
        }
    }

    /// The first weight buffer type whose layout the CPU backend can multiply with
    /// this weight's shape, as llama.cpp's `weight_buft_supported` decides it: probed
    /// with a 512-token `mul_mat`, or for experts (`n_used` of them per token) a
    /// `mul_mat_id`.
    fn matmul_buft(&self, ggml_type: sys::ggml_type, ne: &[i64], n_used: Option<u32>) -> Result<usize> {
        let plain = self.device.weight_bufts.len() - 1;
        if !self.repack {
            return Ok(plain);
        }
        let (_probe, weight, op) = probe_op(ggml_type, ne, n_used)?;
        Ok((0..plain)
            .find(|&i| {
                self.device
                    .supports_op_with_buft(op, weight, self.device.weight_bufts[i])
            })
            .unwrap_or(plain))
    }

    /// The dimensions of the file's tensor of that name, where it has one.
    pub fn tensor_dims(&self, name: &str) -> Option<Vec<u64>> {
        self.gguf.tensor(name).map(|t| t.dims.clone())
    }

    /// Whether device `d` of the placement can run the product of a weight of this type and
    /// shape held in its buffer (probed as [`Loader::matmul_buft`] probes). Asked of this
    /// machine's GPUs only: an RPC worker's device takes what its CPU backend does.
    fn device_takes(&self, d: usize, ggml_type: sys::ggml_type, ne: &[i64], n_used: Option<u32>) -> Result<bool> {
        if !self.placement.is_local(d) {
            return Ok(true);
        }
        let (_probe, weight, op) = probe_op(ggml_type, ne, n_used)?;
        Ok(self.placement.devices[d].supports_op_with_buft(op, weight))
    }

    /// Whether the file has a tensor of that name.
    pub fn has(&self, name: &str) -> bool {
        self.gguf.tensor(name).is_some()
    }

    pub fn matrix(&mut self, name: &str, shape: &[u64]) -> Result<Tensor> {
        required(name, self.declare(name, shape, Usage::Matrix)?)
    }

    pub fn optional_matrix(&mut self, name: &str, shape: &[u64]) -> Result<Option<Tensor>> {
        self.declare(name, shape, Usage::Matrix)
    }

    /// Stacked experts, `n_used` of which each token multiplies.
    pub fn experts(&mut self, name: &str, shape: &[u64], n_used: u32) -> Result<Tensor> {
        required(name, self.declare(name, shape, Usage::Experts { n_used })?)
    }

    pub fn rows(&mut self, name: &str, shape: &[u64]) -> Result<Tensor> {
        required(name, self.declare(name, shape, Usage::Rows)?)
    }

    pub fn optional_rows(&mut self, name: &str, shape: &[u64]) -> Result<Option<Tensor>> {
        self.declare(name, shape, Usage::Rows)
    }

    pub fn vector(&mut self, name: &str, len: u64) -> Result<Tensor> {
        required(name, self.declare(name, &[len], Usage::Vector)?)
    }

    /// Vectors stacked one a row ([len, count]: an expert's bias each), added
    /// element-wise like a vector.
    pub fn vectors(&mut self, name: &str, shape: [u64; 2]) -> Result<Tensor> {
        required(name, self.declare(name, &shape, Usage::Vector)?)
    }

    pub fn optional_vector(&mut self, name: &str, len: u64) -> Result<Option<Tensor>> {
        self.declare(name, &[len], Usage::Vector)
    }

    /// A weight ggml reads as F32 values (a convolution's kernel), of any shape.
    pub fn f32_weight(&mut self, name: &str, shape: &[u64]) -> Result<Tensor> {
        required(name, self.declare(name, shape, Usage::Vector)?)
    }

    /// [`Loader::f32_weight`], where the file has it.
    pub fn optional_f32_weight(&mut self, name: &str, shape: &[u64]) -> Result<Option<Tensor>> {
        self.declare(name, shape, Usage::Vector)
    }

    /// A weight read as F32 or F16 values (a vision encoder's patch kernel, its position
    /// embeddings), of any shape.
    pub fn values(&mut self, name: &str, shape: &[u64]) -> Result<Tensor> {
        required(name, self.declare(name, shape, Usage::Values)?)
    }

    /// An RMS norm's weight.
    pub fn norm(&mut self, name: &str, len: u64) -> Result<Norm> {
        self.vector(name, len).map(Norm::from)
    }

    /// A LayerNorm: `<prefix>.weight` and `<prefix>.bias`, both required.
    pub fn layer_norm(&mut self, prefix: &str, len: u64) -> Result<Norm> {
        Ok(Norm {
            weight: self.vector(&format!("{prefix}.weight"), len)?,
            bias: Some(self.vector(&format!("{prefix}.bias"), len)?),
        })
    }

    /// An encoder's LayerNorm of its input embeddings (`<prefix>.weight` and `.bias`), on the
    /// first layer's device: llama.cpp's `LLM_TENSOR_TOKEN_EMBD_NORM` is a repeating layer's
    /// tensor, loaded as block 0's ("do the norms on the first layer"), so a small batch's
    /// norm is weighted there, not on the CPU beside the embeddings.
    pub fn input_layer_norm(&mut self, prefix: &str, len: u64) -> Result<Norm> {
        let device = self.placement.layers.first().copied().flatten();
        let mut vector = |name: String| required(&name, self.declare_on(&name, &[len], Usage::Vector, device)?);
        Ok(Norm {
            weight: vector(format!("{prefix}.weight"))?,
            bias: Some(vector(format!("{prefix}.bias"))?),
        })
    }

    /// The block of llama and its kin: norms, [`Loader::attention`], and a gated feed-forward.
    pub fn llama_block(&mut self, hp: &HParams, il: u32, qkv_bias: bool) -> Result<LayerWeights> {
        let embd = u64::from(hp.n_embd);
        Ok(LayerWeights {
            attn_norm: Some(self.norm(&format!("blk.{il}.attn_norm.weight"), embd)?),
            mixer: Mixer::Attention(self.attention(hp, il, qkv_bias)?),
            attn_post_norm: None,
            ffn_norm: Some(self.norm(&format!("blk.{il}.ffn_norm.weight"), embd)?),
            ffn: self.gated_ffn(hp, il)?,
            ffn_post_norm: None,
        })
    }

    /// `ffn_gate`, `ffn_up` and `ffn_down`, the layer's `feed_forward_length` wide.
    pub fn gated_ffn(&mut self, hp: &HParams, il: u32) -> Result<FfnWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (embd, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff_of(il as usize)));
        Ok(FfnWeights::Gated {
            gate: self.matrix(&n("ffn_gate.weight"), &[embd, ff])?,
            up: self.matrix(&n("ffn_up.weight"), &[embd, ff])?,
            down: self.matrix(&n("ffn_down.weight"), &[ff, embd])?,
        })
    }

    /// `ffn_up` and `ffn_down`, `feed_forward_length` wide, each with a bias where the
    /// file has one, around a squared ReLU (llama.cpp's `LLM_FFN_RELU_SQR`, no gate).
    pub fn relu_squared_ffn(&mut self, hp: &HParams, il: u32) -> Result<FfnWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (embd, ff) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
        Ok(FfnWeights::ReluSquared {
            up: self.matrix(&n("ffn_up.weight"), &[embd, ff])?,
            up_b: self.optional_vector(&n("ffn_up.bias"), ff)?,
            down: self.matrix(&n("ffn_down.weight"), &[ff, embd])?,
            down_b: self.optional_vector(&n("ffn_down.bias"), embd)?,
        })
    }

    /// A mixture of SwiGLU experts (`expert_count` of them, `n_ff_exp` wide), its
    /// router, the shared expert beside them if any, and, for architectures that take
    /// one (`selection_bias`), the selection bias `exp_probs_b.bias` where the file has it.
    pub fn experts_ffn(
        &mut self,
        hp: &HParams,
        il: u32,
        shared: Option<SharedExpert>,
        selection_bias: bool,
    ) -> Result<FfnWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (embd, ff, n_expert) = (u64::from(hp.n_embd), u64::from(hp.n_ff_exp), u64::from(hp.n_expert));
        let used = hp.n_expert_used;
        Ok(FfnWeights::Experts {
            router: self.matrix(&n("ffn_gate_inp.weight"), &[embd, n_expert])?,
            gate: self.experts(&n("ffn_gate_exps.weight"), &[embd, ff, n_expert], used)?,
            up: self.experts(&n("ffn_up_exps.weight"), &[embd, ff, n_expert], used)?,
            down: self.experts(&n("ffn_down_exps.weight"), &[ff, embd, n_expert], used)?,
            selection_bias: match selection_bias {
                true => self.optional_vector(&n("exp_probs_b.bias"), n_expert)?,
                false => None,
            },
            shared,
            biases: None,
        })
    }

    /// `experts` with biases on the router (`ffn_gate_inp.bias`) and on each expert's
    /// gate, up and down projections (`ffn_{gate,up,down}_exps.bias`), all required.
    pub fn with_expert_biases(&mut self, hp: &HParams, il: u32, mut experts: FfnWeights) -> Result<FfnWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (embd, ff, n_expert) = (u64::from(hp.n_embd), u64::from(hp.n_ff_exp), u64::from(hp.n_expert));
        let FfnWeights::Experts { biases, .. } = &mut experts else {
            return Err(Error::Internal("expert biases belong to a mixture of experts".into()));
        };
        *biases = Some(ExpertBiases {
            router: self.vector(&n("ffn_gate_inp.bias"), n_expert)?,
            gate: self.vectors(&n("ffn_gate_exps.bias"), [ff, n_expert])?,
            up: self.vectors(&n("ffn_up_exps.bias"), [ff, n_expert])?,
            down: self.vectors(&n("ffn_down_exps.bias"), [embd, n_expert])?,
        });
        Ok(experts)
    }

    /// `experts` with the selection bias `exp_probs_b.bias` required (glm4moe's).
    pub fn with_selection_bias(&mut self, hp: &HParams, il: u32, mut experts: FfnWeights) -> Result<FfnWeights> {
        let FfnWeights::Experts { selection_bias, .. } = &mut experts else {
            return Err(Error::Internal(
                "a selection bias belongs to a mixture of experts".into(),
            ));
        };
        *selection_bias = Some(self.vector(&format!("blk.{il}.exp_probs_b.bias"), hp.n_expert.into())?);
        Ok(experts)
    }

    /// A shared expert `width` wide (`ffn_{gate,up,down}_shexp`), with its sigmoid gate
    /// (`ffn_gate_inp_shexp`), computed as `gate` says, where it has one.
    pub fn shared_expert(
        &mut self,
        hp: &HParams,
        il: u32,
        width: u32,
        gate: Option<SharedGate>,
    ) -> Result<SharedExpert> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (embd, ff) = (u64::from(hp.n_embd), u64::from(width));
        Ok(SharedExpert {
            gate: self.matrix(&n("ffn_gate_shexp.weight"), &[embd, ff])?,
            up: self.matrix(&n("ffn_up_shexp.weight"), &[embd, ff])?,
            down: self.matrix(&n("ffn_down_shexp.weight"), &[ff, embd])?,
            gate_inp: match gate {
                Some(how) => Some((self.matrix(&n("ffn_gate_inp_shexp.weight"), &[embd])?, how)),
                None => None,
            },
        })
    }

    /// Layer `il`'s Mamba-2 mixer (`ssm_in`, `ssm_conv1d`, `ssm_dt.bias`, `ssm_a`, `ssm_d`,
    /// `ssm_norm`, `ssm_out`), shaped by the model's [`super::Ssm`]; the convolution's
    /// bias is required when `conv_bias`, else optional (granitehybrid's).
    pub fn mamba2_mixer(&mut self, hp: &HParams, il: u32, conv_bias: bool) -> Result<Mamba2Weights> {
        let mixer = self.mamba2_mixer_with_optional_norm(hp, il, conv_bias)?;
        if mixer.norm.is_none() {
            return Err(Error::Load(format!("missing tensor blk.{il}.ssm_norm.weight")));
        }
        Ok(mixer)
    }

    /// [`Loader::mamba2_mixer`] whose grouped norm `ssm_norm` is optional too (falcon-h1's).
    pub fn mamba2_mixer_with_optional_norm(&mut self, hp: &HParams, il: u32, conv_bias: bool) -> Result<Mamba2Weights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let ssm = hp
            .ssm
            .ok_or_else(|| Error::Internal("a Mamba-2 mixer needs the model's ssm".into()))?;
        let [embd, d_conv, d_inner, n_head, n_group, channels, d_in_proj] = [
            hp.n_embd,
            ssm.d_conv,
            ssm.d_inner,
            ssm.n_head,
            ssm.n_group,
            ssm.conv_channels(),
            ssm.d_in_proj(),
        ]
        .map(u64::from);
        let in_proj = self.matrix(&n("ssm_in.weight"), &[embd, d_in_proj])?;
        let conv = self.f32_weight(&n("ssm_conv1d.weight"), &[d_conv, channels])?;
        let conv_bias = match conv_bias {
            true => Some(self.vector(&n("ssm_conv1d.bias"), channels)?),
            false => self.optional_vector(&n("ssm_conv1d.bias"), channels)?,
        };
        Ok(Mamba2Weights {
            in_proj,
            conv,
            conv_bias,
            dt_bias: self.vector(&n("ssm_dt.bias"), n_head)?,
            // No `.weight` suffix on these two, as llama.cpp names them.
            a: self.f32_weight(&n("ssm_a"), &[1, n_head])?,
            d: self.f32_weight(&n("ssm_d"), &[1, n_head])?,
            norm: self.optional_f32_weight(&n("ssm_norm.weight"), &[d_inner / n_group, n_group])?,
            out_proj: self.matrix(&n("ssm_out.weight"), &[d_inner, embd])?,
        })
    }

    /// Layer `il`'s gated delta net (`attn_qkv`, `attn_gate`, `ssm_conv1d`, `ssm_dt.bias`,
    /// `ssm_a`, beta and alpha, `ssm_norm`, `ssm_out`), shaped by the model's
    /// [`super::Ssm`] as llama.cpp's qwen35 and qwen3next shape it: heads of `d_state`
    /// keys and values. Beta and alpha are `ssm_beta` and `ssm_alpha` apart, or (where
    /// `grouped_beta_alpha`: qwen3next's files) `ssm_ba`; there, an older file's `ssm_in`
    /// (Q, K, V and z in one projection, key head by key head) stands for `attn_qkv` and
    /// `attn_gate`, as llama.cpp's qwen3next reads it. A file with both is refused.
    pub fn delta_net(&mut self, hp: &HParams, il: u32, grouped_beta_alpha: bool) -> Result<DeltaNetWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let ssm = hp
            .ssm
            .ok_or_else(|| Error::Internal("a delta net needs the model's ssm".into()))?;
        let [embd, d_conv, d_state, n_v_heads, n_k_heads] =
            [hp.n_embd, ssm.d_conv, ssm.d_state, ssm.n_head, ssm.n_group].map(u64::from);
        let (key_dim, value_dim) = (d_state * n_k_heads, d_state * n_v_heads);
        let conv_dim = 2 * key_dim + value_dim;
        let fused = self.has(&n("ssm_in.weight"));
        if fused && (!grouped_beta_alpha || self.has(&n("attn_qkv.weight"))) {
            return Err(Error::Unsupported(format!(
                "{}: blk.{il}.ssm_in (a delta net's Q, K, V and z in one projection) beside attn_qkv, or in \
                 a {} file, is not something elelem runs",
                hp.arch.name, hp.arch.name
            )));
        }
        let qkvz = match fused {
            true => Qkvz::Interleaved(self.matrix(&n("ssm_in.weight"), &[embd, 2 * key_dim + 2 * value_dim])?),
            false => Qkvz::Apart {
                qkv: self.matrix(&n("attn_qkv.weight"), &[embd, conv_dim])?,
                gate: self.matrix(&n("attn_gate.weight"), &[embd, value_dim])?,
            },
        };
        let conv = self.f32_weight(&n("ssm_conv1d.weight"), &[d_conv, conv_dim])?;
        let dt_bias = self.vector(&n("ssm_dt.bias"), n_v_heads)?;
        // No `.weight` suffix, as llama.cpp names it (`LLM_TENSOR_SSM_A_NOSCAN`).
        let a = self.vector(&n("ssm_a"), n_v_heads)?;
        let beta_alpha = match grouped_beta_alpha {
            true => BetaAlpha::Grouped(self.matrix(&n("ssm_ba.weight"), &[embd, 2 * n_v_heads])?),
            false => BetaAlpha::Apart {
                beta: self.matrix(&n("ssm_beta.weight"), &[embd, n_v_heads])?,
                alpha: self.matrix(&n("ssm_alpha.weight"), &[embd, n_v_heads])?,
            },
        };
        Ok(DeltaNetWeights {
            qkvz,
            conv,
            dt_bias,
            a,
            beta_alpha,
            norm: self.vector(&n("ssm_norm.weight"), d_state)?,
            out: self.matrix(&n("ssm_out.weight"), &[value_dim, embd])?,
        })
    }

    /// Layer `il`'s attention with a gate on its output (qwen35's, qwen3next's): Q's
    /// projection twice as wide, each head's query followed by its gate; K, V and O as
    /// usual, no biases; per-head RMS norms of Q and K. llama.cpp also takes a fused
    /// `attn_qkv` here, which elelem refuses.
    pub fn attention_with_output_gate(&mut self, hp: &HParams, il: u32) -> Result<AttentionWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        if self.has(&n("attn_qkv.weight")) {
            return Err(Error::Unsupported(format!(
                "{}: a fused attn_qkv on attention layer {il} is not something elelem runs; llama.cpp does",
                hp.arch.name
            )));
        }
        let embd = u64::from(hp.n_embd);
        let q_dim = u64::from(hp.head_dim_k * hp.n_head);
        let attn = AttentionWeights {
            qkv: QkvWeights::Separate {
                wq: self.matrix(&n("attn_q.weight"), &[embd, 2 * q_dim])?,
                wk: self.matrix(&n("attn_k.weight"), &[embd, u64::from(hp.n_embd_k_gqa())])?,
                wv: self.matrix(&n("attn_v.weight"), &[embd, u64::from(hp.n_embd_v_gqa())])?,
                bq: None,
                bk: None,
                bv: None,
            },
            q_norm: None,
            k_norm: None,
            wo: self.matrix(&n("attn_output.weight"), &[q_dim, embd])?,
            bo: None,
            sinks: None,
        };
        self.with_head_norms(hp, il, attn)
    }

    /// Layer `il`'s multi-head latent attention, shaped by the model's [`super::Mla`], as
    /// llama.cpp's deepseek2 declares it: Q through its compression where `q_lora_rank`
    /// is not 0, else one `attn_q`; K and V decompressed by `attn_k_b` and `attn_v_b` (the
    /// absorbed form; the older files' single `attn_kv_b` is the caller's to refuse).
    pub fn mla_attention(&mut self, hp: &HParams, il: u32) -> Result<MlaWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let mla = hp
            .mla
            .ok_or_else(|| Error::Internal("latent attention needs the model's mla".into()))?;
        let [embd, n_head, q_lora, kv_lora, head_k, head_v, n_rot] = [
            hp.n_embd,
            hp.n_head,
            mla.q_lora_rank,
            mla.kv_lora_rank,
            mla.head_dim_k,
            mla.head_dim_v,
            hp.rope.n_dims,
        ]
        .map(u64::from);
        let q_width = n_head * head_k;
        let q = match q_lora {
            0 => MlaQuery::Direct(self.matrix(&n("attn_q.weight"), &[embd, q_width])?),
            _ => MlaQuery::Compressed {
                a: self.matrix(&n("attn_q_a.weight"), &[embd, q_lora])?,
                norm: self.vector(&n("attn_q_a_norm.weight"), q_lora)?,
                b: self.matrix(&n("attn_q_b.weight"), &[q_lora, q_width])?,
            },
        };
        Ok(MlaWeights {
            q,
            kv_a: self.matrix(&n("attn_kv_a_mqa.weight"), &[embd, kv_lora + n_rot])?,
            kv_a_norm: self.vector(&n("attn_kv_a_norm.weight"), kv_lora)?,
            k_b: self.matrix(&n("attn_k_b.weight"), &[head_k - n_rot, kv_lora, n_head])?,
            v_b: self.matrix(&n("attn_v_b.weight"), &[kv_lora, head_v, n_head])?,
            wo: self.matrix(&n("attn_output.weight"), &[n_head * head_v, embd])?,
        })
    }

    /// The per-layer embeddings of gemma4's and gemma3n's small models (`per_layer_*`,
    /// and each layer's `inp_gate`, `proj` and `post_norm`), `hp.n_embd_per_layer` wide.
    pub fn per_layer_embeddings(&mut self, hp: &HParams) -> Result<PerLayerEmbeddings> {
        let (embd, width, n_layer) = (
            u64::from(hp.n_embd),
            u64::from(hp.n_embd_per_layer),
            u64::from(hp.n_layer),
        );
        let tok_embd = self.rows("per_layer_token_embd.weight", &[width * n_layer, u64::from(hp.n_vocab)])?;
        let model_proj = self.matrix("per_layer_model_proj.weight", &[embd, width * n_layer])?;
        let proj_norm = self.vector("per_layer_proj_norm.weight", width)?;
        let layers = (0..hp.n_layer)
            .map(|il| {
                let n = |s: &str| format!("blk.{il}.{s}");
                Ok([
                    self.matrix(&n("inp_gate.weight"), &[embd, width])?,
                    self.matrix(&n("proj.weight"), &[width, embd])?,
                    self.vector(&n("post_norm.weight"), embd)?,
                ])
            })
            .collect::<Result<_>>()?;
        Ok(PerLayerEmbeddings {
            tok_embd,
            model_proj,
            proj_norm,
            layers,
        })
    }

    /// Gemma 3n's alternating updates over `n_streams` streams, `active` the one the
    /// layers compute on: `altup_proj`, `altup_unembd_proj`, and each layer's router,
    /// coefficients and correction scale.
    pub fn altup(&mut self, hp: &HParams, n_streams: u32, active: u32) -> Result<AltUp> {
        let (embd, n) = (u64::from(hp.n_embd), u64::from(n_streams));
        let layers = (0..hp.n_layer)
            .map(|il| {
                let n_ = |s: &str| format!("blk.{il}.{s}");
                Ok(AltUpLayer {
                    router_norm: self.vector(&n_("altup_router_norm.weight"), embd)?,
                    router: self.matrix(&n_("altup_router.weight"), &[embd, n])?,
                    predict_coef: self.matrix(&n_("altup_predict_coef.weight"), &[n, n * n])?,
                    correct_coef: self.matrix(&n_("altup_correct_coef.weight"), &[n, n])?,
                    correct_scale: self.vector(&n_("altup_correct_scale.weight"), embd)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(AltUp {
            n_streams: n_streams.into(),
            active: active as usize,
            proj: self.matrix("altup_proj.weight", &[embd, embd, n - 1])?,
            unembd_proj: self.matrix("altup_unembd_proj.weight", &[embd, embd, n - 1])?,
            layers,
        })
    }

    /// Layer `il`'s LAuReL, of rank `rank`: `laurel_l`, `laurel_r`, `laurel_post_norm`.
    pub fn laurel(&mut self, hp: &HParams, il: u32, rank: u32) -> Result<Laurel> {
        let (embd, rank) = (u64::from(hp.n_embd), u64::from(rank));
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok(Laurel {
            l: self.matrix(&n("laurel_l.weight"), &[embd, rank])?,
            r: self.matrix(&n("laurel_r.weight"), &[rank, embd])?,
            post_norm: self.vector(&n("laurel_post_norm.weight"), embd)?,
        })
    }

    /// `attn` with per-head RMS norms of Q and of K (`attn_q_norm`, `attn_k_norm`,
    /// one head wide).
    pub fn with_head_norms(&mut self, hp: &HParams, il: u32, attn: AttentionWeights) -> Result<AttentionWeights> {
        let head = u64::from(hp.head_dim_k);
        Ok(AttentionWeights {
            q_norm: Some(self.vector(&format!("blk.{il}.attn_q_norm.weight"), head)?),
            k_norm: Some(self.vector(&format!("blk.{il}.attn_k_norm.weight"), head)?),
            ..attn
        })
    }

    /// The attention projections: Q, K, V and O, with biases on Q, K and V required
    /// when `qkv_bias`, else optional, and an optional bias on O; no Q/K norms.
    pub fn attention(&mut self, hp: &HParams, il: u32, qkv_bias: bool) -> Result<AttentionWeights> {
        self.attention_with(hp, il, qkv_bias, true)
    }

    /// [`Loader::attention`] for graphs that add no bias to O (llama.cpp's gemma and
    /// olmo2 graphs): a file's `attn_output.bias` is then left undeclared, and so refused.
    pub fn attention_without_output_bias(&mut self, hp: &HParams, il: u32, qkv_bias: bool) -> Result<AttentionWeights> {
        self.attention_with(hp, il, qkv_bias, false)
    }

    fn attention_with(&mut self, hp: &HParams, il: u32, qkv_bias: bool, out_bias: bool) -> Result<AttentionWeights> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let embd = u64::from(hp.n_embd);
        let q_dim = u64::from(hp.head_dim_k * hp.n_head);
        let k_dim = u64::from(hp.n_embd_k_gqa());
        let v_dim = u64::from(hp.n_embd_v_gqa());
        let bias = |l: &mut Self, name: &str, len: u64| {
            if qkv_bias {
                l.vector(name, len).map(Some)
            } else {
                l.optional_vector(name, len)
            }
        };
        // As llama.cpp's create_tensor_qkv: one fused projection where the file has it
        // (then separate Q/K/V tensors are unused, and so refused), else three.
        let qkv_dim = q_dim + k_dim + v_dim;
        let qkv = match self.optional_matrix(&n("attn_qkv.weight"), &[embd, qkv_dim])? {
            Some(wqkv) => QkvWeights::Fused {
                wqkv,
                bqkv: bias(self, &n("attn_qkv.bias"), qkv_dim)?,
            },
            None => QkvWeights::Separate {
                wq: self.matrix(&n("attn_q.weight"), &[embd, q_dim])?,
                wk: self.matrix(&n("attn_k.weight"), &[embd, k_dim])?,
                wv: self.matrix(&n("attn_v.weight"), &[embd, v_dim])?,
                bq: bias(self, &n("attn_q.bias"), q_dim)?,
                bk: bias(self, &n("attn_k.bias"), k_dim)?,
                bv: bias(self, &n("attn_v.bias"), v_dim)?,
            },
        };
        Ok(AttentionWeights {
            qkv,
            q_norm: None,
            k_norm: None,
            wo: self.matrix(&n("attn_output.weight"), &[q_dim, embd])?,
            bo: match out_bias {
                true => self.optional_vector(&n("attn_output.bias"), embd)?,
                false => None,
            },
            sinks: None,
        })
    }

    /// A tensor llama.cpp loads, checking its shape, and then leaves out of its graphs
    /// (`TENSOR_SKIP`: the multi-token-prediction layers, without `load_mtp`): declared
    /// so that the file is not refused for it, and never placed. Absent, it is an error
    /// only when `required`.
    pub fn unused(&mut self, name: &str, shape: &[u64], required: bool) -> Result<()> {
        match self.gguf.tensor(name) {
            Some(info) => {
                check_shape(name, info, shape)?;
                self.unused.push(name.to_string());
                Ok(())
            }
            None if required => Err(Error::Load(format!("missing tensor {name}"))),
            None => Ok(()),
        }
    }

    /// Like llama.cpp (which counts the tensors it loaded), refuses a file with tensors
    /// the architecture does not read: they would change the math in its graph
    /// (`rope_freqs`, a fused `attn_qkv`, experts), and ignoring them would decode wrong.
    pub(crate) fn check_all_used(&self, arch: &str) -> Result<()> {
        let used: std::collections::HashSet<&str> = self
            .planned
            .iter()
            .map(|p| p.info.name.as_str())
            .chain(self.unused.iter().map(String::as_str))
            .collect();
        match self.gguf.tensors().iter().find(|t| !used.contains(t.name.as_str())) {
            Some(unused) => Err(Error::Unsupported(format!(
                "tensor {} is not part of elelem's {arch} graph (llama.cpp runs {arch} models and would use it, \
                 or refuse the file)",
                unused.name
            ))),
            None => Ok(()),
        }
    }

    /// Gives every declared tensor its memory: the plain ones point straight into
    /// the mapped file (one CPU buffer over the whole mapping, zero-copy); the others
    /// are allocated in their buffer type and filled through `ggml_backend_tensor_set`,
    /// which repacks them.
    pub(crate) fn place(self) -> Result<Placed> {
        let plain = self.device.weight_bufts.len() - 1;
        let file = self.gguf.file_bytes();
        let mut buffers = Vec::new();
        let mapped = Buffer::from_raw(
            unsafe { sys::ggml_backend_cpu_buffer_from_ptr(file.as_ptr() as *mut _, file.len()) },
            "mapped weights",
        )?;
        mapped.set_usage_weights();
        let mut weights_bytes = 0;
        for p in self.planned.iter().filter(|p| p.buft == plain) {
            let addr = self.gguf.tensor_data(&p.info).as_ptr() as *mut std::ffi::c_void;
            let status = unsafe { sys::ggml_backend_tensor_alloc(mapped.as_ptr(), p.tensor.as_ptr(), addr) };
            if status != sys::GGML_STATUS_SUCCESS {
                return Err(Error::Internal(format!("cannot map tensor {}", p.info.name)));
            }
            weights_bytes += p.info.size as usize;
        }
        buffers.push(mapped);
        let mapped_names: std::collections::HashSet<&str> = self
            .planned
            .iter()
            .filter(|p| p.buft == plain)
            .map(|p| p.info.name.as_str())
            .collect();
        let mut repacked_bytes = 0;
        let mut device_bytes = vec![0; self.placement.devices.len()];
        for (i, ctx) in self.contexts.iter().enumerate().filter(|&(i, _)| i != plain) {
            let mine: Vec<&Planned> = self.planned.iter().filter(|p| p.buft == i).collect();
            if mine.is_empty() {
                continue;
            }
            let buft = self.bufts[i];
            let buffer = match i.checked_sub(plain + 1).map(|d| &self.placement.devices[d]) {
                Some(device) => {
                    let bytes: usize = mine.iter().map(|p| p.info.size as usize).sum();
                    Buffer::alloc_ctx_tensors(ctx, buft, "weights")
                        .map_err(|_| device.out_of_memory("weights", bytes))?
                }
                None => Buffer::alloc_ctx_tensors(ctx, buft, &buft.name())?,
            };
            buffer.set_usage_weights();
            for p in mine {
                let data = self.gguf.tensor_data(&p.info);
                unsafe { sys::ggml_backend_tensor_set(p.tensor.as_ptr(), data.as_ptr().cast(), 0, data.len()) };
                // Read once into the new layout: unless a mapped tensor reads the same
                // bytes, their pages need not stay resident (llama.cpp keeps them).
                if !mapped_names.contains(p.info.name.as_str()) {
                    self.gguf.release(self.gguf.tensor_range(&p.info));
                }
            }
            match i.checked_sub(plain + 1) {
                Some(d) => device_bytes[d] += buffer.size(),
                None => repacked_bytes += buffer.size(),
            }
            buffers.push(buffer);
            for worker in &self.placement.workers {
                worker.check()?;
            }
        }
        let offloaded_bytes: usize = device_bytes.iter().sum();
        Ok(Placed {
            device_bytes,
            buffers,
            n_weights: self.planned.len(),
            contexts: self.contexts,
            weights_bytes: weights_bytes + repacked_bytes + offloaded_bytes,
            repacked_bytes,
        })
    }
}

/// Refuses a tensor whose shape is not `shape` (trailing dimensions of 1 implied).
fn check_shape(name: &str, info: &TensorInfo, shape: &[u64]) -> Result<()> {
    let mut expected = [1u64; 4];
    expected[..shape.len()].copy_from_slice(shape);
    if info.ne() != expected {
        return Err(Error::Load(format!(
            "tensor {name} has shape {:?}, expected {:?}",
            info.dims, shape
        )));
    }
    Ok(())
}

/// A tensor the architecture cannot do without: its absence is a load error.
fn required(name: &str, tensor: Option<Tensor>) -> Result<Tensor> {
    tensor.ok_or_else(|| Error::Load(format!("missing tensor {name}")))
}

/// llama.cpp's probe of where a weight can be multiplied (`weight_buft_supported`): a
/// 512-token `mul_mat` of it, or for experts (`n_used` of them per token) a `mul_mat_id`, in a
/// context of its own (returned first: it holds the tensors).
fn probe_op(ggml_type: sys::ggml_type, ne: &[i64], n_used: Option<u32>) -> Result<(ggml::Context, Tensor, Tensor)> {
    let probe = ggml::Context::new_no_alloc(4)?;
    let weight = probe.new_tensor(ggml_type, ne)?;
    let op = match n_used {
        None => {
            let x = probe.new_tensor(sys::GGML_TYPE_F32, &[ne[0], 512, ne[2], ne[3]])?;
            unsafe { sys::ggml_mul_mat(probe.as_ptr(), weight.as_ptr(), x.as_ptr()) }
        }
        Some(n_used) => {
            let x = probe.new_tensor(sys::GGML_TYPE_F32, &[ne[0], n_used.into(), 512])?;
            let ids = probe.new_tensor(sys::GGML_TYPE_I32, &[n_used.into(), 512])?;
            unsafe { sys::ggml_mul_mat_id(probe.as_ptr(), weight.as_ptr(), x.as_ptr(), ids.as_ptr()) }
        }
    };
    let op = Tensor::from_raw(op)?;
    Ok((probe, weight, op))
}
