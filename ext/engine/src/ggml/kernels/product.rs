//! What every kernel of ours shares: a product's operands as its op finds them, the
//! activations' block type, and the inner-loop table of 1 to [`ROWS_PER_PASS`] rows.

use ggml_sys as sys;

/// Weights per K-quant block.
pub(super) const QK_K: usize = 256;

/// ggml's `block_q8_K`: 256 activations quantized to bytes, the other operand of
/// every K-quant product.
#[repr(C)]
pub(super) struct BlockQ8K {
    pub(super) d: f32,
    pub(super) qs: [i8; QK_K],
    /// Sums of each 16 `qs`.
    pub(super) bsums: [i16; QK_K / 16],
}

/// Fails the build unless our block type `$ours` has the layout of ggml's `$theirs`
/// (read from ggml's headers by bindgen): the same size, each named field at the same
/// offset, and no more alignment than ggml's (ours reads ggml's memory).
macro_rules! same_layout {
    ($ours:ty, $theirs:ty, $($field:ident),+) => {
        const _: () = {
            use std::mem::{align_of, offset_of, size_of};
            assert!(size_of::<$ours>() == size_of::<$theirs>());
            assert!(align_of::<$ours>() <= align_of::<$theirs>());
            $(assert!(offset_of!($ours, $field) == offset_of!($theirs, $field));)+
        };
    };
}
pub(super) use same_layout;

same_layout!(BlockQ8K, sys::layouts::block_q8_K, d, qs, bsums);

/// A product's operands, as its op finds them: `out = w · x`.
pub(super) struct Product<W, X = BlockQ8K> {
    /// The weights: `n_weight_rows` rows of `nb` blocks each (stored row by row, or
    /// in groups of eight rows interleaved).
    pub(super) w: *const W,
    pub(super) nb: usize,
    pub(super) n_weight_rows: usize,
    /// The activations, quantized: `n_rows` rows of `nb` blocks.
    pub(super) x: *const X,
    pub(super) n_rows: usize,
    /// `n_rows` rows of `out_stride` floats.
    pub(super) out: *mut f32,
    pub(super) out_stride: usize,
}

impl<W, X> Product<W, X> {
    pub(super) unsafe fn of(dst: *mut sys::ggml_tensor) -> Product<W, X> {
        let dst = &*dst;
        let (w, xq) = (&*dst.src[0], &*dst.src[1]);
        Product {
            w: w.data.cast(),
            nb: (w.ne[0] / sys::ggml_blck_size(w.type_)) as usize,
            n_weight_rows: w.ne[1] as usize,
            x: xq.data.cast(),
            n_rows: xq.ne[1] as usize,
            out: dst.data.cast(),
            out_stride: dst.nb[1] / std::mem::size_of::<f32>(),
        }
    }

    /// The same product over activation rows `first..` only.
    pub(super) unsafe fn rows_from(&self, first: usize) -> Product<W, X> {
        Product {
            x: self.x.add(first * self.nb),
            n_rows: self.n_rows - first,
            out: self.out.add(first * self.out_stride),
            ..*self
        }
    }

    /// The same product over the first `n_rows` activation rows only.
    pub(super) fn first_rows(&self, n_rows: usize) -> Product<W, X> {
        Product { n_rows, ..*self }
    }
}

impl<W> Product<W> {
    /// Runs `dots[R - 1]` for each unit of `units` (a weight row, or a group of
    /// `width` rows stored together) and each run of up to [`ROWS_PER_PASS`]
    /// activation rows: unit by unit, so that a unit read from memory serves every
    /// run while it is in the cache.
    pub(super) unsafe fn for_each_unit(
        &self,
        dots: &[Dot<W>; ROWS_PER_PASS],
        width: usize,
        units: std::ops::Range<usize>,
    ) {
        for unit in units {
            let mut first = 0;
            while first < self.n_rows {
                let count = (self.n_rows - first).min(ROWS_PER_PASS);
                dots[count - 1](
                    self.w.add(unit * self.nb),
                    self.nb,
                    self.x.add(first * self.nb),
                    self.out.add(first * self.out_stride + unit * width),
                    self.out_stride,
                );
                first += count;
            }
        }
    }
}

impl<W, X> Clone for Product<W, X> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W, X> Copy for Product<W, X> {}

/// Activation rows one pass over a weight row (or group) serves: their accumulators
/// fill the registers. More rows take more passes over weights then in cache.
pub(super) const ROWS_PER_PASS: usize = 8;

/// A kernel's inner loop: one weight row (or group of rows) of `nb` blocks times `R`
/// activation rows, into `out[r·out_stride]` (and the next columns, for a group).
pub(super) type Dot<W> = unsafe fn(*const W, usize, *const BlockQ8K, *mut f32, usize);

/// A kernel's inner loops for 1 to [`ROWS_PER_PASS`] rows: `dots!(f)` or, for a
/// kernel with a second generic parameter (a flag or a block type), `dots!(f, P)`.
macro_rules! dots {
    ($f:ident $(, $flag:tt)?) => {
        [
            $f::<1 $(, $flag)?>,
            $f::<2 $(, $flag)?>,
            $f::<3 $(, $flag)?>,
            $f::<4 $(, $flag)?>,
            $f::<5 $(, $flag)?>,
            $f::<6 $(, $flag)?>,
            $f::<7 $(, $flag)?>,
            $f::<8 $(, $flag)?>,
        ]
    };
}
pub(super) use dots;

/// The six-bit scales and mins of sub-block `s` of a `block_q4_K` (`packed` at
/// `12·s`: one block's twelve bytes, or a `block_q4_Kx8`'s for eight rows), decoded
/// as ggml decodes them: eight scales, then eight mins, a byte each.
#[inline(always)]
pub(super) fn scales_and_mins(packed: &[u8], s: usize) -> (u64, u64) {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes(packed[12 * s + 4 * i..12 * s + 4 * i + 4].try_into().unwrap());
    let (u0, u1, u2) = (word(0), word(1), word(2));
    let scales = [u0 & KMASK1, (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4)];
    let mins = [u1 & KMASK1, ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4)];
    let pair = |w: [u32; 2]| u64::from(w[0]) | (u64::from(w[1]) << 32);
    (pair(scales), pair(mins))
}

/// ggml's `hsum_float_8`, in its order: `((x4+x0) + (x6+x2)) + ((x5+x1) + (x7+x3))`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn hsum_float_8(x: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let mut res = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

/// Sixteen bytes, byte `i` being `at(i)` (a shuffle's indices).
#[target_feature(enable = "sse2")]
#[inline]
pub(super) unsafe fn bytes(at: impl Fn(usize) -> i8) -> std::arch::x86_64::__m128i {
    let bytes: [i8; 16] = std::array::from_fn(at);
    std::arch::x86_64::_mm_loadu_si128(bytes.as_ptr().cast())
}

#[target_feature(enable = "f16c")]
pub(super) unsafe fn f16_to_f32(h: u16) -> f32 {
    use std::arch::x86_64::*;
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}
