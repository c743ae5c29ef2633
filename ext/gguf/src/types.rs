use std::fmt;

/// A ggml tensor type as stored in GGUF, with the block geometry needed to size
/// its data. Values are ggml's `enum ggml_type`; removed types (4, 5, 31–33) are
/// absent, as in ggml 0.26.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorType(u32);

// (id, name, elements per block, bytes per block)
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl TensorType {
    pub const F32: TensorType = TensorType(0);
    pub const F16: TensorType = TensorType(1);
    pub const Q4_0: TensorType = TensorType(2);
    pub const Q5_0: TensorType = TensorType(6);
    pub const Q8_0: TensorType = TensorType(8);
    pub const Q4_K: TensorType = TensorType(12);
    pub const Q6_K: TensorType = TensorType(14);
    pub const MXFP4: TensorType = TensorType(39);

    /// The type with ggml id `id`, if ggml 0.26.0 has it.
    pub fn from_id(id: u32) -> Option<TensorType> {
        TYPES.iter().any(|t| t.0 == id).then_some(TensorType(id))
    }

    pub fn id(self) -> u32 {
        self.0
    }

    fn entry(self) -> &'static (u32, &'static str, u64, u64) {
        TYPES
            .iter()
            .find(|t| t.0 == self.0)
            .expect("constructed from the table")
    }

    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// Elements per block: a row's length must be a multiple of it.
    pub fn block_size(self) -> u64 {
        self.entry().2
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.entry().3
    }

    /// Bytes of one row of `n` elements, or `None` when `n` does not fill whole blocks
    /// or the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }

    /// All types ggml 0.26.0 knows, for tests that cross-check against ggml itself.
    pub fn all() -> impl Iterator<Item = TensorType> {
        TYPES.iter().map(|t| TensorType(t.0))
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
