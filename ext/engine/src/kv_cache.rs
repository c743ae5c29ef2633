use crate::ggml::{self, Backend, Buffer, Tensor};
use crate::hparams::HParams;
use crate::Result;
use ggml_sys as sys;

/// Cells are allocated and attended in steps of this many, as llama.cpp pads
/// both the cache size and the number of cells a graph sees (`n_kv`); the same
/// padding keeps the flash-attention kernels, and so the bits, the same.
pub(crate) const KV_PAD: u32 = 256;

/// K and V of every layer for `size` cells, F16, in one backend buffer allocated
/// once and never touched by the graph allocator. V is not transposed (the
/// flash-attention layout).
pub(crate) struct KvCache {
    pub k: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub size: u32,
    buffer: Buffer,
    _ctx: ggml::Context,
}

impl KvCache {
    pub fn new(backend: &Backend, hp: &HParams, n_ctx: u32) -> Result<KvCache> {
        let size = n_ctx.div_ceil(KV_PAD) * KV_PAD;
        let ctx = ggml::Context::new_no_alloc(2 * hp.n_layer as usize)?;
        let mut k = Vec::with_capacity(hp.n_layer as usize);
        let mut v = Vec::with_capacity(hp.n_layer as usize);
        for il in 0..hp.n_layer {
            k.push(
                ctx.new_tensor(sys::GGML_TYPE_F16, &[hp.n_embd_k_gqa().into(), size.into()])?
                    .set_name(&format!("cache_k_l{il}")),
            );
            v.push(
                ctx.new_tensor(sys::GGML_TYPE_F16, &[hp.n_embd_v_gqa().into(), size.into()])?
                    .set_name(&format!("cache_v_l{il}")),
            );
        }
        let buffer = Buffer::alloc_ctx_tensors(&ctx, backend.default_buft(), "KV cache")?;
        buffer.clear(0);
        Ok(KvCache {
            k,
            v,
            size,
            buffer,
            _ctx: ctx,
        })
    }

    pub fn bytes(&self) -> usize {
        self.buffer.size()
    }

    /// How many cells a graph attends over once `used` cells hold the sequence.
    pub fn n_kv(&self, used: u32) -> u32 {
        self.size.min(KV_PAD.max(used.div_ceil(KV_PAD) * KV_PAD))
    }
}
