//! elelem-gguf knows ggml's block geometry without linking ggml; this keeps
//! its table honest against the vendored ggml.

use elelem_engine::ggml::{blck_size, type_size};
use elelem_gguf::TensorType;

#[test]
fn gguf_type_table_matches_ggml() {
    for t in TensorType::all() {
        let ty = t.id() as ggml_sys::ggml_type;
        assert_eq!(t.block_size(), blck_size(ty) as u64, "{t} block size");
        assert_eq!(t.type_size(), type_size(ty) as u64, "{t} type size");
    }
}
