//! Where a memory's per-layer tensors live: one buffer per buffer type its layers are on
//! (a device's, beside the layer's weights, or the CPU's).

use crate::ggml::{self, Buffer, BufferType};
use crate::Result;

/// The descriptors of a memory's per-layer tensors, one context per buffer type its
/// layers are placed in, before they are allocated.
pub(super) struct LayerPlaces<'a> {
    cpu: BufferType,
    layer_bufts: &'a [Option<BufferType>],
    n_tensors: usize,
    contexts: Vec<(BufferType, ggml::Context)>,
}

impl<'a> LayerPlaces<'a> {
    /// `layer_bufts[il]`: where layer `il`'s tensors go (`None`, or past the end: `cpu`).
    pub(super) fn new(cpu: BufferType, layer_bufts: &'a [Option<BufferType>], n_tensors: usize) -> LayerPlaces<'a> {
        LayerPlaces {
            cpu,
            layer_bufts,
            n_tensors,
            contexts: Vec::new(),
        }
    }

    /// The context for layer `il`'s tensors.
    pub(super) fn context(&mut self, il: usize) -> Result<&ggml::Context> {
        let buft = self.layer_bufts.get(il).copied().flatten().unwrap_or(self.cpu);
        let at = match self.contexts.iter().position(|(b, _)| *b == buft) {
            Some(at) => at,
            None => {
                self.contexts.push((buft, ggml::Context::new_no_alloc(self.n_tensors)?));
                self.contexts.len() - 1
            }
        };
        Ok(&self.contexts[at].1)
    }

    /// A zeroed buffer per buffer type for its tensors; `what` names them in an error.
    pub(super) fn allocate(self, what: &str) -> Result<Placed> {
        let mut placed = Placed::default();
        for (buft, ctx) in self.contexts {
            let buffer = if buft == self.cpu {
                Buffer::alloc_ctx_tensors(&ctx, buft, what)?
            } else {
                Buffer::alloc_ctx_tensors(&ctx, buft, what).map_err(|_| {
                    crate::Error::Backend(format!(
                        "the device {} could not allocate its layers' share of the {what}: too little memory there",
                        buft.name()
                    ))
                })?
            };
            buffer.clear(0);
            placed.buffers.push((buft, buffer));
            placed.contexts.push(ctx);
        }
        Ok(placed)
    }
}

/// A memory's buffers, and the descriptor contexts their tensors live in.
#[derive(Default)]
pub(super) struct Placed {
    buffers: Vec<(BufferType, Buffer)>,
    contexts: Vec<ggml::Context>,
}

impl Placed {
    pub(super) fn bytes(&self) -> usize {
        self.buffers.iter().map(|(_, b)| b.size()).sum()
    }

    /// The bytes of its buffers of type `buft`.
    pub(super) fn bytes_in(&self, buft: BufferType) -> usize {
        self.buffers
            .iter()
            .filter(|(t, _)| *t == buft)
            .map(|(_, b)| b.size())
            .sum()
    }
}
