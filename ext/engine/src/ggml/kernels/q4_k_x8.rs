//! Repacked Q4_K weights times a few activation rows, with AVX-512 VNNI.
//!
//! ggml stores a Q4_K matrix on x86 as `block_q4_Kx8`: eight weight rows
//! interleaved per 256-wide block. It multiplies one activation row with
//! `ggml_gemv_q4_K_8x8_q8_K` and four at a time with its gemm, whose time grows
//! with the rows about as fast as calling the gemv once per row. Here each block of
//! eight weight rows is unpacked once and dotted with every activation row, four
//! products per instruction (`vpdpbusd`).
//!
//! The results are ggml's bits: the integer sums are exact, so the order they are
//! formed in does not matter, and the floating-point steps are ggml's own, in its
//! order. Its gemm (rows in fours) and its gemv (the rows left over) differ there:
//! the gemv adds `fma(f32(sum), d_w·d_x, acc)` once per 256-wide block, the gemm once
//! per 64-wide pair of sub-blocks (likewise for the mins; then `acc − mins`). So
//! [`mul_rows`] gives the first rows in fours the gemm's order, the rest the gemv's.

use std::arch::x86_64::*;

use super::product::{dots, same_layout, scales_and_mins, BlockQ8K, Dot, Product, ROWS_PER_PASS};

/// ggml's `block_q4_Kx8`: eight `block_q4_K` rows interleaved.
#[repr(C)]
pub struct BlockQ4Kx8 {
    d: [u16; 8],
    dmin: [u16; 8],
    /// Sub-block `s`'s six-bit scales and mins of the eight rows, packed as in
    /// `block_q4_K`, at `12·s`.
    scales: [u8; 96],
    /// For sub-blocks `2p` (low nibbles) and `2p+1` (high nibbles), at `256·p + 64·i`:
    /// elements `8i..8i+8` of rows 0..8, eight bytes each.
    qs: [u8; 1024],
}

same_layout!(BlockQ4Kx8, ggml_sys::layouts::block_q4_Kx8, d, dmin, scales, qs);

/// `out[r][8g + j] = w_row(8g + j) · x[r]` for the weight groups `groups` and every
/// activation row `r` of `x` (`x[r]` holds `nb` blocks), with the bits of ggml's
/// product of the same `n_rows` rows.
///
/// # Safety
/// [`super::avx512_vnni`] is true, and `product` holds the units (weight rows or
/// groups) named.
pub(super) unsafe fn mul_rows(product: &Product<BlockQ4Kx8>, groups: std::ops::Range<usize>) {
    let as_gemm: [Dot<BlockQ4Kx8>; ROWS_PER_PASS] = dots!(group, true);
    let as_gemv: [Dot<BlockQ4Kx8>; ROWS_PER_PASS] = dots!(group, false);
    let in_fours = product.n_rows - product.n_rows % 4;
    let (gemm_rows, gemv_rows) = (product.first_rows(in_fours), product.rows_from(in_fours));
    // Group by group, so that both orders take a group read from memory.
    for group in groups {
        gemm_rows.for_each_unit(&as_gemm, 8, group..group + 1);
        gemv_rows.for_each_unit(&as_gemv, 8, group..group + 1);
    }
}

/// One group of eight weight rows times `R` activation rows, in the gemm's order
/// (`PER_PAIR`) or the gemv's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn group<const R: usize, const PER_PAIR: bool>(
    w: *const BlockQ4Kx8,
    nb: usize,
    x: *const BlockQ8K,
    out: *mut f32,
    out_stride: usize,
) {
    let nibble = _mm512_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_mins = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let wb = &*w.add(b);
        let d = _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr().cast()));
        let dmin = _mm256_cvtph_ps(_mm_loadu_si128(wb.dmin.as_ptr().cast()));
        // The block unpacked once for every row (it stays in L1): per pair of
        // sub-blocks, the low and high nibbles, the scales and the mins.
        let mut quants = [[_mm512_setzero_si512(); 8]; 4];
        let mut scales = [[_mm512_setzero_si512(); 2]; 4];
        let mut mins = [_mm256_setzero_si256(); 4];
        for pair in 0..4 {
            let (scales_lo, mins_lo) = scales_and_mins(&wb.scales, 2 * pair);
            let (scales_hi, mins_hi) = scales_and_mins(&wb.scales, 2 * pair + 1);
            // Lanes 2j and 2j+1 hold row j's partial sums: its scale in both.
            let widen = |s: u64| {
                let s = _mm_cvtsi64_si128(s as i64);
                _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(s, s))
            };
            scales[pair] = [widen(scales_lo), widen(scales_hi)];
            // Row j's two mins side by side, for one `madd` with the two sub-block sums.
            mins[pair] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(
                _mm_cvtsi64_si128(mins_lo as i64),
                _mm_cvtsi64_si128(mins_hi as i64),
            ));
            let qs = wb.qs.as_ptr().add(256 * pair);
            for i in 0..4 {
                let raw = _mm512_loadu_si512(qs.add(64 * i).cast());
                quants[pair][i] = _mm512_and_si512(raw, nibble);
                quants[pair][4 + i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
            }
        }
        for r in 0..R {
            let xb = &*x.add(r * nb + b);
            let dx = _mm256_set1_ps(xb.d);
            // The row's eight sub-block sums (of its `bsums` pairs), as 16-bit lanes.
            let bsums = _mm256_loadu_si256(xb.bsums.as_ptr().cast());
            let sub_block_sums = _mm256_broadcastsi128_si256(_mm_hadd_epi16(
                _mm256_castsi256_si128(bsums),
                _mm256_extracti128_si256(bsums, 1),
            ));
            let mut sum = _mm512_setzero_si512();
            let mut min_sum = _mm256_setzero_si256();
            for pair in 0..4 {
                let q = xb.qs.as_ptr().add(64 * pair);
                let eight = |at: usize| _mm512_set1_epi64(std::ptr::read_unaligned(q.add(at).cast::<i64>()));
                let mut dot_lo = _mm512_setzero_si512();
                let mut dot_hi = _mm512_setzero_si512();
                for i in 0..4 {
                    dot_lo = _mm512_dpbusd_epi32(dot_lo, quants[pair][i], eight(8 * i));
                    dot_hi = _mm512_dpbusd_epi32(dot_hi, quants[pair][4 + i], eight(32 + 8 * i));
                }
                let pair_sum = _mm512_add_epi32(
                    _mm512_mullo_epi32(dot_lo, scales[pair][0]),
                    _mm512_mullo_epi32(dot_hi, scales[pair][1]),
                );
                // The sums of sub-blocks 2·pair and 2·pair + 1 in every 32-bit lane.
                let both = _mm256_permutevar8x32_epi32(sub_block_sums, _mm256_set1_epi32(pair as i32));
                let pair_min_sum = _mm256_madd_epi16(both, mins[pair]);
                if PER_PAIR {
                    accumulate(&mut acc[r], &mut acc_mins[r], pair_sum, pair_min_sum, d, dmin, dx);
                } else {
                    sum = _mm512_add_epi32(sum, pair_sum);
                    min_sum = _mm256_add_epi32(min_sum, pair_min_sum);
                }
            }
            if !PER_PAIR {
                accumulate(&mut acc[r], &mut acc_mins[r], sum, min_sum, d, dmin, dx);
            }
        }
    }
    for r in 0..R {
        _mm256_storeu_ps(out.add(r * out_stride), _mm256_sub_ps(acc[r], acc_mins[r]));
    }
}

/// `acc += f32(sums)·(d·dx)` and `acc_mins += f32(min_sums)·(dmin·dx)`, one fused
/// multiply-add per lane as ggml does, `sums` holding each weight row's two halves in
/// lanes `2j` and `2j + 1`.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline]
unsafe fn accumulate(
    acc: &mut __m256,
    acc_mins: &mut __m256,
    sums: __m512i,
    min_sums: __m256i,
    d: __m256,
    dmin: __m256,
    dx: __m256,
) {
    let per_row = _mm512_cvtepi64_epi32(_mm512_add_epi32(sums, _mm512_srli_epi64(sums, 32)));
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(per_row), _mm256_mul_ps(d, dx), *acc);
    *acc_mins = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sums), _mm256_mul_ps(dmin, dx), *acc_mins);
}
