//! A forward pass's inputs as small objects, as llama.cpp's `llm_graph_input_*`: each
//! is created with the graph (its tensors flagged as inputs), writes its own values
//! for a micro-batch once the graph is allocated ([`GraphInput::set`]), and says
//! whether a built graph can serve another micro-batch unchanged
//! ([`GraphInput::can_reuse`]), so that most decode steps only write their inputs.

use std::cell::RefCell;

use ggml_sys as sys;

use crate::ggml::{Graph, Tensor};
use crate::memory::kv_cache::{Cells, KvCache, SeqId, MASK_HIDDEN, MASK_VISIBLE};
use crate::memory::StateRows;

/// One micro-batch: each token with its position and sequence, the rows whose
/// logits are wanted, and the cache cells each group put the tokens in.
pub(crate) struct Batch<'a> {
    /// The token ids, or for a pass over embeddings (`embd`) the ids the sequence records
    /// in their place, which the graph does not read.
    pub tokens: &'a [u32],
    /// The input embeddings, n_embd values per token, instead of the tokens' rows (an
    /// image's, from its projector: llama.cpp's `batch.embd`).
    pub embd: Option<&'a [f32]>,
    /// False for a pass whose tokens see each other in both directions (Gemma 3's image
    /// tokens, as mtmd decodes them with `llama_set_causal_attn(false)`).
    pub causal: bool,
    pub pos: &'a [i32],
    /// Under multi-dimensional rope, each token's row and column (an image token's place in
    /// its grid, offset by its position; a text token's position twice): the second and
    /// third sections of its position, and the order of a position's cells in the mask.
    pub yx: Option<&'a [(i32, i32)]>,
    pub seqs: &'a [SeqId],
    pub out_rows: &'a [i32],
    /// Per cache group, the cell of each token.
    pub slots: &'a [Vec<u32>],
    pub kv: &'a KvCache,
    /// Per distinct sequence, in the order of its first token, the rows of its recurrent
    /// state (empty for a model without one).
    pub state_rows: &'a [StateRows],
}

impl Batch<'_> {
    fn n_tokens(&self) -> usize {
        self.tokens.len()
    }
}

pub(crate) trait GraphInput: Send {
    /// Writes this micro-batch's values into the allocated tensors.
    fn set(&self, batch: &Batch);

    /// Whether the graph built with this input can compute `batch` as it is.
    fn can_reuse(&self, batch: &Batch) -> bool;
}

/// What a pass starts from (llama.cpp's `llm_graph_input_embd`, which selects one of
/// its inputs by the batch's contents): I32 [n_tokens] token ids whose rows the graph
/// looks up, or F32 [n_embd, n_tokens] embeddings given as they are.
#[derive(Clone, Copy)]
pub enum TokenInput {
    Ids(Tensor),
    Embeddings(Tensor),
}

impl GraphInput for TokenInput {
    fn set(&self, batch: &Batch) {
        match (*self, batch.embd) {
            (TokenInput::Ids(t), _) => {
                let ids: Vec<i32> = batch.tokens.iter().map(|&t| t as i32).collect();
                t.write(&ids);
            }
            (TokenInput::Embeddings(t), Some(embd)) => t.write(embd),
            (TokenInput::Embeddings(_), None) => unreachable!("can_reuse refuses a token pass"),
        }
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        match *self {
            TokenInput::Ids(t) => batch.embd.is_none() && t.ne()[0] as usize == batch.n_tokens(),
            TokenInput::Embeddings(t) => batch.embd.is_some() && t.ne()[1] as usize == batch.n_tokens(),
        }
    }
}

/// I32 [n_tokens × per_token]: each token's position (`llm_graph_input_pos`); under
/// multi-dimensional rope ([`crate::ggml::RopeMode::Mrope`], [`crate::ggml::RopeMode::Imrope`]) a coordinate per section,
/// section by section: `[t, y, x, 0]` ([`Batch::yx`]; a text token's `[p, p, p, 0]`, as
/// llama.cpp's batch expands a text token's position; an image token's as mtmd's
/// `mtmd_image_tokens_get_decoder_pos` places it). A graph that rotates nothing (mamba2's, Granite 4's without rope)
/// does not read it, and it gets no memory.
pub struct Positions(pub Tensor, pub usize);

impl GraphInput for Positions {
    fn set(&self, batch: &Batch) {
        if self.1 == 1 {
            self.0.write(batch.pos);
            return;
        }
        let n = batch.n_tokens();
        let mut coords = vec![0i32; n * self.1];
        coords[..n].copy_from_slice(batch.pos);
        match batch.yx {
            Some(yx) => {
                for (i, &(y, x)) in yx.iter().enumerate() {
                    coords[n + i] = y;
                    coords[2 * n + i] = x;
                }
            }
            None => {
                coords[n..2 * n].copy_from_slice(batch.pos);
                coords[2 * n..3 * n].copy_from_slice(batch.pos);
            }
        }
        self.0.write(&coords);
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        self.0.ne()[0] as usize == batch.n_tokens() * self.1
    }
}

/// I32 [n_outputs]: the rows whose logits are computed (`llm_graph_input_out_ids`).
pub struct OutputRows(pub Tensor);

impl GraphInput for OutputRows {
    fn set(&self, batch: &Batch) {
        self.0.write(batch.out_rows);
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        self.0.ne()[0] as usize == batch.out_rows.len()
    }
}

/// A cache group's view for the pass (`llm_graph_input_attn_kv`): where each token's
/// K and V go, and which cells each token may attend to.
pub struct KvGroupInput {
    /// Which of the cache's groups.
    pub group: usize,
    /// How many cells of the group the graph attends over.
    pub n_kv: i64,
    /// [n_kv, n_tokens]: 0 where a token may attend a cell, -inf elsewhere; F16 for
    /// flash attention, F32 for plain attention's soft-max (as llama.cpp's).
    pub mask: Tensor,
    /// I64 [n_tokens]: the cell each token's K (and untransposed V) go to.
    pub cells: Tensor,
    /// I64 [n_embd_v_gqa × n_tokens], for a transposed V cache: where each value of
    /// each token goes, `j × cells + cell` (llama.cpp's `v_idxs` with `v_trans`).
    pub v_elements: Option<Tensor>,
}

impl KvGroupInput {
    /// Whether the pass attends with flash attention (its mask is then F16).
    pub fn flash_attn(&self) -> bool {
        self.mask.ggml_type() == sys::GGML_TYPE_F16
    }
}

impl GraphInput for KvGroupInput {
    fn set(&self, batch: &Batch) {
        let idxs: Vec<i64> = batch.slots[self.group].iter().map(|&i| i64::from(i)).collect();
        self.cells.write(&idxs);
        let cells: &Cells = &batch.kv.groups[self.group];
        if let Some(v_elements) = self.v_elements {
            let width = v_elements.ne()[0] / batch.n_tokens() as i64;
            let size = i64::from(cells.size());
            let elements: Vec<i64> = idxs
                .iter()
                .flat_map(|&cell| (0..width).map(move |j| j * size + cell))
                .collect();
            v_elements.write(&elements);
        }
        if self.mask.ggml_type() == sys::GGML_TYPE_F16 {
            self.write_mask(batch, cells, MASK_VISIBLE, MASK_HIDDEN);
        } else {
            self.write_mask(batch, cells, 0f32, f32::NEG_INFINITY);
        }
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        self.cells.ne()[0] as usize == batch.n_tokens() && i64::from(batch.kv.groups[self.group].n_kv()) == self.n_kv
    }
}

impl KvGroupInput {
    /// Row by row: the whole mask of a micro-batch deep in a large context would be a
    /// second copy of up to a GiB.
    fn write_mask<T: Copy>(&self, batch: &Batch, cells: &Cells, visible: T, hidden: T) {
        let mut row = vec![hidden; self.n_kv as usize];
        let row_bytes = std::mem::size_of_val(&row[..]);
        assert_eq!(self.mask.nbytes(), row_bytes * batch.n_tokens());
        for (i, (&query, &seq)) in batch.pos.iter().zip(batch.seqs).enumerate() {
            let query_yx = batch.yx.map(|yx| yx[i]);
            cells.mask_row(query, query_yx, seq, batch.causal, &mut row, visible, hidden);
            self.mask.write_at(i * row_bytes, &row);
        }
    }
}

/// An input holding one value everywhere: llama.cpp feeds some constants as inputs
/// rather than op parameters (Gemma 3's embedding scale), and we mirror its ops. Set
/// every pass: the allocator lends an input's memory to later tensors once its last
/// reader has run, so a reused graph finds it overwritten.
pub struct Filled {
    pub tensor: Tensor,
    pub value: f32,
}

impl GraphInput for Filled {
    fn set(&self, _: &Batch) {
        let n = self.tensor.nbytes() / std::mem::size_of::<f32>();
        self.tensor.write(&vec![self.value; n]);
    }

    fn can_reuse(&self, _: &Batch) -> bool {
        true
    }
}

/// F32 [1, 1, n_tokens]: each token's attention temperature, which Q is multiplied by
/// (llama.cpp's `llm_graph_input_attn_temp`, Llama 4's and Mistral 3's long-context
/// scaling): `ln(floor((pos + offset) / floor_scale) + 1) * scale + 1`, the logarithm in
/// double as llama.cpp computes it.
pub struct TemperatureInput {
    pub tensor: Tensor,
    pub scale: f32,
    pub floor_scale: u32,
    pub offset: f32,
}

impl GraphInput for TemperatureInput {
    fn set(&self, batch: &Batch) {
        let values: Vec<f32> = batch
            .pos
            .iter()
            .map(|&pos| {
                let floor = ((pos as f32 + self.offset) / self.floor_scale as f32).floor();
                ((f64::from(floor) + 1.0).ln() * f64::from(self.scale) + 1.0) as f32
            })
            .collect();
        self.tensor.write(&values);
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        self.tensor.ne()[2] as usize == batch.n_tokens()
    }
}

/// I32 [n_seqs] and I64 [n_seqs]: the rows each sequence's recurrent state is read
/// from and written to (llama.cpp's `llm_graph_input_rs`, whose `s_copy` gathers them).
pub struct StateRowsInput {
    pub read: Tensor,
    pub write: Tensor,
}

impl GraphInput for StateRowsInput {
    fn set(&self, batch: &Batch) {
        let read: Vec<i32> = batch.state_rows.iter().map(|r| r.read).collect();
        let write: Vec<i64> = batch.state_rows.iter().map(|r| r.write).collect();
        self.read.write(&read);
        self.write.write(&write);
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        self.read.ne()[0] as usize == batch.state_rows.len()
    }
}

/// The batch's distinct sequences, ascending: the order of pooled rows, as llama.cpp's
/// `ubatch.seq_id_unq`.
pub(crate) fn distinct_seqs(seqs: &[SeqId]) -> Vec<SeqId> {
    let mut distinct = seqs.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    distinct
}

/// F16 [n_tokens, n_tokens]: the mask of a pass that attends over its own tokens only
/// (`llm_graph_input_attn_no_cache`): 0 where a token may see another of its sequence
/// (an earlier one, or any when the attention is not causal), -inf elsewhere.
pub struct OwnTokensMask {
    pub mask: Tensor,
    pub causal: bool,
}

impl GraphInput for OwnTokensMask {
    fn set(&self, batch: &Batch) {
        let n = batch.n_tokens();
        let (zero, minus_inf) = (f16_bits(0.0), f16_bits(f32::NEG_INFINITY));
        let mut mask = vec![minus_inf; n * n];
        for (row, (&p1, &s1)) in mask.chunks_mut(n).zip(batch.pos.iter().zip(batch.seqs)) {
            for (cell, (&p0, &s0)) in row.iter_mut().zip(batch.pos.iter().zip(batch.seqs)) {
                if s0 == s1 && !(self.causal && p0 > p1) {
                    *cell = zero;
                }
            }
        }
        self.mask.write(&mask);
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        self.mask.ne()[0] as usize == batch.n_tokens()
    }
}

fn f16_bits(x: f32) -> u16 {
    unsafe { sys::ggml_fp32_to_fp16(x) }
}

/// F32 [n_tokens, n_seqs]: each sequence's column holds 1/(its token count) at its
/// tokens' rows, so that a product averages them (`llm_graph_input_mean`).
pub struct MeanWeights(pub Tensor);

impl GraphInput for MeanWeights {
    fn set(&self, batch: &Batch) {
        let n = batch.n_tokens();
        let distinct = distinct_seqs(batch.seqs);
        let mut weights = vec![0f32; n * distinct.len()];
        for (col, &seq) in distinct.iter().enumerate() {
            let count = batch.seqs.iter().filter(|&&s| s == seq).count();
            let share = 1.0 / count as f32;
            for (i, _) in batch.seqs.iter().enumerate().filter(|(_, &s)| s == seq) {
                weights[col * n + i] = share;
            }
        }
        self.0.write(&weights);
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        let [rows, cols, ..] = self.0.ne();
        rows as usize == batch.n_tokens() && cols as usize == distinct_seqs(batch.seqs).len()
    }
}

/// I32 [n_seqs]: each sequence's first token (`cls`) or last (`last`), the row its
/// pooled embedding is taken from (`llm_graph_input_cls`).
pub struct PooledRows {
    pub rows: Tensor,
    pub last: bool,
}

impl GraphInput for PooledRows {
    fn set(&self, batch: &Batch) {
        let rows: Vec<i32> = distinct_seqs(batch.seqs)
            .iter()
            .map(|&seq| {
                let mut target: Option<(i32, usize)> = None;
                for (i, (&pos, _)) in batch
                    .pos
                    .iter()
                    .zip(batch.seqs)
                    .enumerate()
                    .filter(|(_, (_, &s))| s == seq)
                {
                    let better = target.is_none_or(|(p, _)| if self.last { pos >= p } else { pos < p });
                    if better {
                        target = Some((pos, i));
                    }
                }
                target.map_or(0, |(_, i)| i as i32)
            })
            .collect();
        self.rows.write(&rows);
    }

    fn can_reuse(&self, batch: &Batch) -> bool {
        self.rows.ne()[0] as usize == distinct_seqs(batch.seqs).len()
    }
}

/// Which attention a pass's cache inputs serve.
#[derive(Clone, Copy)]
pub enum MaskFor<'a> {
    FlashAttention,
    /// Plain attention (a matrix product, a soft-max, a matrix product) over a V cache
    /// transposed, its rows `v_widths[group]` values (the group's n_embd_v_gqa) per cell;
    /// 0 for a group without a V cache (multi-head latent attention's values are K's columns).
    SoftMax {
        v_widths: &'a [u32],
    },
}

/// Every input of a pass.
pub struct Inputs {
    pub tokens: TokenInput,
    pub pos: Positions,
    pub out_ids: OutputRows,
    /// One per KV cache group (see [`crate::memory::kv_cache`]).
    pub kv: Vec<KvGroupInput>,
    /// Added while the graph is built, by the pieces that need them.
    pub(crate) added: RefCell<Vec<Box<dyn GraphInput>>>,
}

impl Inputs {
    /// The inputs of a pass over `n_tokens` tokens with `n_outputs` output rows,
    /// attending over the first `n_kv` cells of each cache group, with flash attention
    /// or without (then with a transposed V cache `v_width` values wide), each position
    /// `pos_per_token` values (see [`Positions`]); from token ids, or from embeddings
    /// `n_embd_input` wide.
    pub fn new(
        graph: &Graph,
        n_tokens: i64,
        n_embd_input: Option<i64>,
        n_outputs: i64,
        n_kv: &[u32],
        attention: MaskFor,
        pos_per_token: usize,
    ) -> Inputs {
        let mask_type = match attention {
            MaskFor::FlashAttention => sys::GGML_TYPE_F16,
            MaskFor::SoftMax { .. } => sys::GGML_TYPE_F32,
        };
        let kv = n_kv
            .iter()
            .enumerate()
            .map(|(group, &n_kv)| KvGroupInput {
                group,
                n_kv: n_kv.into(),
                mask: graph.input(
                    &format!("attn_inp_kq_mask_g{group}"),
                    mask_type,
                    &[n_kv.into(), n_tokens, 1, 1],
                ),
                cells: graph.input(&format!("inp_kv_cells_g{group}"), sys::GGML_TYPE_I64, &[n_tokens]),
                v_elements: match attention {
                    MaskFor::SoftMax { v_widths } if v_widths[group] > 0 => Some(graph.input(
                        &format!("inp_kv_v_elements_g{group}"),
                        sys::GGML_TYPE_I64,
                        &[i64::from(v_widths[group]) * n_tokens],
                    )),
                    MaskFor::SoftMax { .. } | MaskFor::FlashAttention => None,
                },
            })
            .collect();
        Inputs {
            tokens: match n_embd_input {
                None => TokenInput::Ids(graph.input("inp_tokens", sys::GGML_TYPE_I32, &[n_tokens])),
                Some(n_embd) => {
                    TokenInput::Embeddings(graph.input("inp_embd", sys::GGML_TYPE_F32, &[n_embd, n_tokens]))
                }
            },
            pos: Positions(
                graph.input("inp_pos", sys::GGML_TYPE_I32, &[n_tokens * pos_per_token as i64]),
                pos_per_token,
            ),
            out_ids: OutputRows(graph.input("inp_out_ids", sys::GGML_TYPE_I32, &[n_outputs])),
            kv,
            added: RefCell::new(Vec::new()),
        }
    }

    fn each(&self, mut f: impl FnMut(&dyn GraphInput) -> bool) -> bool {
        let fixed: [&dyn GraphInput; 3] = [&self.tokens, &self.pos, &self.out_ids];
        fixed.into_iter().all(&mut f)
            && self.kv.iter().all(|g| f(g))
            && self.added.borrow().iter().all(|i| f(i.as_ref()))
    }

    pub(crate) fn set(&self, batch: &Batch) {
        self.each(|input| {
            input.set(batch);
            true
        });
    }

    pub(crate) fn can_reuse(&self, batch: &Batch) -> bool {
        self.each(|input| input.can_reuse(batch))
    }
}
