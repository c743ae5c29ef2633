//! Repacked Q4_K weights times a few activation rows, with AVX-512 VNNI or AVX2.
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
//! AVX2 forms the same integer sums four weight rows per instruction.

use std::arch::x86_64::*;

use super::isa::Isa;
use super::product::{bytes, dots, same_layout, scales_and_mins, BlockQ8K, Dot, Product, ROWS_PER_PASS};

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

impl BlockQ4Kx8 {
    /// The eight rows' `d` and `dmin`, as F32.
    #[target_feature(enable = "avx,f16c")]
    #[inline]
    unsafe fn scales_f32(&self) -> (__m256, __m256) {
        let load = |h: &[u16; 8]| _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast()));
        (load(&self.d), load(&self.dmin))
    }
}

/// `out[r][8g + j] = w_row(8g + j) · x[r]` for the weight groups `groups` and every
/// activation row `r` of `x` (`x[r]` holds `nb` blocks), with the bits of ggml's
/// product of the same `n_rows` rows.
///
/// # Safety
/// The CPU runs `isa`, and `product` holds the groups named.
pub(super) unsafe fn mul_rows(product: &Product<BlockQ4Kx8>, isa: Isa, groups: std::ops::Range<usize>) {
    let (as_gemm, as_gemv): ([Dot<BlockQ4Kx8>; ROWS_PER_PASS], [Dot<BlockQ4Kx8>; ROWS_PER_PASS]) = match isa {
        Isa::Avx512Vnni => (dots!(group, true), dots!(group, false)),
        Isa::Avx2 => (dots!(group_avx2, true), dots!(group_avx2, false)),
    };
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
        let (d, dmin) = wb.scales_f32();
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
            mins[pair] = side_by_side(mins_lo, mins_hi);
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
            let sub_block_sums = sub_block_sums(xb);
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
                let pair_min_sum = pair_min_sum(sub_block_sums, pair, mins[pair]);
                if PER_PAIR {
                    accumulate(
                        &mut acc[r],
                        &mut acc_mins[r],
                        per_row(pair_sum),
                        pair_min_sum,
                        d,
                        dmin,
                        dx,
                    );
                } else {
                    sum = _mm512_add_epi32(sum, pair_sum);
                    min_sum = _mm256_add_epi32(min_sum, pair_min_sum);
                }
            }
            if !PER_PAIR {
                accumulate(&mut acc[r], &mut acc_mins[r], per_row(sum), min_sum, d, dmin, dx);
            }
        }
    }
    store(&acc, &acc_mins, out, out_stride);
}

/// Each weight row's sum, from `sums` holding its two halves in lanes `2j` and `2j + 1`.
#[target_feature(enable = "avx512f,avx512vl,avx2")]
#[inline]
unsafe fn per_row(sums: __m512i) -> __m256i {
    _mm512_cvtepi64_epi32(_mm512_add_epi32(sums, _mm512_srli_epi64(sums, 32)))
}

/// One group of eight weight rows times `R` activation rows with AVX2, in the gemm's
/// order (`PER_PAIR`) or the gemv's: [`group`]'s sums, rows 0–3 and 4–7 apart, each
/// half of a pair of sub-blocks unpacked and dotted with every row in turn (sixteen
/// registers hold no more), its scales multiplied in with the pairs' `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_avx2<const R: usize, const PER_PAIR: bool>(
    w: *const BlockQ4Kx8,
    nb: usize,
    x: *const BlockQ8K,
    out: *mut f32,
    out_stride: usize,
) {
    let nibble = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_mins = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let wb = &*w.add(b);
        let (d, dmin) = wb.scales_f32();
        let row = |r: usize| &*x.add(r * nb + b);
        let row_sub_block_sums: [__m256i; R] = std::array::from_fn(|r| sub_block_sums(row(r)));
        let mut sums = [[_mm256_setzero_si256(); 2]; R];
        let mut min_sums = [_mm256_setzero_si256(); R];
        for pair in 0..4 {
            let (scales_lo, mins_lo) = scales_and_mins(&wb.scales, 2 * pair);
            let (scales_hi, mins_hi) = scales_and_mins(&wb.scales, 2 * pair + 1);
            let qs = wb.qs.as_ptr().add(256 * pair);
            let mut pair_sums = [[_mm256_setzero_si256(); 2]; R];
            for h in 0..2 {
                let (scale_lo, scale_hi) = (half_scales(scales_lo, h), half_scales(scales_hi, h));
                let quants: [__m256i; 8] = std::array::from_fn(|k| {
                    let raw = _mm256_loadu_si256(qs.add(64 * (k % 4) + 32 * h).cast());
                    _mm256_and_si256(if k < 4 { raw } else { _mm256_srli_epi16(raw, 4) }, nibble)
                });
                for (r, pair_sums) in pair_sums.iter_mut().enumerate() {
                    let q = row(r).qs.as_ptr().add(64 * pair);
                    let eight = |at: usize| _mm256_set1_epi64x(std::ptr::read_unaligned(q.add(at).cast::<i64>()));
                    // Pairs of products fit 16 bits (15·128·2 < 2¹⁵), their scaled sums 32.
                    let dot = |quants, at, scale| _mm256_madd_epi16(_mm256_maddubs_epi16(quants, eight(at)), scale);
                    let mut sum = _mm256_setzero_si256();
                    for i in 0..4 {
                        sum = _mm256_add_epi32(sum, dot(quants[i], 8 * i, scale_lo));
                        sum = _mm256_add_epi32(sum, dot(quants[4 + i], 32 + 8 * i, scale_hi));
                    }
                    pair_sums[h] = sum;
                }
            }
            let mins = side_by_side(mins_lo, mins_hi);
            for r in 0..R {
                let pair_min_sum = pair_min_sum(row_sub_block_sums[r], pair, mins);
                if PER_PAIR {
                    let dx = _mm256_set1_ps(row(r).d);
                    accumulate(
                        &mut acc[r],
                        &mut acc_mins[r],
                        per_row_avx2(pair_sums[r]),
                        pair_min_sum,
                        d,
                        dmin,
                        dx,
                    );
                } else {
                    sums[r] = [0, 1].map(|h| _mm256_add_epi32(sums[r][h], pair_sums[r][h]));
                    min_sums[r] = _mm256_add_epi32(min_sums[r], pair_min_sum);
                }
            }
        }
        if !PER_PAIR {
            for r in 0..R {
                let dx = _mm256_set1_ps(row(r).d);
                accumulate(
                    &mut acc[r],
                    &mut acc_mins[r],
                    per_row_avx2(sums[r]),
                    min_sums[r],
                    d,
                    dmin,
                    dx,
                );
            }
        }
    }
    store(&acc, &acc_mins, out, out_stride);
}

/// The scales of weight rows `4h .. 4h + 4` (bytes `4h..` of `scales`), each in the
/// four 16-bit lanes of its two 32-bit lanes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn half_scales(scales: u64, h: usize) -> __m256i {
    let spread = bytes(|j| (4 * h + j / 4) as i8);
    _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128(scales as i64), spread))
}

/// Each weight row's sum, from `halves` holding rows 4h + j's two halves in lanes
/// `2j` and `2j + 1` of half h.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn per_row_avx2(halves: [__m256i; 2]) -> __m256i {
    // Rows 0, 1, 4, 5 | 2, 3, 6, 7, then in order.
    let sums = _mm256_hadd_epi32(halves[0], halves[1]);
    _mm256_permutevar8x32_epi32(sums, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7))
}

/// Each row's two mins of a pair of sub-blocks side by side, for one `madd` with the
/// two sub-block sums.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn side_by_side(mins_lo: u64, mins_hi: u64) -> __m256i {
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(
        _mm_cvtsi64_si128(mins_lo as i64),
        _mm_cvtsi64_si128(mins_hi as i64),
    ))
}

/// An activation row's eight sub-block sums (of its `bsums` pairs), as 16-bit lanes,
/// in both halves.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn sub_block_sums(xb: &BlockQ8K) -> __m256i {
    let bsums = _mm256_loadu_si256(xb.bsums.as_ptr().cast());
    _mm256_broadcastsi128_si256(_mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    ))
}

/// Each weight row's mins times the sums of sub-blocks `2·pair` and `2·pair + 1`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn pair_min_sum(sub_block_sums: __m256i, pair: usize, mins: __m256i) -> __m256i {
    let both = _mm256_permutevar8x32_epi32(sub_block_sums, _mm256_set1_epi32(pair as i32));
    _mm256_madd_epi16(both, mins)
}

/// `acc += f32(per_row)·(d·dx)` and `acc_mins += f32(min_sums)·(dmin·dx)`, one fused
/// multiply-add per lane as ggml does.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn accumulate(
    acc: &mut __m256,
    acc_mins: &mut __m256,
    per_row: __m256i,
    min_sums: __m256i,
    d: __m256,
    dmin: __m256,
    dx: __m256,
) {
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(per_row), _mm256_mul_ps(d, dx), *acc);
    *acc_mins = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sums), _mm256_mul_ps(dmin, dx), *acc_mins);
}

/// `out[r] = acc[r] − acc_mins[r]`, eight weight rows at a time.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store<const R: usize>(acc: &[__m256; R], acc_mins: &[__m256; R], out: *mut f32, out_stride: usize) {
    for r in 0..R {
        _mm256_storeu_ps(out.add(r * out_stride), _mm256_sub_ps(acc[r], acc_mins[r]));
    }
}
