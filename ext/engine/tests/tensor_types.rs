//! elelem-gguf knows ggml's block geometry without linking ggml; this keeps
//! its table honest against the vendored ggml.

use elelem_gguf::TensorType;

#[test]
fn gguf_type_table_matches_ggml() {
    for t in TensorType::all() {
        let ty = t.id() as ggml_sys::ggml_type;
        let (block, size) = unsafe { (ggml_sys::ggml_blck_size(ty), ggml_sys::ggml_type_size(ty)) };
        assert_eq!(t.block_size(), block as u64, "{t} block size");
        assert_eq!(t.type_size(), size as u64, "{t} type size");
    }
}
