//! What a context remembers between passes: the KV cache of the attention layers and
//! the recurrent state of the others, held together by [`hybrid::Memory`].

pub mod hybrid;
pub mod kv_cache;
mod placed;
pub mod recurrent;

pub use kv_cache::{CacheType, KvShape, KvUsage, SeqId, MAX_SEQUENCES};
pub use recurrent::{RecurrentShape, StateRows};
