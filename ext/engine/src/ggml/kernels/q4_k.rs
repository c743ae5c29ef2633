//! Q4_K weights (not repacked) times a few activation rows, with AVX-512 VNNI or AVX2.
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
//! f32(min lanes), mins)`, then `hsum(acc) + hsum(mins)`. The two instruction sets
//! differ only in how the lanes are formed: AVX-512 two sub-blocks per instruction.

use std::arch::x86_64::*;

use super::isa::Isa;
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
/// The CPU runs `isa`, and `product` holds the weight rows named.
pub(super) unsafe fn mul_rows(product: &Product<BlockQ4K>, isa: Isa, rows: std::ops::Range<usize>) {
    let dots: [Dot<BlockQ4K>; ROWS_PER_PASS] = match isa {
        Isa::Avx512Vnni => dots!(dot_rows),
        Isa::Avx2 => dots!(dot_rows_avx2),
    };
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
            add_mins(&mut acc_mins[r], mins, xb, dmin);
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
        *out.add(r * out_stride) = hsum_with_mins(acc[r], acc_mins[r]);
    }
}

/// One weight row times `R` activation rows, with AVX2: the same lanes, a sub-block
/// per instruction.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows_avx2<const R: usize>(
    w: *const BlockQ4K,
    nb: usize,
    x: *const BlockQ8K,
    out: *mut f32,
    out_stride: usize,
) {
    let low4 = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_mins = [_mm_setzero_ps(); R];
    for b in 0..nb {
        let wb = &*w.add(b);
        let (scales, mins) = scales_and_mins(&wb.scales, 0);
        // Sub-block s's scale in every 16-bit lane, for one `vpmaddwd` per sub-block.
        let scale: [__m256i; 8] = std::array::from_fn(|s| _mm256_set1_epi16(i16::from((scales >> (8 * s)) as u8)));
        let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mins as i64));
        // Sub-block s's weights, the low (even s) or high (odd s) nibbles of run s/2.
        let quants: [__m256i; 8] = std::array::from_fn(|s| {
            let run = _mm256_loadu_si256(wb.qs.as_ptr().add(32 * (s / 2)).cast());
            _mm256_and_si256(if s % 2 == 0 { run } else { _mm256_srli_epi16(run, 4) }, low4)
        });
        let d = f16_to_f32(wb.d);
        let dmin = f16_to_f32(wb.dmin);
        for r in 0..R {
            let xb = &*x.add(r * nb + b);
            add_mins(&mut acc_mins[r], mins, xb, dmin);
            let mut lanes = _mm256_setzero_si256();
            for s in 0..8 {
                let q8 = _mm256_loadu_si256(xb.qs.as_ptr().add(32 * s).cast());
                // Pairs of products fit 16 bits (15·128·2 < 2¹⁵).
                let pairs = _mm256_maddubs_epi16(quants[s], q8);
                lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(pairs, scale[s]));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * d), _mm256_cvtepi32_ps(lanes), acc[r]);
        }
    }
    for r in 0..R {
        *out.add(r * out_stride) = hsum_with_mins(acc[r], acc_mins[r]);
    }
}

/// `acc_mins = fma(−d_x·dmin_w, f32(min lanes), acc_mins)`, `mins` the weight
/// block's eight mins as 16-bit lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add_mins(acc_mins: &mut __m128, mins: __m128i, xb: &BlockQ8K, dmin: f32) {
    let bsums = _mm256_loadu_si256(xb.bsums.as_ptr().cast());
    let pair_sums = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
    let min_lanes = _mm_cvtepi32_ps(_mm_madd_epi16(mins, pair_sums));
    *acc_mins = _mm_fmadd_ps(_mm_set1_ps(-xb.d * dmin), min_lanes, *acc_mins);
}

/// `hsum(acc) + hsum(mins)`, in `vec_dot`'s order.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn hsum_with_mins(acc: __m256, mins: __m128) -> f32 {
    let mut m = _mm_add_ps(mins, _mm_movehl_ps(mins, mins));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    hsum_float_8(acc) + _mm_cvtss_f32(m)
}
