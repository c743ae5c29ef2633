//! The KV cache: K and V of every layer (F16, or quantized as llama.cpp's
//! `-ctk` / `-ctv`), and per group of layers the
//! bookkeeping of which position of which sequences each cell holds.
//!
//! Layers that attend to the whole context share one group of `n_ctx` cells.
//! Sliding-window layers share another, smaller one that is reused as a ring,
//! as llama.cpp's ISWA cache does: it holds each sequence's window plus one
//! micro-batch, so its memory does not grow with the context. All sequences
//! share the cells of a group (llama.cpp's unified cache, `kv_unified`): a cell
//! may hold one position for several sequences (a shared prefix). Which cell a
//! token lands in decides the order flash attention accumulates in, so the cell
//! choice below follows llama.cpp's `find_slot` / `apply_ubatch` step for step.

use std::collections::{BTreeMap, BTreeSet};

use super::placed::{LayerPlaces, Placed};
use crate::ggml::{self, Backend, Buffer, BufferType, Tensor};
use crate::Result;
use ggml_sys as sys;

/// Cells are allocated and attended in steps of this many, as llama.cpp pads
/// both the cache size and the number of cells a graph sees (`n_kv`); the same
/// padding keeps the flash-attention kernels, and so the bits, the same.
pub(crate) const KV_PAD: u32 = 256;

/// The most sequences one context holds (a cell's sequences are the bits of a u64).
pub const MAX_SEQUENCES: u32 = 64;

/// F16 bits of 0 and -inf.
/// The F16 mask's values (flash attention's mask is F16): 0 and -inf.
pub(crate) const MASK_VISIBLE: u16 = 0x0000;
pub(crate) const MASK_HIDDEN: u16 = 0xFC00;

/// What the cache stores K (or V) as: llama.cpp's `--cache-type-k` / `--cache-type-v`
/// values that elelem supports. F16 is the default, as llama.cpp's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheType {
    #[default]
    F16,
    Q8_0,
    Q4_0,
}

impl CacheType {
    pub const ALL: [CacheType; 3] = [CacheType::F16, CacheType::Q8_0, CacheType::Q4_0];

    /// The name llama.cpp's `-ctk` / `-ctv` take (ggml's type name).
    pub fn name(self) -> &'static str {
        match self {
            CacheType::F16 => "f16",
            CacheType::Q8_0 => "q8_0",
            CacheType::Q4_0 => "q4_0",
        }
    }

    pub fn from_name(name: &str) -> Option<CacheType> {
        CacheType::ALL.into_iter().find(|t| t.name() == name)
    }

    pub(crate) fn ggml_type(self) -> sys::ggml_type {
        match self {
            CacheType::F16 => sys::GGML_TYPE_F16,
            CacheType::Q8_0 => sys::GGML_TYPE_Q8_0,
            CacheType::Q4_0 => sys::GGML_TYPE_Q4_0,
        }
    }

    pub fn is_quantized(self) -> bool {
        self != CacheType::F16
    }

    /// How many values one block of the type holds (a row must be whole blocks).
    pub fn block_size(self) -> u32 {
        match self {
            CacheType::F16 => 1,
            CacheType::Q8_0 | CacheType::Q4_0 => 32,
        }
    }

    /// The bytes of a row of `n` values (`n` a multiple of the block size).
    pub fn row_bytes(self, n: u64) -> u64 {
        unsafe { sys::ggml_row_size(self.ggml_type(), n as i64) as u64 }
    }
}

/// The size of the Walsh-Hadamard rotation llama.cpp applies to Q and K before a
/// quantized K cache (and to V, and back on the output, before a quantized V
/// cache), which spreads outliers over a block before it is quantized: 64, doubled
/// while it still divides the head dimension for K, 64 for V; none when the type is
/// F16 or the head dimension is not a multiple of 64 (`llama_kv_cache`'s `n_rot_k`,
/// `n_rot_v`).
fn rotation(ty: CacheType, head_dim: u32, grow: bool) -> Option<u32> {
    if !ty.is_quantized() || !head_dim.is_multiple_of(64) {
        return None;
    }
    let mut n = 64;
    while grow && head_dim.is_multiple_of(2 * n) {
        n *= 2;
    }
    Some(n)
}

/// llama.cpp's `ggml_gen_hadamard`: the orthonormal Walsh-Hadamard matrix of size
/// `n` (a power of 2), row-major.
fn hadamard(n: usize) -> Vec<f32> {
    let mut data = vec![0.0f32; n * n];
    data[0] = (1.0 / f64::from((n as f32).sqrt())) as f32;
    let mut s = 1;
    while s < n {
        for i in 0..s {
            for j in 0..s {
                let val = data[i * n + j];
                data[(i + s) * n + j] = val;
                data[i * n + j + s] = val;
                data[(i + s) * n + j + s] = -val;
            }
        }
        s *= 2;
    }
    data
}

/// How full the cache is, as llama-server's `kv_cache_usage_ratio` and
/// `kv_cache_tokens` gauges read it: of the group whose layers attend over the
/// whole context (else the first), the cells holding a key, the cells in all,
/// and the tokens held (a cell that several sequences share counts once for each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvUsage {
    pub cells_used: u32,
    pub cells: u32,
    pub tokens: u64,
}

/// A sequence's index in a context, `0..n_seq_max`.
pub type SeqId = u32;

/// The cells of one group: llama.cpp's `llama_kv_cells` plus the head its slot
/// search starts from.
pub(crate) struct Cells {
    /// The position each cell holds, -1 when empty.
    pos: Vec<i32>,
    /// Under multi-dimensional rope, each cell's token's place in an image (row, column:
    /// llama.cpp's `llama_kv_cell_ext` `y`, `x`), a text token's both its position: which
    /// of two cells at one position comes first ([`Cells::mask_row`]).
    yx: Vec<(i32, i32)>,
    /// The sequences each cell belongs to, one bit each; 0 when empty.
    seqs: Vec<u64>,
    used: BTreeSet<u32>,
    /// Per sequence, how many cells hold each of its positions.
    seq_pos: Vec<BTreeMap<i32, u32>>,
    head: u32,
    /// A key this many positions behind the query (or more) is invisible; or, where
    /// `chunked`, a key before the query's chunk of this many positions.
    window: Option<u32>,
    chunked: bool,
    /// Causal even in a non-causal pass: Gemma 4's full-attention layers (llama.cpp's
    /// `LLAMA_NON_CAUSAL_TYPE_SWA_ONLY`: only its sliding layers see an image both ways).
    always_causal: bool,
    /// Cells per sequence when each has a range of its own (see [`Cells::partitioned`]).
    partition: Option<u32>,
}

impl Cells {
    fn new(size: u32, window: Option<u32>, n_seq: u32) -> Cells {
        Cells {
            pos: vec![-1; size as usize],
            yx: vec![(-1, -1); size as usize],
            seqs: vec![0; size as usize],
            used: BTreeSet::new(),
            seq_pos: vec![BTreeMap::new(); n_seq as usize],
            head: 0,
            window,
            chunked: false,
            always_causal: false,
            partition: None,
        }
    }

    /// Cells where sequence `s` keeps position `p` in cell `s · per_seq + p`, never
    /// reused while it holds them (a sliding window only masks): its keys lie in
    /// position order whatever else the cache holds, as when it is alone, so attention
    /// that visits them in cell order sees the same sequence either way.
    fn partitioned(per_seq: u32, window: Option<u32>, n_seq: u32) -> Cells {
        Cells {
            partition: Some(per_seq),
            ..Cells::new(per_seq * n_seq, window, n_seq)
        }
    }

    pub fn size(&self) -> u32 {
        self.pos.len() as u32
    }

    pub fn clear(&mut self) {
        self.pos.fill(-1);
        self.seqs.fill(0);
        self.used.clear();
        self.seq_pos.iter_mut().for_each(BTreeMap::clear);
        self.head = 0;
    }

    /// llama.cpp's `is_masked_swa`, standard or chunked.
    fn outside_window(&self, key: i32, query: i32) -> bool {
        self.window.is_some_and(|w| match self.chunked {
            true => i64::from(key) < i64::from(query) / i64::from(w) * i64::from(w),
            false => i64::from(query) - i64::from(key) >= i64::from(w),
        })
    }

    /// The newest position of `seq` in the group, -1 when it has none.
    pub fn seq_pos_max(&self, seq: SeqId) -> i32 {
        self.seq_pos[seq as usize].last_key_value().map_or(-1, |(&p, _)| p)
    }

    /// The oldest position of `seq` in the group, -1 when it has none.
    pub fn seq_pos_min(&self, seq: SeqId) -> i32 {
        self.seq_pos[seq as usize].first_key_value().map_or(-1, |(&p, _)| p)
    }

    fn seq_add(&mut self, idx: u32, seq: SeqId) {
        let bit = 1u64 << seq;
        if self.seqs[idx as usize] & bit == 0 {
            self.seqs[idx as usize] |= bit;
            *self.seq_pos[seq as usize].entry(self.pos[idx as usize]).or_insert(0) += 1;
        }
    }

    /// Takes `seq` out of cell `idx`; true when that left the cell empty.
    fn seq_remove(&mut self, idx: u32, seq: SeqId) -> bool {
        let i = idx as usize;
        let bit = 1u64 << seq;
        if self.seqs[i] & bit == 0 {
            return false;
        }
        self.seqs[i] &= !bit;
        let positions = &mut self.seq_pos[seq as usize];
        let count = positions.get_mut(&self.pos[i]).expect("tracked with its cell");
        *count -= 1;
        if *count == 0 {
            positions.remove(&self.pos[i]);
        }
        if self.seqs[i] == 0 {
            self.pos[i] = -1;
            self.used.remove(&idx);
            return true;
        }
        false
    }

    /// Empties cell `idx`.
    fn remove(&mut self, idx: u32) {
        let mut seqs = self.seqs[idx as usize];
        while seqs != 0 {
            let seq = seqs.trailing_zeros();
            self.seq_remove(idx, seq);
            seqs &= seqs - 1;
        }
    }

    /// The cells for the tokens `(position, sequence)`, without taking them: in a
    /// partitioned group each position's own cell, if the sequence's range has it;
    /// otherwise as [`Cells::find_free`] finds them.
    pub fn find_slot(&self, tokens: &[(i32, SeqId)]) -> Option<Vec<u32>> {
        match self.partition {
            Some(per_seq) => tokens
                .iter()
                .map(|&(p, seq)| {
                    u32::try_from(p)
                        .ok()
                        .filter(|&p| p < per_seq)
                        .map(|p| seq * per_seq + p)
                })
                .collect(),
            None => self.find_free(tokens.len() as u32),
        }
    }

    /// The cells for the next `n_tokens` tokens: empty cells, or (sliding groups)
    /// cells of one sequence that its next token can no longer see. The search
    /// starts at the head, or at 0 when enough cells before the head are free, and
    /// wraps.
    fn find_free(&self, n_tokens: u32) -> Option<Vec<u32>> {
        let size = self.size();
        if n_tokens > size {
            return None;
        }
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
            let seqs = self.seqs[idx as usize];
            let usable = seqs == 0
                || (seqs.count_ones() == 1
                    && self.outside_window(self.pos[idx as usize], self.seq_pos_max(seqs.trailing_zeros()) + 1));
            if usable {
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

    /// Puts the tokens `(position, sequence)` in `idxs` (from [`Cells::find_slot`]).
    /// A sequence whose positions were overwritten loses the older ones too, so each
    /// holds a contiguous range; the next search starts after the last cell taken.
    pub fn apply(&mut self, idxs: &[u32], tokens: impl Iterator<Item = (i32, SeqId)>) {
        let mut newest_overwritten: BTreeMap<SeqId, i32> = BTreeMap::new();
        for (&idx, (p, seq)) in idxs.iter().zip(tokens) {
            let old = self.pos[idx as usize];
            if old >= 0 {
                let owner = self.seqs[idx as usize].trailing_zeros();
                let newest = newest_overwritten.entry(owner).or_insert(-1);
                *newest = (*newest).max(old);
                self.remove(idx);
            }
            self.pos[idx as usize] = p;
            self.used.insert(idx);
            self.seq_add(idx, seq);
        }
        for (seq, newest) in newest_overwritten {
            if self.seq_pos_min(seq) >= 0 && self.seq_pos_min(seq) <= newest {
                self.seq_rm(seq, self.seq_pos_min(seq), newest + 1);
            }
        }
        self.head = idxs.last().map_or(self.head, |&i| i + 1);
    }

    /// Records the (row, column) of each token put in `idxs` ([`Cells::yx`]), as
    /// llama.cpp's `apply_ubatch` sets a cell's `ext` for a batch of 2D positions.
    pub fn set_yx(&mut self, idxs: &[u32], yx: impl Iterator<Item = (i32, i32)>) {
        for (&idx, yx) in idxs.iter().zip(yx) {
            self.yx[idx as usize] = yx;
        }
    }

    /// llama.cpp's `seq_rm`: `seq` forgets its positions in `p0..p1`; cells left
    /// empty are freed, and the next search starts at the first of them if that is
    /// before the head.
    pub fn seq_rm(&mut self, seq: SeqId, p0: i32, p1: i32) {
        let mut first_freed = None;
        for idx in 0..self.size() {
            let p = self.pos[idx as usize];
            if p >= 0 && (p0..p1).contains(&p) && self.seq_remove(idx, seq) {
                first_freed.get_or_insert(idx);
            }
        }
        if let Some(idx) = first_freed.filter(|&i| i < self.head) {
            self.head = idx;
        }
    }

    /// llama.cpp's `seq_cp` within one cache: `dst` shares `src`'s cells of positions
    /// `p0..p1` (not in a partitioned group, where each sequence has cells of its own).
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: i32, p1: i32) {
        debug_assert!(self.partition.is_none(), "partitioned cells are never shared");
        if src == dst {
            return;
        }
        for idx in 0..self.size() {
            let p = self.pos[idx as usize];
            if p >= 0 && (p0..p1).contains(&p) && self.seqs[idx as usize] & (1 << src) != 0 {
                self.seq_add(idx, dst);
            }
        }
    }

    /// llama.cpp's `seq_keep`: every other sequence leaves its cells.
    pub fn seq_keep(&mut self, seq: SeqId) {
        let mut first_freed = None;
        for idx in 0..self.size() {
            let others = self.seqs[idx as usize] & !(1u64 << seq);
            if others != 0 {
                let was = self.seqs[idx as usize];
                let mut rest = others;
                while rest != 0 {
                    self.seq_remove(idx, rest.trailing_zeros());
                    rest &= rest - 1;
                }
                if was & (1u64 << seq) == 0 {
                    first_freed.get_or_insert(idx);
                }
            }
        }
        if let Some(idx) = first_freed.filter(|&i| i < self.head) {
            self.head = idx;
        }
    }

    /// The tokens the sequences hold: each sequence's positions, summed.
    fn tokens(&self) -> u64 {
        self.seq_pos.iter().map(|positions| positions.len() as u64).sum()
    }

    /// How many cells a graph attends over: all up to the last one used, padded.
    pub fn n_kv(&self) -> u32 {
        let used_end = self.used.last().map_or(0, |&i| i + 1);
        self.size().min(KV_PAD.max(used_end.div_ceil(KV_PAD) * KV_PAD))
    }

    /// One row of the mask [n_kv, n_tokens], for the token of `seq` at position
    /// `query` over the first `row.len()` cells: a cell is `visible` if it holds a
    /// position of `seq` at or before the token's (any of its positions, when not
    /// `causal`), within the window, else `hidden` (0 and -inf, in F16 or F32). Under
    /// multi-dimensional rope (`query_yx`, the token's row and column), a cell at the
    /// token's own position whose (row, column) is later is hidden too (llama.cpp's
    /// `is_2d_gt`: an image's tokens share one position). Row by row, because the whole
    /// mask of a micro-batch deep in a large context would be a second copy of up to a GiB.
    #[allow(clippy::too_many_arguments)]
    pub fn mask_row<T: Copy>(
        &self,
        query: i32,
        query_yx: Option<(i32, i32)>,
        seq: SeqId,
        causal: bool,
        row: &mut [T],
        visible: T,
        hidden: T,
    ) {
        row.fill(hidden);
        let bit = 1u64 << seq;
        for (((m, &key), &seqs), &key_yx) in row.iter_mut().zip(&self.pos).zip(&self.seqs).zip(&self.yx) {
            let causal = causal || self.always_causal;
            let later_in_image = causal && key == query && query_yx.is_some_and(|q| key_yx > q);
            if seqs & bit != 0 && (key <= query || !causal) && !later_in_image && !self.outside_window(key, query) {
                *m = visible;
            }
        }
    }
}

/// K and V of every attention layer, F16 or quantized, in one backend buffer
/// allocated once and never touched by the graph allocator (a recurrent layer keeps
/// a state instead, see [`super::recurrent`]). Each layer's tensors have as many
/// rows as its group has cells. V is stored as K is (a row per cell) for flash attention,
/// and transposed (a row per value dimension, a column per cell) without it, as
/// llama.cpp's `v_trans`: the layout its plain attention's matrix product reads.
pub(crate) struct KvCache {
    /// Per layer; `None` for a layer without attention.
    pub k: Vec<Option<Tensor>>,
    pub v: Vec<Option<Tensor>>,
    pub v_trans: bool,
    /// The Walsh-Hadamard matrices Q and K (`k_rot`) and V (`v_rot`) are rotated by
    /// before a quantized cache, as llama.cpp's `attn_inp_k_rot` / `attn_inp_v_rot`.
    pub k_rot: Option<Tensor>,
    pub v_rot: Option<Tensor>,
    /// The index in `groups` of each layer (`None` for a layer without attention).
    pub layer_group: Vec<Option<usize>>,
    pub groups: Vec<Cells>,
    /// None for a model without a cache (an encoder).
    placed: Option<Placed>,
    /// The rotations' own buffer (not counted as cache), when there are any.
    _rot: Option<(ggml::Context, Buffer)>,
}

/// What the cache's shape takes from a model: which layers attend, each one's sliding
/// window (`None` where the layer sees the whole context) and the widths of its keys
/// and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvShape {
    /// Per layer: false for a recurrent layer (llama.cpp's `is_recr`), which has no cache.
    pub attends: Vec<bool>,
    pub windows: Vec<Option<u32>>,
    /// Whether the windows are chunks (see [`Cells`]).
    pub chunked: bool,
    /// Whether the layers without a window stay causal in a non-causal pass (see
    /// [`Cells`]).
    pub dense_layers_stay_causal: bool,
    /// Per layer, K's and V's widths over all its KV heads.
    pub n_embd_k: Vec<u32>,
    pub n_embd_v: Vec<u32>,
    /// One head's (the full-attention layers'), which the quantized caches' rotations span.
    pub head_dim_k: u32,
    pub head_dim_v: u32,
    /// Whether V has a cache of its own: not with multi-head latent attention, whose
    /// values are the first columns of K's rows (llama.cpp's `has_v = !is_mla`).
    pub has_v: bool,
}

impl KvCache {
    /// `n_ubatch` is the most tokens one graph adds: the sliding group keeps that
    /// many cells beyond the windows of its `n_seq` sequences, so a micro-batch never
    /// overwrites a key one of its own tokens still sees. `cells_per_sequence` gives
    /// each sequence that many cells of its own in every group ([`Cells::partitioned`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: &Backend,
        layer_bufts: &[Option<BufferType>],
        shape: &KvShape,
        n_ctx: u32,
        n_ubatch: u32,
        n_seq: u32,
        cells_per_sequence: Option<u32>,
        v_trans: bool,
        (type_k, type_v): (CacheType, CacheType),
    ) -> Result<KvCache> {
        let pad = |n: u32| n.div_ceil(KV_PAD) * KV_PAD;
        let full = pad(n_ctx);
        let mut groups = Vec::new();
        let mut group_of_kind = [None, None];
        let layer_group = shape
            .windows
            .iter()
            .zip(&shape.attends)
            .map(|(&window, &attends)| {
                let sliding = window.is_some();
                attends.then(|| {
                    *group_of_kind[usize::from(sliding)].get_or_insert_with(|| {
                        let cells = match (cells_per_sequence, window) {
                            (Some(per_seq), _) => Cells::partitioned(per_seq, window, n_seq),
                            (None, Some(window)) => {
                                let ring = window.saturating_mul(n_seq).saturating_add(n_ubatch);
                                Cells::new(pad(full.min(ring)), Some(window), n_seq)
                            }
                            (None, None) => Cells::new(full, None, n_seq),
                        };
                        groups.push(Cells {
                            chunked: shape.chunked && window.is_some(),
                            always_causal: shape.dense_layers_stay_causal && window.is_none(),
                            ..cells
                        });
                        groups.len() - 1
                    })
                })
            })
            .collect::<Vec<_>>();
        // A layer's K and V go where the layer is (`layer_bufts`; `None`: the CPU's buffer).
        let mut places = LayerPlaces::new(backend.default_buft(), layer_bufts, 2 * shape.windows.len());
        let mut k = Vec::with_capacity(shape.windows.len());
        let mut v = Vec::with_capacity(shape.windows.len());
        for (il, group) in layer_group.iter().enumerate() {
            let Some(g) = *group else {
                k.push(None);
                v.push(None);
                continue;
            };
            let cells = i64::from(groups[g].size());
            let ctx = places.context(il)?;
            k.push(Some(
                ctx.new_tensor(type_k.ggml_type(), &[shape.n_embd_k[il].into(), cells])?
                    .set_name(&format!("cache_k_l{il}")),
            ));
            v.push(if shape.has_v {
                Some(
                    ctx.new_tensor(type_v.ggml_type(), &[shape.n_embd_v[il].into(), cells])?
                        .set_name(&format!("cache_v_l{il}")),
                )
            } else {
                None
            });
        }
        // What failing to allocate the keys and values would cost, so the error says.
        let row_bytes = |il: usize| {
            let v_bytes = if shape.has_v {
                type_v.row_bytes(shape.n_embd_v[il].into())
            } else {
                0
            };
            type_k.row_bytes(shape.n_embd_k[il].into()) + v_bytes
        };
        let bytes: u64 = layer_group
            .iter()
            .enumerate()
            .filter_map(|(il, g)| g.map(|g| row_bytes(il) * u64::from(groups[g].size())))
            .sum();
        let what = format!(
            "KV cache ({bytes} bytes, {:.1} MiB, for n_ctx {n_ctx}; a smaller n_ctx needs less)",
            bytes as f64 / f64::from(1 << 20)
        );
        let placed = places.allocate(&what)?;
        let rotations = [
            rotation(type_k, shape.head_dim_k, true),
            rotation(type_v, shape.head_dim_v, false).filter(|_| shape.has_v),
        ];
        let (k_rot, v_rot, rot) = if rotations.iter().any(Option::is_some) {
            let rot_ctx = ggml::Context::new_no_alloc(2)?;
            let [k_rot, v_rot] = rotations.map(|n| {
                n.map(|n| rot_ctx.new_tensor(sys::GGML_TYPE_F32, &[n.into(), n.into()]))
                    .transpose()
            });
            let (k_rot, v_rot) = (k_rot?, v_rot?);
            let rot_buffer = Buffer::alloc_ctx_tensors(&rot_ctx, backend.default_buft(), "KV cache rotation matrices")?;
            for t in [k_rot, v_rot].into_iter().flatten() {
                t.write(&hadamard(t.ne()[0] as usize));
            }
            (k_rot, v_rot, Some((rot_ctx, rot_buffer)))
        } else {
            (None, None, None)
        };
        Ok(KvCache {
            k,
            v,
            v_trans,
            k_rot,
            v_rot,
            layer_group,
            groups,
            placed: Some(placed),
            _rot: rot,
        })
    }

    /// Each group's V width (its first layer's; a group's layers agree): the values a
    /// transposed V cache holds per cell, 0 without a V cache (latent attention's).
    pub fn group_v_widths(&self) -> Vec<u32> {
        (0..self.groups.len())
            .map(|g| {
                let il = self.layer_group.iter().position(|&lg| lg == Some(g));
                il.and_then(|il| self.v[il]).map_or(0, |v| v.ne()[0] as u32)
            })
            .collect()
    }

    /// No cache at all, for a model whose passes attend over their own tokens only.
    pub fn none() -> KvCache {
        KvCache {
            k: Vec::new(),
            v: Vec::new(),
            v_trans: false,
            k_rot: None,
            v_rot: None,
            layer_group: Vec::new(),
            groups: Vec::new(),
            placed: None,
            _rot: None,
        }
    }

    pub fn bytes(&self) -> usize {
        self.placed.as_ref().map_or(0, Placed::bytes)
    }

    /// The bytes of it in buffers of type `buft` (on one device, or the CPU's).
    pub fn bytes_in(&self, buft: BufferType) -> usize {
        self.placed.as_ref().map_or(0, |p| p.bytes_in(buft))
    }

    /// Forgets every sequence; the data stays, masked out until overwritten.
    pub fn clear(&mut self) {
        self.groups.iter_mut().for_each(Cells::clear);
    }

    /// How many cells are free in the fullest group that can run out. A sliding ring
    /// cannot: it reuses the cells its windows leave behind and holds every sequence's
    /// window plus a micro-batch, so however long the sequences grow it limits nothing
    /// (counting its size as the free cells held back sequences llama.cpp decodes
    /// together). Without a cache (every layer recurrent) there is nothing to run out of.
    pub fn free_cells(&self) -> u32 {
        self.groups
            .iter()
            .filter(|cells| cells.window.is_none() || cells.partition.is_some())
            .map(|cells| cells.size() - cells.used.len() as u32)
            .min()
            .unwrap_or(u32::MAX)
    }

    /// See [`KvUsage`]; all zero for a model without a cache.
    pub fn usage(&self) -> KvUsage {
        let group = self
            .groups
            .iter()
            .find(|cells| cells.window.is_none())
            .or(self.groups.first());
        group.map_or_else(KvUsage::default, |cells| KvUsage {
            cells_used: cells.used.len() as u32,
            cells: cells.size(),
            tokens: cells.tokens(),
        })
    }

    /// `seq` forgets its positions `p0..` in every group.
    pub fn seq_rm(&mut self, seq: SeqId, p0: i32) {
        self.groups.iter_mut().for_each(|cells| cells.seq_rm(seq, p0, i32::MAX));
    }

    /// `dst` shares `src`'s cells of positions `p0..p1` in every group.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: i32, p1: i32) {
        self.groups.iter_mut().for_each(|cells| cells.seq_cp(src, dst, p0, p1));
    }

    /// Every sequence but `seq` leaves its cells, in every group.
    pub fn seq_keep(&mut self, seq: SeqId) {
        self.groups.iter_mut().for_each(|cells| cells.seq_keep(seq));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `cells` with `n` more tokens of `seq` in micro-batches of `ubatch`,
    /// returning the cells each batch took.
    fn feed(cells: &mut Cells, seq: SeqId, first: i32, n: u32, ubatch: u32) -> Vec<Vec<u32>> {
        let mut taken = Vec::new();
        let mut p = first;
        let mut left = n;
        while left > 0 {
            let n_tok = left.min(ubatch);
            let tokens: Vec<(i32, SeqId)> = (p..p + n_tok as i32).map(|p| (p, seq)).collect();
            let idxs = cells.find_slot(&tokens).expect("a slot");
            cells.apply(&idxs, tokens.into_iter());
            taken.push(idxs);
            p += n_tok as i32;
            left -= n_tok;
        }
        taken
    }

    #[test]
    fn rotations_are_llama_cpps() {
        assert_eq!(rotation(CacheType::F16, 64, true), None);
        assert_eq!(rotation(CacheType::Q8_0, 64, true), Some(64));
        assert_eq!(rotation(CacheType::Q8_0, 128, true), Some(128));
        assert_eq!(rotation(CacheType::Q8_0, 256, false), Some(64));
        assert_eq!(rotation(CacheType::Q4_0, 96, true), None);
        // Orthonormal: H·Hᵀ = I.
        let n = 64;
        let h = hadamard(n);
        for i in 0..n {
            for j in 0..n {
                let dot: f32 = (0..n).map(|k| h[i * n + k] * h[j * n + k]).sum();
                assert!((dot - f32::from(u8::from(i == j))).abs() < 1e-5);
            }
        }
        assert_eq!(CacheType::from_name("q8_0"), Some(CacheType::Q8_0));
        assert_eq!(CacheType::from_name("q8"), None);
    }

    #[test]
    fn full_cache_cells_are_positions() {
        let mut cells = Cells::new(1024, None, 1);
        let taken = feed(&mut cells, 0, 0, 700, 512);
        assert_eq!(taken[0], (0..512).collect::<Vec<_>>());
        assert_eq!(taken[1], (512..700).collect::<Vec<_>>());
        assert_eq!(cells.n_kv(), 768);
        let mut mask = [0; 768];
        cells.mask_row(699, None, 0, true, &mut mask, MASK_VISIBLE, MASK_HIDDEN);
        assert!(mask[..700].iter().all(|&m| m == MASK_VISIBLE));
        assert!(mask[700..].iter().all(|&m| m == MASK_HIDDEN));
    }

    #[test]
    fn usage_reads_the_full_group_and_counts_shared_cells_per_sequence() {
        let mut kv = KvCache::none();
        assert_eq!(kv.usage(), KvUsage::default());
        let mut sliding = Cells::new(64, Some(8), 2);
        feed(&mut sliding, 0, 0, 20, 20);
        let mut full = Cells::new(256, None, 2);
        feed(&mut full, 0, 0, 100, 512);
        // Sequence 1 shares sequence 0's first 40 cells, then writes 10 of its own.
        full.seq_cp(0, 1, 0, 40);
        feed(&mut full, 1, 40, 10, 512);
        kv.groups = vec![sliding, full];
        let usage = KvUsage {
            cells_used: 110,
            cells: 256,
            tokens: 150,
        };
        assert_eq!(kv.usage(), usage);
    }

    #[test]
    fn sliding_cache_is_a_ring_over_the_window() {
        // llama.cpp's SWA cache for n_swa 512, n_ubatch 512: 1024 cells.
        let mut cells = Cells::new(1024, Some(512), 1);
        let taken = feed(&mut cells, 0, 0, 1100, 512);
        // The third micro-batch wraps to the cells of positions 0..76.
        assert_eq!(taken[2], (0..76).collect::<Vec<_>>());
        assert_eq!(cells.n_kv(), 1024);
        // Decoding continues around the ring, always over the oldest position.
        assert_eq!(feed(&mut cells, 0, 1100, 1, 1)[0], [76]);
        let query = 1100;
        let mut mask = [0; 1024];
        cells.mask_row(query, None, 0, true, &mut mask, MASK_VISIBLE, MASK_HIDDEN);
        for (idx, &m) in mask.iter().enumerate() {
            let key = cells.pos[idx];
            assert_eq!(m == MASK_VISIBLE, query - key < 512, "cell {idx} at {key}");
        }
        // A long prompt: each micro-batch reuses cells the window has left behind.
        cells.clear();
        let taken = feed(&mut cells, 0, 0, 2000, 512);
        assert_eq!(taken[2], (0..512).collect::<Vec<_>>());
        assert_eq!(taken[3], (512..976).collect::<Vec<_>>());
        assert_eq!(cells.used.len(), 1024);
    }

    #[test]
    fn seq_rm_frees_the_newest_positions() {
        let mut cells = Cells::new(1024, Some(512), 1);
        feed(&mut cells, 0, 0, 1100, 512);
        cells.seq_rm(0, 1090, i32::MAX);
        assert_eq!(cells.seq_pos_max(0), 1089);
        assert_eq!(cells.head, 66);
        assert_eq!(feed(&mut cells, 0, 1090, 4, 4)[0], [66, 67, 68, 69]);
    }

    #[test]
    fn sequences_see_only_their_own_cells_and_share_copied_ones() {
        let mut cells = Cells::new(256, None, 3);
        // A shared prefix of 4 in sequence 0, copied to 1; then each goes its own way.
        feed(&mut cells, 0, 0, 4, 512);
        cells.seq_cp(0, 1, 0, i32::MAX);
        let a = feed(&mut cells, 0, 4, 2, 512);
        let b = feed(&mut cells, 1, 4, 3, 512);
        assert_eq!((a[0].clone(), b[0].clone()), (vec![4, 5], vec![6, 7, 8]));
        let visible = |seq, query| {
            let mut row = [0u16; 9];
            cells.mask_row(query, None, seq, true, &mut row, MASK_VISIBLE, MASK_HIDDEN);
            row.iter().map(|&m| m == MASK_VISIBLE).collect::<Vec<_>>()
        };
        let t = true;
        let f = false;
        assert_eq!(visible(0, 5), [t, t, t, t, t, t, f, f, f]);
        assert_eq!(visible(1, 6), [t, t, t, t, f, f, t, t, t]);
        assert_eq!(visible(2, 9), [f; 9]);
        // Sequence 0 leaves: the shared prefix stays for 1, its own cells are freed.
        cells.seq_rm(0, 0, i32::MAX);
        assert_eq!(cells.used.len(), 7);
        assert_eq!(cells.head, 4);
        assert_eq!(
            (cells.seq_pos_min(1), cells.seq_pos_max(1), cells.seq_pos_max(0)),
            (0, 6, -1)
        );
        // Keeping 1 alone changes nothing more; keeping 2 frees everything.
        cells.seq_keep(1);
        assert_eq!(cells.used.len(), 7);
        cells.seq_keep(2);
        assert!(cells.used.is_empty());
    }

    #[test]
    fn partitioned_cells_keep_each_sequence_in_position_order_in_its_own_range() {
        // Three sequences of 100 cells each, a window that only masks.
        let mut cells = Cells::partitioned(100, Some(8), 3);
        assert_eq!(cells.size(), 300);
        // Interleaved arrivals: each position still lands in its sequence's own cell.
        let mixed = [(0, 2), (0, 0), (1, 2), (1, 0), (0, 1), (2, 2)];
        let idxs = cells.find_slot(&mixed).unwrap();
        assert_eq!(idxs, [200, 0, 201, 1, 100, 202]);
        cells.apply(&idxs, mixed.into_iter());
        assert_eq!(feed(&mut cells, 2, 3, 20, 7)[1], (210..217).collect::<Vec<_>>());
        // Past the window nothing is reused: only the mask hides old keys.
        let mut row = [0u16; 300];
        cells.mask_row(22, None, 2, true, &mut row, MASK_VISIBLE, MASK_HIDDEN);
        let visible: Vec<usize> = (0..300).filter(|&i| row[i] == MASK_VISIBLE).collect();
        assert_eq!(visible, (215..223).collect::<Vec<_>>());
        // A sequence's range is all it has; truncated, it refills the same cells.
        assert_eq!(cells.find_slot(&[(100, 0)]), None);
        cells.seq_rm(2, 10, i32::MAX);
        assert_eq!(cells.find_slot(&[(10, 2), (11, 2)]), Some(vec![210, 211]));
    }

    #[test]
    fn only_groups_that_can_fill_limit_the_free_cells() {
        let mut kv = KvCache::none();
        assert_eq!(kv.free_cells(), u32::MAX);
        // A ring of 768 cells over a window of 4, and 4096 cells for the whole context.
        let mut ring = Cells::new(768, Some(4), 4);
        let mut full = Cells::new(4096, None, 4);
        for seq in 0..3 {
            feed(&mut ring, seq, 0, 700, 512);
            feed(&mut full, seq, 0, 700, 512);
        }
        kv.groups = vec![ring, full];
        // 2,100 tokens are more than the ring holds; the full group decides.
        assert_eq!(kv.free_cells(), 4096 - 2100);
        // A sliding window over cells of each sequence's own only masks: it fills.
        let mut partitioned = Cells::partitioned(512, Some(4), 2);
        feed(&mut partitioned, 0, 0, 500, 512);
        kv.groups = vec![partitioned];
        assert_eq!(kv.free_cells(), 1024 - 500);
    }

    #[test]
    fn sliding_rings_track_each_sequence_window() {
        // Two sequences in a ring of 256 cells with a window of 8.
        let mut cells = Cells::new(256, Some(8), 2);
        for step in 0..200 {
            feed(&mut cells, 0, step, 1, 1);
            feed(&mut cells, 1, step, 1, 1);
        }
        // Each sequence keeps at least its window, and the ring never fills.
        for seq in 0..2 {
            assert_eq!(cells.seq_pos_max(seq), 199);
            assert!(cells.seq_pos_min(seq) <= 199 - 8);
        }
        assert!(cells.used.len() <= 256);
    }
}
