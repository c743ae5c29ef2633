//! ggml's backend scheduler, for a model whose layers are on several devices: it splits
//! each graph between their backends (a node runs where its weights are), copies what
//! crosses from one to another, and holds a compute buffer per backend, reserved once.

use std::ptr::NonNull;

use ggml_sys as sys;

use super::graph::Graph;
use super::tensor::Tensor;
use crate::{Error, Result};

pub struct Sched {
    sched: NonNull<sys::ggml_backend_sched>,
    /// The devices' backends, then the CPU's (last: the scheduler's fallback), not owned.
    backends: Vec<sys::ggml_backend_t>,
}

unsafe impl Send for Sched {}

impl Sched {
    /// `backends` in order of preference, the CPU's last; `parallel`: pipeline parallelism
    /// (several copies of the inputs, so one device computes a micro-batch while the next
    /// takes the previous one), as llama.cpp enables it when every layer is offloaded to
    /// several devices.
    pub fn new(backends: Vec<sys::ggml_backend_t>, max_nodes: usize, parallel: bool) -> Result<Sched> {
        let mut ptrs = backends.clone();
        let sched = unsafe {
            sys::ggml_backend_sched_new(
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
                ptrs.len() as i32,
                max_nodes,
                parallel,
                true,
            )
        };
        let sched = NonNull::new(sched).ok_or_else(|| Error::OutOfMemory("backend scheduler".into()))?;
        Ok(Sched { sched, backends })
    }

    /// Sizes every backend's compute buffer for `graph` (the worst case) once, with each
    /// node of `pins` on the backend at its index (of those given to [`Sched::new`]).
    pub fn reserve(&mut self, graph: &Graph, pins: &[(Tensor, usize)]) -> Result<()> {
        self.reset(pins);
        if unsafe { sys::ggml_backend_sched_reserve(self.sched.as_ptr(), graph.graph) } {
            Ok(())
        } else {
            Err(Error::OutOfMemory(format!(
                "compute buffers for {} graph nodes",
                graph.n_nodes()
            )))
        }
    }

    /// Splits and allocates `graph` in the reserved buffers, with `pins` as for [`Sched::reserve`].
    pub fn alloc(&mut self, graph: &Graph, pins: &[(Tensor, usize)]) -> Result<()> {
        self.reset(pins);
        if unsafe { sys::ggml_backend_sched_alloc_graph(self.sched.as_ptr(), graph.graph) } {
            Ok(())
        } else {
            Err(Error::OutOfMemory("compute buffers".into()))
        }
    }

    /// Forgets the last graph's assignments (a reset clears them), then assigns `pins`.
    fn reset(&mut self, pins: &[(Tensor, usize)]) {
        unsafe { sys::ggml_backend_sched_reset(self.sched.as_ptr()) };
        for &(node, index) in pins {
            unsafe {
                sys::ggml_backend_sched_set_tensor_backend(self.sched.as_ptr(), node.as_ptr(), self.backends[index])
            }
        }
    }

    /// Runs an allocated graph; `Err(Aborted)` when the CPU backend's abort flag stopped it.
    pub fn compute(&mut self, graph: &Graph) -> Result<()> {
        match unsafe { sys::ggml_backend_sched_graph_compute(self.sched.as_ptr(), graph.graph) } {
            sys::GGML_STATUS_SUCCESS => Ok(()),
            sys::GGML_STATUS_ABORTED => Err(Error::Aborted),
            status => Err(Error::Backend(format!(
                "a backend failed to compute the graph (ggml status {status})"
            ))),
        }
    }

    /// The compute buffer of each backend, in bytes, in the order given to [`Sched::new`].
    pub fn buffer_sizes(&self) -> Vec<usize> {
        self.backends
            .iter()
            .map(|&b| unsafe { sys::ggml_backend_sched_get_buffer_size(self.sched.as_ptr(), b) })
            .collect()
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        unsafe { sys::ggml_backend_sched_free(self.sched.as_ptr()) }
    }
}
