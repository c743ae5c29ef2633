//! The KV cache: K and V of every layer, F16, and per group of layers the
//! bookkeeping of which position each cell holds.
//!
//! Layers that attend to the whole context share one group of `n_ctx` cells.
//! Sliding-window layers share another, smaller one that is reused as a ring,
//! as llama.cpp's ISWA cache does: it holds the window plus one micro-batch,
//! so its memory does not grow with the context. Which cell a token lands in
//! decides the order flash attention accumulates in, so the cell choice below
//! follows llama.cpp's `find_slot` / `apply_ubatch` step for step.

use std::collections::BTreeSet;

use crate::ggml::{self, Backend, Buffer, Tensor};
use crate::hparams::HParams;
use crate::Result;
use ggml_sys as sys;

/// Cells are allocated and attended in steps of this many, as llama.cpp pads
/// both the cache size and the number of cells a graph sees (`n_kv`); the same
/// padding keeps the flash-attention kernels, and so the bits, the same.
pub(crate) const KV_PAD: u32 = 256;

/// F16 bits of 0 and -inf.
const MASK_VISIBLE: u16 = 0x0000;
const MASK_HIDDEN: u16 = 0xFC00;

/// The cells of one group, for a single sequence: llama.cpp's `llama_kv_cells`
/// plus the head its slot search starts from.
pub(crate) struct Cells {
    /// The position each cell holds, -1 when empty.
    pos: Vec<i32>,
    used: BTreeSet<u32>,
    positions: BTreeSet<i32>,
    head: u32,
    /// A key this many positions behind the query (or more) is invisible.
    window: Option<u32>,
}

impl Cells {
    fn new(size: u32, window: Option<u32>) -> Cells {
        Cells {
            pos: vec![-1; size as usize],
            used: BTreeSet::new(),
            positions: BTreeSet::new(),
            head: 0,
            window,
        }
    }

    pub fn size(&self) -> u32 {
        self.pos.len() as u32
    }

    pub fn clear(&mut self) {
        self.pos.fill(-1);
        self.used.clear();
        self.positions.clear();
        self.head = 0;
    }

    fn outside_window(&self, key: i32, query: i32) -> bool {
        self.window
            .is_some_and(|w| i64::from(query) - i64::from(key) >= i64::from(w))
    }

    fn remove(&mut self, idx: u32) {
        let p = std::mem::replace(&mut self.pos[idx as usize], -1);
        self.used.remove(&idx);
        self.positions.remove(&p);
    }

    /// The cells for the next `n_tokens` tokens, without taking them: empty cells,
    /// or (sliding groups) cells no later token can see. The search starts at the
    /// head, or at 0 when enough cells before the head are free, and wraps.
    pub fn find_slot(&self, n_tokens: u32) -> Option<Vec<u32>> {
        let size = self.size();
        if n_tokens > size {
            return None;
        }
        // The next position: every token of the batch comes at or after it.
        let next = self.positions.last().map_or(0, |&p| p + 1);
        let mut head = self.head;
        if head > self.used.len() as u32 + 2 * n_tokens {
            head = 0;
        }
        let mut idxs = Vec::with_capacity(n_tokens as usize);
        let mut n_tested = 0;
        loop {
            if head == size {
                head = 0;
                continue;
            }
            let idx = head;
            head += 1;
            n_tested += 1;
            let p = self.pos[idx as usize];
            if p < 0 || self.outside_window(p, next) {
                idxs.push(idx);
            }
            if idxs.len() == n_tokens as usize {
                return Some(idxs);
            }
            if n_tested >= size {
                return None;
            }
        }
    }

    /// Puts positions `first..` in `idxs` (from [`Cells::find_slot`]). Positions
    /// older than any it overwrote are dropped too, so the group always holds a
    /// contiguous range; the next search starts after the last cell taken.
    pub fn apply(&mut self, idxs: &[u32], first: i32) {
        let mut newest_overwritten = -1;
        for (&idx, p) in idxs.iter().zip(first..) {
            let old = self.pos[idx as usize];
            if old >= 0 {
                newest_overwritten = newest_overwritten.max(old);
                self.remove(idx);
            }
            self.pos[idx as usize] = p;
            self.used.insert(idx);
            self.positions.insert(p);
        }
        if self
            .positions
            .first()
            .is_some_and(|&oldest| oldest <= newest_overwritten)
        {
            self.remove_range(0, newest_overwritten + 1);
        }
        self.head = idxs.last().map_or(self.head, |&i| i + 1);
    }

    /// Forgets positions `first..`, and lets the next search start at the first
    /// cell freed if that is before the head.
    pub fn truncate(&mut self, first: i32) {
        self.remove_range(first, i32::MAX);
    }

    fn remove_range(&mut self, p0: i32, p1: i32) {
        let mut first_freed = None;
        for idx in 0..self.size() {
            let p = self.pos[idx as usize];
            if p >= 0 && (p0..p1).contains(&p) {
                self.remove(idx);
                first_freed.get_or_insert(idx);
            }
        }
        if let Some(idx) = first_freed.filter(|&i| i < self.head) {
            self.head = idx;
        }
    }

    /// How many cells a graph attends over: all up to the last one used, padded.
    pub fn n_kv(&self) -> u32 {
        let used_end = self.used.last().map_or(0, |&i| i + 1);
        self.size().min(KV_PAD.max(used_end.div_ceil(KV_PAD) * KV_PAD))
    }

    /// One row of the F16 mask [n_kv, n_tokens], for the token at position `query`
    /// over the first `row.len()` cells: a cell is visible if it holds a position at
    /// or before the token's, within the window. Row by row, because the whole mask
    /// of a micro-batch deep in a large context would be a second copy of up to a GiB.
    pub fn mask_row(&self, query: i32, row: &mut [u16]) {
        row.fill(MASK_HIDDEN);
        for (m, &key) in row.iter_mut().zip(&self.pos) {
            if key >= 0 && key <= query && !self.outside_window(key, query) {
                *m = MASK_VISIBLE;
            }
        }
    }
}

/// K and V of every layer, F16, in one backend buffer allocated once and never
/// touched by the graph allocator. V is not transposed (the flash-attention
/// layout). Each layer's tensors have as many rows as its group has cells.
pub(crate) struct KvCache {
    pub k: Vec<Tensor>,
    pub v: Vec<Tensor>,
    /// The index in `groups` of each layer.
    pub layer_group: Vec<usize>,
    pub groups: Vec<Cells>,
    buffer: Buffer,
    _ctx: ggml::Context,
}

impl KvCache {
    /// `n_ubatch` is the most tokens one graph adds: the sliding group keeps that
    /// many cells beyond the window so a micro-batch never overwrites a key one of
    /// its own tokens still sees.
    pub fn new(backend: &Backend, hp: &HParams, n_ctx: u32, n_ubatch: u32) -> Result<KvCache> {
        let pad = |n: u32| n.div_ceil(KV_PAD) * KV_PAD;
        let full = pad(n_ctx);
        let mut groups = Vec::new();
        let mut group_of_kind = [None, None];
        let layer_group = (0..hp.n_layer as usize)
            .map(|il| {
                let sliding = hp.is_swa(il);
                *group_of_kind[usize::from(sliding)].get_or_insert_with(|| {
                    groups.push(match &hp.swa {
                        Some(swa) if sliding => {
                            Cells::new(pad(full.min(swa.window.saturating_add(n_ubatch))), Some(swa.window))
                        }
                        _ => Cells::new(full, None),
                    });
                    groups.len() - 1
                })
            })
            .collect::<Vec<_>>();
        let ctx = ggml::Context::new_no_alloc(2 * hp.n_layer as usize)?;
        let mut k = Vec::with_capacity(hp.n_layer as usize);
        let mut v = Vec::with_capacity(hp.n_layer as usize);
        for (il, &g) in layer_group.iter().enumerate() {
            let cells = i64::from(groups[g].size());
            k.push(
                ctx.new_tensor(sys::GGML_TYPE_F16, &[hp.n_embd_k_gqa().into(), cells])?
                    .set_name(&format!("cache_k_l{il}")),
            );
            v.push(
                ctx.new_tensor(sys::GGML_TYPE_F16, &[hp.n_embd_v_gqa().into(), cells])?
                    .set_name(&format!("cache_v_l{il}")),
            );
        }
        // F16 keys and values: what failing to allocate them would cost, so the error says.
        let bytes: u64 = layer_group
            .iter()
            .map(|&g| u64::from(hp.n_embd_k_gqa() + hp.n_embd_v_gqa()) * u64::from(groups[g].size()) * 2)
            .sum();
        let what = format!(
            "KV cache ({bytes} bytes, {:.1} MiB, for n_ctx {n_ctx}; a smaller n_ctx needs less)",
            bytes as f64 / f64::from(1 << 20)
        );
        let buffer = Buffer::alloc_ctx_tensors(&ctx, backend.default_buft(), &what)?;
        buffer.clear(0);
        Ok(KvCache {
            k,
            v,
            layer_group,
            groups,
            buffer,
            _ctx: ctx,
        })
    }

    pub fn bytes(&self) -> usize {
        self.buffer.size()
    }

    /// Forgets the sequence; the data stays, masked out until overwritten.
    pub fn clear(&mut self) {
        self.groups.iter_mut().for_each(Cells::clear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `cells` with `n` more tokens in micro-batches of `ubatch`, returning
    /// the cells each batch took.
    fn feed(cells: &mut Cells, first: i32, n: u32, ubatch: u32) -> Vec<Vec<u32>> {
        let mut taken = Vec::new();
        let mut p = first;
        let mut left = n;
        while left > 0 {
            let n_tok = left.min(ubatch);
            let idxs = cells.find_slot(n_tok).expect("a slot");
            cells.apply(&idxs, p);
            taken.push(idxs);
            p += n_tok as i32;
            left -= n_tok;
        }
        taken
    }

    #[test]
    fn full_cache_cells_are_positions() {
        let mut cells = Cells::new(1024, None);
        let taken = feed(&mut cells, 0, 700, 512);
        assert_eq!(taken[0], (0..512).collect::<Vec<_>>());
        assert_eq!(taken[1], (512..700).collect::<Vec<_>>());
        assert_eq!(cells.n_kv(), 768);
        let mut mask = [0; 768];
        cells.mask_row(699, &mut mask);
        assert!(mask[..700].iter().all(|&m| m == MASK_VISIBLE));
        assert!(mask[700..].iter().all(|&m| m == MASK_HIDDEN));
    }

    #[test]
    fn sliding_cache_is_a_ring_over_the_window() {
        // llama.cpp's SWA cache for n_swa 512, n_ubatch 512: 1024 cells.
        let mut cells = Cells::new(1024, Some(512));
        let taken = feed(&mut cells, 0, 1100, 512);
        // The third micro-batch wraps to the cells of positions 0..76.
        assert_eq!(taken[2], (0..76).collect::<Vec<_>>());
        assert_eq!(cells.n_kv(), 1024);
        // Decoding continues around the ring, always over the oldest position.
        assert_eq!(feed(&mut cells, 1100, 1, 1)[0], [76]);
        let query = 1100;
        let mut mask = [0; 1024];
        cells.mask_row(query, &mut mask);
        for (idx, &m) in mask.iter().enumerate() {
            let key = cells.pos[idx];
            assert_eq!(m == MASK_VISIBLE, query - key < 512, "cell {idx} at {key}");
        }
        // A long prompt: each micro-batch reuses cells the window has left behind.
        cells.clear();
        let taken = feed(&mut cells, 0, 2000, 512);
        assert_eq!(taken[2], (0..512).collect::<Vec<_>>());
        assert_eq!(taken[3], (512..976).collect::<Vec<_>>());
        assert_eq!(cells.used.len(), 1024);
    }

    #[test]
    fn truncate_frees_the_newest_positions() {
        let mut cells = Cells::new(1024, Some(512));
        feed(&mut cells, 0, 1100, 512);
        cells.truncate(1090);
        assert_eq!(cells.positions.last(), Some(&1089));
        assert_eq!(cells.head, 66);
        assert_eq!(feed(&mut cells, 1090, 4, 4)[0], [66, 67, 68, 69]);
    }
}
