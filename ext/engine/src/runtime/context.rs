use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::ggml::kernels::Products;
use crate::ggml::{Backend, BufferType, Gallocr, Graph, GraphArena, Sched, Tensor};
use crate::memory::hybrid::Memory;
use crate::memory::kv_cache::{CacheType, Cells, KvCache, KvUsage, SeqId, KV_PAD, MAX_SEQUENCES};
use crate::memory::recurrent::RecurrentState;
use crate::memory::StateRows;
use crate::model::inputs::{distinct_seqs, Batch, Inputs, MaskFor};
use crate::model::{GraphBuilder, Kind, Model, Pooling};
use crate::{Error, Result};

/// The fewest graph nodes a forward pass is given room for; models with many
/// weights get 8 per weight, as llama.cpp sizes its graphs. A graph that outgrew
/// its arena would make ggml abort.
const MIN_NODES: usize = 8192;
/// The prompt is evaluated in micro-batches of at most this many tokens, as llama.cpp's n_ubatch.
pub const DEFAULT_UBATCH: u32 = 512;
/// The context size unless told otherwise (`Elelem.open`'s `n_ctx:`, `Elelem::Defaults::N_CTX`).
pub const DEFAULT_N_CTX: u32 = 4096;
/// The largest context, and so the most tokens any count may ask for (`max_tokens`).
pub const MAX_N_CTX: u32 = 1 << 20;
/// The most threads a pass may run on.
pub const MAX_THREADS: usize = 512;

#[derive(Debug, Clone)]
pub struct ContextParams {
    /// The most tokens the context holds, all sequences together (one unified cache).
    pub n_ctx: u32,
    pub n_threads: usize,
    pub n_ubatch: u32,
    /// How many sequences the context holds at once.
    pub n_seq_max: u32,
    /// What a pass outputs: the logits of its output rows (`None`), or embeddings
    /// pooled this way (every token is an output row then, as in llama.cpp).
    pub pooling: Option<Pooling>,
    /// Attention as one fused flash-attention kernel (llama.cpp's `-fa on`, which its
    /// `auto` picks on the CPU), or as a matrix product, a soft-max and a matrix product
    /// over a transposed V cache (`-fa off`). Each mode gives llama.cpp's bits in the
    /// same mode; they differ from each other. Encoders always use flash attention.
    pub flash_attn: bool,
    /// What the KV cache stores K and V as (llama.cpp's `-ctk` / `-ctv`; F16 by
    /// default). A quantized V cache needs flash attention, as in llama.cpp; a
    /// quantized cache of either gives llama.cpp's bits with the same types, which
    /// differ from F16's.
    pub type_k: CacheType,
    pub type_v: CacheType,
    /// The most rows of logits one pass computes, beyond one per sequence: a
    /// speculative decoder's verification pass wants one per token it carries.
    pub n_outputs_max: u32,
    /// Run a pass on fewer threads while other work takes the cores (see
    /// `threads.rs`); never where the thread count would change its result.
    pub adaptive_threads: bool,
    /// Give every row the bits it would get in a pass of its own, whatever else the
    /// pass carries: other sequences, more of the same prompt, a speculative draft.
    /// Passes run on ggml's reference kernels (`Backend::use_reference_kernels`) and
    /// each sequence keeps `n_ctx / n_seq_max` cells of its own (llama.cpp's
    /// non-unified cache), whose keys flash attention visits in position order. Needs
    /// flash attention and a model opened without repacked weights. The bits are not
    /// the default kernels' (so not llama.cpp's), and prompts take longer.
    pub batch_invariant: bool,
    /// Let passes of a few rows multiply with our own kernels where one fits the
    /// weights and the CPU (`kernels/`): the bits of the ggml kernel that would run
    /// for the same pass, in less time. Off: ggml's products only.
    pub own_kernels: bool,
    /// Each layer's KV cache and recurrent state beside its weights, on its device (llama.cpp's
    /// `offload_kqv`, on by default); off: all of it in the CPU's memory.
    pub kv_offload: bool,
}

impl ContextParams {
    /// The cells each sequence has of its own: `n_ctx / n_seq_max` in a
    /// batch-invariant context; none in a unified cache.
    fn cells_per_sequence(&self) -> Option<u32> {
        self.batch_invariant.then(|| self.n_ctx / self.n_seq_max)
    }

    /// The most tokens one sequence holds: `n_ctx`, or in a batch-invariant context
    /// its share of it (llama.cpp's `n_ctx_seq`).
    pub fn n_ctx_seq(&self) -> usize {
        self.cells_per_sequence().unwrap_or(self.n_ctx) as usize
    }

    /// [`ContextParams::n_ctx_seq`] in words, for errors.
    pub fn capacity_words(&self) -> String {
        if self.batch_invariant {
            format!(
                "{} (n_ctx {} split among {} sequences)",
                self.n_ctx_seq(),
                self.n_ctx,
                self.n_seq_max
            )
        } else {
            format!("n_ctx {}", self.n_ctx)
        }
    }

    /// Whose matrix products the passes use: ours where they give ggml's bits for
    /// the kernels this context runs on (reference ones when batch-invariant), on
    /// repacked weights only when the CPU backend runs whole graphs (`cpu_alone`).
    fn products(&self, cpu_alone: bool) -> Products {
        if self.own_kernels {
            Products::Own {
                reference: self.batch_invariant,
                repacked: cpu_alone,
            }
        } else {
            Products::Ggml
        }
    }
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: DEFAULT_N_CTX,
            n_threads: 2,
            n_ubatch: DEFAULT_UBATCH,
            n_seq_max: 1,
            pooling: None,
            flash_attn: true,
            type_k: CacheType::default(),
            type_v: CacheType::default(),
            n_outputs_max: 1,
            adaptive_threads: true,
            batch_invariant: false,
            own_kernels: true,
            kv_offload: true,
        }
    }
}

/// Counters of the work done since the context (or its single sequence) began.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeStats {
    pub prompt_tokens: u64,
    pub prompt_seconds: f64,
    pub decode_tokens: u64,
    pub decode_seconds: f64,
    /// The smallest and largest compute buffer seen after any forward pass: equal
    /// when the buffer reserved up front never had to grow.
    pub compute_buffer_bytes_min: usize,
    pub compute_buffer_bytes_max: usize,
    /// Prompt tokens whose K and V were kept from the previous sequence.
    pub reused_tokens: u64,
}

/// One token of a batch: appended to sequence `seq` at its next position; its
/// logits are computed when `output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchToken {
    pub token: u32,
    pub seq: SeqId,
    pub output: bool,
}

/// Where one image's rows of a pass lie in its grid of `nx` x `ny` tokens (mtmd's
/// `mtmd_image_tokens`), for a model under multi-dimensional rope: the pass holds the rows
/// from `first` on, in row-major order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGrid {
    pub nx: u32,
    pub ny: u32,
    pub first: u32,
}

impl ImageGrid {
    /// The positions the image takes in its sequence (mtmd's `n_pos`: `max(nx, ny)`).
    fn n_pos(self) -> i32 {
        self.nx.max(self.ny) as i32
    }
}

/// Where a sequence's tokens sit: each held token's position, and the next one's. They
/// are the tokens' indices but under multi-dimensional rope after an image, whose tokens
/// all take the position the image starts at and whose next token takes `n_pos` more
/// ([`ImageGrid`]).
#[derive(Debug, Clone, Default)]
struct SeqPositions {
    held: Vec<i32>,
    next: i32,
}

impl SeqPositions {
    fn clear(&mut self) {
        self.held.clear();
        self.next = 0;
    }
}

/// A pass's tokens as [`Context::decode_batch`] lays them out: positions, sequences,
/// output rows, and the cells each cache group gave them.
struct Pass<'a> {
    tokens: &'a [u32],
    embd: Option<&'a [f32]>,
    causal: bool,
    pos: &'a [i32],
    yx: Option<&'a [(i32, i32)]>,
    seqs: &'a [SeqId],
    out_rows: &'a [i32],
    slots: &'a [Vec<u32>],
    state_rows: &'a [StateRows],
}

/// The last graph built and allocated, kept for the next pass its inputs say it
/// can serve (most decode steps): that pass only writes its inputs, as llama.cpp
/// reuses its graphs. Building and allocating one costs ~0.4 ms, 1-2% of a token.
struct BuiltGraph {
    graph: Graph,
    inputs: Inputs,
    /// The logits, or the embeddings.
    output: Tensor,
}

/// The shape of a pass: its tokens, its output rows, its distinct sequences, and
/// how many cells of each cache group it attends over.
struct PassShape<'a> {
    n_tokens: u32,
    /// From embeddings rather than token ids.
    embeddings: bool,
    n_outputs: u32,
    n_seqs: u32,
    n_kv: &'a [u32],
}

/// Sequences over a model: the memory they share (KV cache and recurrent state), the
/// graph allocator that owns the compute buffer, and the CPU backend the graphs run on.
/// [`Context::decode_batch`] evaluates tokens of any of the sequences in one pass; the
/// single-sequence methods ([`Context::decode`] and its kin) work on sequence 0.
pub struct Context {
    model: Arc<Model>,
    params: ContextParams,
    backend: Backend,
    memory: Memory,
    /// Declared before `galloc` and `arena`, whose memory its tensors point into.
    last_graph: Option<BuiltGraph>,
    /// Whether the allocator's plan is a graph's from embeddings (else from token ids).
    planned_embeddings: bool,
    galloc: Allocator,
    arena: GraphArena,
    /// Per sequence, the tokens the memory holds (their K and V, or the state after
    /// them), in order.
    seqs: Vec<Vec<u32>>,
    /// Per sequence, where its tokens sit.
    positions: Vec<SeqPositions>,
    /// The last pass's output: the logits of its output rows, one row of n_vocab
    /// each, or its embeddings (see [`Context::embeddings`]).
    logits: Vec<f32>,
    abort: Arc<AtomicBool>,
    stats: DecodeStats,
}

/// One backend's share of a context's memory (see [`Context::backend_memory`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendMemory {
    /// The device's name (`RPC0`), or `CPU`.
    pub name: String,
    /// The KV cache and recurrent state of its layers.
    pub cache_bytes: usize,
    pub compute_bytes: usize,
}

/// What plans the compute memory and runs the graphs: on the CPU alone, a `ggml_gallocr`
/// and the CPU backend; with layers on devices, ggml's scheduler over their backends
/// and the CPU's.
enum Allocator {
    Cpu(Gallocr),
    Sched {
        sched: Sched,
        /// Declared after `sched`, which uses them.
        _devices: Vec<DeviceBackend>,
    },
}

/// A device's backend, owned by one context.
struct DeviceBackend(std::ptr::NonNull<ggml_sys::ggml_backend>);

unsafe impl Send for DeviceBackend {}

impl Drop for DeviceBackend {
    fn drop(&mut self) {
        unsafe { ggml_sys::ggml_backend_free(self.0.as_ptr()) }
    }
}

impl Allocator {
    /// A gallocr for a model on the CPU alone; else the scheduler, with a backend of this
    /// context's on each device, and pipeline parallelism when llama.cpp enables it (every
    /// layer offloaded, to more than one device, with their caches).
    fn new(model: &Model, backend: &Backend, max_nodes: usize, kv_offload: bool) -> Result<Allocator> {
        let placement = model.placement();
        if placement.devices.is_empty() {
            return Ok(Allocator::Cpu(Gallocr::new(backend.default_buft())?));
        }
        let devices = (0..placement.devices.len())
            .map(|d| Ok(DeviceBackend(placement.backend(d)?)))
            .collect::<Result<Vec<_>>>()?;
        let backends = devices.iter().map(|d| d.0.as_ptr()).chain([backend.as_ptr()]).collect();
        let parallel = placement.devices.len() > 1 && placement.offloaded() == placement.layers.len() + 1 && kv_offload;
        Ok(Allocator::Sched {
            sched: Sched::new(backends, max_nodes, parallel)?,
            _devices: devices,
        })
    }

    fn reserve(&mut self, graph: &Graph, model: &Model, n_tokens: u32) -> Result<()> {
        match self {
            Allocator::Cpu(galloc) => galloc.reserve(graph),
            Allocator::Sched {
                sched,
                _devices: devices,
            } => {
                refuse_unsupported(graph, model, devices)?;
                sched.reserve(graph, &layer_norm_pins(graph, model, n_tokens))
            }
        }
    }

    fn alloc(&mut self, graph: &Graph, model: &Model, n_tokens: u32) -> Result<()> {
        match self {
            Allocator::Cpu(galloc) => galloc.alloc(graph),
            Allocator::Sched { sched, .. } => sched.alloc(graph, &layer_norm_pins(graph, model, n_tokens)),
        }
    }

    /// The compute buffers' bytes, all backends together.
    fn buffer_size(&self) -> usize {
        match self {
            Allocator::Cpu(galloc) => galloc.buffer_size(),
            Allocator::Sched { sched, .. } => sched.buffer_sizes().iter().sum(),
        }
    }
}

/// `Err(Error::Backend)` naming the op when `graph` has a node that reads a weight or a cache
/// in a GPU's memory and that the GPU cannot run (ggml's scheduler would abort the process:
/// no other backend can read that memory). RPC workers' devices run what their CPU backend
/// does, and are not asked (each question would be a round trip).
fn refuse_unsupported(graph: &Graph, model: &Model, devices: &[DeviceBackend]) -> Result<()> {
    let placement = model.placement();
    for (d, backend) in devices.iter().enumerate().filter(|&(d, _)| placement.is_local(d)) {
        let device = &placement.devices[d];
        if let Some(node) = graph.node_refused_by(backend.0, device.buft) {
            return Err(Error::Backend(format!(
                "{} ({}) cannot run {node} of {}'s graph, which reads its memory: this model cannot run \
                 with layers there (open it with n_gpu_layers: 0)",
                device.name,
                device.description,
                model.arch().name()
            )));
        }
    }
    Ok(())
}

/// Which backend each layer norm of `graph` runs on, as llama.cpp's graph callback pins them
/// (`llama_context::graph_get_cb`): for a batch of under 32 tokens, or when every layer and
/// the output one are offloaded, a layer's norm goes to its layer's device (the scheduler's
/// backend of the same index); a layer on the CPU is left to the scheduler.
fn layer_norm_pins(graph: &Graph, model: &Model, n_tokens: u32) -> Vec<(Tensor, usize)> {
    let placement = model.placement();
    if n_tokens >= 32 && placement.offloaded() <= placement.layers.len() {
        return Vec::new();
    }
    graph
        .layer_norms()
        .into_iter()
        .filter_map(|(t, il)| placement.layers.get(il).copied().flatten().map(|d| (t, d)))
        .collect()
}

impl Context {
    /// Whose matrix products this context's passes use (see [`ContextParams::products`]).
    fn products(&self) -> Products {
        self.params.products(matches!(self.galloc, Allocator::Cpu(_)))
    }

    pub fn new(model: Arc<Model>, params: ContextParams) -> Result<Context> {
        validate(&params)?;
        validate_output(&model, &params)?;
        validate_batch_invariant(&model, &params)?;
        let mut backend = Backend::cpu(params.n_threads)?;
        if params.adaptive_threads {
            backend.adapt_threads();
        }
        if params.batch_invariant {
            backend.use_reference_kernels()?;
        }
        // Each layer's memory goes where its weights are (llama.cpp's default, offload_kqv),
        // or all of it to the CPU.
        let placement = model.placement();
        let layer_bufts: Vec<Option<BufferType>> = match params.kv_offload {
            true => placement
                .layers
                .iter()
                .map(|d| d.map(|d| placement.devices[d].buft))
                .collect(),
            false => Vec::new(),
        };
        let kv = match model.hparams.arch.kind {
            // A model whose every layer is recurrent (mamba2) keeps no K and V.
            Kind::Decoder if model.hparams.attention_free() => KvCache::none(),
            Kind::Decoder => KvCache::new(
                &backend,
                &layer_bufts,
                &model.hparams.kv_shape(),
                params.n_ctx,
                params.n_ubatch.min(params.n_ctx),
                params.n_seq_max,
                params.cells_per_sequence(),
                !params.flash_attn,
                (params.type_k, params.type_v),
            )?,
            // An encoder's pass attends over its own tokens only.
            Kind::Encoder => KvCache::none(),
        };
        let recurrent = match model.hparams.recurrent_shape() {
            Some(shape) => RecurrentState::new(&backend, &layer_bufts, &shape, params.n_seq_max)?,
            None => RecurrentState::none(),
        };
        if !placement.devices.is_empty() {
            backend.sleep_between_graphs();
        }
        let max_nodes = MIN_NODES.max(8 * model.n_weights());
        let galloc = Allocator::new(&model, &backend, max_nodes, params.kv_offload)?;
        let abort = Arc::new(AtomicBool::new(false));
        // SAFETY: the flag is an Arc the context holds for as long as the backend lives.
        unsafe { backend.set_abort_flag(Arc::as_ptr(&abort)) };
        let n_vocab = model.hparams.n_vocab as usize;
        let mut ctx = Context {
            model,
            backend,
            memory: Memory { kv, recurrent },
            last_graph: None,
            planned_embeddings: false,
            galloc,
            arena: GraphArena::new(max_nodes),
            seqs: vec![Vec::new(); params.n_seq_max as usize],
            positions: vec![SeqPositions::default(); params.n_seq_max as usize],
            logits: vec![0.0; n_vocab],
            abort,
            stats: DecodeStats::default(),
            params,
        };
        ctx.reserve()?;
        Ok(ctx)
    }

    /// The most output rows one pass computes: one per sequence (or `n_outputs_max`),
    /// or every token when the pass gives embeddings.
    fn max_outputs(&self) -> u32 {
        match self.params.pooling {
            None => self
                .params
                .n_seq_max
                .max(self.params.n_outputs_max)
                .min(self.max_batch()),
            Some(_) => self.max_batch(),
        }
    }

    /// The most tokens one pass evaluates.
    pub fn max_batch(&self) -> u32 {
        self.params.n_ubatch.min(self.params.n_ctx)
    }

    /// Sizes the compute buffer once, for the largest graph this context will build
    /// (a full micro-batch with an output row per sequence, attending over every
    /// cell), so it never grows later.
    ///
    /// A model with recurrent layers splits its passes into micro-batches of as many
    /// tokens from each sequence (see [`split_equal`]): its graphs are reserved for one
    /// sequence's full micro-batch and for every sequence's equal share of one. A model
    /// that takes embeddings gets its embeddings graph reserved first: the allocator keeps
    /// the last graph's plan, which must be a token graph's (see [`Context::compute`]).
    fn reserve(&mut self) -> Result<()> {
        let n_kv: Vec<u32> = self.memory.kv.groups.iter().map(Cells::size).collect();
        let n_seqs = self.params.n_seq_max.min(self.max_batch());
        let mut shapes = Vec::new();
        if self.model.takes_embeddings() {
            shapes.push((self.max_batch(), 1, true));
        }
        if self.memory.is_recurrent() {
            shapes.extend([
                (self.max_batch(), 1, false),
                (self.max_batch() / n_seqs * n_seqs, n_seqs, false),
            ]);
        } else {
            shapes.push((self.max_batch(), n_seqs, false));
        }
        for (n_tokens, n_seqs, embeddings) in shapes {
            let products = self.products();
            let graph = self.arena.graph()?.use_products(products);
            let shape = PassShape {
                n_tokens,
                embeddings,
                n_outputs: self.max_outputs().min(n_tokens),
                n_seqs,
                n_kv: &n_kv,
            };
            build(&graph, &self.model, &self.memory, &self.params, &shape);
            self.galloc.reserve(&graph, &self.model, n_tokens)?;
        }
        Ok(())
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// Tokens in sequence 0 so far.
    pub fn n_past(&self) -> u32 {
        self.seqs[0].len() as u32
    }

    /// The tokens whose K and V the cache holds for `seq`, in order.
    pub fn seq_tokens(&self, seq: SeqId) -> &[u32] {
        &self.seqs[seq as usize]
    }

    /// Forgets every sequence (the cache cells are simply reused).
    pub fn clear(&mut self) {
        self.memory.clear();
        self.seqs.iter_mut().for_each(Vec::clear);
        self.positions.iter_mut().for_each(SeqPositions::clear);
        self.stats = DecodeStats::default();
    }

    /// `seq` forgets its tokens from the `keep`th on (llama.cpp's
    /// `llama_memory_seq_rm(seq, p, -1)` from that token's position `p`); their cells are
    /// the next ones filled.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a model with recurrent layers when `keep` is
    /// neither 0 nor all the sequence holds: a state cannot be cut back (see
    /// [`crate::memory::recurrent`]); or when `keep` is within an image under
    /// multi-dimensional rope, whose tokens share one position. Nothing is forgotten then.
    pub fn seq_truncate(&mut self, seq: SeqId, keep: usize) -> Result<()> {
        let positions = &self.positions[seq as usize];
        let Some(&from) = positions.held.get(keep) else {
            return Ok(());
        };
        if keep > 0 && positions.held[keep - 1] == from {
            return Err(Error::InvalidArgument(format!(
                "cannot keep {keep} tokens: the {keep}th is within an image, whose tokens share one position"
            )));
        }
        self.memory.seq_truncate(seq, from as usize, positions.next as usize)?;
        self.seqs[seq as usize].truncate(keep);
        let positions = &mut self.positions[seq as usize];
        positions.held.truncate(keep);
        positions.next = from;
        Ok(())
    }

    /// `seq` forgets all it holds.
    pub fn seq_forget(&mut self, seq: SeqId) {
        self.memory.forget(seq);
        self.seqs[seq as usize].clear();
        self.positions[seq as usize].clear();
    }

    /// `dst` becomes a copy of `src` (llama.cpp's `seq_rm(dst)` then `seq_cp(src, dst)`):
    /// it shares `src`'s cells, and so its prefix, without evaluating anything.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] in a batch-invariant context, whose sequences
    /// share no cells.
    pub fn seq_copy(&mut self, src: SeqId, dst: SeqId) -> Result<()> {
        if self.params.batch_invariant {
            return Err(Error::InvalidArgument(
                "a batch-invariant context's sequences share no cells".into(),
            ));
        }
        if src != dst {
            self.seq_forget(dst);
            self.memory.seq_cp(src, dst);
            self.seqs[dst as usize] = self.seqs[src as usize].clone();
            self.positions[dst as usize] = self.positions[src as usize].clone();
        }
        Ok(())
    }

    /// Lets the worker threads sleep until the next pass instead of polling for it
    /// (see [`Backend::rest`]): for when no pass follows soon, as at the end of work.
    pub fn rest(&mut self) {
        self.backend.rest();
    }

    /// Every sequence but `seq` is forgotten (llama.cpp's `seq_keep`).
    pub fn seq_keep(&mut self, seq: SeqId) {
        self.memory.seq_keep(seq);
        for (s, (tokens, positions)) in self.seqs.iter_mut().zip(&mut self.positions).enumerate() {
            if s as SeqId != seq {
                tokens.clear();
                positions.clear();
            }
        }
    }

    /// How many more cells the cache can take right now, in its smallest group.
    pub fn free_cells(&self) -> u32 {
        self.memory.kv.free_cells()
    }

    /// How long a prefix of `prompt` sequence `seq` already holds, leaving at least
    /// one token to evaluate (for its logits), and not ending within an image under
    /// multi-dimensional rope. A model with sliding-window layers
    /// shares none: its ring may no longer hold the window a shorter prefix needs. A
    /// model with recurrent layers shares all it holds or nothing: its state is that of
    /// the whole sequence, so only a prompt that continues it can reuse it (a
    /// conversation's next turn); any other prompt starts afresh.
    pub fn reusable_prefix(&self, seq: SeqId, prompt: &[u32]) -> usize {
        if self.model.hparams.swa.is_some() {
            return 0;
        }
        let cached = &self.seqs[seq as usize];
        let common = cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let reusable = common.min(prompt.len().saturating_sub(1));
        // Not within an image whose tokens share one position (which cannot be cut): back
        // to its start.
        let held = &self.positions[seq as usize].held;
        let reusable = held
            .get(reusable)
            .map_or(reusable, |&p| held[..reusable].partition_point(|&q| q < p));
        if self.memory.is_recurrent() && reusable < cached.len() {
            return 0;
        }
        reusable
    }

    /// Whether the model keeps a recurrent state, which cannot be cut back to an
    /// earlier position (see [`crate::memory::recurrent`]).
    pub fn is_recurrent(&self) -> bool {
        self.memory.is_recurrent()
    }

    /// Starts sequence 0 anew with `prompt` in view, keeping the K and V of the
    /// longest prefix it shares with the cached one ([`Context::reusable_prefix`]).
    /// Returns how many tokens were kept.
    pub fn restart_with_prefix(&mut self, prompt: &[u32]) -> usize {
        let shared = self.reusable_prefix(0, prompt);
        if shared == 0 {
            self.clear();
            return 0;
        }
        self.seq_truncate(0, shared)
            .expect("reusable_prefix keeps what the memory can cut back to");
        self.stats = DecodeStats {
            reused_tokens: shared as u64,
            ..DecodeStats::default()
        };
        shared
    }

    pub fn stats(&self) -> DecodeStats {
        self.stats
    }

    pub fn compute_buffer_bytes(&self) -> usize {
        self.galloc.buffer_size()
    }

    /// Per backend (each device of the model's placement, then the CPU), its name and the
    /// bytes of this context's KV cache and recurrent state, and of its compute buffer, there.
    pub fn backend_memory(&self) -> Vec<BackendMemory> {
        let placement = self.model.placement();
        let cpu = self.backend.default_buft();
        let bufts: Vec<(String, BufferType)> = placement
            .devices
            .iter()
            .map(|d| (d.name.clone(), d.buft))
            .chain([("CPU".to_string(), cpu)])
            .collect();
        let compute = match &self.galloc {
            Allocator::Cpu(galloc) => vec![galloc.buffer_size()],
            Allocator::Sched { sched, .. } => sched.buffer_sizes(),
        };
        bufts
            .into_iter()
            .zip(compute)
            .map(|((name, buft), compute_bytes)| BackendMemory {
                name,
                cache_bytes: self.memory.kv.bytes_in(buft) + self.memory.recurrent.bytes_in(buft),
                compute_bytes,
            })
            .collect()
    }

    pub fn kv_cache_bytes(&self) -> usize {
        self.memory.kv.bytes()
    }

    /// The recurrent layers' state, for all sequences (0 for a transformer).
    pub fn recurrent_state_bytes(&self) -> usize {
        self.memory.recurrent.bytes()
    }

    /// How full the KV cache is (its attention layers' cells, in a hybrid model).
    pub fn kv_usage(&self) -> KvUsage {
        self.memory.kv.usage()
    }

    /// A flag that, once set (from any thread), stops the computation between two
    /// graph nodes with [`Error::Aborted`], and every later one until it is cleared.
    /// Whoever sets it clears it before the next call: were `decode` to clear it,
    /// an interrupt that came just before would be lost.
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.abort)
    }

    /// How many threads the last pass ran on: `n_threads`, or fewer while other work
    /// takes the cores ([`ContextParams::adaptive_threads`]).
    pub fn last_pass_threads(&self) -> usize {
        self.backend.last_threads()
    }

    /// Runs this context's passes on `other`'s worker threads, as a draft model does
    /// on its target's: the caller never decodes on both at once, and both have the
    /// same thread count.
    pub fn share_workers(&mut self, other: &Context) {
        self.backend.share_workers(&other.backend);
    }

    /// The logits of the last pass's last output row (after [`Context::decode`], of its
    /// last token).
    pub fn logits(&self) -> &[f32] {
        let n_vocab = self.model.hparams.n_vocab as usize;
        &self.logits[self.logits.len() - n_vocab..]
    }

    /// The last pass's embeddings, row after row: one per distinct sequence in it (in
    /// ascending sequence order) when pooled, else one per token; each
    /// [`Context::embedding_width`] wide.
    pub fn embeddings(&self) -> &[f32] {
        &self.logits
    }

    /// How many values an embedding row has: n_embd, or a reranker's scores.
    pub fn embedding_width(&self) -> usize {
        let hp = &self.model.hparams;
        match self.params.pooling {
            Some(Pooling::Rank) => hp.n_cls_out as usize,
            _ => hp.n_embd as usize,
        }
    }

    /// The logits of output row `i` of the last [`Context::decode_batch`] (the batch's
    /// `i`-th token marked `output`).
    pub fn output_logits(&self, i: usize) -> &[f32] {
        let n_vocab = self.model.hparams.n_vocab as usize;
        &self.logits[i * n_vocab..(i + 1) * n_vocab]
    }

    /// Appends `tokens` to sequence 0, in micro-batches, and returns the logits after
    /// its last token.
    pub fn decode(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("no tokens to decode".into()));
        }
        self.check_fits(0, tokens.len())?;
        let start = Instant::now();
        for chunk in tokens.chunks(self.max_batch() as usize) {
            let batch: Vec<BatchToken> = chunk
                .iter()
                .map(|&token| BatchToken {
                    token,
                    seq: 0,
                    output: false,
                })
                .collect();
            self.decode_batch(&batch)?;
        }
        let seconds = start.elapsed().as_secs_f64();
        self.count(tokens.len(), seconds);
        Ok(self.logits())
    }

    /// Adds a pass's work to the counters: a prompt when it had several tokens.
    pub fn count(&mut self, n_tokens: usize, seconds: f64) {
        if n_tokens > 1 {
            self.stats.prompt_tokens += n_tokens as u64;
            self.stats.prompt_seconds += seconds;
        } else {
            self.stats.decode_tokens += 1;
            self.stats.decode_seconds += seconds;
        }
    }

    fn check_fits(&self, seq: SeqId, n_tokens: usize) -> Result<()> {
        let held = self.seqs[seq as usize].len();
        if held + n_tokens > self.n_ctx_seq() {
            return Err(Error::ContextFull(format!(
                "{n_tokens} tokens do not fit: the sequence holds {held} of {}",
                self.capacity_words()
            )));
        }
        Ok(())
    }

    /// [`ContextParams::n_ctx_seq`].
    pub fn n_ctx_seq(&self) -> usize {
        self.params.n_ctx_seq()
    }

    /// [`ContextParams::capacity_words`].
    pub fn capacity_words(&self) -> String {
        self.params.capacity_words()
    }

    /// One pass over tokens of any sequences (at most [`Context::max_batch`], each
    /// appended to its sequence in batch order), computing the logits of those marked
    /// `output` (else of the last token). On failure no sequence keeps any of them.
    pub fn decode_batch(&mut self, batch: &[BatchToken]) -> Result<()> {
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(t) = batch.iter().find(|t| t.token >= n_vocab) {
            return Err(Error::InvalidArgument(format!(
                "token id {} is out of range (vocabulary size {n_vocab})",
                t.token
            )));
        }
        self.decode_rows(batch, None, true, None)
    }

    /// [`Context::decode_batch`] from embeddings instead of token ids (an image's, from
    /// its projector: n_embd values per token of `batch`, whose ids the sequences record
    /// in their place and the graph does not read), as mtmd's helper decodes an image.
    /// `causal` false lets the batch's tokens see each other in both directions (Gemma 3's
    /// image tokens, which llama.cpp then requires in one pass, as one batch is here).
    pub fn decode_embeddings(&mut self, batch: &[BatchToken], embd: &[f32], causal: bool) -> Result<()> {
        self.decode_given_rows(batch, embd, causal, None)
    }

    /// [`Context::decode_embeddings`] of an image's rows `grid` says where in it, for a
    /// model under multi-dimensional rope, as mtmd's helper decodes an image chunk: each
    /// token at `[t, t + row, t + column, 0]`, `t` the position the image starts at, and
    /// once its last row is in, the sequence goes on `max(nx, ny)` after `t`.
    ///
    /// # Errors
    /// Those of [`Context::decode_embeddings`]; [`Error::InvalidArgument`] for a model
    /// with one position per token, a batch of several sequences, rows beyond the grid,
    /// or a batch-invariant context (whose cells are one per position).
    pub fn decode_image(&mut self, batch: &[BatchToken], embd: &[f32], causal: bool, grid: ImageGrid) -> Result<()> {
        let invalid = |what: String| Err(Error::InvalidArgument(what));
        if self.model.hparams.rope.mode.positions_per_token() == 1 {
            return invalid("image positions need a model under multi-dimensional rope".into());
        }
        if self.params.batch_invariant {
            return invalid("a batch-invariant context takes no image of shared positions".into());
        }
        if batch.iter().any(|t| t.seq != batch[0].seq) {
            return invalid("an image's rows are of one sequence".into());
        }
        let n_rows = u64::from(grid.nx) * u64::from(grid.ny);
        let end = u64::from(grid.first) + batch.len() as u64;
        if end > n_rows {
            return invalid(format!("rows {} to {end} of an image of {n_rows}", grid.first));
        }
        self.decode_given_rows(batch, embd, causal, Some(grid))
    }

    /// [`Context::decode_rows`] over embeddings, checked: a model that takes them, and
    /// n_embd values per token of `batch`.
    fn decode_given_rows(
        &mut self,
        batch: &[BatchToken],
        embd: &[f32],
        causal: bool,
        grid: Option<ImageGrid>,
    ) -> Result<()> {
        let hp = &self.model.hparams;
        let n_embd = hp.n_embd_inp() as usize;
        self.model.check_takes_embeddings()?;
        if embd.len() != batch.len() * n_embd {
            let width = if hp.n_deepstack_layers > 0 {
                format!(
                    "n_embd_inp {n_embd} (n_embd and its {} deepstack slices)",
                    hp.n_deepstack_layers
                )
            } else {
                format!("n_embd {n_embd}")
            };
            return Err(Error::InvalidArgument(format!(
                "{} embedding values for {} tokens: each takes {width}",
                embd.len(),
                batch.len()
            )));
        }
        self.decode_rows(batch, Some(embd), causal, grid)
    }

    /// [`Context::decode_batch`] over checked tokens, or over embeddings `embd` (one
    /// row per token of `batch`, whose ids the sequences record), an image's where `grid`
    /// says where in it.
    fn decode_rows(
        &mut self,
        batch: &[BatchToken],
        embd: Option<&[f32]>,
        causal: bool,
        grid: Option<ImageGrid>,
    ) -> Result<()> {
        if batch.is_empty() || batch.len() > self.max_batch() as usize {
            return Err(Error::InvalidArgument(format!(
                "a batch holds 1 to {} tokens, got {}",
                self.max_batch(),
                batch.len()
            )));
        }
        if let Some(t) = batch.iter().find(|t| t.seq >= self.params.n_seq_max) {
            return Err(Error::InvalidArgument(format!(
                "sequence {} is out of range (the context holds {})",
                t.seq, self.params.n_seq_max
            )));
        }
        let mut out_rows: Vec<i32> = (0..batch.len() as i32).filter(|&i| batch[i as usize].output).collect();
        if out_rows.len() > self.max_outputs() as usize {
            return Err(Error::InvalidArgument(format!(
                "a batch computes at most {} output rows (one per sequence, or n_outputs_max)",
                self.max_outputs()
            )));
        }
        if out_rows.is_empty() {
            out_rows.push(batch.len() as i32 - 1);
        }
        let mut next: Vec<i32> = self.positions.iter().map(|p| p.next).collect();
        let (pos, yx): (Vec<i32>, Vec<(i32, i32)>) = match grid {
            // mtmd_image_tokens_get_decoder_pos: one position, the rows and columns beside it.
            Some(grid) => batch
                .iter()
                .enumerate()
                .map(|(j, t)| {
                    let t = next[t.seq as usize];
                    let i = grid.first as i32 + j as i32;
                    (t, (t + i / grid.nx as i32, t + i % grid.nx as i32))
                })
                .unzip(),
            None => batch
                .iter()
                .map(|t| {
                    next[t.seq as usize] += 1;
                    let p = next[t.seq as usize] - 1;
                    (p, (p, p))
                })
                .unzip(),
        };
        if let Some(grid) =
            grid.filter(|g| (g.first as usize + batch.len()) as u64 == u64::from(g.nx) * u64::from(g.ny))
        {
            next[batch[0].seq as usize] += grid.n_pos();
        }
        let mut counts = vec![0usize; self.seqs.len()];
        batch.iter().for_each(|t| counts[t.seq as usize] += 1);
        for (seq, &n) in counts.iter().enumerate() {
            self.check_fits(seq as SeqId, n)?;
        }
        let yx = (self.model.hparams.rope.mode.positions_per_token() > 1).then_some(yx);
        let mut is_output = vec![false; batch.len()];
        out_rows.iter().for_each(|&i| is_output[i as usize] = true);
        // A model with recurrent layers computes a batch in micro-batches of as many
        // tokens from each sequence, as llama.cpp splits it for its recurrent memory.
        let micro_batches = if self.memory.is_recurrent() {
            split_equal(batch, self.max_batch() as usize, self.model.hparams.attention_free())
        } else {
            vec![(0..batch.len()).collect()]
        };
        // Unless the micro-batches are the batch in its order, their output rows are
        // gathered back into the batch's.
        let in_order = micro_batches.len() == 1 && micro_batches[0].windows(2).all(|w| w[0] < w[1]);
        let mut outputs: Vec<(usize, Vec<f32>)> = Vec::new();
        for micro in &micro_batches {
            match self.decode_micro_batch(batch, embd, causal, &pos, yx.as_deref(), &is_output, micro, !in_order) {
                Ok(rows) => outputs.extend(rows),
                Err(e) => {
                    for (seq, positions) in self.positions.iter_mut().enumerate() {
                        self.memory.kv.seq_rm(seq as SeqId, positions.next);
                        // An image's earlier rows share the position the failed ones took:
                        // forgotten with them.
                        let kept = positions.held.partition_point(|&p| p < positions.next);
                        positions.held.truncate(kept);
                        self.seqs[seq].truncate(kept);
                    }
                    self.memory.recurrent.discard();
                    return Err(e);
                }
            }
        }
        self.memory.recurrent.commit();
        if !in_order {
            // The logits of the output rows, in the batch's order.
            outputs.sort_unstable_by_key(|&(i, _)| i);
            self.logits = outputs.into_iter().flat_map(|(_, row)| row).collect();
        }
        for (t, &p) in batch.iter().zip(&pos) {
            self.seqs[t.seq as usize].push(t.token);
            self.positions[t.seq as usize].held.push(p);
        }
        for (positions, next) in self.positions.iter_mut().zip(next) {
            positions.next = next;
        }
        Ok(())
    }

    /// Finds cells for the tokens `micro` (indices into `batch`, at positions `pos`, and
    /// under multi-dimensional rope the rows and columns `yx`),
    /// takes them, and computes their pass. With `collect`, returns the logits of the
    /// batch's output rows (`is_output`, by index into `batch`) that this micro-batch
    /// holds, by index. A micro-batch without one computes its last token's, which
    /// nobody reads: its memory is what matters.
    #[allow(clippy::too_many_arguments)]
    fn decode_micro_batch(
        &mut self,
        batch: &[BatchToken],
        embd: Option<&[f32]>,
        causal: bool,
        pos: &[i32],
        yx: Option<&[(i32, i32)]>,
        is_output: &[bool],
        micro: &[usize],
        collect: bool,
    ) -> Result<Vec<(usize, Vec<f32>)>> {
        let tokens: Vec<u32> = micro.iter().map(|&i| batch[i].token).collect();
        let n_embd = self.model.hparams.n_embd_inp() as usize;
        let embd: Option<Vec<f32>> = embd.map(|rows| {
            micro
                .iter()
                .flat_map(|&i| &rows[i * n_embd..(i + 1) * n_embd])
                .copied()
                .collect()
        });
        let seqs: Vec<SeqId> = micro.iter().map(|&i| batch[i].seq).collect();
        let pos: Vec<i32> = micro.iter().map(|&i| pos[i]).collect();
        let yx: Option<Vec<(i32, i32)>> = yx.map(|yx| micro.iter().map(|&i| yx[i]).collect());
        let mut rows: Vec<i32> = (0..micro.len() as i32)
            .filter(|&j| is_output[micro[j as usize]])
            .collect();
        let wanted = rows.len();
        if rows.is_empty() {
            rows.push(micro.len() as i32 - 1);
        }
        let placed: Vec<(i32, SeqId)> = pos.iter().copied().zip(seqs.iter().copied()).collect();
        // Every group finds its cells before any takes them, as llama.cpp prepares a batch.
        let slots = self
            .memory
            .kv
            .groups
            .iter()
            .map(|cells| cells.find_slot(&placed))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Error::ContextFull(format!(
                    "no room in the KV cache for {} tokens (n_ctx {} is shared by every sequence)",
                    batch.len(),
                    self.params.n_ctx
                ))
            })?;
        for (cells, slot) in self.memory.kv.groups.iter_mut().zip(&slots) {
            cells.apply(slot, placed.iter().copied());
            if let Some(yx) = &yx {
                cells.set_yx(slot, yx.iter().copied());
            }
        }
        let state_rows = match self.memory.is_recurrent() {
            true => self.memory.recurrent.rows_for(&first_seen(&seqs)),
            false => Vec::new(),
        };
        let pass = Pass {
            tokens: &tokens,
            embd: embd.as_deref(),
            causal,
            pos: &pos,
            yx: yx.as_deref(),
            seqs: &seqs,
            out_rows: &rows,
            slots: &slots,
            state_rows: &state_rows,
        };
        self.compute(&pass)?;
        if !collect {
            return Ok(Vec::new());
        }
        let n_vocab = self.model.hparams.n_vocab as usize;
        Ok(rows[..wanted]
            .iter()
            .zip(self.logits.chunks(n_vocab))
            .map(|(&j, row)| (micro[j as usize], row.to_vec()))
            .collect())
    }

    fn compute(&mut self, pass: &Pass) -> Result<()> {
        let batch = Batch {
            tokens: pass.tokens,
            embd: pass.embd,
            causal: pass.causal,
            pos: pass.pos,
            yx: pass.yx,
            seqs: pass.seqs,
            out_rows: pass.out_rows,
            slots: pass.slots,
            kv: &self.memory.kv,
            state_rows: pass.state_rows,
        };
        if !self.last_graph.as_ref().is_some_and(|g| g.inputs.can_reuse(&batch)) {
            // The arena holds one graph at a time, and the allocator lays out one.
            self.last_graph = None;
            let n_kv: Vec<u32> = self.memory.kv.groups.iter().map(Cells::n_kv).collect();
            let products = self.products();
            let graph = self.arena.graph()?.use_products(products);
            let shape = PassShape {
                n_tokens: batch.tokens.len() as u32,
                embeddings: batch.embd.is_some(),
                n_outputs: batch.out_rows.len() as u32,
                n_seqs: distinct_seqs(batch.seqs).len() as u32,
                n_kv: &n_kv,
            };
            let (inputs, output) = build(&graph, &self.model, &self.memory, &self.params, &shape);
            let n_tokens = batch.tokens.len() as u32;
            // The allocator reuses the last graph's plan for a graph of as many nodes whose
            // tensors fit it, which is right for the same graph of fewer tokens only: a graph
            // from embeddings after one from tokens (or back) is planned afresh, within the
            // buffers reserved for both.
            if shape.embeddings != self.planned_embeddings {
                self.galloc.reserve(&graph, &self.model, n_tokens)?;
                self.planned_embeddings = shape.embeddings;
            }
            self.galloc.alloc(&graph, &self.model, n_tokens)?;
            self.last_graph = Some(BuiltGraph { graph, inputs, output });
        }
        let BuiltGraph { graph, inputs, output } = self.last_graph.as_ref().expect("built above");
        inputs.set(&batch);

        let bytes = self.galloc.buffer_size();
        if self.stats.compute_buffer_bytes_max == 0 {
            self.stats.compute_buffer_bytes_min = bytes;
        }
        self.stats.compute_buffer_bytes_min = self.stats.compute_buffer_bytes_min.min(bytes);
        self.stats.compute_buffer_bytes_max = self.stats.compute_buffer_bytes_max.max(bytes);
        match &mut self.galloc {
            Allocator::Cpu(_) => self.backend.compute(graph)?,
            Allocator::Sched { sched, .. } => {
                self.model.check_workers()?;
                self.backend.attach_all()?;
                let computed = sched.compute(graph);
                // A failed worker leaves garbage behind: its error comes first.
                self.model.check_workers()?;
                computed?;
            }
        }
        self.logits.resize(output.nbytes() / std::mem::size_of::<f32>(), 0.0);
        output.read_f32(0, &mut self.logits);
        Ok(())
    }
}

fn validate(params: &ContextParams) -> Result<()> {
    if params.n_ctx == 0 || params.n_ctx > MAX_N_CTX {
        return Err(Error::InvalidArgument(format!(
            "n_ctx must be between 1 and {MAX_N_CTX}, got {}",
            params.n_ctx
        )));
    }
    if params.n_threads == 0 || params.n_threads > MAX_THREADS {
        return Err(Error::InvalidArgument(format!(
            "n_threads must be between 1 and {MAX_THREADS}, got {}",
            params.n_threads
        )));
    }
    if params.n_seq_max == 0 || params.n_seq_max > MAX_SEQUENCES {
        return Err(Error::InvalidArgument(format!(
            "the number of sequences must be between 1 and {MAX_SEQUENCES}, got {}",
            params.n_seq_max
        )));
    }
    if params.n_ubatch == 0 || params.n_ubatch > 8192 {
        return Err(Error::InvalidArgument(format!(
            "n_ubatch must be between 1 and 8192, got {}",
            params.n_ubatch
        )));
    }
    Ok(())
}

/// A batch-invariant context's attention must visit keys one at a time in cell order
/// (flash attention; the plain product and soft-max reduce over cells in SIMD lanes)
/// and its matrix products must not take repacked kernels, which ignore `use_ref`.
fn validate_batch_invariant(model: &Model, params: &ContextParams) -> Result<()> {
    if !params.batch_invariant {
        return Ok(());
    }
    if !params.flash_attn && model.hparams.arch.kind == Kind::Decoder {
        return Err(Error::InvalidArgument(
            "batch-invariant passes need flash attention".into(),
        ));
    }
    if model.repacked_bytes() > 0 {
        return Err(Error::InvalidArgument(
            "batch-invariant passes need a model opened without repacked weights (ModelParams::repack false)".into(),
        ));
    }
    if params.n_ctx < params.n_seq_max {
        return Err(Error::InvalidArgument(format!(
            "a batch-invariant context splits n_ctx among its sequences: n_ctx {} is less than one cell for each of {}",
            params.n_ctx, params.n_seq_max
        )));
    }
    Ok(())
}

/// An encoder gives embeddings only, and a reranker's scores need its classifier.
fn validate_output(model: &Model, params: &ContextParams) -> Result<()> {
    let hp = &model.hparams;
    match params.pooling {
        None if hp.arch.kind == Kind::Encoder => Err(Error::InvalidArgument(format!(
            "{} is an embedding model: it gives embeddings, not text",
            hp.arch.name
        ))),
        Some(Pooling::Rank) if model.weights().classifier.is_empty() => Err(Error::InvalidArgument(
            "rank pooling needs a reranker's classification head (cls.weight or cls.output.weight), \
             which this model does not have"
                .into(),
        )),
        Some(_) if hp.recurrent.contains(&true) => Err(Error::InvalidArgument(format!(
            "{} keeps a recurrent state: elelem gives its text, not embeddings (llama.cpp splits an embedding \
             pass by sequence, which elelem does not)",
            hp.arch.name
        ))),
        _ => Ok(()),
    }?;
    validate_cache_types(hp, params)
}

/// llama.cpp's rules for the cache types (`llama_init_from_model`), checked before
/// ggml sees them: a quantized V cache needs flash attention, and a quantized type's
/// blocks must divide the head dimension.
fn validate_cache_types(hp: &crate::HParams, params: &ContextParams) -> Result<()> {
    if hp.mla.is_some() && (params.type_k.is_quantized() || params.type_v.is_quantized()) {
        return Err(Error::Unsupported(format!(
            "{}'s latent attention keeps its cache f16 in elelem (a quantized one, {} K and {} V, is not \
             something elelem runs; llama.cpp takes one type for both)",
            hp.arch.name,
            params.type_k.name(),
            params.type_v.name()
        )));
    }
    if params.type_v.is_quantized() && !params.flash_attn {
        return Err(Error::InvalidArgument(format!(
            "a quantized V cache ({}) needs flash attention, as in llama.cpp: turn flash_attn on, \
             or keep the V cache f16",
            params.type_v.name()
        )));
    }
    if hp.heads_vary() && (params.type_k.is_quantized() || params.type_v.is_quantized()) {
        return Err(Error::Unsupported(format!(
            "a quantized KV cache ({}/{}) for a model whose layers' head sizes differ ({}) is not something \
             elelem runs; keep the cache f16, or use llama.cpp, which runs it",
            params.type_k.name(),
            params.type_v.name(),
            hp.arch.name
        )));
    }
    for (which, ty, head_dim) in [("K", params.type_k, hp.head_dim_k), ("V", params.type_v, hp.head_dim_v)] {
        if !head_dim.is_multiple_of(ty.block_size()) {
            return Err(Error::InvalidArgument(format!(
                "{which} cache type {} (blocks of {}) does not divide the model's head dimension {head_dim}",
                ty.name(),
                ty.block_size()
            )));
        }
    }
    Ok(())
}

fn build(graph: &Graph, model: &Model, memory: &Memory, params: &ContextParams, shape: &PassShape) -> (Inputs, Tensor) {
    let kv = &memory.kv;
    let v_widths = kv.group_v_widths();
    let attention = if kv.v_trans {
        MaskFor::SoftMax { v_widths: &v_widths }
    } else {
        MaskFor::FlashAttention
    };
    let inputs = Inputs::new(
        graph,
        shape.n_tokens.into(),
        shape.embeddings.then_some(model.hparams.n_embd_inp().into()),
        shape.n_outputs.into(),
        shape.n_kv,
        attention,
        model.hparams.rope.mode.positions_per_token(),
    );
    let builder = GraphBuilder {
        graph,
        own_mask: std::cell::Cell::new(None),
        inputs,
        hparams: &model.hparams,
        weights: model.weights(),
        kv,
        recurrent: &memory.recurrent,
        state_rows: std::cell::Cell::new(None),
        n_tokens: shape.n_tokens.into(),
        // llama.cpp pads the context to whole cache pages before comparing it; the
        // unified cache gives every sequence the whole context.
        n_ctx_seq: params.n_ctx.div_ceil(KV_PAD) * KV_PAD,
        pooling: params.pooling,
        n_seqs: shape.n_seqs.into(),
    };
    let output = model.arch().build(&builder);
    graph.mark_output(output);
    graph.expand(output);
    (builder.inputs, output)
}

/// llama.cpp's `split_equal` (`llama_batch_allocr`, as its recurrent and hybrid
/// memories split a batch): each micro-batch takes the same number of tokens from every
/// sequence that has tokens left, grouped by sequence in the order of their first
/// token, as many as all of them have, at most `n_ubatch` in all. `sequential` (the
/// split of llama.cpp's purely recurrent memory, a hybrid's over a unified cache being
/// free of it) admits a sequence only when its id follows the last one admitted.
/// Returns indices into `batch`.
fn split_equal(batch: &[BatchToken], n_ubatch: usize, sequential: bool) -> Vec<Vec<usize>> {
    let mut used = vec![false; batch.len()];
    let mut micro_batches = Vec::new();
    loop {
        let seqs = first_seen(
            &batch
                .iter()
                .zip(&used)
                .filter(|(_, &u)| !u)
                .map(|(t, _)| t.seq)
                .collect::<Vec<_>>(),
        );
        if seqs.is_empty() {
            return micro_batches;
        }
        let seqs = match sequential {
            true => seqs
                .iter()
                .scan(None, |last: &mut Option<SeqId>, &seq| {
                    let follows = last.is_none_or(|l| seq == l + 1);
                    if follows {
                        *last = Some(seq);
                    }
                    Some(follows.then_some(seq))
                })
                .flatten()
                .collect(),
            false => seqs,
        };
        let mut left: Vec<std::collections::VecDeque<usize>> = seqs
            .iter()
            .map(|&seq| (0..batch.len()).filter(|&i| !used[i] && batch[i].seq == seq).collect())
            .collect();
        let mut taken: Vec<Vec<usize>> = vec![Vec::new(); seqs.len()];
        while left.iter().all(|l| !l.is_empty()) {
            for (l, t) in left.iter_mut().zip(&mut taken) {
                let i = l.pop_front().expect("checked above");
                used[i] = true;
                t.push(i);
            }
            if (taken[0].len() + 1) * seqs.len() > n_ubatch {
                break;
            }
        }
        micro_batches.push(taken.concat());
    }
}

/// The distinct sequences of `seqs`, in the order of their first appearance.
fn first_seen(seqs: &[SeqId]) -> Vec<SeqId> {
    let mut distinct = Vec::new();
    for &seq in seqs {
        if !distinct.contains(&seq) {
            distinct.push(seq);
        }
    }
    distinct
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seqs: &[SeqId]) -> Vec<BatchToken> {
        seqs.iter()
            .map(|&seq| BatchToken {
                token: 0,
                seq,
                output: false,
            })
            .collect()
    }

    #[test]
    fn split_equal_takes_as_many_tokens_from_each_sequence_as_all_have() {
        // Two decoding sequences, then a prompt chunk of sequence 2.
        let b = batch(&[1, 0, 2, 2, 2]);
        assert_eq!(split_equal(&b, 512, false), [vec![0, 1, 2], vec![3, 4]]);
        // Interleaved tokens are grouped by sequence, in the order of their first token.
        let b = batch(&[0, 1, 0, 1]);
        assert_eq!(split_equal(&b, 512, false), [vec![0, 2, 1, 3]]);
        // One sequence fills micro-batches of n_ubatch tokens.
        let b = batch(&[0; 7]);
        assert_eq!(split_equal(&b, 3, false), [vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
        // Two sequences stop while another token of each would not fit.
        let b = batch(&[0, 0, 0, 1, 1, 1]);
        assert_eq!(split_equal(&b, 5, false), [vec![0, 1, 3, 4], vec![2, 5]]);
    }

    #[test]
    fn a_sequential_split_admits_only_sequences_following_the_last() {
        // llama.cpp's recurrent memory: sequence 2 does not follow 0, so it waits.
        let b = batch(&[0, 2, 1, 1, 1]);
        assert_eq!(split_equal(&b, 512, true), [vec![0, 2], vec![1], vec![3, 4]]);
        assert_eq!(split_equal(&b, 512, false), [vec![0, 1, 2], vec![3, 4]]);
        // In order, as the lockstep passes lay them out, the splits agree.
        let b = batch(&[0, 1, 2, 2, 2]);
        assert_eq!(split_equal(&b, 512, true), split_equal(&b, 512, false));
    }
}
