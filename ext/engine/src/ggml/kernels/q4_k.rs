//! Q4_K weights (not repacked) times a few activation rows, with AVX-512 VNNI.
//!
//! A model opened with `repack: false` (batch-invariant contexts) keeps Q4_K weights
//! as `block_q4_K`, which ggml multiplies by each activation row with
//! `ggml_vec_dot_q4_K_q8_K`. Here each block of a weight row is unpacked once and
//! dotted with every activation row.
//!
//! The results are `vec_dot`'s bits: its eight integer lanes per block (lane `l`
//! holds elements `4l .. 4l + 4` of every sub-block, each times its scale) and its
//! four lanes of mins are formed exactly; the float steps are its own, in its order:
//! per block `acc = fma(d_x·d_w, f32(lanes), acc)` and `mins = fma(−d_x·dmin_w,
//! f32(min lanes), mins)`, then `hsum(acc) + hsum(mins)`.

use std::arch::x86_64::*;

use super::product::{
    dots, f16_to_f32, hsum_float_8, same_layout, scales_and_mins, BlockQ8K, Dot, Product, QK_K, ROWS_PER_PASS,
};

/// ggml's `block_q4_K`.
#[repr(C)]
pub struct BlockQ4K {
    d: u16,
    dmin: u16,
    /// Eight six-bit scales and eight six-bit mins, packed.
    scales: [u8; 12],
    /// Sub-blocks `2j` (low nibbles) and `2j + 1` (high nibbles) at `32j`.
    qs: [u8; QK_K / 2],
}

same_layout!(BlockQ4K, ggml_sys::layouts::block_q4_K, scales, qs);

/// `out[r][row] = w_row(row) · x[r]` for the weight rows `rows` and every activation
/// row `r` of `x` (each row holds `nb` blocks).
///
/// # Safety
/// [`super::avx512_vnni`] is true, and `product` holds the units (weight rows or
/// groups) named.
pub(super) unsafe fn mul_rows(product: &Product<BlockQ4K>, rows: std::ops::Range<usize>) {
    let dots: [Dot<BlockQ4K>; ROWS_PER_PASS] = dots!(dot_rows);
    product.for_each_unit(&dots, 1, rows);
}

/// One weight row times `R` activation rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_rows<const R: usize>(
    w: *const BlockQ4K,
    nb: usize,
    x: *const BlockQ8K,
    out: *mut f32,
    out_stride: usize,
) {
    let low4 = _mm512_set1_epi8(0x0f);
    // The high nibbles of the upper half: a 32-byte run of `qs` holds two sub-blocks.
    let shift = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(4), 1);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_mins = [_mm_setzero_ps(); R];
    for b in 0..nb {
        let wb = &*w.add(b);
        let (scales, mins) = scales_and_mins(&wb.scales, 0);
        // Sub-block s's scale in both 16-bit halves of its lanes, for one `vpdpwssd`
        // per pair of sub-blocks (the lower half of product j is sub-block 2j).
        let scale: [__m512i; 4] = std::array::from_fn(|j| {
            let pair = |s: usize| _mm256_set1_epi16(i16::from((scales >> (8 * s)) as u8));
            _mm512_inserti64x4(_mm512_castsi256_si512(pair(2 * j)), pair(2 * j + 1), 1)
        });
        let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mins as i64));
        let quants: [__m512i; 4] = std::array::from_fn(|j| {
            let run = _mm512_broadcast_i64x4(_mm256_loadu_si256(wb.qs.as_ptr().add(32 * j).cast()));
            _mm512_and_si512(_mm512_srlv_epi16(run, shift), low4)
        });
        let d = f16_to_f32(wb.d);
        let dmin = f16_to_f32(wb.dmin);
        for r in 0..R {
            let xb = &*x.add(r * nb + b);
            let bsums = _mm256_loadu_si256(xb.bsums.as_ptr().cast());
            let pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
            let min_lanes = _mm_cvtepi32_ps(_mm_madd_epi16(mins, pair_sums));
            acc_mins[r] = _mm_fmadd_ps(_mm_set1_ps(-xb.d * dmin), min_lanes, acc_mins[r]);
            let mut sums = _mm512_setzero_si512();
            for j in 0..4 {
                let q8 = _mm512_loadu_si512(xb.qs.as_ptr().add(64 * j).cast());
                // Pairs of products fit 16 bits (15·128·2 < 2¹⁵).
                sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(quants[j], q8), scale[j]);
            }
            let lanes = _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * d), _mm256_cvtepi32_ps(lanes), acc[r]);
        }
    }
    for r in 0..R {
        let mut m = _mm_add_ps(acc_mins[r], _mm_movehl_ps(acc_mins[r], acc_mins[r]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        *out.add(r * out_stride) = hsum_float_8(acc[r]) + _mm_cvtss_f32(m);
    }
}
