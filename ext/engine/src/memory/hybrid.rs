//! A context's memory (llama.cpp's `llama_memory_hybrid`): the KV cache of the
//! attention layers beside the recurrent state of the others, kept in step. Either
//! may be empty: a transformer has no recurrent state, an encoder neither.
//!
//! The sequence operations follow llama.cpp's: the recurrent part is asked first,
//! since a state can only be forgotten whole, and a request it cannot honour leaves
//! both parts as they were.

use super::kv_cache::{KvCache, SeqId};
use super::recurrent::RecurrentState;
use crate::{Error, Result};

pub(crate) struct Memory {
    pub kv: KvCache,
    pub recurrent: RecurrentState,
}

impl Memory {
    /// Whether some layers keep a recurrent state, which cannot be cut back.
    pub fn is_recurrent(&self) -> bool {
        !self.recurrent.is_empty()
    }

    /// Forgets every sequence.
    pub fn clear(&mut self) {
        self.kv.clear();
        self.recurrent.clear();
    }

    /// `seq`, which holds `held` tokens, forgets those from position `keep` on
    /// (llama.cpp's `seq_rm(seq, keep, -1)`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the model keeps a recurrent state and `keep`
    /// is neither 0 nor `held`: the state after `keep` tokens is gone.
    pub fn seq_truncate(&mut self, seq: SeqId, keep: usize, held: usize) -> Result<()> {
        if keep >= held {
            return Ok(());
        }
        if keep == 0 {
            self.forget(seq);
            return Ok(());
        }
        if self.is_recurrent() {
            return Err(Error::InvalidArgument(format!(
                "a recurrent state cannot be cut back: the sequence holds {held} tokens and can keep all of \
                 them or none, not {keep}"
            )));
        }
        self.kv.seq_rm(seq, keep as i32);
        Ok(())
    }

    /// `seq` forgets all it holds.
    pub fn forget(&mut self, seq: SeqId) {
        self.kv.seq_rm(seq, 0);
        self.recurrent.forget(seq);
    }

    /// `dst` shares `src`'s cached positions and gets a copy of its state.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId) {
        self.kv.seq_cp(src, dst, 0, i32::MAX);
        self.recurrent.seq_cp(src, dst);
    }

    /// Every sequence but `seq` is forgotten.
    pub fn seq_keep(&mut self, seq: SeqId) {
        self.kv.seq_keep(seq);
        self.recurrent.seq_keep(seq);
    }
}
