//! Q6_K weights times a few activation rows, with AVX-512 VNNI or AVX2.
//!
//! ggml multiplies Q6_K weights (never repacked on x86) by each activation row with
//! `ggml_vec_dot_q6_K_q8_K`, and by eight rows or more with its tiled kernel, which
//! at eight rows spends most of its time unpacking. Here each block of a weight row
//! is unpacked once and dotted with every activation row.
//!
//! The results are ggml's bits. Below eight rows ggml computes each output with
//! `vec_dot`: its eight integer lanes per block are formed exactly here (lane `l`
//! holds elements `32c + 4l .. 32c + 4l + 4` of every 32-wide chunk `c`, less the
//! `−32` offset through the sums of sub-blocks `2l` and `2l + 1`), then its float
//! steps follow in its order: per block `acc = fma(d_w·d_x, f32(lanes), acc)`, at
//! the end its horizontal sum. From eight rows on ggml's tiled kernel takes over,
//! which adds per block `out = fma(f32(sum)·d_w, d_x, out)` with the block's exact
//! sum: [`mul_rows`] follows whichever ggml would run (`tiled`). The two instruction
//! sets differ only in how the lanes are formed: AVX-512 64 elements per instruction.

use std::arch::x86_64::*;

use super::isa::Isa;
use super::product::{bytes, dots, f16_to_f32, hsum_float_8, same_layout, BlockQ8K, Dot, Product, QK_K, ROWS_PER_PASS};

/// ggml's `block_q6_K`.
#[repr(C)]
pub struct BlockQ6K {
    /// Low four bits: elements `128j + e` (low nibble) and `128j + 64 + e` (high), at `64j + e`.
    ql: [u8; QK_K / 2],
    /// High two bits: of elements `128j + 32i + e` at bits `2i` of `32j + e`.
    qh: [u8; QK_K / 4],
    scales: [i8; QK_K / 16],
    d: u16,
}

same_layout!(BlockQ6K, ggml_sys::layouts::block_q6_K, ql, qh, scales, d);

/// `out[r][row] = w_row(row) · x[r]` for the weight rows `rows` and every activation
/// row `r` of `x` (each row holds `nb` blocks), with the bits of `vec_dot` or, when
/// `tiled`, of ggml's tiled kernel.
///
/// # Safety
/// The CPU runs `isa`, and `product` holds the weight rows named.
pub(super) unsafe fn mul_rows(product: &Product<BlockQ6K>, isa: Isa, rows: std::ops::Range<usize>, tiled: bool) {
    let dots: [Dot<BlockQ6K>; ROWS_PER_PASS] = match (isa, tiled) {
        (Isa::Avx512Vnni, true) => dots!(dot_rows, true),
        (Isa::Avx512Vnni, false) => dots!(dot_rows, false),
        (Isa::Avx2, true) => dots!(dot_rows_avx2, true),
        (Isa::Avx2, false) => dots!(dot_rows_avx2, false),
    };
    product.for_each_unit(&dots, 1, rows);
}

/// One weight row times `R` activation rows, in the tiled kernel's order (`TILED`)
/// or `vec_dot`'s.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_rows<const R: usize, const TILED: bool>(
    w: *const BlockQ6K,
    nb: usize,
    x: *const BlockQ8K,
    out: *mut f32,
    out_stride: usize,
) {
    let low4 = _mm512_set1_epi8(0x0f);
    let low2 = _mm512_set1_epi8(0x03);
    // Per 16-bit lane: the shift that brings a chunk's two high bits down, for the
    // first and second chunk of each 64-element product.
    let shift_even = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    let shift_odd = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    // Lane L of product k (elements 64k + 4L..) has sub-block 4k + L/4's scale.
    let spread: [__m128i; 4] = std::array::from_fn(|k| bytes(|l| (4 * k + l / 4) as i8));
    let mut acc = [_mm256_setzero_ps(); R];
    // Tiled: lane r holds row r's sum.
    let mut sums = _mm256_setzero_ps();
    let at_row = scales_at_rows::<R>(nb);
    for b in 0..nb {
        let wb = &*w.add(b);
        let scales = _mm_loadu_si128(wb.scales.as_ptr().cast());
        let scales16 = _mm256_cvtepi8_epi16(scales);
        // Both 16-bit halves of lane L carry its scale, for one `vpdpwssd`.
        let scale: [__m512i; 4] = std::array::from_fn(|k| {
            let s = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(scales, spread[k]));
            _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(s, 16))
        });
        let mut quants = [_mm512_setzero_si512(); 4];
        for j in 0..2 {
            let low = _mm512_loadu_si512(wb.ql.as_ptr().add(64 * j).cast());
            let high = _mm512_broadcast_i64x4(_mm256_loadu_si256(wb.qh.as_ptr().add(32 * j).cast()));
            let top = |shift| _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, shift), low2), 4);
            quants[2 * j] = _mm512_or_si512(_mm512_and_si512(low, low4), top(shift_even));
            quants[2 * j + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), low4), top(shift_odd));
        }
        let d = f16_to_f32(wb.d);
        let mut row_lanes = [_mm256_setzero_si256(); 8];
        for r in 0..R {
            let xb = &*x.add(r * nb + b);
            let mut sums = _mm512_setzero_si512();
            for k in 0..4 {
                let q8 = _mm512_loadu_si512(xb.qs.as_ptr().add(64 * k).cast());
                // Pairs of products fit 16 bits (63·128·2 < 2¹⁵).
                sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(quants[k], q8), scale[k]);
            }
            let lanes = _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1));
            add_row::<TILED>(&mut acc[r], &mut row_lanes[r], lanes, xb, scales16, d);
        }
        if TILED {
            add_rows_tiled(&mut sums, &row_lanes, d, x.add(b), at_row);
        }
    }
    store::<R, TILED>(&acc, sums, out, out_stride);
}

/// One weight row times `R` activation rows, with AVX2: the same lanes, 32 elements
/// per instruction.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows_avx2<const R: usize, const TILED: bool>(
    w: *const BlockQ6K,
    nb: usize,
    x: *const BlockQ8K,
    out: *mut f32,
    out_stride: usize,
) {
    let low4 = _mm256_set1_epi8(0x0f);
    let low2 = _mm256_set1_epi8(0x03);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut sums = _mm256_setzero_ps();
    let at_row = scales_at_rows::<R>(nb);
    for b in 0..nb {
        let wb = &*w.add(b);
        let scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(wb.scales.as_ptr().cast()));
        // Chunk c holds elements 32c.. (sub-blocks 2c and 2c + 1): lane l of its
        // product has sub-block 2c + l/4's scale, in both 16-bit halves.
        let scale: [__m256i; 8] = std::array::from_fn(|c| {
            let of = |s: usize| _mm_set1_epi16(i16::from(wb.scales[s]));
            _mm256_set_m128i(of(2 * c + 1), of(2 * c))
        });
        // Chunk 4j + i: its low four bits in `ql` at 64j (the low nibbles of chunks
        // 4j and 4j + 1, the high of 4j + 2 and 4j + 3), its top two at bits 2i of
        // `qh` at 32j.
        let quants: [__m256i; 8] = std::array::from_fn(|c| {
            let (j, i) = (c / 4, c % 4);
            let low = _mm256_loadu_si256(wb.ql.as_ptr().add(64 * j + 32 * (i % 2)).cast());
            let low = if i < 2 { low } else { _mm256_srli_epi16(low, 4) };
            let high = _mm256_loadu_si256(wb.qh.as_ptr().add(32 * j).cast());
            let top = _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * i as i32)), low2);
            _mm256_or_si256(_mm256_and_si256(low, low4), _mm256_slli_epi16(top, 4))
        });
        let d = f16_to_f32(wb.d);
        let mut row_lanes = [_mm256_setzero_si256(); 8];
        for r in 0..R {
            let xb = &*x.add(r * nb + b);
            let mut lanes = _mm256_setzero_si256();
            for c in 0..8 {
                let q8 = _mm256_loadu_si256(xb.qs.as_ptr().add(32 * c).cast());
                // Pairs of products fit 16 bits (63·128·2 < 2¹⁵).
                lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(quants[c], q8), scale[c]));
            }
            add_row::<TILED>(&mut acc[r], &mut row_lanes[r], lanes, xb, scales16, d);
        }
        if TILED {
            add_rows_tiled(&mut sums, &row_lanes, d, x.add(b), at_row);
        }
    }
    store::<R, TILED>(&acc, sums, out, out_stride);
}

/// Where row r's block scales lie, from the first row's, in F32 steps (rows past `R`
/// read the first row's: their sums stay zero).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn scales_at_rows<const R: usize>(nb: usize) -> __m256i {
    const STEP: usize = std::mem::size_of::<BlockQ8K>() / std::mem::size_of::<f32>();
    let at_row = std::array::from_fn::<i32, 8, _>(|r| if r < R { (r * nb * STEP) as i32 } else { 0 });
    _mm256_loadu_si256(at_row.as_ptr().cast())
}

/// A row's block, from its lanes (without the `−32` offset, which is taken off
/// here): `vec_dot`'s `acc = fma(d_w·d_x, f32(lanes), acc)`, or, tiled, the lanes
/// kept for [`add_rows_tiled`].
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add_row<const TILED: bool>(
    acc: &mut __m256,
    row_lanes: &mut __m256i,
    lanes: __m256i,
    xb: &BlockQ8K,
    scales16: __m256i,
    d: f32,
) {
    let offset = _mm256_slli_epi32(
        _mm256_madd_epi16(_mm256_loadu_si256(xb.bsums.as_ptr().cast()), scales16),
        5,
    );
    let lanes = _mm256_sub_epi32(lanes, offset);
    if TILED {
        *row_lanes = lanes;
    } else {
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * d), _mm256_cvtepi32_ps(lanes), *acc);
    }
}

/// Every row's `out = fma(f32(sum)·d_w, d_x, out)` in one lane of its own (ggml's
/// compiler fuses its `out + block·d_x`), `x` the first row's block.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add_rows_tiled(sums: &mut __m256, row_lanes: &[__m256i; 8], d: f32, x: *const BlockQ8K, at_row: __m256i) {
    let block = _mm256_mul_ps(_mm256_cvtepi32_ps(row_sums(row_lanes)), _mm256_set1_ps(d));
    let dx = _mm256_i32gather_ps::<4>(std::ptr::addr_of!((*x).d), at_row);
    *sums = _mm256_fmadd_ps(block, dx, *sums);
}

/// Each row's output: the lane of the tiled sums, or `vec_dot`'s horizontal sum.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store<const R: usize, const TILED: bool>(acc: &[__m256; R], sums: __m256, out: *mut f32, out_stride: usize) {
    let tiled: [f32; 8] = std::mem::transmute(sums);
    for r in 0..R {
        *out.add(r * out_stride) = if TILED { tiled[r] } else { hsum_float_8(acc[r]) };
    }
}

/// The exact sums of eight rows' eight integer lanes: lane r holds row r's.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn row_sums(rows: &[__m256i; 8]) -> __m256i {
    // Per 128-bit half, pairs, then fours: [r0, r1, r2, r3] of each half's lanes.
    let pairs = |a, b| _mm256_hadd_epi32(a, b);
    let low = pairs(pairs(rows[0], rows[1]), pairs(rows[2], rows[3]));
    let high = pairs(pairs(rows[4], rows[5]), pairs(rows[6], rows[7]));
    _mm256_add_epi32(
        _mm256_permute2x128_si256(low, high, 0x20),
        _mm256_permute2x128_si256(low, high, 0x31),
    )
}
