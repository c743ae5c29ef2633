//! What a context remembers between passes: the KV cache now; recurrent state next.

pub mod kv_cache;

pub use kv_cache::{CacheType, KvShape, KvUsage, SeqId, MAX_SEQUENCES};
