//! Recurrent state (llama.cpp's `llama_memory_recurrent`): what a layer without a
//! KV cache carries from one token to the next, one state per sequence instead of
//! one cell per position. A convolution keeps the last `kernel - 1` inputs of every
//! channel (llama.cpp's `n_embd_r`: LFM2's short convolutions, Mamba-2's, the gated
//! delta nets'); Mamba-2's selective scan keeps a `d_state` wide state of every channel
//! besides, and a gated delta net a `d_state × d_state` matrix per value head (either
//! is llama.cpp's `n_embd_s`), which a sequence's two rows hold as its convolution
//! state does.
//!
//! A state summarizes every token before it and cannot be cut back: a sequence
//! holds its whole past or nothing (llama.cpp's `seq_rm` refuses anything else
//! without its rollback snapshots, `n_rs_seq`, which are off by default). So a
//! cached prefix is reused only when it is the whole state
//! (`Context::reusable_prefix`), and speculative decoding, whose rejected guesses
//! would have to be taken back, is refused.
//!
//! Each sequence has two rows, allocated once (with a row of zeros that a fresh
//! sequence reads): a batch reads a sequence's current row and writes the other,
//! which becomes current only when the whole batch has been computed. A pass that
//! is interrupted (or fails) leaves every state as it was, as it leaves the KV
//! cache, where llama.cpp's state is then half written; the price is a second row
//! per sequence, twice llama.cpp's `n_seq_max` rows.

use super::placed::{LayerPlaces, Placed};
use crate::ggml::{Backend, BufferType, Tensor};
use crate::memory::kv_cache::SeqId;
use crate::Result;
use ggml_sys as sys;

/// What the recurrent state's shape takes from a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecurrentShape {
    /// Per layer: whether it keeps a state (llama.cpp's `is_recr`).
    pub layers: Vec<bool>,
    /// The values of one layer's convolution state (llama.cpp's `n_embd_r`).
    pub conv_width: u32,
    /// The values of one layer's scan state (llama.cpp's `n_embd_s`: Mamba-2's
    /// `d_state · d_inner`, a gated delta net's `d_state²` per value head, as many);
    /// 0 where the layers keep none (LFM2's).
    pub ssm_width: u32,
}

/// The rows a batch reads a sequence's state from and writes it to, in a layer's
/// state tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateRows {
    pub read: i32,
    pub write: i64,
}

/// The convolution and scan states of every recurrent layer, F32 (llama.cpp's `type_r`
/// and `type_s`), in one backend buffer allocated once and never touched by the graph
/// allocator.
pub(crate) struct RecurrentState {
    /// Per layer, [conv_width, 2 · n_seq + 1] (`None` for a layer with a KV cache):
    /// sequence `s` owns rows `2s` and `2s + 1`; the last row stays zero.
    pub conv: Vec<Option<Tensor>>,
    /// Per layer, [ssm_width, 2 · n_seq + 1], rows as in `conv` (`None` for a layer with
    /// a KV cache, and for every layer of a model without scan states).
    pub ssm: Vec<Option<Tensor>>,
    /// Per sequence, the row holding its state; `None` for a fresh sequence.
    current: Vec<Option<u32>>,
    /// Per sequence, the row the batch in progress writes.
    pending: Vec<Option<u32>>,
    conv_width: u32,
    ssm_width: u32,
    /// None for a model without recurrent layers.
    placed: Option<Placed>,
}

impl RecurrentState {
    pub fn new(
        backend: &Backend,
        layer_bufts: &[Option<BufferType>],
        shape: &RecurrentShape,
        n_seq: u32,
    ) -> Result<RecurrentState> {
        let rows = 2 * i64::from(n_seq) + 1;
        // A layer's state goes where the layer is (`layer_bufts`; `None`: the CPU's buffer).
        let mut places = LayerPlaces::new(backend.default_buft(), layer_bufts, 2 * shape.layers.len());
        // Per recurrent layer, a tensor `width` wide named `<name>_l<il>` (llama.cpp's
        // `cache_r_l<il>` and `cache_s_l<il>`); none at all where `width` is 0.
        let mut states = |width: u32, name: &str| {
            shape
                .layers
                .iter()
                .enumerate()
                .map(|(il, &recurrent)| {
                    (recurrent && width > 0)
                        .then(|| {
                            places
                                .context(il)
                                .and_then(|ctx| ctx.new_tensor(sys::GGML_TYPE_F32, &[width.into(), rows]))
                                .map(|t| t.set_name(&format!("{name}_l{il}")))
                        })
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()
        };
        let conv = states(shape.conv_width, "cache_r")?;
        let ssm = states(shape.ssm_width, "cache_s")?;
        let bytes = conv.iter().chain(&ssm).flatten().map(|t| t.nbytes()).sum::<usize>();
        let what = format!(
            "recurrent state ({bytes} bytes, {:.2} MiB, for {n_seq} sequences)",
            bytes as f64 / f64::from(1 << 20)
        );
        let placed = places.allocate(&what)?;
        Ok(RecurrentState {
            conv,
            ssm,
            current: vec![None; n_seq as usize],
            pending: vec![None; n_seq as usize],
            conv_width: shape.conv_width,
            ssm_width: shape.ssm_width,
            placed: Some(placed),
        })
    }

    /// No state at all, for a model whose layers all attend.
    pub fn none() -> RecurrentState {
        RecurrentState {
            conv: Vec::new(),
            ssm: Vec::new(),
            current: Vec::new(),
            pending: Vec::new(),
            conv_width: 0,
            ssm_width: 0,
            placed: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.placed.is_none()
    }

    pub fn bytes(&self) -> usize {
        self.placed.as_ref().map_or(0, Placed::bytes)
    }

    /// The bytes of it in buffers of type `buft` (on one device, or the CPU's).
    pub fn bytes_in(&self, buft: BufferType) -> usize {
        self.placed.as_ref().map_or(0, |p| p.bytes_in(buft))
    }

    fn zero_row(&self) -> u32 {
        2 * self.current.len() as u32
    }

    /// The rows of each sequence of a micro-batch (in its order): the first micro-batch
    /// of a batch to touch a sequence reads its current row (or zeros) and writes its
    /// other row; later ones read and write that row.
    pub fn rows_for(&mut self, seqs: &[SeqId]) -> Vec<StateRows> {
        seqs.iter()
            .map(|&seq| {
                let s = seq as usize;
                let (read, write) = match (self.pending[s], self.current[s]) {
                    (Some(row), _) => (row, row),
                    (None, Some(row)) => (row, row ^ 1),
                    (None, None) => (self.zero_row(), 2 * seq),
                };
                self.pending[s] = Some(write);
                StateRows {
                    read: read as i32,
                    write: write.into(),
                }
            })
            .collect()
    }

    /// The batch completed: the rows it wrote hold the sequences' states.
    pub fn commit(&mut self) {
        for (current, pending) in self.current.iter_mut().zip(&mut self.pending) {
            if let Some(row) = pending.take() {
                *current = Some(row);
            }
        }
    }

    /// The batch failed: every sequence keeps the state it had before it.
    pub fn discard(&mut self) {
        self.pending.fill(None);
    }

    /// `seq` starts afresh (llama.cpp's `seq_rm` of all its positions).
    pub fn forget(&mut self, seq: SeqId) {
        if let Some(current) = self.current.get_mut(seq as usize) {
            *current = None;
        }
    }

    /// Every sequence starts afresh.
    pub fn clear(&mut self) {
        self.current.fill(None);
    }

    /// `dst` gets a copy of `src`'s state (llama.cpp's `seq_cp`, which shares the cell
    /// until one of them moves on; here the rows are copied at once).
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId) {
        if src == dst || self.is_empty() {
            return;
        }
        let Some(from) = self.current[src as usize] else {
            self.forget(dst);
            return;
        };
        let to = 2 * dst;
        for (states, width) in [(&self.conv, self.conv_width), (&self.ssm, self.ssm_width)] {
            let row_bytes = width as usize * std::mem::size_of::<f32>();
            let mut row = vec![0f32; width as usize];
            for t in states.iter().flatten() {
                t.read_f32(from as usize * row_bytes, &mut row);
                t.write_at(to as usize * row_bytes, &row);
            }
        }
        self.current[dst as usize] = Some(to);
    }

    /// Every sequence but `seq` starts afresh (llama.cpp's `seq_keep`).
    pub fn seq_keep(&mut self, seq: SeqId) {
        for (s, current) in self.current.iter_mut().enumerate() {
            if s != seq as usize {
                *current = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(n_seq: u32) -> RecurrentState {
        let backend = Backend::cpu(1).unwrap();
        let shape = RecurrentShape {
            layers: vec![true, false, true],
            conv_width: 4,
            ssm_width: 0,
        };
        RecurrentState::new(&backend, &[], &shape, n_seq).unwrap()
    }

    /// Mamba-2's: a convolution state and a scan state per recurrent layer.
    fn mamba_state(n_seq: u32) -> RecurrentState {
        let backend = Backend::cpu(1).unwrap();
        let shape = RecurrentShape {
            layers: vec![true, false, true],
            conv_width: 4,
            ssm_width: 6,
        };
        RecurrentState::new(&backend, &[], &shape, n_seq).unwrap()
    }

    fn rows(read: i32, write: i64) -> StateRows {
        StateRows { read, write }
    }

    #[test]
    fn a_batch_writes_the_other_row_and_commits_it() {
        let mut rs = state(2);
        assert!(rs.conv[1].is_none());
        assert!(rs.ssm.iter().all(Option::is_none));
        assert_eq!(rs.conv[0].unwrap().nbytes(), 4 * 5 * 4);
        assert!(rs.bytes() >= 2 * 4 * 5 * 4);
        // Fresh sequences read the zero row (row 4).
        assert_eq!(rs.rows_for(&[1, 0]), [rows(4, 2), rows(4, 0)]);
        // A second micro-batch of the same batch reads what the first wrote.
        assert_eq!(rs.rows_for(&[1]), [rows(2, 2)]);
        rs.commit();
        assert_eq!(rs.rows_for(&[0]), [rows(0, 1)]);
        // A failed batch leaves the state where it was.
        rs.discard();
        assert_eq!(rs.rows_for(&[0, 1]), [rows(0, 1), rows(2, 3)]);
        rs.commit();
        rs.seq_keep(1);
        assert_eq!(rs.rows_for(&[0, 1]), [rows(4, 0), rows(3, 2)]);
    }

    #[test]
    fn a_model_without_state_has_nothing_to_forget_copy_or_keep() {
        let mut rs = RecurrentState::none();
        assert!(rs.is_empty());
        rs.forget(3);
        rs.seq_cp(0, 1);
        rs.seq_keep(2);
        rs.clear();
        assert_eq!(rs.bytes(), 0);
    }

    #[test]
    fn a_copy_takes_the_source_state_into_the_destination_rows() {
        let mut rs = state(3);
        rs.rows_for(&[0]);
        rs.commit();
        let conv = rs.conv[0].unwrap();
        conv.write_at(0, &[1.0f32, 2.0, 3.0, 4.0]);
        rs.seq_cp(0, 2);
        let mut copied = [0f32; 4];
        conv.read_f32(4 * 4 * 4, &mut copied);
        assert_eq!(copied, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(rs.rows_for(&[2]), [rows(4, 5)]);
        // Copying a fresh sequence makes the destination fresh.
        rs.seq_cp(1, 0);
        rs.discard();
        assert_eq!(rs.rows_for(&[0]), [rows(6, 0)]);
    }

    #[test]
    fn scan_states_sit_beside_the_convolution_states_and_move_with_them() {
        let mut rs = mamba_state(2);
        assert!(rs.ssm[1].is_none());
        let (conv, ssm) = (rs.conv[2].unwrap(), rs.ssm[2].unwrap());
        assert_eq!(ssm.ne(), [6, 5, 1, 1]);
        assert_eq!(ssm.name(), "cache_s_l2");
        assert!(rs.bytes() >= 2 * (4 + 6) * 5 * 4);
        // Allocated zeroed: a fresh sequence's zero row is zero in both.
        let mut zeros = [1f32; 6];
        ssm.read_f32(4 * 6 * 4, &mut zeros);
        assert_eq!(zeros, [0.0; 6]);
        // Sequence 0 writes row 1 (its current is row 0 after a first batch).
        rs.rows_for(&[0]);
        rs.commit();
        rs.rows_for(&[0]);
        rs.commit();
        conv.write_at(4 * 4, &[1.0f32, 2.0, 3.0, 4.0]);
        ssm.write_at(6 * 4, &[5.0f32, 6.0, 7.0, 8.0, 9.0, 10.0]);
        // A copy takes both states into the destination's first row.
        rs.seq_cp(0, 1);
        let (mut c, mut s) = ([0f32; 4], [0f32; 6]);
        conv.read_f32(2 * 4 * 4, &mut c);
        ssm.read_f32(2 * 6 * 4, &mut s);
        assert_eq!(c, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s, [5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
        assert_eq!(rs.rows_for(&[1, 0]), [rows(2, 3), rows(1, 0)]);
        // A failed batch keeps both where they were; a forgotten sequence reads zeros.
        rs.discard();
        rs.forget(0);
        assert_eq!(rs.rows_for(&[0, 1]), [rows(4, 0), rows(2, 3)]);
    }
}
