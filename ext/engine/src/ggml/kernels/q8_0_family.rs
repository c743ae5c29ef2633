//! Weights in ggml's 32-weight blocks with one scale (Q5_0, Q8_0) times a few
//! activation rows, with AVX-512 VNNI or AVX2.
//!
//! Models whose rows are no multiple of 256 (Qwen2.5 0.5B's 896) keep most weights
//! as Q5_0 and their output head as Q8_0. ggml multiplies them by one activation row
//! with `vec_dot` (`ggml_vec_dot_q5_0_q8_0`), as fast as the memory allows, and by
//! several with llamafile's tinyBLAS, which from about 4 rows on is no faster than this
//! kernel (`examples/product_times.rs`; see `Kernel::max_rows` for how far). Here
//! each weight block is unpacked once and dotted with every activation row; with
//! AVX-512 up to four weight rows run side by side, their chains of multiply-adds
//! interleaved.
//!
//! The results are ggml's bits, at any row count: `vec_dot` and tinyBLAS take the
//! same steps. Per block each forms eight integer lanes (lane `l` the sum of
//! products `4l .. 4l + 4`, exact however formed; here through unsigned weights,
//! `w + offset`, less `offset ·` the activations' sums), then `acc = fma(d_w·d_x,
//! f32(lanes), acc)`; at the end their horizontal sum (`hsum_float_8`, which is
//! tinyBLAS's `hsum` too). With AVX2 the lanes are formed as ggml forms them there
//! (`mul_sum_i8_pairs`: `|w|` times `x` with `w`'s sign, in pairs, then in fours).

use std::arch::x86_64::*;

use super::isa::Isa;
use super::product::{dots, f16_to_f32, hsum_float_8, same_layout, Product, ROWS_PER_PASS};

/// Weights per block, and values per Q8_0 activation block.
pub const QK: usize = 32;

/// ggml's `block_q5_0`: weight `j` is `(qs nibble | bit j of qh << 4) − 16`.
#[repr(C)]
pub struct BlockQ5_0 {
    d: u16,
    qh: [u8; 4],
    /// Weights `j` (low nibbles) and `j + 16` (high nibbles) at `j`.
    qs: [u8; QK / 2],
}

same_layout!(BlockQ5_0, ggml_sys::layouts::block_q5_0, d, qh, qs);

/// ggml's `block_q8_0`: the weights' (or activations') bytes, and their scale.
#[repr(C)]
pub struct BlockQ8_0 {
    d: u16,
    qs: [i8; QK],
}

same_layout!(BlockQ8_0, ggml_sys::layouts::block_q8_0, d, qs);

/// A block type: its scale, and its 32 weights as unsigned bytes `w + OFFSET`
/// (`vpdpbusd` multiplies unsigned by signed bytes) or as signed bytes.
pub trait Block {
    const OFFSET: u8;
    fn d(&self) -> u16;
    /// # Safety
    /// The CPU has AVX-512 BW and VL.
    unsafe fn unsigned_weights(&self) -> __m256i;
    /// # Safety
    /// The CPU has AVX2.
    unsafe fn signed_weights(&self) -> __m256i;
}

impl Block for BlockQ5_0 {
    const OFFSET: u8 = 16;

    fn d(&self) -> u16 {
        self.d
    }

    #[inline(always)]
    unsafe fn unsigned_weights(&self) -> __m256i {
        let qs = _mm_loadu_si128(self.qs.as_ptr().cast());
        let nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f));
        // The fifth bit, set where qh says: `w + 16` in 0..32.
        let high = u32::from_le_bytes(self.qh);
        _mm256_mask_add_epi8(nibbles, high, nibbles, _mm256_set1_epi8(16))
    }

    #[inline(always)]
    unsafe fn signed_weights(&self) -> __m256i {
        let qs = _mm_loadu_si128(self.qs.as_ptr().cast());
        let nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f));
        // `w = (nibble | bit j of qh << 4) − 16`: the nibble where the bit is set, the
        // nibble less 16 where it is clear. Byte j of `spread` holds byte j/8 of qh,
        // and `bit` picks its bit j % 8.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(i32::from_le_bytes(self.qh)),
            _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0),
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        _mm256_sub_epi8(nibbles, _mm256_andnot_si256(set, _mm256_set1_epi8(16)))
    }
}

impl Block for BlockQ8_0 {
    const OFFSET: u8 = 128;

    fn d(&self) -> u16 {
        self.d
    }

    #[inline(always)]
    unsafe fn unsigned_weights(&self) -> __m256i {
        _mm256_xor_si256(_mm256_loadu_si256(self.qs.as_ptr().cast()), _mm256_set1_epi8(i8::MIN))
    }

    #[inline(always)]
    unsafe fn signed_weights(&self) -> __m256i {
        _mm256_loadu_si256(self.qs.as_ptr().cast())
    }
}

/// `out[r][row] = w_row(row) · x[r]` for the weight rows `share` hands this thread
/// and every activation row `r` of `x` (each row holds `nb` blocks). `share` runs the
/// work it is given on each range of weight rows this thread takes.
///
/// # Safety
/// The CPU runs `isa`, and `product` holds the weight rows `share` names.
pub(super) unsafe fn mul_rows<B: Block>(
    product: &Product<B, BlockQ8_0>,
    isa: Isa,
    share: impl FnOnce(&mut dyn FnMut(std::ops::Range<usize>)),
) {
    let sides: [SideBySide<B>; ROWS_PER_PASS] = match isa {
        Isa::Avx512Vnni => dots!(side_by_side, B),
        Isa::Avx2 => dots!(one_by_one_avx2, B),
    };
    // Worked out once per thread, for all the weight rows it takes.
    let runs: Vec<(Product<B, BlockQ8_0>, Activations)> = (0..product.n_rows)
        .step_by(ROWS_PER_PASS)
        .map(|first| {
            let part = product
                .rows_from(first)
                .first_rows((product.n_rows - first).min(ROWS_PER_PASS));
            let activations = Activations::of::<B>(&part, isa);
            (part, activations)
        })
        .collect();
    share(&mut |rows| {
        // A few weight rows at a time through every run of activation rows, so that the
        // runs after the first read them from the cache (as `Product::for_each_unit`).
        for first in rows.clone().step_by(WEIGHT_ROWS_AT_ONCE) {
            let group = first..(first + WEIGHT_ROWS_AT_ONCE).min(rows.end);
            for (part, activations) in &runs {
                sides[part.n_rows - 1](part, activations, group.clone());
            }
        }
    });
}

/// The weight rows dotted side by side with up to four activation rows (sixteen
/// accumulators), and the most a group read once for every run holds. Each weight
/// row is a stream of its own, and ggml's tinyBLAS reads four at once too: on an
/// Intel Xeon (`product_times`, 2 threads, a layer's Q8_0 matrices 1024 and 3072
/// wide), one row at a time took 1.8–3.1× tinyBLAS's time at 2 and 4 activation
/// rows, four 1.0–1.2×.
const WEIGHT_ROWS_AT_ONCE: usize = 4;

/// What each activation block contributes to every weight row's dot products, worked
/// out once: the lanes' starting values (`−offset ·` the sums of each four
/// activations; AVX-512 only) and the block's scale as F32, for row `r` block `b` at
/// `r·nb + b`.
struct Activations {
    starts: Vec<__m256i>,
    scales: Vec<f32>,
}

impl Activations {
    unsafe fn of<B: Block>(product: &Product<B, BlockQ8_0>, isa: Isa) -> Activations {
        let blocks = std::slice::from_raw_parts(product.x, product.n_rows * product.nb);
        Activations {
            starts: match isa {
                Isa::Avx512Vnni => Self::starts::<B>(blocks),
                Isa::Avx2 => Vec::new(),
            },
            scales: blocks.iter().map(|xb| f16_to_f32(xb.d)).collect(),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn starts<B: Block>(blocks: &[BlockQ8_0]) -> Vec<__m256i> {
        let offset = _mm256_set1_epi8(B::OFFSET as i8);
        blocks
            .iter()
            .map(|xb| {
                let q8 = _mm256_loadu_si256(xb.qs.as_ptr().cast());
                _mm256_sub_epi32(
                    _mm256_setzero_si256(),
                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, q8),
                )
            })
            .collect()
    }
}

type SideBySide<B> = unsafe fn(&Product<B, BlockQ8_0>, &Activations, std::ops::Range<usize>);

/// The weight rows `rows` (at most [`WEIGHT_ROWS_AT_ONCE`]) times the `R` activation
/// rows of `product`: side by side where their accumulators fit sixteen registers,
/// else two at a time, the last alone.
unsafe fn side_by_side<const R: usize, B: Block>(
    product: &Product<B, BlockQ8_0>,
    activations: &Activations,
    rows: std::ops::Range<usize>,
) {
    let mut row = rows.start;
    if R <= 4 && row + WEIGHT_ROWS_AT_ONCE <= rows.end {
        dot_rows::<B, R, WEIGHT_ROWS_AT_ONCE>(product, activations, row);
        row += WEIGHT_ROWS_AT_ONCE;
    }
    while row + 2 <= rows.end {
        dot_rows::<B, R, 2>(product, activations, row);
        row += 2;
    }
    if row < rows.end {
        dot_rows::<B, R, 1>(product, activations, row);
    }
}

/// How far ahead of a weight row's block its bytes are prefetched. Rows read side by
/// side in blocks of 22 or 34 bytes outrun the hardware's prefetcher: without this
/// a product of two activation rows took 1.8× as long.
const PREFETCH_BYTES: usize = 1024;

/// Weight rows `first .. first + P` times the `R` activation rows of `product`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_rows<B: Block, const R: usize, const P: usize>(
    product: &Product<B, BlockQ8_0>,
    activations: &Activations,
    first: usize,
) {
    let nb = product.nb;
    let mut acc = [[_mm256_setzero_ps(); P]; R];
    for b in 0..nb {
        let blocks: [&B; P] = std::array::from_fn(|p| &*product.w.add((first + p) * nb + b));
        for block in blocks {
            _mm_prefetch::<_MM_HINT_T0>((block as *const B).cast::<i8>().add(PREFETCH_BYTES));
        }
        let weights: [__m256i; P] = std::array::from_fn(|p| blocks[p].unsigned_weights());
        let d: [f32; P] = std::array::from_fn(|p| f16_to_f32(blocks[p].d()));
        for (r, acc) in acc.iter_mut().enumerate() {
            let at = r * nb + b;
            let q8 = _mm256_loadu_si256((*product.x.add(at)).qs.as_ptr().cast());
            let (start, dx) = (
                *activations.starts.get_unchecked(at),
                *activations.scales.get_unchecked(at),
            );
            for p in 0..P {
                let lanes = _mm256_dpbusd_epi32(start, weights[p], q8);
                acc[p] = _mm256_fmadd_ps(_mm256_set1_ps(d[p] * dx), _mm256_cvtepi32_ps(lanes), acc[p]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (p, &acc) in acc.iter().enumerate() {
            *product.out.add(r * product.out_stride + first + p) = hsum_float_8(acc);
        }
    }
}

/// The weight rows `rows` times the `R` activation rows of `product`, one weight row
/// at a time, with AVX2.
unsafe fn one_by_one_avx2<const R: usize, B: Block>(
    product: &Product<B, BlockQ8_0>,
    activations: &Activations,
    rows: std::ops::Range<usize>,
) {
    for row in rows {
        dot_row_avx2::<B, R>(product, activations, row);
    }
}

/// Weight row `row` times the `R` activation rows of `product`, with AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_row_avx2<B: Block, const R: usize>(
    product: &Product<B, BlockQ8_0>,
    activations: &Activations,
    row: usize,
) {
    let nb = product.nb;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let block = &*product.w.add(row * nb + b);
        let weights = block.signed_weights();
        let magnitudes = _mm256_sign_epi8(weights, weights);
        let d = f16_to_f32(block.d());
        for (r, acc) in acc.iter_mut().enumerate() {
            let at = r * nb + b;
            let q8 = _mm256_loadu_si256((*product.x.add(at)).qs.as_ptr().cast());
            // Pairs of products fit 16 bits (127·127·2 < 2¹⁵).
            let pairs = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(q8, weights));
            let lanes = _mm256_madd_epi16(pairs, ones);
            let dx = *activations.scales.get_unchecked(at);
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(lanes), *acc);
        }
    }
    for (r, &acc) in acc.iter().enumerate() {
        *product.out.add(r * product.out_stride + row) = hsum_float_8(acc);
    }
}
