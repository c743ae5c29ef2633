//! The CPU backend that runs graphs, with its worker threads.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::time::Instant;

use ggml_sys as sys;

use super::device::{cpu, BufferType};
use super::graph::Graph;
use super::threads::{free_cores, Governor, SchedStat};
use crate::{Error, Result};

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
    /// How hard the worker pool polls for the next graph (ggml's `poll`, 0 to 100).
    poll: u32,
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
    fn new(n_threads: usize, poll: u32) -> Result<Threadpool> {
        let mut params = unsafe { sys::ggml_threadpool_params_default(n_threads as i32) };
        params.poll = poll;
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
            poll: unsafe { sys::ggml_threadpool_params_default(n_threads as i32) }.poll,
        })
    }

    /// Lets the worker threads sleep as soon as a graph ends instead of polling for the
    /// next one (ggml's `poll` 0). For a CPU backend under ggml's scheduler, whose graphs
    /// alternate with other backends': polling through their turns would take the cores
    /// that an RPC worker on this machine, or the transfers, need (decoding over two
    /// loopback workers ran at half the speed).
    pub fn sleep_between_graphs(&mut self) {
        self.poll = 0;
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
        Ok(())
    }

    /// Lets the thread count follow how many cores the machine gives the computing
    /// thread (see [`crate::ggml::threads`]); the results stay those of `n_threads`.
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
                *slot = Some(Threadpool::new(self.n_threads, self.poll)?);
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

    /// Readies the backend for a graph that ggml's scheduler runs (on all `n_threads`).
    pub fn attach_all(&mut self) -> Result<()> {
        self.last_threads = self.n_threads;
        self.attach(self.n_threads)
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
        // On fewer threads, a split flash attention computes the configured count's chunks.
        graph.fix_attention_chunks(self.n_threads);
        let (start, before) = (Instant::now(), SchedStat::of_this_thread());
        let result = self.run(graph, n_threads);
        if let (Some(governor), Some(before), Some(after)) =
            (self.governor.as_mut(), before, SchedStat::of_this_thread())
        {
            let now = Instant::now();
            governor.record(now - start, after.waited.saturating_sub(before.waited), now, free_cores);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::graph::{Gallocr, GraphArena};

    /// The bits of a lone query's flash attention over 600 f32 cells (ggml splits it into
    /// KV chunks), computed by a backend of `threads` threads, its chunks fixed when given.
    fn split_attention(threads: usize, chunks: Option<usize>) -> Vec<u32> {
        let n_kv = 600;
        let mut arena = GraphArena::new(16);
        let graph = arena.graph().unwrap();
        let q = graph.input("q", sys::GGML_TYPE_F32, &[64, 1, 4, 1]);
        let k = graph.input("k", sys::GGML_TYPE_F32, &[64, n_kv, 2, 1]);
        let v = graph.input("v", sys::GGML_TYPE_F32, &[64, n_kv, 2, 1]);
        let mask = graph.input("mask", sys::GGML_TYPE_F16, &[n_kv, 1, 1, 1]);
        let out = graph.flash_attn(q, k, v, mask, 0.125, 0.0, None);
        graph.expand(out);
        if let Some(n) = chunks {
            graph.fix_attention_chunks(n);
        }
        let mut backend = Backend::cpu(threads).unwrap();
        let mut alloc = Gallocr::new(backend.default_buft()).unwrap();
        alloc.alloc(&graph).unwrap();
        let mut state = 12345u32;
        let mut floats = |n: i64| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    state = state.wrapping_mul(1664525).wrapping_add(1013904223);
                    (state >> 8) as f32 / (1u32 << 23) as f32 - 1.0
                })
                .collect()
        };
        q.write(&floats(64 * 4));
        k.write(&floats(64 * n_kv * 2));
        v.write(&floats(64 * n_kv * 2));
        mask.write(&vec![0u16; n_kv as usize]); // f16 zeros: every cell seen
        backend.compute(&graph).unwrap();
        let mut result = vec![0.0f32; 64 * 4];
        out.read_f32(0, &mut result);
        result.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn a_split_flash_attention_has_the_bits_of_its_chunks_on_any_thread_count() {
        let two = split_attention(2, None);
        assert_eq!(split_attention(1, Some(2)), two, "one thread computing two chunks");
        assert_eq!(split_attention(2, Some(2)), two, "two threads, a chunk each");
        // One chunk rounds otherwise: what the fixed count keeps.
        assert_ne!(split_attention(1, None), two);
    }
}
