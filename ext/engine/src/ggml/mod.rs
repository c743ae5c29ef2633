//! Owning wrappers around the ggml objects the engine keeps (contexts,
//! backends, buffers, the graph allocator), and a [`Graph`] builder whose
//! methods are the ops the architectures use.
//!
//! Every ggml object is freed by its owner's `Drop`; none is shared across
//! threads without the owner (the engine's `Context` is `Send`, not `Sync`).
//!
//! The files read bottom-up: [`tensor`] (handles), [`device`] (the CPU backend loaded,
//! its buffer types), [`kernels`] (our own matrix products), [`graph`] (the ops),
//! [`threads`], [`backend`] (running a graph), [`build_profile`].

mod backend;
pub mod build_profile;
mod device;
mod graph;
pub mod kernels;
pub mod rpc;
mod sched;
mod tensor;
pub mod threads;

pub use backend::Backend;
pub use build_profile::{cpu_model, BuildProfile};
pub use device::{
    amx, cpu_has_vec_dot, cpu_variant, cpu_variants, init, local_devices, system_info, vulkan_build, Amx, Buffer,
    BufferType, CpuDevice, CpuVariantInfo, Device,
};
pub use graph::{Gallocr, Graph, GraphArena, Rope, RopeMode, MROPE_SECTIONS};
pub use sched::Sched;
pub use tensor::{Context, Tensor};
