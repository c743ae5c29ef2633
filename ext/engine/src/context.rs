use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::ggml::{Backend, Gallocr, Graph, GraphArena, Tensor};
use crate::graph_inputs::{Batch, Inputs};
use crate::kv_cache::{Cells, KvCache, KV_PAD};
use crate::layers::GraphBuilder;
use crate::{Error, Model, Result};

/// The fewest graph nodes a forward pass is given room for; models with many
/// weights get 8 per weight, as llama.cpp sizes its graphs. A graph that outgrew
/// its arena would make ggml abort.
const MIN_NODES: usize = 8192;
/// The prompt is evaluated in micro-batches of at most this many tokens, as llama.cpp's n_ubatch.
pub const DEFAULT_UBATCH: u32 = 512;

#[derive(Debug, Clone)]
pub struct ContextParams {
    /// The most tokens the sequence may hold.
    pub n_ctx: u32,
    pub n_threads: usize,
    pub n_ubatch: u32,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_threads: 2,
            n_ubatch: DEFAULT_UBATCH,
        }
    }
}

/// Counters of the work done since the sequence began.
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

/// The last graph built and allocated, kept for the next pass its inputs say it
/// can serve (most decode steps): that pass only writes its inputs, as llama.cpp
/// reuses its graphs. Building and allocating one costs ~0.4 ms, 1-2% of a token.
struct BuiltGraph {
    graph: Graph,
    inputs: Inputs,
    logits: Tensor,
}

/// One sequence over a model: the KV cache, the graph allocator that owns the
/// compute buffer, and the CPU backend the graphs run on.
pub struct Context {
    model: Arc<Model>,
    params: ContextParams,
    backend: Backend,
    kv: KvCache,
    /// Declared before `galloc` and `arena`, whose memory its tensors point into.
    last_graph: Option<BuiltGraph>,
    galloc: Gallocr,
    arena: GraphArena,
    n_past: u32,
    /// The tokens whose K and V the cache holds, in order.
    cached: Vec<u32>,
    logits: Vec<f32>,
    abort: Arc<AtomicBool>,
    stats: DecodeStats,
}

impl Context {
    pub fn new(model: Arc<Model>, params: ContextParams) -> Result<Context> {
        validate(&params)?;
        let backend = Backend::cpu(params.n_threads)?;
        let kv = KvCache::new(
            &backend,
            &model.hparams,
            params.n_ctx,
            params.n_ubatch.min(params.n_ctx),
        )?;
        let galloc = Gallocr::new(backend.default_buft())?;
        let abort = Arc::new(AtomicBool::new(false));
        // SAFETY: the flag is an Arc the context holds for as long as the backend lives.
        unsafe { backend.set_abort_flag(Arc::as_ptr(&abort)) };
        let n_vocab = model.hparams.n_vocab as usize;
        let model_weights = model.n_weights();
        let mut ctx = Context {
            model,
            params,
            backend,
            kv,
            last_graph: None,
            galloc,
            arena: GraphArena::new(MIN_NODES.max(8 * model_weights)),
            n_past: 0,
            cached: Vec::new(),
            logits: vec![0.0; n_vocab],
            abort,
            stats: DecodeStats::default(),
        };
        ctx.reserve()?;
        Ok(ctx)
    }

    /// Sizes the compute buffer once, for the largest graph this context will build
    /// (a full micro-batch attending over every cell), so it never grows later.
    fn reserve(&mut self) -> Result<()> {
        let n_tokens = self.params.n_ubatch.min(self.params.n_ctx);
        let n_kv: Vec<u32> = self.kv.groups.iter().map(Cells::size).collect();
        let graph = self.arena.graph()?;
        build(&graph, &self.model, &self.kv, self.params.n_ctx, n_tokens, &n_kv);
        self.galloc.reserve(&graph)
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// Tokens in the sequence so far.
    pub fn n_past(&self) -> u32 {
        self.n_past
    }

    /// Forgets the sequence (the cache cells are simply reused).
    pub fn clear(&mut self) {
        self.kv.clear();
        self.n_past = 0;
        self.cached.clear();
        self.stats = DecodeStats::default();
    }

    /// Starts a new sequence that will begin with `prompt`, keeping the K and V of
    /// the longest prefix it shares with the cached one; at least one token is left
    /// to evaluate, for its logits. Returns how many tokens were kept. A model with
    /// sliding-window layers always starts afresh: its ring may no longer hold the
    /// window a shorter prefix needs.
    pub fn restart_with_prefix(&mut self, prompt: &[u32]) -> usize {
        let shared = if self.model.hparams.swa.is_some() {
            0
        } else {
            let common = self.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
            common.min(prompt.len().saturating_sub(1))
        };
        if shared == 0 {
            self.clear();
            return 0;
        }
        // What llama.cpp's llama_memory_seq_rm(seq, shared, -1) does: positions from
        // `shared` on are forgotten, and their cells are the next ones filled.
        self.kv
            .groups
            .iter_mut()
            .for_each(|cells| cells.truncate(shared as i32));
        self.cached.truncate(shared);
        self.n_past = shared as u32;
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

    pub fn kv_cache_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// A flag that, once set (from any thread), stops the computation between two
    /// graph nodes with [`Error::Aborted`], and every later one until it is cleared.
    /// Whoever sets it clears it before the next call: were `decode` to clear it,
    /// an interrupt that came just before would be lost.
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.abort)
    }

    /// The logits after the last decoded token.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Appends `tokens` to the sequence and returns the logits after its last token.
    pub fn decode(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("no tokens to decode".into()));
        }
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(&bad) = tokens.iter().find(|&&t| t >= n_vocab) {
            return Err(Error::InvalidArgument(format!(
                "token id {bad} is out of range (vocabulary size {n_vocab})"
            )));
        }
        let total = u64::from(self.n_past) + tokens.len() as u64;
        if total > u64::from(self.params.n_ctx) {
            return Err(Error::ContextFull(format!(
                "{} tokens do not fit: the context holds {} of n_ctx {}",
                tokens.len(),
                self.n_past,
                self.params.n_ctx
            )));
        }
        let start = Instant::now();
        for chunk in tokens.chunks(self.params.n_ubatch as usize) {
            self.eval(chunk)?;
        }
        let seconds = start.elapsed().as_secs_f64();
        if tokens.len() > 1 {
            self.stats.prompt_tokens += tokens.len() as u64;
            self.stats.prompt_seconds += seconds;
        } else {
            self.stats.decode_tokens += 1;
            self.stats.decode_seconds += seconds;
        }
        Ok(&self.logits)
    }

    /// One micro-batch: place it in the cache, build, allocate, fill inputs, compute,
    /// read the last row's logits. On failure the cache forgets the batch's positions.
    fn eval(&mut self, tokens: &[u32]) -> Result<()> {
        let n_tokens = tokens.len() as u32;
        let first = self.n_past as i32;
        // Every group finds its cells before any takes them, as llama.cpp prepares a batch.
        let slots = self
            .kv
            .groups
            .iter()
            .map(|cells| cells.find_slot(n_tokens))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Internal(format!("no KV cache cells for {n_tokens} tokens")))?;
        for (cells, slot) in self.kv.groups.iter_mut().zip(&slots) {
            cells.apply(slot, first);
        }
        let result = self.compute(tokens, first, &slots);
        if result.is_err() {
            self.kv.groups.iter_mut().for_each(|cells| cells.truncate(first));
        }
        result
    }

    fn compute(&mut self, tokens: &[u32], first: i32, slots: &[Vec<u32>]) -> Result<()> {
        let n_tokens = tokens.len() as u32;
        let batch = Batch {
            tokens,
            first_pos: first,
            slots,
            kv: &self.kv,
        };
        if !self.last_graph.as_ref().is_some_and(|g| g.inputs.can_reuse(&batch)) {
            // The arena holds one graph at a time, and the allocator lays out one.
            self.last_graph = None;
            let n_kv: Vec<u32> = self.kv.groups.iter().map(Cells::n_kv).collect();
            let graph = self.arena.graph()?;
            let (inputs, logits) = build(&graph, &self.model, &self.kv, self.params.n_ctx, n_tokens, &n_kv);
            self.galloc.alloc(&graph)?;
            self.last_graph = Some(BuiltGraph { graph, inputs, logits });
        }
        let BuiltGraph { graph, inputs, logits } = self.last_graph.as_ref().expect("built above");
        inputs.set(&batch);

        let bytes = self.galloc.buffer_size();
        if self.stats.compute_buffer_bytes_max == 0 {
            self.stats.compute_buffer_bytes_min = bytes;
        }
        self.stats.compute_buffer_bytes_min = self.stats.compute_buffer_bytes_min.min(bytes);
        self.stats.compute_buffer_bytes_max = self.stats.compute_buffer_bytes_max.max(bytes);
        self.backend.compute(graph)?;
        logits.read_f32(0, &mut self.logits);
        self.n_past += n_tokens;
        self.cached.extend_from_slice(tokens);
        Ok(())
    }
}

fn validate(params: &ContextParams) -> Result<()> {
    if params.n_ctx == 0 || params.n_ctx > 1 << 20 {
        return Err(Error::InvalidArgument(format!(
            "n_ctx must be between 1 and {}, got {}",
            1 << 20,
            params.n_ctx
        )));
    }
    if params.n_threads == 0 || params.n_threads > 512 {
        return Err(Error::InvalidArgument(format!(
            "n_threads must be between 1 and 512, got {}",
            params.n_threads
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

fn build(graph: &Graph, model: &Model, kv: &KvCache, n_ctx: u32, n_tokens: u32, n_kv: &[u32]) -> (Inputs, Tensor) {
    let inputs = Inputs::new(graph, n_tokens.into(), n_kv);
    let builder = GraphBuilder {
        graph,
        inputs,
        model,
        kv,
        n_tokens: n_tokens.into(),
        // llama.cpp pads the context to whole cache pages before comparing it.
        n_ctx_seq: n_ctx.div_ceil(KV_PAD) * KV_PAD,
    };
    let logits = model.hparams.arch.build(&builder);
    graph.mark_output(logits);
    graph.expand(logits);
    (builder.inputs, logits)
}
