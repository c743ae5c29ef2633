//! Owning wrappers around the ggml objects the engine keeps (contexts,
//! backends, buffers, the graph allocator), and a [`Graph`] builder whose
//! methods are the ops the architectures use.
//!
//! Every ggml object is freed by its owner's `Drop`; none is shared across
//! threads without the owner (the engine's `Context` is `Send`, not `Sync`).

use std::ffi::{c_void, CStr, CString};
use std::ptr::NonNull;
use std::time::Instant;

use ggml_sys as sys;

use crate::kernels::{self, Products};
use crate::threads::{Governor, SchedStat};
use crate::{Error, Result};

/// A tensor in some ggml context this module owns. Copyable: it is only a handle,
/// valid while the context that holds it lives (the graph builder's or the model's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor(NonNull<sys::ggml_tensor>);

// SAFETY: tensors are plain descriptors; all access goes through the owning context,
// whose users serialize it.
unsafe impl Send for Tensor {}
unsafe impl Sync for Tensor {}

impl Tensor {
    pub(crate) fn from_raw(ptr: *mut sys::ggml_tensor) -> Result<Tensor> {
        NonNull::new(ptr)
            .map(Tensor)
            .ok_or_else(|| Error::Internal("ggml returned a null tensor".into()))
    }

    pub fn as_ptr(self) -> *mut sys::ggml_tensor {
        self.0.as_ptr()
    }

    pub fn ne(self) -> [i64; 4] {
        unsafe { (*self.as_ptr()).ne }
    }

    pub fn nb(self) -> [usize; 4] {
        unsafe { (*self.as_ptr()).nb }
    }

    pub fn ggml_type(self) -> sys::ggml_type {
        unsafe { (*self.as_ptr()).type_ }
    }

    pub fn nbytes(self) -> usize {
        unsafe { sys::ggml_nbytes(self.as_ptr()) }
    }

    pub fn set_name(self, name: &str) -> Tensor {
        let name = CString::new(name).expect("tensor names have no NUL");
        unsafe { sys::ggml_set_name(self.as_ptr(), name.as_ptr()) };
        self
    }

    pub fn name(self) -> String {
        unsafe { CStr::from_ptr((*self.as_ptr()).name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Copies `data` into the tensor through its backend buffer.
    pub fn write<T: Copy>(self, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        assert_eq!(bytes, self.nbytes(), "input size for {}", self.name());
        unsafe { sys::ggml_backend_tensor_set(self.as_ptr(), data.as_ptr().cast(), 0, bytes) };
    }

    /// Writes `data` at byte `offset`, through the backend buffer.
    pub fn write_at<T: Copy>(self, offset: usize, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        assert!(offset + bytes <= self.nbytes(), "input range for {}", self.name());
        unsafe { sys::ggml_backend_tensor_set(self.as_ptr(), data.as_ptr().cast(), offset, bytes) };
    }

    /// Reads `out.len()` elements starting at byte `offset`, through the backend buffer.
    pub fn read_f32(self, offset: usize, out: &mut [f32]) {
        assert!(offset + std::mem::size_of_val(out) <= self.nbytes());
        unsafe {
            sys::ggml_backend_tensor_get(
                self.as_ptr(),
                out.as_mut_ptr().cast(),
                offset,
                std::mem::size_of_val(out),
            )
        };
    }
}

/// An owned `ggml_context`.
pub struct Context(NonNull<sys::ggml_context>);

unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Context {
    /// A context that holds tensor descriptors only (their data lives in backend buffers),
    /// for `n_tensors` tensors, in its own allocation.
    pub fn new_no_alloc(n_tensors: usize) -> Result<Context> {
        let params = sys::ggml_init_params {
            mem_size: n_tensors * unsafe { sys::ggml_tensor_overhead() },
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        Self::init(params)
    }

    /// A no-alloc context over a caller-owned metadata buffer (reused for every graph).
    fn over_buffer(buffer: &mut [u8]) -> Result<Context> {
        let params = sys::ggml_init_params {
            mem_size: buffer.len(),
            mem_buffer: buffer.as_mut_ptr().cast(),
            no_alloc: true,
        };
        Self::init(params)
    }

    fn init(params: sys::ggml_init_params) -> Result<Context> {
        NonNull::new(unsafe { sys::ggml_init(params) })
            .map(Context)
            .ok_or_else(|| Error::OutOfMemory("ggml context".into()))
    }

    pub fn as_ptr(&self) -> *mut sys::ggml_context {
        self.0.as_ptr()
    }

    /// A new tensor descriptor of `ty` with dimensions `ne` (1 to 4 of them).
    pub fn new_tensor(&self, ty: sys::ggml_type, ne: &[i64]) -> Result<Tensor> {
        Tensor::from_raw(unsafe { sys::ggml_new_tensor(self.as_ptr(), ty, ne.len() as i32, ne.as_ptr()) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::ggml_free(self.as_ptr()) }
    }
}

/// A backend buffer type (where tensor data lives, and in which layout). These
/// are static objects of the backend: copying the handle is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferType(sys::ggml_backend_buffer_type_t);

unsafe impl Send for BufferType {}
unsafe impl Sync for BufferType {}

impl BufferType {
    pub fn name(self) -> String {
        unsafe { CStr::from_ptr(sys::ggml_backend_buft_name(self.0)) }
            .to_string_lossy()
            .into_owned()
    }
}

/// An owned backend buffer.
pub struct Buffer(NonNull<sys::ggml_backend_buffer>);

unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    pub(crate) fn from_raw(ptr: sys::ggml_backend_buffer_t, what: &str) -> Result<Buffer> {
        NonNull::new(ptr)
            .map(Buffer)
            .ok_or_else(|| Error::OutOfMemory(what.to_string()))
    }

    /// Allocates every tensor of `ctx` in one buffer of type `buft`.
    pub fn alloc_ctx_tensors(ctx: &Context, buft: BufferType, what: &str) -> Result<Buffer> {
        Self::from_raw(
            unsafe { sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx.as_ptr(), buft.0) },
            what,
        )
    }

    pub fn as_ptr(&self) -> sys::ggml_backend_buffer_t {
        self.0.as_ptr()
    }

    pub fn size(&self) -> usize {
        unsafe { sys::ggml_backend_buffer_get_size(self.as_ptr()) }
    }

    pub fn clear(&self, value: u8) {
        unsafe { sys::ggml_backend_buffer_clear(self.as_ptr(), value) }
    }

    pub fn set_usage_weights(&self) {
        unsafe { sys::ggml_backend_buffer_set_usage(self.as_ptr(), sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { sys::ggml_backend_buffer_free(self.as_ptr()) }
    }
}

/// The CPU device and the buffer types it offers for weights, best first: the
/// "extra" types (repacked layouts such as q4_K_8x8) before the plain one,
/// as llama.cpp orders them.
pub struct CpuDevice {
    dev: sys::ggml_backend_dev_t,
    pub weight_bufts: Vec<BufferType>,
}

impl CpuDevice {
    pub fn get() -> Result<CpuDevice> {
        let cpu = cpu()?;
        let mut weight_bufts = extra_bufts(cpu.get_extra_bufts, cpu.dev);
        // ggml checks only the permission; an AMX buffer is used only where every check passed.
        weight_bufts.retain(|b| b.name() != AMX_BUFFER || cpu.amx == Amx::InUse);
        weight_bufts.push(BufferType(unsafe { sys::ggml_backend_cpu_buffer_type() }));
        Ok(CpuDevice {
            dev: cpu.dev,
            weight_bufts,
        })
    }

    /// Whether the device can run `op` with its weight held in a buffer of type `buft`
    /// (the repacked types accept only some shapes and types).
    pub fn supports_op_with_buft(&self, op: Tensor, weight: Tensor, buft: BufferType) -> bool {
        unsafe {
            let probe = sys::ggml_backend_buft_alloc_buffer(buft.0, 0);
            if probe.is_null() {
                return false;
            }
            (*weight.as_ptr()).buffer = probe;
            let ok = sys::ggml_backend_dev_supports_op(self.dev, op.as_ptr());
            (*weight.as_ptr()).buffer = std::ptr::null_mut();
            sys::ggml_backend_buffer_free(probe);
            ok
        }
    }
}

/// The CPU backend: where graphs run. One per engine context, so each has its
/// own thread count and abort flag. Its worker threads persist between graphs
/// (ggml would otherwise start and join them for every forward pass) and may be
/// shared with another backend that never computes at the same time (see
/// [`Backend::share_workers`]).
pub struct Backend {
    backend: NonNull<sys::ggml_backend>,
    n_threads: usize,
    workers: Workers,
    /// The pool last attached to `backend` (null: none, ggml's threads of one graph).
    attached: *mut sys::ggml_threadpool,
    /// Fewer threads while the cores are taken by others; `None`: always `n_threads`.
    governor: Option<Governor>,
    /// How many threads the last graph ran on.
    last_threads: usize,
    /// Room for the graphs of [`Backend::run_in_segments`], kept between passes.
    segments: Option<GraphArena>,
    /// Whether graphs run on ggml's reference kernels (see [`Backend::use_reference_kernels`]).
    reference: bool,
}

unsafe impl Send for Backend {}

/// A slot for a worker pool, made on first use and again after a fork.
type Workers = std::sync::Arc<std::sync::Mutex<Option<Threadpool>>>;

struct Threadpool {
    pool: NonNull<sys::ggml_threadpool>,
    /// Worker threads do not survive `fork`: a child must not wait for them.
    owner_pid: u32,
}

unsafe impl Send for Threadpool {}

impl Threadpool {
    fn new(n_threads: usize) -> Result<Threadpool> {
        let mut params = unsafe { sys::ggml_threadpool_params_default(n_threads as i32) };
        let pool = NonNull::new(unsafe { (cpu()?.threadpool_new)(&mut params) })
            .ok_or_else(|| Error::OutOfMemory("CPU thread pool".into()))?;
        Ok(Threadpool {
            pool,
            owner_pid: std::process::id(),
        })
    }
}

impl Drop for Threadpool {
    fn drop(&mut self) {
        // In a forked child the workers are gone; joining them would hang, so the
        // parent's pool is left alone there.
        if self.owner_pid == std::process::id() {
            if let Ok(cpu) = cpu() {
                unsafe { (cpu.threadpool_free)(self.pool.as_ptr()) }
            }
        }
    }
}

impl Backend {
    pub fn cpu(n_threads: usize) -> Result<Backend> {
        let cpu = cpu()?;
        let backend = NonNull::new(unsafe { sys::ggml_backend_dev_init(cpu.dev, std::ptr::null()) })
            .ok_or_else(|| Error::OutOfMemory("CPU backend".into()))?;
        unsafe { (cpu.set_n_threads)(backend.as_ptr(), n_threads as i32) };
        Ok(Backend {
            backend,
            n_threads,
            workers: Workers::default(),
            attached: std::ptr::null_mut(),
            governor: None,
            last_threads: n_threads,
            segments: None,
            reference: false,
        })
    }

    /// Runs every later graph on ggml's reference kernels (ggml-cpu's `use_ref`): each
    /// output of a matrix product is one `vec_dot` over its whole row, and flash
    /// attention takes a query's keys one at a time, in cell order, skipping the masked
    /// ones. No kernel then depends on how many rows a pass has or how many threads run
    /// it, so a row's bits are the same in any batch, as long as weights are not held in
    /// repacked layouts (whose kernels ignore the setting; see `ModelParams::repack`).
    pub fn use_reference_kernels(&mut self) -> Result<()> {
        let set_use_ref = cpu()?
            .set_use_ref
            .ok_or_else(|| Error::Cpu("ggml's CPU backend has no ggml_backend_cpu_set_use_ref".into()))?;
        unsafe { set_use_ref(self.as_ptr(), true) };
        self.reference = true;
        Ok(())
    }

    /// Lets the thread count follow how many cores the machine gives the computing
    /// thread (see [`crate::threads`]), for every graph whose result does not depend on it.
    pub fn adapt_threads(&mut self) {
        if self.n_threads > 1 && SchedStat::of_this_thread().is_some() {
            self.governor = Some(Governor::new(self.n_threads));
        }
    }

    /// Runs this backend's graphs on `other`'s worker threads. Two pools would each
    /// keep polling a while after their graph ends, taking cores from the other
    /// (a draft model and its target take turns many times a token). The caller
    /// guarantees the two never compute at the same time.
    pub fn share_workers(&mut self, other: &Backend) {
        debug_assert_eq!(self.n_threads, other.n_threads, "a pool has one thread count");
        self.workers = std::sync::Arc::clone(&other.workers);
    }

    pub fn as_ptr(&self) -> sys::ggml_backend_t {
        self.backend.as_ptr()
    }

    pub fn default_buft(&self) -> BufferType {
        BufferType(unsafe { sys::ggml_backend_get_default_buffer_type(self.as_ptr()) })
    }

    /// Makes ggml poll `flag` between graph nodes and stop when it is set.
    ///
    /// # Safety
    /// `flag` must outlive every later `compute` on this backend.
    pub unsafe fn set_abort_flag(&self, flag: *const std::sync::atomic::AtomicBool) {
        unsafe extern "C" fn should_abort(data: *mut c_void) -> bool {
            (*(data as *const std::sync::atomic::AtomicBool)).load(std::sync::atomic::Ordering::Relaxed)
        }
        // A backend exists only once `cpu()` has succeeded.
        let cpu = cpu().expect("the CPU backend is loaded");
        (cpu.set_abort_callback)(self.as_ptr(), Some(should_abort), flag as *mut c_void);
    }

    /// Attaches the worker pool for this process, made on first use and again after
    /// a fork, for a graph on all `n_threads`; fewer threads run on threads of ggml's
    /// own for the one graph, the pool paused meanwhile, so none of it spins.
    fn attach(&mut self, n_threads: usize) -> Result<()> {
        let cpu = cpu()?;
        let pool = if n_threads == self.n_threads && n_threads > 1 {
            let mut slot = self.workers.lock().unwrap_or_else(|p| p.into_inner());
            if slot.as_ref().is_none_or(|p| p.owner_pid != std::process::id()) {
                // Replacing the old pool drops it, which frees it only in the process that made it.
                *slot = Some(Threadpool::new(self.n_threads)?);
            }
            slot.as_ref().expect("made above").pool.as_ptr()
        } else {
            std::ptr::null_mut()
        };
        if pool != self.attached {
            // Detaching pauses the pool; the next graph on it resumes it.
            unsafe { (cpu.set_threadpool)(self.as_ptr(), pool) };
            self.attached = pool;
        }
        unsafe { (cpu.set_n_threads)(self.as_ptr(), n_threads as i32) };
        Ok(())
    }

    /// Lets the worker pool sleep now. After a graph ggml's workers poll for the next
    /// one for about 100 ms (`poll` 50), which keeps passes close together but takes
    /// a core from whatever runs once the work is over: another process, Ruby threads.
    /// Detaching the pool pauses it; the next graph attaches it again and wakes it.
    pub fn rest(&mut self) {
        if !self.attached.is_null() {
            // A backend exists only once `cpu()` has succeeded.
            let cpu = cpu().expect("the CPU backend is loaded");
            unsafe { (cpu.set_threadpool)(self.as_ptr(), std::ptr::null_mut()) };
            self.attached = std::ptr::null_mut();
        }
    }

    /// How many threads the last graph ran on.
    pub fn last_threads(&self) -> usize {
        self.last_threads
    }

    /// Runs an allocated graph; `Err(Aborted)` when the abort flag stopped it.
    pub fn compute(&mut self, graph: &Graph) -> Result<()> {
        let Some(governor) = &self.governor else {
            return self.run(graph, self.n_threads);
        };
        let n_threads = governor.threads();
        let (start, before) = (Instant::now(), SchedStat::of_this_thread());
        let result = if n_threads < self.n_threads && !self.reference && graph.bits_depend_on_threads() {
            self.run_in_segments(graph, n_threads)
        } else {
            self.run(graph, n_threads)
        };
        if let (Some(governor), Some(before), Some(after)) =
            (self.governor.as_mut(), before, SchedStat::of_this_thread())
        {
            let now = Instant::now();
            governor.record(now - start, after.waited.saturating_sub(before.waited), now);
        }
        result
    }

    /// Runs `graph` on `n_threads` threads but its nodes whose bits depend on the thread
    /// count, which run on all of them: the graph in runs of consecutive nodes of either
    /// kind, each a graph of its own over the same (allocated) tensors.
    fn run_in_segments(&mut self, graph: &Graph, n_threads: usize) -> Result<()> {
        let n_nodes = graph.n_nodes();
        let mut arena = match self.segments.take() {
            Some(arena) if arena.max_nodes >= n_nodes as usize => arena,
            _ => GraphArena::new(n_nodes as usize),
        };
        let mut result = Ok(());
        let mut first = 0;
        while first < n_nodes && result.is_ok() {
            let pinned = graph.node_bits_depend_on_threads(first);
            let last = (first + 1..n_nodes)
                .find(|&i| graph.node_bits_depend_on_threads(i) != pinned)
                .unwrap_or(n_nodes);
            result = arena.graph().and_then(|segment| {
                (first..last).for_each(|i| segment.add_node(graph.node(i)));
                self.run(&segment, if pinned { self.n_threads } else { n_threads })
            });
            first = last;
        }
        self.segments = Some(arena);
        self.last_threads = n_threads;
        result
    }

    /// Runs `graph` on `n_threads` threads.
    fn run(&mut self, graph: &Graph, n_threads: usize) -> Result<()> {
        self.attach(n_threads)?;
        self.last_threads = n_threads;
        match unsafe { sys::ggml_backend_graph_compute(self.as_ptr(), graph.graph) } {
            sys::GGML_STATUS_SUCCESS => Ok(()),
            sys::GGML_STATUS_ABORTED => Err(Error::Aborted),
            sys::GGML_STATUS_ALLOC_FAILED => Err(Error::OutOfMemory("graph compute".into())),
            status => Err(Error::Internal(format!("graph compute failed with status {status}"))),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        unsafe { sys::ggml_backend_free(self.as_ptr()) }
        // The pool drops after the last backend that used it.
    }
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
    max_nodes: usize,
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
        })
    }
}

/// A forward pass being built: a no-alloc context plus its `ggml_cgraph`.
pub struct Graph {
    ctx: Context,
    graph: *mut sys::ggml_cgraph,
    /// Whose products [`Graph::mul_mat`] uses ([`crate::kernels`]).
    products: Products,
    /// The work counters of the graph's products of ours, one per op (its userdata),
    /// boxed so that they stay put while the graph is computed.
    #[allow(clippy::vec_box, reason = "ops hold their addresses while the vector grows")]
    chunks: std::cell::RefCell<Vec<Box<kernels::Chunks>>>,
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

    /// Whether the CPU backend's result depends on its thread count (see
    /// [`Graph::node_bits_depend_on_threads`]).
    pub fn bits_depend_on_threads(&self) -> bool {
        (0..self.n_nodes()).any(|i| self.node_bits_depend_on_threads(i))
    }

    /// Whether node `i`'s result depends on the CPU backend's thread count: ggml splits
    /// the cells of a lone query's flash attention among its threads when they are many
    /// (ggml-cpu's `ggml_compute_forward_flash_attn_ext_f16`, `use_split_kv_path`);
    /// every other op gives each thread whole rows.
    pub fn node_bits_depend_on_threads(&self, i: i32) -> bool {
        let node = unsafe { &*self.node(i) };
        if node.op != sys::GGML_OP_FLASH_ATTN_EXT {
            return false;
        }
        let [q, k, v] = [0, 1, 2].map(|j| unsafe { &*node.src[j] });
        let float = |t: &sys::ggml_tensor| t.type_ == sys::GGML_TYPE_F16 || t.type_ == sys::GGML_TYPE_F32;
        q.ne[1] == 1
            && q.ne[3] == 1
            && q.type_ == sys::GGML_TYPE_F32
            && float(k)
            && k.type_ == v.type_
            && k.ne[1] >= 512
    }

    fn node(&self, i: i32) -> *mut sys::ggml_tensor {
        unsafe { sys::ggml_graph_node(self.graph, i) }
    }

    /// Appends a node of another graph (a segment of it, computed on its own).
    fn add_node(&self, node: *mut sys::ggml_tensor) {
        unsafe { sys::ggml_graph_add_node(self.graph, node) }
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
    /// rows (see [`crate::kernels`]).
    pub fn mul_mat(&self, w: Tensor, x: Tensor) -> Tensor {
        if let Some(kernel) = kernels::for_product(w, x, self.products) {
            let [k, rows, ..] = x.ne();
            let quantized = self
                .ctx
                .new_tensor(kernel.activation_type(), &[k, rows])
                .expect("the arena is sized for the graph");
            let quantized = op!(self, sys::ggml_cpy(self.c(), x.as_ptr(), quantized.as_ptr()));
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

    /// `softmax(a * scale + mask)` per row (no ALiBi).
    pub fn soft_max_ext(&self, a: Tensor, mask: Tensor, scale: f32) -> Tensor {
        op!(
            self,
            sys::ggml_soft_max_ext(self.c(), a.as_ptr(), mask.as_ptr(), scale, 0.0)
        )
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

    /// The indices of the `k` largest values of each row, largest first.
    pub fn argsort_top_k(&self, a: Tensor, k: i32) -> Tensor {
        op!(self, sys::ggml_argsort_top_k(self.c(), a.as_ptr(), k))
    }

    pub fn sum_rows(&self, a: Tensor) -> Tensor {
        op!(self, sys::ggml_sum_rows(self.c(), a.as_ptr()))
    }

    pub fn clamp(&self, a: Tensor, min: f32, max: f32) -> Tensor {
        op!(self, sys::ggml_clamp(self.c(), a.as_ptr(), min, max))
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

    pub fn set_rows(&self, dst: Tensor, src: Tensor, rows: Tensor) -> Tensor {
        op!(
            self,
            sys::ggml_set_rows(self.c(), dst.as_ptr(), src.as_ptr(), rows.as_ptr())
        )
    }

    /// The rotary embedding `rope` describes (YaRN included); `freq_factors`, where
    /// given, divides each pair's frequency (llama3's `rope_freqs`, LongRoPE's factors).
    pub fn rope(&self, x: Tensor, pos: Tensor, rope: &crate::hparams::Rope, freq_factors: Option<Tensor>) -> Tensor {
        op!(
            self,
            sys::ggml_rope_ext(
                self.c(),
                x.as_ptr(),
                pos.as_ptr(),
                freq_factors.map_or(std::ptr::null_mut(), |f| f.as_ptr()),
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
        )
    }

    /// Flash attention with F32 accumulation, as llama.cpp sets it; a non-zero
    /// `logit_softcap` caps the scores at `cap * tanh(score / cap)`.
    pub fn flash_attn(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor,
        kq_scale: f32,
        logit_softcap: f32,
    ) -> Tensor {
        let out = op!(
            self,
            sys::ggml_flash_attn_ext(
                self.c(),
                q.as_ptr(),
                k.as_ptr(),
                v.as_ptr(),
                mask.as_ptr(),
                kq_scale,
                0.0,
                logit_softcap
            )
        );
        unsafe { sys::ggml_flash_attn_ext_set_prec(out.as_ptr(), sys::GGML_PREC_F32) };
        out
    }
}

/// The CPU backend's device and the functions its registry hands out
/// (`ggml_backend_reg_get_proc_address`), which work the same whether the backend is
/// linked in or a variant library loaded at run time.
struct Cpu {
    dev: sys::ggml_backend_dev_t,
    reg: sys::ggml_backend_reg_t,
    set_n_threads: SetNThreads,
    set_abort_callback: SetAbortCallback,
    threadpool_new: ThreadpoolNew,
    threadpool_free: ThreadpoolFree,
    set_threadpool: SetThreadpool,
    get_extra_bufts: Option<GetExtraBufts>,
    get_features: Option<GetFeatures>,
    set_use_ref: Option<SetUseRef>,
    amx: Amx,
}

/// ggml's AMX kernels (Intel's tile instructions, the fastest prompt path of the CPUs that
/// have them) in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Amx {
    /// Not compiled into the CPU backend in use.
    NotBuilt,
    /// Compiled in and usable: the weight types they take go to ggml's AMX buffer.
    InUse,
    /// Compiled in but unusable here, and why; the AVX-512 path runs instead.
    Off(String),
}

impl Amx {
    /// The state, given whether the backend was compiled with AMX, whether ggml offers its
    /// AMX buffer type, and what [`sys::cpu::amx_refusal`] says.
    fn decide(built: bool, offered: bool, refusal: Option<String>) -> Amx {
        match (built, refusal) {
            (false, _) => Amx::NotBuilt,
            (true, Some(reason)) => Amx::Off(reason),
            (true, None) if offered => Amx::InUse,
            (true, None) => Amx::Off("ggml's CPU backend did not offer its AMX buffer".to_string()),
        }
    }
}

type SetNThreads = unsafe extern "C" fn(sys::ggml_backend_t, i32);
type SetAbortCallback = unsafe extern "C" fn(sys::ggml_backend_t, sys::ggml_abort_callback, *mut c_void);
type ThreadpoolNew = unsafe extern "C" fn(*mut sys::ggml_threadpool_params) -> *mut sys::ggml_threadpool;
type ThreadpoolFree = unsafe extern "C" fn(*mut sys::ggml_threadpool);
type SetThreadpool = unsafe extern "C" fn(sys::ggml_backend_t, *mut sys::ggml_threadpool);
type GetExtraBufts = unsafe extern "C" fn(sys::ggml_backend_dev_t) -> *mut sys::ggml_backend_buffer_type_t;
type GetFeatures = unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *mut sys::ggml_backend_feature;
type SetUseRef = unsafe extern "C" fn(sys::ggml_backend_t, bool);

// SAFETY: the device and registry are process-wide ggml singletons, never freed.
unsafe impl Send for Cpu {}
unsafe impl Sync for Cpu {}

static CPU: std::sync::OnceLock<std::result::Result<Cpu, String>> = std::sync::OnceLock::new();

/// Process-wide ggml setup, once: ggml's log routed to stderr only when `ELELEM_DEBUG` is
/// set (ggml logs freely otherwise), then the CPU backend loaded (in a variants build, the
/// variant this CPU runs best or the one `ELELEM_CPU_VARIANT` forces) and its functions
/// looked up.
fn cpu() -> Result<&'static Cpu> {
    CPU.get_or_init(|| unsafe {
        if std::env::var_os("ELELEM_DEBUG").is_none() {
            unsafe extern "C" fn quiet(_: sys::ggml_log_level, _: *const std::ffi::c_char, _: *mut c_void) {}
            sys::ggml_log_set(Some(quiet), std::ptr::null_mut());
        }
        sys::cpu::load()?;
        let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        if dev.is_null() {
            return Err("ggml has no CPU device".into());
        }
        let reg = sys::ggml_backend_dev_backend_reg(dev);
        let proc_ = |name: &CStr| sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
        let get_extra_bufts =
            std::mem::transmute::<*mut c_void, Option<GetExtraBufts>>(proc_(c"ggml_backend_dev_get_extra_bufts"));
        let amx = Amx::decide(
            amx_built()?,
            extra_bufts(get_extra_bufts, dev).iter().any(|b| b.name() == AMX_BUFFER),
            sys::cpu::amx_refusal(),
        );
        if let Amx::Off(reason) = &amx {
            eprintln!(
                "elelem: warning: ggml's AMX kernels are built in, but {reason}; matrix products use AVX-512 instead"
            );
        }
        let required = |name: &CStr| {
            let p = proc_(name);
            if p.is_null() {
                Err(format!("ggml's CPU backend has no {}", name.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        Ok(Cpu {
            dev,
            reg,
            set_n_threads: std::mem::transmute::<*mut c_void, SetNThreads>(required(c"ggml_backend_set_n_threads")?),
            set_abort_callback: std::mem::transmute::<*mut c_void, SetAbortCallback>(required(
                c"ggml_backend_set_abort_callback",
            )?),
            threadpool_new: std::mem::transmute::<*mut c_void, ThreadpoolNew>(required(c"ggml_threadpool_new")?),
            threadpool_free: std::mem::transmute::<*mut c_void, ThreadpoolFree>(required(c"ggml_threadpool_free")?),
            set_threadpool: std::mem::transmute::<*mut c_void, SetThreadpool>(required(
                c"ggml_backend_cpu_set_threadpool",
            )?),
            get_extra_bufts,
            get_features: std::mem::transmute::<*mut c_void, Option<GetFeatures>>(proc_(c"ggml_backend_get_features")),
            set_use_ref: std::mem::transmute::<*mut c_void, Option<SetUseRef>>(proc_(c"ggml_backend_cpu_set_use_ref")),
            amx,
        })
    })
    .as_ref()
    .map_err(|e| Error::Cpu(e.clone()))
}

/// The name of ggml's AMX weight buffer type.
const AMX_BUFFER: &str = "AMX";

/// Whether the CPU backend in use was compiled with ggml's AMX kernels.
fn amx_built() -> std::result::Result<bool, String> {
    let isa: Vec<&str> = match sys::cpu::load()?.variant {
        Some(variant) => variant.features.to_vec(),
        None => sys::GGML_ISA.split_whitespace().collect(),
    };
    Ok(isa.contains(&"AMX_INT8"))
}

/// The CPU device's extra weight buffer types (repacked layouts, AMX), best first.
fn extra_bufts(get_extra: Option<GetExtraBufts>, dev: sys::ggml_backend_dev_t) -> Vec<BufferType> {
    let mut bufts = Vec::new();
    if let Some(get_extra) = get_extra {
        unsafe {
            let mut p = get_extra(dev);
            while !p.is_null() && !(*p).is_null() {
                bufts.push(BufferType(*p));
                p = p.add(1);
            }
        }
    }
    bufts
}

/// ggml's AMX kernels in this process (loads the CPU backend if it is not yet).
///
/// # Errors
/// [`Error::Cpu`] when the CPU backend cannot be loaded.
pub fn amx() -> Result<&'static Amx> {
    Ok(&cpu()?.amx)
}

/// Loads the CPU backend (see [`cpu`]) if it is not yet.
///
/// # Errors
/// [`Error::Cpu`] when it cannot be loaded.
pub fn init() -> Result<()> {
    cpu().map(|_| ())
}

/// The CPU variant in use, in a build with variants (`None` when the backend is linked in).
pub fn cpu_variant() -> Result<Option<&'static sys::BuiltVariant>> {
    init()?;
    Ok(sys::cpu::load().map_err(Error::Cpu)?.variant)
}

/// A CPU variant of this build (none in a build that links its CPU backend in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuVariantInfo {
    pub name: &'static str,
    /// The features ggml compiles it for (`AVX2`, `AVX512_VNNI`, ...).
    pub features: &'static [&'static str],
    /// Whether this CPU (and the operating system) supports them all.
    pub runnable: bool,
    /// Whether this process runs it.
    pub in_use: bool,
}

/// Every CPU variant this build compiled, in llama.cpp's order.
pub fn cpu_variants() -> Vec<CpuVariantInfo> {
    let have = sys::cpu::cpu_features();
    let in_use = cpu().ok().and_then(|_| sys::cpu::load().ok()).and_then(|l| l.variant);
    sys::BUILT_VARIANTS
        .iter()
        .map(|v| CpuVariantInfo {
            name: v.name,
            features: v.features,
            runnable: sys::cpu::missing(v, &have).is_empty(),
            in_use: in_use.is_some_and(|u| u.name == v.name),
        })
        .collect()
}

/// ggml's CPU features as its backend reports them (`ggml_backend_get_features`, what
/// llama.cpp's system info prints), e.g. "SSE3 SSSE3 AVX ... REPACK", after
/// `CPU_VARIANT=<name>` in a build with variants.
pub fn system_info() -> Result<String> {
    let cpu = cpu()?;
    let mut parts = Vec::new();
    if let Some(variant) = cpu_variant()? {
        parts.push(format!("CPU_VARIANT={}", variant.name));
    }
    if let Some(get_features) = cpu.get_features {
        unsafe {
            let mut f = get_features(cpu.reg);
            while !f.is_null() && !(*f).name.is_null() {
                let name = CStr::from_ptr((*f).name).to_string_lossy();
                let value = CStr::from_ptr((*f).value).to_string_lossy();
                f = f.add(1);
                if name.starts_with("AMX") && matches!(cpu.amx, Amx::Off(_)) {
                    continue;
                }
                parts.push(if value == "1" {
                    name.to_string()
                } else {
                    format!("{name}={value}")
                });
            }
        }
    }
    if matches!(cpu.amx, Amx::Off(_)) {
        parts.push("AMX=off".to_string());
    }
    Ok(parts.join(" "))
}

/// Whether the CPU backend can multiply weights of `ty`. Some types exist only as
/// the other operand's format (Q8_1, Q8_K): a matmul over them calls a null kernel.
pub fn cpu_has_vec_dot(ty: sys::ggml_type) -> bool {
    init().is_ok() && sys::cpu::type_has_vec_dot(ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amx_is_used_only_where_it_is_built_offered_and_not_refused() {
        assert_eq!(Amx::decide(false, true, None), Amx::NotBuilt);
        assert_eq!(Amx::decide(true, true, None), Amx::InUse);
        assert_eq!(
            Amx::decide(true, true, Some("hidden".into())),
            Amx::Off("hidden".into())
        );
        assert!(matches!(Amx::decide(true, false, None), Amx::Off(r) if r.contains("did not offer")));
    }

    #[test]
    fn no_amx_buffer_holds_weights_unless_amx_is_in_use() {
        let device = CpuDevice::get().unwrap();
        let has_amx = device.weight_bufts.iter().any(|b| b.name() == AMX_BUFFER);
        assert_eq!(has_amx, *amx().unwrap() == Amx::InUse);
        let profile = crate::BuildProfile::current().unwrap();
        assert_eq!(profile.isa.contains(&"AMX_INT8"), has_amx, "{profile:?}");
    }

    /// A graph of one flash attention: `n_q` queries over `n_kv` cells stored as `kv`.
    fn attention(n_q: i64, n_kv: i64, kv: sys::ggml_type) -> bool {
        let mut arena = GraphArena::new(16);
        let graph = arena.graph().unwrap();
        let q = graph.input("q", sys::GGML_TYPE_F32, &[64, n_q, 4, 1]);
        let k = graph.input("k", kv, &[64, n_kv, 2, 1]);
        let v = graph.input("v", kv, &[64, n_kv, 2, 1]);
        let mask = graph.input("mask", sys::GGML_TYPE_F16, &[n_kv, n_q, 1, 1]);
        graph.expand(graph.flash_attn(q, k, v, mask, 0.125, 0.0));
        graph.bits_depend_on_threads()
    }

    #[test]
    fn only_a_lone_querys_flash_attention_over_512_float_cells_depends_on_threads() {
        assert!(attention(1, 512, sys::GGML_TYPE_F16));
        assert!(attention(1, 4096, sys::GGML_TYPE_F32));
        assert!(!attention(1, 511, sys::GGML_TYPE_F16));
        assert!(!attention(2, 512, sys::GGML_TYPE_F16));
        assert!(!attention(1, 4096, sys::GGML_TYPE_Q8_0));
        let mut arena = GraphArena::new(16);
        let graph = arena.graph().unwrap();
        let w = graph.input("w", sys::GGML_TYPE_F32, &[64, 64]);
        let x = graph.input("x", sys::GGML_TYPE_F32, &[64, 1]);
        graph.expand(graph.mul_mat(w, x));
        assert!(!graph.bits_depend_on_threads());
    }
}
