//! A forward pass being built: a [`Graph`] whose methods are the ops the
//! architectures use, the arena its metadata lives in, and the allocator of its
//! compute buffer.

use std::ptr::NonNull;

use ggml_sys as sys;

use super::device::BufferType;
use super::kernels::{self, Products};
use super::tensor::{Context, Tensor};
use crate::{Error, Result};

/// How pairs of dimensions are rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum RopeMode {
    /// Consecutive pairs (2i, 2i+1): llama.
    Norm = 0,
    /// Halves (i, i + n/2): qwen2, gemma3.
    Neox = 2,
    /// Multi-dimensional rope in sections (ggml's `GGML_ROPE_TYPE_MROPE`: Qwen2-VL's and
    /// Qwen2.5-VL's), in NEOX order: each position has [`MROPE_SECTIONS`] coordinates,
    /// and [`Rope::sections`] says how many consecutive pairs each coordinate turns.
    Mrope = 8,
    /// Multi-dimensional rope over image patches (ggml's `GGML_ROPE_TYPE_VISION`:
    /// Qwen2-VL's ViT): each position has [`MROPE_SECTIONS`] coordinates (a patch's row,
    /// column, row and column), and [`Rope::sections`] says how many pairs each turns.
    Vision = 24,
    /// Interleaved multi-dimensional rope (ggml's `GGML_ROPE_TYPE_IMROPE`: Qwen3-VL's
    /// and Qwen 3.5's), in NEOX order: each position has [`MROPE_SECTIONS`] coordinates
    /// (a text token's `[p, p, p, 0]`), and [`Rope::sections`] says how many pairs
    /// each coordinate turns, interleaved.
    Imrope = 40,
}

/// The coordinates of a position under multi-dimensional rope (ggml's `GGML_MROPE_SECTIONS`).
pub const MROPE_SECTIONS: usize = 4;

impl RopeMode {
    /// How many values one token's position takes in the positions input: one, or a
    /// coordinate per section (as llama.cpp's `n_pos_per_embd`).
    pub fn positions_per_token(self) -> usize {
        match self {
            RopeMode::Norm | RopeMode::Neox => 1,
            RopeMode::Mrope | RopeMode::Vision | RopeMode::Imrope => MROPE_SECTIONS,
        }
    }
}

/// The rotary embedding, with the scaling the file declares (`rope.scaling.type`):
/// linear scales every frequency by `freq_scale`; YaRN (`ext_factor` 1) blends
/// scaled and unscaled frequencies between `beta_slow` and `beta_fast` rotations
/// over `n_ctx_orig` and corrects the magnitude by `attn_factor`; LongRoPE's factors
/// are tensors (see `RopeFactors` in the model's weights) and its `attn_factor` a key.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    pub mode: RopeMode,
    pub n_dims: u32,
    /// The context the model was trained with before any extension (llama.cpp's
    /// `n_ctx_orig_yarn`).
    pub n_ctx_orig: u32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// Under multi-dimensional rope, the pairs each coordinate turns
    /// (`rope.dimension_sections`); zeros otherwise.
    pub sections: [i32; MROPE_SECTIONS],
}

/// A `ggml_gallocr`: plans and holds the compute buffer of the graphs.
pub struct Gallocr(NonNull<sys::ggml_gallocr>);

unsafe impl Send for Gallocr {}

impl Gallocr {
    pub fn new(buft: BufferType) -> Result<Gallocr> {
        NonNull::new(unsafe { sys::ggml_gallocr_new(buft.0) })
            .map(Gallocr)
            .ok_or_else(|| Error::OutOfMemory("graph allocator".into()))
    }

    /// Sizes the compute buffer for `graph` (the worst case) once.
    pub fn reserve(&mut self, graph: &Graph) -> Result<()> {
        if unsafe { sys::ggml_gallocr_reserve(self.0.as_ptr(), graph.graph) } {
            Ok(())
        } else {
            Err(Error::OutOfMemory(format!(
                "compute buffer for {} graph nodes",
                graph.n_nodes()
            )))
        }
    }

    pub fn alloc(&mut self, graph: &Graph) -> Result<()> {
        if unsafe { sys::ggml_gallocr_alloc_graph(self.0.as_ptr(), graph.graph) } {
            Ok(())
        } else {
            Err(Error::OutOfMemory("compute buffer".into()))
        }
    }

    pub fn buffer_size(&self) -> usize {
        unsafe { sys::ggml_gallocr_get_buffer_size(self.0.as_ptr(), 0) }
    }
}

impl Drop for Gallocr {
    fn drop(&mut self) {
        unsafe { sys::ggml_gallocr_free(self.0.as_ptr()) }
    }
}

/// The metadata memory for one graph at a time: reused by every forward pass, so
/// building a graph allocates nothing.
pub struct GraphArena {
    buffer: Vec<u8>,
    pub(super) max_nodes: usize,
}

impl GraphArena {
    pub fn new(max_nodes: usize) -> GraphArena {
        let size =
            unsafe { sys::ggml_tensor_overhead() * max_nodes + sys::ggml_graph_overhead_custom(max_nodes, false) };
        GraphArena {
            buffer: vec![0; size],
            max_nodes,
        }
    }

    /// Starts a new graph in the arena (dropping whatever the previous one built).
    pub fn graph(&mut self) -> Result<Graph> {
        let ctx = Context::over_buffer(&mut self.buffer)?;
        let graph = unsafe { sys::ggml_new_graph_custom(ctx.as_ptr(), self.max_nodes, false) };
        if graph.is_null() {
            return Err(Error::Internal("graph arena too small".into()));
        }
        Ok(Graph {
            ctx,
            graph,
            products: Products::Ggml,
            chunks: Default::default(),
            layer_norms: Default::default(),
        })
    }
}

/// A forward pass being built: a no-alloc context plus its `ggml_cgraph`.
pub struct Graph {
    ctx: Context,
    pub(super) graph: *mut sys::ggml_cgraph,
    /// Whose products [`Graph::mul_mat`] uses ([`crate::ggml::kernels`]).
    products: Products,
    /// The work counters of the graph's products of ours, one per op (its userdata),
    /// boxed so that they stay put while the graph is computed.
    #[allow(clippy::vec_box, reason = "ops hold their addresses while the vector grows")]
    chunks: std::cell::RefCell<Vec<Box<kernels::Chunks>>>,
    /// Each layer's normalized activations and the layer's index (see [`Graph::mark_layer_norm`]).
    layer_norms: std::cell::RefCell<Vec<(Tensor, usize)>>,
}

// SAFETY: the cgraph lives in the context's memory and only its owner uses it,
// from one thread at a time (a context kept between passes may move threads).
unsafe impl Send for Graph {}

macro_rules! op {
    ($self:ident, $call:expr) => {
        Tensor::from_raw(unsafe { $call }).expect("ggml ops only fail on invalid arguments, which callers validate")
    };
}

impl Graph {
    pub fn n_nodes(&self) -> i32 {
        unsafe { sys::ggml_graph_n_nodes(self.graph) }
    }

    /// The first node that reads a tensor held in a buffer of type `buft` (a device's: its
    /// weights, its caches) and that `backend` cannot run, as `"<op> of <tensor>"`. ggml's
    /// scheduler must run such a node where the tensor is, and aborts the process otherwise.
    pub fn node_refused_by(
        &self,
        backend: std::ptr::NonNull<sys::ggml_backend>,
        buft: super::BufferType,
    ) -> Option<String> {
        (0..self.n_nodes()).find_map(|i| unsafe {
            let node = sys::ggml_graph_node(self.graph, i);
            let reads = (*node).src.iter().any(|&src| {
                !src.is_null() && !(*src).buffer.is_null() && sys::ggml_backend_buffer_get_type((*src).buffer) == buft.0
            });
            (reads && !sys::ggml_backend_supports_op(backend.as_ptr(), node)).then(|| {
                let op = std::ffi::CStr::from_ptr(sys::ggml_op_desc(node)).to_string_lossy();
                let name = std::ffi::CStr::from_ptr((*node).name.as_ptr()).to_string_lossy();
                format!("{op} ({name})")
            })
        })
    }

    /// Fixes how many KV chunks ggml's CPU backend splits a lone query's flash attention
    /// over ≥ 512 f16 or f32 cells into (ggml-cpu's `use_split_kv_path`), whose bits depend
    /// on the chunks: `n_chunks`, however many threads compute them (ggml-sys's
    /// `cpu_patches.rs`; ggml's own is one chunk per thread). Every other op gives each
    /// thread whole rows, so the graph then has the bits of `n_chunks` threads on any count.
    pub fn fix_attention_chunks(&self, n_chunks: usize) {
        for i in 0..self.n_nodes() {
            let node = unsafe { &mut *self.node(i) };
            if node.op == sys::GGML_OP_FLASH_ATTN_EXT {
                node.op_params[sys::FA_CHUNKS_OP_PARAM] = n_chunks as i32;
            }
        }
    }

    pub(super) fn node(&self, i: i32) -> *mut sys::ggml_tensor {
        unsafe { sys::ggml_graph_node(self.graph, i) }
    }

    pub fn expand(&self, t: Tensor) {
        unsafe { sys::ggml_build_forward_expand(self.graph, t.as_ptr()) }
    }

    /// A graph input (the allocator gives it memory; we fill it before computing).
    pub fn input(&self, name: &str, ty: sys::ggml_type, ne: &[i64]) -> Tensor {
        let t = self.ctx.new_tensor(ty, ne).expect("the arena is sized for the graph");
        unsafe { sys::ggml_set_input(t.as_ptr()) };
        t.set_name(name)
    }

    /// Notes `t`, a norm's output in layer `il` (before its weight), as llama.cpp's graph
    /// callback sees `"norm"`: with layers on several devices, small batches pin it to its
    /// layer's device (else the scheduler may run it where the previous layer was).
    pub fn mark_layer_norm(&self, t: Tensor, il: usize) {
        self.layer_norms.borrow_mut().push((t, il));
    }

    /// The tensors [`Graph::mark_layer_norm`] noted, with their layers.
    pub fn layer_norms(&self) -> Vec<(Tensor, usize)> {
        self.layer_norms.borrow().clone()
    }

    pub fn mark_output(&self, t: Tensor) {
        unsafe { sys::ggml_set_output(t.as_ptr()) }
    }

    fn c(&self) -> *mut sys::ggml_context {
        self.ctx.as_ptr()
    }

    pub fn get_rows(&self, a: Tensor, rows: Tensor) -> Tensor {
        op!(self, sys::ggml_get_rows(self.c(), a.as_ptr(), rows.as_ptr()))
    }

    /// Sets whose products [`Graph::mul_mat`] uses.
    pub fn use_products(mut self, products: Products) -> Graph {
        self.products = products;
        self
    }

    /// `w · x`: ggml's `mul_mat`, or a kernel of ours with the same bits for a few
    /// rows (see [`crate::ggml::kernels`]).
    pub fn mul_mat(&self, w: Tensor, x: Tensor) -> Tensor {
        if let Some(kernel) = kernels::for_product(w, x, self.products) {
            let rows = x.ne()[1];
            // A cast, not a copy into a tensor of our own: that would be a leaf, which the
            // graph allocator keeps for the whole pass (every product's activations at
            // once: 90 MiB more for the 0.5B); a cast's result is freed after its product.
            let quantized = op!(self, sys::ggml_cast(self.c(), x.as_ptr(), kernel.activation_type()));
            let mut args = [w.as_ptr(), quantized.as_ptr()];
            return op!(
                self,
                sys::ggml_custom_4d(
                    self.c(),
                    sys::GGML_TYPE_F32,
                    w.ne()[1],
                    rows,
                    1,
                    1,
                    args.as_mut_ptr(),
                    args.len() as i32,
                    kernel.op(),
                    sys::GGML_N_TASKS_MAX,
                    self.new_chunks(),
                )
            );
        }
        op!(self, sys::ggml_mul_mat(self.c(), w.as_ptr(), x.as_ptr()))
    }

    /// A work counter for a product of ours, kept as long as the graph.
    fn new_chunks(&self) -> *mut std::ffi::c_void {
        let mut chunks = self.chunks.borrow_mut();
        chunks.push(Box::default());
        let counter: &kernels::Chunks = chunks.last().expect("just pushed");
        (counter as *const kernels::Chunks).cast_mut().cast()
    }

    /// `w[ids[i, t]] · x[:, i, t]` for each selected expert `i` of each token `t`.
    pub fn mul_mat_id(&self, w: Tensor, x: Tensor, ids: Tensor) -> Tensor {
        op!(
            self,
            sys::ggml_mul_mat_id(self.c(), w.as_ptr(), x.as_ptr(), ids.as_ptr())
        )
    }

    pub fn soft_max(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_soft_max(self.c(), a.as_ptr()))
    }

    /// `softmax(a * scale + mask)` per row (no ALiBi), with one more logit per head,
    /// `sinks[head]`, in each row's sum where given (attention sinks: gpt-oss).
    pub fn soft_max_ext(&self, a: Tensor, mask: Tensor, scale: f32, sinks: Option<Tensor>) -> Tensor {
        let out = op!(
            self,
            sys::ggml_soft_max_ext(self.c(), a.as_ptr(), mask.as_ptr(), scale, 0.0)
        );
        if let Some(sinks) = sinks {
            unsafe { sys::ggml_soft_max_add_sinks(out.as_ptr(), sinks.as_ptr()) };
        }
        out
    }

    /// `a[:, i, t] + b[:, ids[i, t]]`: each selected expert's bias added to its rows.
    pub fn add_id(&self, a: Tensor, b: Tensor, ids: Tensor) -> Tensor {
        op!(self, sys::ggml_add_id(self.c(), a.as_ptr(), b.as_ptr(), ids.as_ptr()))
    }

    /// `w · x` accumulated in F32 whatever the types (llama.cpp's attention scores).
    pub fn mul_mat_f32(&self, w: Tensor, x: Tensor) -> Tensor {
        let out = self.mul_mat(w, x);
        unsafe { sys::ggml_mul_mat_set_prec(out.as_ptr(), sys::GGML_PREC_F32) };
        out
    }

    pub fn cont_2d(&self, a: Tensor, ne0: i64, ne1: i64) -> Tensor {
        op!(self, sys::ggml_cont_2d(self.c(), a.as_ptr(), ne0, ne1))
    }

    pub fn cont_3d(&self, a: Tensor, ne0: i64, ne1: i64, ne2: i64) -> Tensor {
        op!(self, sys::ggml_cont_3d(self.c(), a.as_ptr(), ne0, ne1, ne2))
    }

    /// `a` repeated (tiled along each dimension) to the shape `ne`, each of whose
    /// dimensions a multiple of `a`'s.
    pub fn repeat_4d(&self, a: Tensor, ne: [i64; 4]) -> Tensor {
        op!(
            self,
            sys::ggml_repeat_4d(self.c(), a.as_ptr(), ne[0], ne[1], ne[2], ne[3])
        )
    }

    /// The indices of the `k` largest values of each row, largest first.
    pub fn argsort_top_k(&self, a: Tensor, k: i32) -> Tensor {
        op!(self, sys::ggml_argsort_top_k(self.c(), a.as_ptr(), k))
    }

    /// A tensor of `a`'s shape, every value `c`.
    pub fn fill(&self, a: Tensor, c: f32) -> Tensor {
        op!(self, sys::ggml_fill(self.c(), a.as_ptr(), c))
    }

    pub fn sum_rows(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_sum_rows(self.c(), a.as_ptr()))
    }

    pub fn clamp(&self, a: Tensor, min: f32, max: f32) -> Tensor {
        op!(self, sys::ggml_clamp(self.c(), a.as_ptr(), min, max))
    }

    /// The mean of each row, [1, rows, ...].
    pub fn mean(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_mean(self.c(), a.as_ptr()))
    }

    /// `a - b`, `b` broadcast over `a`.
    pub fn sub(&self, a: Tensor, b: Tensor) -> Tensor {
        op!(self, sys::ggml_sub(self.c(), a.as_ptr(), b.as_ptr()))
    }

    pub fn sqrt(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_sqrt(self.c(), a.as_ptr()))
    }

    /// `a * s + b`, element by element.
    pub fn scale_bias(&self, a: Tensor, s: f32, b: f32) -> Tensor {
        op!(self, sys::ggml_scale_bias(self.c(), a.as_ptr(), s, b))
    }

    pub fn div(&self, a: Tensor, b: Tensor) -> Tensor {
        op!(self, sys::ggml_div(self.c(), a.as_ptr(), b.as_ptr()))
    }

    pub fn cont(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_cont(self.c(), a.as_ptr()))
    }

    pub fn add(&self, a: Tensor, b: Tensor) -> Tensor {
        op!(self, sys::ggml_add(self.c(), a.as_ptr(), b.as_ptr()))
    }

    pub fn mul(&self, a: Tensor, b: Tensor) -> Tensor {
        op!(self, sys::ggml_mul(self.c(), a.as_ptr(), b.as_ptr()))
    }

    pub fn scale(&self, a: Tensor, s: f32) -> Tensor {
        op!(self, sys::ggml_scale(self.c(), a.as_ptr(), s))
    }

    pub fn tanh(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_tanh(self.c(), a.as_ptr()))
    }

    pub fn sigmoid(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_sigmoid(self.c(), a.as_ptr()))
    }

    /// `log(1 + exp(a))` (ggml's `softplus`).
    pub fn softplus(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_softplus(self.c(), a.as_ptr()))
    }

    pub fn silu(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_silu(self.c(), a.as_ptr()))
    }

    /// `max(a, 0)`.
    pub fn relu(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_relu(self.c(), a.as_ptr()))
    }

    /// `a · min(max(a + 3, 0), 6) / 6`.
    pub fn hardswish(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_hardswish(self.c(), a.as_ptr()))
    }

    /// `min(max(a + 3, 0), 6) / 6`.
    pub fn hardsigmoid(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_hardsigmoid(self.c(), a.as_ptr()))
    }

    /// `a * a`, element by element.
    pub fn sqr(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_sqr(self.c(), a.as_ptr()))
    }

    /// xIELU with its parameters `[alpha_n, alpha_p, beta, eps]` (ggml applies softplus
    /// to the alphas itself).
    pub fn xielu(&self, a: Tensor, [alpha_n, alpha_p, beta, eps]: [f32; 4]) -> Tensor {
        op!(self, sys::ggml_xielu(self.c(), a.as_ptr(), alpha_n, alpha_p, beta, eps))
    }

    pub fn rms_norm(&self, a: Tensor, eps: f32) -> Tensor {
        op!(self, sys::ggml_rms_norm(self.c(), a.as_ptr(), eps))
    }

    /// LayerNorm without its weight and bias: mean 0, variance 1 per row.
    pub fn layer_norm(&self, a: Tensor, eps: f32) -> Tensor {
        op!(self, sys::ggml_norm(self.c(), a.as_ptr(), eps))
    }

    /// GELU with ggml's tabulated approximation (as llama.cpp's `LLM_FFN_GELU`).
    pub fn gelu(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_gelu(self.c(), a.as_ptr()))
    }

    /// GELU by the error function, `0.5 x (1 + erf(x / √2))`, computed (not tabulated):
    /// the whisper encoders' (clip.cpp's `FFN_GELU_ERF`).
    pub fn gelu_erf(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_gelu_erf(self.c(), a.as_ptr()))
    }

    /// GELU's sigmoid approximation, `x * sigmoid(1.702 x)`, tabulated as ggml does.
    pub fn gelu_quick(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_gelu_quick(self.c(), a.as_ptr()))
    }

    /// A contiguous copy of `a` in another type.
    pub fn cast(&self, a: Tensor, ty: sys::ggml_type) -> Tensor {
        op!(self, sys::ggml_cast(self.c(), a.as_ptr(), ty))
    }

    pub fn transpose(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_transpose(self.c(), a.as_ptr()))
    }

    pub fn swiglu_split(&self, gate: Tensor, up: Tensor) -> Tensor {
        op!(self, sys::ggml_swiglu_split(self.c(), gate.as_ptr(), up.as_ptr()))
    }

    pub fn geglu_split(&self, gate: Tensor, up: Tensor) -> Tensor {
        op!(self, sys::ggml_geglu_split(self.c(), gate.as_ptr(), up.as_ptr()))
    }

    pub fn geglu_erf_split(&self, gate: Tensor, up: Tensor) -> Tensor {
        op!(self, sys::ggml_geglu_erf_split(self.c(), gate.as_ptr(), up.as_ptr()))
    }

    pub fn geglu_quick_split(&self, gate: Tensor, up: Tensor) -> Tensor {
        op!(self, sys::ggml_geglu_quick_split(self.c(), gate.as_ptr(), up.as_ptr()))
    }

    /// gpt-oss's SwiGLU: `gate` clamped above at `limit`, `up` to ±`limit`, then
    /// `gate * sigmoid(alpha * gate) * (up + 1)`.
    pub fn swiglu_oai(&self, gate: Tensor, up: Tensor, alpha: f32, limit: f32) -> Tensor {
        op!(
            self,
            sys::ggml_swiglu_oai(self.c(), gate.as_ptr(), up.as_ptr(), alpha, limit)
        )
    }

    /// SwiGLU of one tensor: silu of its first half times its second half.
    pub fn swiglu(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_swiglu(self.c(), a.as_ptr()))
    }

    /// GeGLU of one tensor: gelu of its first half times its second half.
    pub fn geglu(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_geglu(self.c(), a.as_ptr()))
    }

    pub fn view_3d(&self, a: Tensor, ne: [i64; 3], nb1: usize, nb2: usize, offset: usize) -> Tensor {
        op!(
            self,
            sys::ggml_view_3d(self.c(), a.as_ptr(), ne[0], ne[1], ne[2], nb1, nb2, offset)
        )
    }

    pub fn reshape_2d(&self, a: Tensor, ne0: i64, ne1: i64) -> Tensor {
        op!(self, sys::ggml_reshape_2d(self.c(), a.as_ptr(), ne0, ne1))
    }

    pub fn reshape_4d(&self, a: Tensor, ne: [i64; 4]) -> Tensor {
        op!(
            self,
            sys::ggml_reshape_4d(self.c(), a.as_ptr(), ne[0], ne[1], ne[2], ne[3])
        )
    }

    /// `cur` rotated by the Walsh-Hadamard matrix `rot` (n × n) in rows of n, as
    /// llama.cpp's `llama_mul_mat_hadamard`: a matrix product the CPU backend
    /// computes as a fast Walsh-Hadamard transform, told so by its hint.
    pub fn mul_mat_hadamard(&self, cur: Tensor, rot: Tensor) -> Tensor {
        let n = rot.ne()[0];
        let ne = cur.ne();
        let rows = ne.iter().product::<i64>() / n;
        let res = if unsafe { sys::ggml_is_contiguous(cur.as_ptr()) } {
            self.reshape_2d(cur, n, rows)
        } else {
            self.cont_2d(cur, n, rows)
        };
        let res = self.mul_mat(rot, res);
        unsafe { sys::ggml_mul_mat_set_hint(res.as_ptr(), sys::GGML_HINT_SRC0_IS_HADAMARD) };
        self.reshape_4d(res, ne)
    }

    pub fn reshape_3d(&self, a: Tensor, ne0: i64, ne1: i64, ne2: i64) -> Tensor {
        op!(self, sys::ggml_reshape_3d(self.c(), a.as_ptr(), ne0, ne1, ne2))
    }

    pub fn view_2d(&self, a: Tensor, ne0: i64, ne1: i64, nb1: usize, offset: usize) -> Tensor {
        op!(self, sys::ggml_view_2d(self.c(), a.as_ptr(), ne0, ne1, nb1, offset))
    }

    pub fn view_1d(&self, a: Tensor, ne0: i64, offset: usize) -> Tensor {
        op!(self, sys::ggml_view_1d(self.c(), a.as_ptr(), ne0, offset))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn view_4d(&self, a: Tensor, ne: [i64; 4], nb1: usize, nb2: usize, nb3: usize, offset: usize) -> Tensor {
        op!(
            self,
            sys::ggml_view_4d(self.c(), a.as_ptr(), ne[0], ne[1], ne[2], ne[3], nb1, nb2, nb3, offset)
        )
    }

    pub fn permute(&self, a: Tensor, axes: [i32; 4]) -> Tensor {
        op!(
            self,
            sys::ggml_permute(self.c(), a.as_ptr(), axes[0], axes[1], axes[2], axes[3])
        )
    }

    /// `a` and `b` joined along dimension `dim` (the other dimensions equal).
    pub fn concat(&self, a: Tensor, b: Tensor, dim: i32) -> Tensor {
        op!(self, sys::ggml_concat(self.c(), a.as_ptr(), b.as_ptr(), dim))
    }

    /// A causal depthwise convolution over time (ggml's `ssm_conv`): `x` is
    /// [kernel - 1 + n_seq_tokens, channels, n_seqs] (the previous steps first), the
    /// kernel [kernel, channels]; gives [channels, n_seq_tokens, n_seqs].
    pub fn ssm_conv(&self, x: Tensor, kernel: Tensor) -> Tensor {
        op!(self, sys::ggml_ssm_conv(self.c(), x.as_ptr(), kernel.as_ptr()))
    }

    /// Mamba-2's selective scan (ggml's `ssm_scan`, one state kept: `K` 1): from the
    /// states `s` [d_state, head_dim, n_head, rows], of which `ids` (I32 [n_seqs]) picks
    /// each sequence's, runs `x` [head_dim, n_head, n_seq_tokens, n_seqs] with the time
    /// steps `dt` [n_head, n_seq_tokens, n_seqs], the decay `a` [1, n_head] and the
    /// projections `b` and `c` [d_state, n_group, n_seq_tokens, n_seqs]. Gives one F32
    /// vector: `y` (as many values as `x`), then each sequence's last state.
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_scan(&self, s: Tensor, x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor, ids: Tensor) -> Tensor {
        op!(
            self,
            sys::ggml_ssm_scan(
                self.c(),
                s.as_ptr(),
                x.as_ptr(),
                dt.as_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                c.as_ptr(),
                ids.as_ptr(),
                1
            )
        )
    }

    /// The gated delta rule (ggml's `gated_delta_net`, one state kept: `K` 1): from the
    /// states `s` [S_v, S_v, H_v, n_seqs], runs the queries and keys `q`, `k` [S_k, H_k,
    /// n_seq_tokens, n_seqs] (H_v a multiple of H_k, broadcast), the values `v` [S_v, H_v,
    /// n_seq_tokens, n_seqs], the decay `g` and the write strength `beta` [1, H_v,
    /// n_seq_tokens, n_seqs]. Gives one F32 tensor: the outputs (as many values as `v`),
    /// then each sequence's last state.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(&self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, s: Tensor) -> Tensor {
        op!(
            self,
            sys::ggml_gated_delta_net(
                self.c(),
                q.as_ptr(),
                k.as_ptr(),
                v.as_ptr(),
                g.as_ptr(),
                beta.as_ptr(),
                s.as_ptr(),
                1
            )
        )
    }

    pub fn set_rows(&self, dst: Tensor, src: Tensor, rows: Tensor) -> Tensor {
        op!(
            self,
            sys::ggml_set_rows(self.c(), dst.as_ptr(), src.as_ptr(), rows.as_ptr())
        )
    }

    /// The rotary embedding `rope` describes (YaRN included); `freq_factors`, where
    /// given, divides each pair's frequency (llama3's `rope_freqs`, LongRoPE's factors).
    /// Multi-dimensional rope is ggml's `rope_multi`, `pos` then holding each token's
    /// coordinates section by section.
    pub fn rope(&self, x: Tensor, pos: Tensor, rope: &Rope, freq_factors: Option<Tensor>) -> Tensor {
        let factors = freq_factors.map_or(std::ptr::null_mut(), |f| f.as_ptr());
        match rope.mode {
            RopeMode::Norm | RopeMode::Neox => op!(
                self,
                sys::ggml_rope_ext(
                    self.c(),
                    x.as_ptr(),
                    pos.as_ptr(),
                    factors,
                    rope.n_dims as i32,
                    rope.mode as i32,
                    rope.n_ctx_orig as i32,
                    rope.freq_base,
                    rope.freq_scale,
                    rope.ext_factor,
                    rope.attn_factor,
                    rope.beta_fast,
                    rope.beta_slow,
                )
            ),
            RopeMode::Mrope | RopeMode::Vision | RopeMode::Imrope => {
                let mut sections = rope.sections;
                op!(
                    self,
                    sys::ggml_rope_multi(
                        self.c(),
                        x.as_ptr(),
                        pos.as_ptr(),
                        factors,
                        rope.n_dims as i32,
                        sections.as_mut_ptr(),
                        rope.mode as i32,
                        rope.n_ctx_orig as i32,
                        rope.freq_base,
                        rope.freq_scale,
                        rope.ext_factor,
                        rope.attn_factor,
                        rope.beta_fast,
                        rope.beta_slow,
                    )
                )
            }
        }
    }

    /// `rope` (a [`Graph::rope`] of mode `Norm` or `Neox`) turning the `n_dims` values from
    /// `n_offs` on rather than from 0 (`ggml_rope_set_offset`: the vision encoders' 2D RoPE).
    pub fn rope_set_offset(&self, rope: Tensor, n_offs: i32) -> Tensor {
        op!(self, sys::ggml_rope_set_offset(rope.as_ptr(), n_offs))
    }

    /// `input` (`[W, H, C, N]`) unfolded into `kw` x `kh` windows moved by `s0`, `s1`: one
    /// row of `C · kh · kw` values per window (`ggml_im2col`, 2D, no padding or dilation);
    /// `kernel` gives only its shape `[kw, kh, C]`.
    pub fn im2col_2d(&self, kernel: Tensor, input: Tensor, s0: i32, s1: i32, ty: sys::ggml_type) -> Tensor {
        op!(
            self,
            sys::ggml_im2col(self.c(), kernel.as_ptr(), input.as_ptr(), s0, s1, 0, 0, 1, 1, true, ty)
        )
    }

    /// A 2D convolution of `input` (`[W, H, C_in, N]`) by `kernel` (`[KW, KH, C_in, C_out]`),
    /// ggml's im2col then product (`ggml_conv_2d`; the vision encoders' patch embedding).
    #[allow(clippy::too_many_arguments)]
    pub fn conv_2d(
        &self,
        kernel: Tensor,
        input: Tensor,
        s0: i32,
        s1: i32,
        p0: i32,
        p1: i32,
        d0: i32,
        d1: i32,
    ) -> Tensor {
        op!(
            self,
            sys::ggml_conv_2d(self.c(), kernel.as_ptr(), input.as_ptr(), s0, s1, p0, p1, d0, d1)
        )
    }

    /// A depthwise 2D convolution of `input` (`[W, H, C, N]`) by `kernel` (`[KW, KH, 1, C]`,
    /// F16: ggml's im2col makes F16 columns for it), each channel by its own kernel
    /// (`ggml_conv_2d_dw`).
    #[allow(clippy::too_many_arguments)]
    pub fn conv_2d_dw(
        &self,
        kernel: Tensor,
        input: Tensor,
        s0: i32,
        s1: i32,
        p0: i32,
        p1: i32,
        d0: i32,
        d1: i32,
    ) -> Tensor {
        op!(
            self,
            sys::ggml_conv_2d_dw(self.c(), kernel.as_ptr(), input.as_ptr(), s0, s1, p0, p1, d0, d1)
        )
    }

    /// A 1D convolution of `input` (`[L, C_in]`) by `kernel` (`[K, C_in, C_out]`, F32 or F16;
    /// `K` odd) moved by `s`, padded by half the kernel at each end, dilated by `d`
    /// (`ggml_conv_1d_ph`: an F16 im2col, then its product with the kernel): `[L_out, C_out]`.
    /// The whisper encoders' stem.
    ///
    /// # Panics
    /// Where ggml would abort: the kernel's channels are not the input's, or its type is
    /// neither F32 nor F16 (the loader refuses such files first).
    pub fn conv_1d_ph(&self, kernel: Tensor, input: Tensor, s: i32, d: i32) -> Tensor {
        let (k, i) = (kernel.ne(), input.ne());
        assert!(
            k[1] == i[1] && k[3] == 1 && i[2] == 1 && i[3] == 1,
            "conv_1d_ph: a kernel of {k:?} over an input of {i:?}"
        );
        assert!(
            matches!(kernel.ggml_type(), sys::GGML_TYPE_F32 | sys::GGML_TYPE_F16),
            "conv_1d_ph: a kernel of type {}",
            kernel.ggml_type()
        );
        op!(
            self,
            sys::ggml_conv_1d_ph(self.c(), kernel.as_ptr(), input.as_ptr(), s, d)
        )
    }

    /// The mean of each `k` values along the first dimension, moved by `s`, unpadded
    /// (`ggml_pool_1d`, `GGML_OP_POOL_AVG`): Qwen2-Audio's pooling of positions in pairs.
    ///
    /// # Panics
    /// Where ggml would abort: a first dimension shorter than the window.
    pub fn pool_1d_avg(&self, a: Tensor, k: i32, s: i32) -> Tensor {
        assert!(
            k > 0 && s > 0 && a.ne()[0] >= i64::from(k),
            "pool_1d_avg: a window of {k} over {:?}",
            a.ne()
        );
        op!(
            self,
            sys::ggml_pool_1d(self.c(), a.as_ptr(), sys::GGML_OP_POOL_AVG, k, s, 0)
        )
    }

    /// The mean of each `k0` x `k1` window of the first two dimensions, moved by `s0`, `s1`.
    pub fn pool_2d_avg(&self, a: Tensor, k0: i32, k1: i32, s0: i32, s1: i32) -> Tensor {
        op!(
            self,
            sys::ggml_pool_2d(self.c(), a.as_ptr(), sys::GGML_OP_POOL_AVG, k0, k1, s0, s1, 0.0, 0.0)
        )
    }

    /// Zeros appended at the end of each dimension (`ggml_pad`).
    pub fn pad(&self, a: Tensor, p: [i32; 4]) -> Tensor {
        op!(self, sys::ggml_pad(self.c(), a.as_ptr(), p[0], p[1], p[2], p[3]))
    }

    /// Resized to `ne` by `mode` (`ggml_interpolate`: a `ggml_scale_mode`, with its flags).
    pub fn interpolate(&self, a: Tensor, ne: [i64; 4], mode: u32) -> Tensor {
        op!(
            self,
            sys::ggml_interpolate(self.c(), a.as_ptr(), ne[0], ne[1], ne[2], ne[3], mode)
        )
    }

    pub fn cont_4d(&self, a: Tensor, ne: [i64; 4]) -> Tensor {
        op!(
            self,
            sys::ggml_cont_4d(self.c(), a.as_ptr(), ne[0], ne[1], ne[2], ne[3])
        )
    }

    /// Puts `t` (and what it needs) in the graph now, in order but without marking it
    /// computed (`ggml_build_forward_order`): a branch kept in the order it was built.
    pub fn order(&self, t: Tensor) {
        unsafe { sys::ggml_build_forward_order(self.graph, t.as_ptr()) }
    }

    /// `softmax(a * scale)` per row, without a mask (bidirectional attention).
    pub fn soft_max_scaled(&self, a: Tensor, scale: f32) -> Tensor {
        op!(
            self,
            sys::ggml_soft_max_ext(self.c(), a.as_ptr(), std::ptr::null_mut(), scale, 0.0)
        )
    }

    /// Flash attention of every query over every key, without a mask (bidirectional
    /// attention: the vision encoders), with F32 accumulation.
    pub fn flash_attn_unmasked(&self, q: Tensor, k: Tensor, v: Tensor, kq_scale: f32) -> Tensor {
        self.flash_attn_f32(q, k, v, None, kq_scale, 0.0, None)
    }

    /// Flash attention with F32 accumulation, as llama.cpp sets it; a non-zero
    /// `logit_softcap` caps the scores at `cap * tanh(score / cap)`; `sinks[head]`, where
    /// given, is one more logit in each head's soft-max (attention sinks: gpt-oss).
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor,
        kq_scale: f32,
        logit_softcap: f32,
        sinks: Option<Tensor>,
    ) -> Tensor {
        self.flash_attn_f32(q, k, v, Some(mask), kq_scale, logit_softcap, sinks)
    }

    #[allow(clippy::too_many_arguments)]
    fn flash_attn_f32(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Option<Tensor>,
        kq_scale: f32,
        logit_softcap: f32,
        sinks: Option<Tensor>,
    ) -> Tensor {
        let out = op!(
            self,
            sys::ggml_flash_attn_ext(
                self.c(),
                q.as_ptr(),
                k.as_ptr(),
                v.as_ptr(),
                mask.map_or(std::ptr::null_mut(), Tensor::as_ptr),
                kq_scale,
                0.0,
                logit_softcap
            )
        );
        if let Some(sinks) = sinks {
            unsafe { sys::ggml_flash_attn_ext_add_sinks(out.as_ptr(), sinks.as_ptr()) };
        }
        unsafe { sys::ggml_flash_attn_ext_set_prec(out.as_ptr(), sys::GGML_PREC_F32) };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_no_node_reads_gets_no_memory_and_writing_it_is_skipped() {
        let mut arena = GraphArena::new(16);
        let graph = arena.graph().unwrap();
        let x = graph.input("x", sys::GGML_TYPE_F32, &[4]);
        let unread = graph.input("unread", sys::GGML_TYPE_F32, &[4]);
        graph.expand(graph.scale(x, 2.0));
        let cpu = crate::ggml::CpuDevice::get().unwrap();
        let mut alloc = Gallocr::new(*cpu.weight_bufts.last().unwrap()).unwrap();
        alloc.alloc(&graph).unwrap();
        assert!(x.is_allocated());
        assert!(!unread.is_allocated());
        // ggml aborts on a tensor without a buffer; our write leaves it alone.
        x.write(&[1.0f32; 4]);
        unread.write(&[1.0f32; 4]);
        unread.write_at(4, &[1.0f32]);
    }
}
