//! Matrix products of our own for the few-row passes ggml runs slowly (decode steps
//! of several sequences, speculative verification), as custom ops on the CPU backend.
//!
//! Each kernel gives every output the bits ggml's own product would give it in the
//! same pass (ggml changes kernels, and their order of float operations, with the
//! row count: see each kernel), so passes still match llama.cpp bit for bit. With
//! ggml's reference kernels (batch-invariant contexts) that is `vec_dot`'s at any
//! row count, so a row's product does not depend on the other rows of its pass.
//! Prompt passes take them too, up to the row count where ggml's kernel for the
//! weight type catches up (see [`Kernel::max_rows`]).

use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;
#[cfg(target_arch = "x86_64")]
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use ggml_sys as sys;

use crate::ggml::Tensor;

#[cfg(target_arch = "x86_64")]
mod q4_k;
#[cfg(target_arch = "x86_64")]
mod q4_k_x8;
#[cfg(target_arch = "x86_64")]
mod q6_k;
#[cfg(target_arch = "x86_64")]
mod q8_0_family;

/// The most activation rows a product of ours takes (a default micro-batch); more go
/// to ggml. Some kernels stop earlier: [`Kernel::max_rows`].
pub const MAX_ROWS: i64 = 512;

/// The most rows our Q6_K kernel takes in ggml's tiled order: from 48 rows ggml's
/// tiled product is faster (`examples/product_times.rs`, 2 threads, the 1.5B's head:
/// ours took 0.87 of its time at 40 rows, 1.10 at 48, 1.9 at 128).
const TILED_Q6_K_MAX_ROWS: i64 = 40;

/// The most rows our Q8_0 kernel takes beside tinyBLAS, which catches up from about
/// 24 rows (the 0.5B's head: ours 0.77 of its time at 17 rows, 0.94 at 24, 1.05 at
/// 32, 1.12 at 256); with the reference kernels (`vec_dot` per output) ours stays
/// ahead at any count.
const TINYBLAS_Q8_0_MAX_ROWS: i64 = 24;

/// From this many rows on, ggml's default kernels multiply plain K-quant weights with
/// their tiled product (`ggml_tiled_min_batch`), whose bits are not `vec_dot`'s.
/// Unless there is a kernel of ours for the tiled order, the products stay ggml's.
const TILED_MIN_ROWS: i64 = 8;

/// A lone row gains nothing from our plain Q4_K, Q5_0 and Q8_0 kernels: `vec_dot`
/// streams one weight row at a time as fast (ours pays its per-block decoding for one
/// row only, or reads more rows at once than the prefetcher follows).
const VEC_DOT_ROWS: i64 = 1;

/// Which matrix products a graph uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// ggml's, always.
    #[default]
    Ggml,
    /// Ours wherever one gives the bits ggml's product would give in the same pass,
    /// with ggml's default kernels or, when `reference`, with its reference kernels
    /// (`use_ref`: one `vec_dot` per output at any row count).
    Own { reference: bool },
}

/// The kernel of ours for `w · x` under `products`, if there is one for this weight
/// layout, this CPU and this many rows. `w` is a model weight (already in its
/// buffer), `x` an F32 activation matrix.
pub fn for_product(w: Tensor, x: Tensor, products: Products) -> Option<Kernel> {
    let Products::Own { reference } = products else {
        return None;
    };
    let [k, n, w2, w3] = w.ne();
    let [xk, rows, x2, x3] = x.ne();
    let shapes_fit = xk == k && w2 == 1 && w3 == 1 && x2 == 1 && x3 == 1 && rows >= 1;
    if !shapes_fit
        || k % unsafe { sys::ggml_blck_size(w.ggml_type()) } != 0
        || x.ggml_type() != sys::GGML_TYPE_F32
        || !unsafe { sys::ggml_is_contiguous(x.as_ptr()) }
        || !avx512_vnni()
    {
        return None;
    }
    let repacked = is_repacked(w);
    if !(repacked || in_host_memory(w)) {
        return None;
    }
    // ggml multiplies plain K-quant weights with `vec_dot` (reference kernels, or
    // below eight rows) or its tiled kernel, repacked Q4_K ones with a gemm per four
    // rows and a gemv for the rest: each kernel here follows whichever ggml runs.
    // Q5_0 and Q8_0 take the same float steps in `vec_dot` and in tinyBLAS.
    let tiled = !reference && rows >= TILED_MIN_ROWS && tiled_enabled();
    let kernel = match (w.ggml_type(), repacked) {
        (sys::GGML_TYPE_Q4_K, true) if n % 8 == 0 => Kernel::Q4Kx8,
        (sys::GGML_TYPE_Q4_K, false) if !tiled && rows > VEC_DOT_ROWS => Kernel::Q4K,
        (sys::GGML_TYPE_Q6_K, false) => Kernel::Q6K { tiled },
        (sys::GGML_TYPE_Q5_0, false) if rows > VEC_DOT_ROWS => Kernel::Q5_0,
        (sys::GGML_TYPE_Q8_0, false) if rows > VEC_DOT_ROWS => Kernel::Q8_0,
        _ => return None,
    };
    (rows <= kernel.max_rows(reference)).then_some(kernel)
}

/// Whether ggml's tiled kernel is on: `GGML_CPU_TILED_MM` unset or not 0, as ggml
/// reads it.
fn tiled_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("GGML_CPU_TILED_MM").map_or(true, |v| v.trim().parse::<i64>().is_ok_and(|n| n != 0))
    })
}

/// Weights per K-quant block.
#[cfg(target_arch = "x86_64")]
const QK_K: usize = 256;

/// ggml's `block_q8_K`: 256 activations quantized to bytes, the other operand of
/// every K-quant product.
#[cfg(target_arch = "x86_64")]
#[repr(C)]
struct BlockQ8K {
    d: f32,
    qs: [i8; QK_K],
    /// Sums of each 16 `qs`.
    bsums: [i16; QK_K / 16],
}

/// Whether this CPU runs our kernels (all of them need AVX-512 VNNI).
fn avx512_vnni() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Whether `w`'s data is in host memory, where a custom op on the CPU backend can
/// read it (another backend's weights stay with ggml's products; the CPU's
/// repacking buffer, also in host memory, does not say so).
fn in_host_memory(w: Tensor) -> bool {
    let buffer = unsafe { (*w.as_ptr()).buffer };
    !buffer.is_null() && unsafe { sys::ggml_backend_buffer_is_host(buffer) }
}

/// Whether `w` lives in ggml's repacking buffer (which holds Q4_K as `block_q4_Kx8`
/// on x86 CPUs with AVX2, the only ones our Q4_K kernel runs on).
fn is_repacked(w: Tensor) -> bool {
    let buffer = unsafe { (*w.as_ptr()).buffer };
    !buffer.is_null()
        && unsafe { std::ffi::CStr::from_ptr(sys::ggml_backend_buft_name(sys::ggml_backend_buffer_get_type(buffer))) }
            .to_bytes()
            == b"CPU_REPACK"
}

/// A product of ours: the type its activations are quantized to first, and the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Repacked Q4_K weights (`block_q4_Kx8`), activations as Q8_K.
    Q4Kx8,
    /// Q4_K weights as in the file, activations as Q8_K.
    Q4K,
    /// Q6_K weights, activations as Q8_K, with the bits of ggml's tiled kernel or of
    /// `vec_dot`.
    Q6K { tiled: bool },
    /// Q5_0 weights, activations as Q8_0.
    Q5_0,
    /// Q8_0 weights, activations as Q8_0.
    Q8_0,
}

impl Kernel {
    /// The most activation rows this kernel takes: where it stops being faster than
    /// the ggml kernel it stands in for (with ggml's `reference` kernels, or its
    /// default ones). The repacked and plain Q4_K and the Q5_0 kernels stay ahead up
    /// to [`MAX_ROWS`] (repacked Q4_K: 0.63 of ggml's time at 512 rows; Q5_0 0.88 at
    /// 96, within the noise at 512).
    fn max_rows(self, reference: bool) -> i64 {
        match self {
            Kernel::Q6K { tiled: true } => TILED_Q6_K_MAX_ROWS,
            Kernel::Q8_0 if !reference => TINYBLAS_Q8_0_MAX_ROWS,
            _ => MAX_ROWS,
        }
    }

    /// The type ggml's own kernel quantizes the activations to (`vec_dot_type`),
    /// which a `ggml_cpy` produces with the same function.
    pub fn activation_type(self) -> sys::ggml_type {
        match self {
            Kernel::Q4Kx8 | Kernel::Q4K | Kernel::Q6K { .. } => sys::GGML_TYPE_Q8_K,
            Kernel::Q5_0 | Kernel::Q8_0 => sys::GGML_TYPE_Q8_0,
        }
    }

    /// The custom op: `dst = w · xq` with `dst->src = [w, xq]`.
    pub fn op(self) -> sys::ggml_custom_op_t {
        match self {
            Kernel::Q4Kx8 => Some(q4_k_x8_op),
            Kernel::Q4K => Some(q4_k_op),
            Kernel::Q6K { tiled: false } => Some(q6_k_op::<false>),
            Kernel::Q6K { tiled: true } => Some(q6_k_op::<true>),
            #[cfg(target_arch = "x86_64")]
            Kernel::Q5_0 => Some(q8_0_family_op::<q8_0_family::BlockQ5_0>),
            #[cfg(target_arch = "x86_64")]
            Kernel::Q8_0 => Some(q8_0_family_op::<q8_0_family::BlockQ8_0>),
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Q5_0 | Kernel::Q8_0 => Some(q8_0_family_op),
        }
    }
}

/// A product's weight units (rows, or repacked groups of eight), handed out a chunk
/// at a time to whichever of the op's threads asks next. A thread the host preempts,
/// or one slowed by another process, leaves its chunks to the others, where a fixed
/// share per thread kept them waiting at ggml's barrier after the op.
///
/// Each custom op node holds one, as its userdata, for the graph's life.
#[derive(Debug, Default)]
// Off x86-64 no kernel of ours is chosen, so nothing takes chunks.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct Chunks {
    next: AtomicUsize,
    finished: AtomicUsize,
}

/// Chunks per thread a product is cut into: enough for a late thread's share to be
/// taken over, few enough that each is a long run of weights for the prefetcher.
#[cfg(target_arch = "x86_64")]
const CHUNKS_PER_THREAD: usize = 8;

#[cfg(target_arch = "x86_64")]
impl Chunks {
    /// Runs `work` over chunks of `0..units` (even-sized: Q5_0 takes its rows in
    /// pairs) until none is left. The last of the op's `nth` threads to finish sets
    /// the counters back for the next computation of the graph, which ggml starts
    /// only after its barrier, so no thread still reads them.
    ///
    /// # Safety
    /// `chunks` is the op's userdata, a [`Chunks`] its graph keeps alive; every one
    /// of the op's `nth` threads calls this once per computation.
    unsafe fn share(chunks: *mut c_void, units: usize, nth: c_int, mut work: impl FnMut(std::ops::Range<usize>)) {
        let chunks = &*chunks.cast::<Chunks>();
        let per_chunk = units.div_ceil(nth as usize * CHUNKS_PER_THREAD).next_multiple_of(2);
        loop {
            let start = chunks.next.fetch_add(1, Ordering::Relaxed) * per_chunk;
            if start >= units {
                break;
            }
            work(start..(start + per_chunk).min(units));
        }
        if chunks.finished.fetch_add(1, Ordering::AcqRel) + 1 == nth as usize {
            chunks.next.store(0, Ordering::Relaxed);
            chunks.finished.store(0, Ordering::Relaxed);
        }
    }
}

/// `dst = w · xq`, `dst->src = [w, xq]`, `chunks` a [`Chunks`]: the weight rows (or
/// their groups of eight, for repacked Q4_K) this thread takes.
unsafe extern "C" fn q4_k_x8_op(dst: *mut sys::ggml_tensor, _ith: c_int, nth: c_int, chunks: *mut c_void) {
    #[cfg(target_arch = "x86_64")]
    {
        let product = Product::of(dst);
        Chunks::share(chunks, product.n_weight_rows / 8, nth, |groups| {
            q4_k_x8::mul_rows(&product, groups)
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    off_x86(dst, _ith, nth, chunks)
}

unsafe extern "C" fn q4_k_op(dst: *mut sys::ggml_tensor, _ith: c_int, nth: c_int, chunks: *mut c_void) {
    #[cfg(target_arch = "x86_64")]
    {
        let product = Product::of(dst);
        Chunks::share(chunks, product.n_weight_rows, nth, |rows| {
            q4_k::mul_rows(&product, rows)
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    off_x86(dst, _ith, nth, chunks)
}

unsafe extern "C" fn q6_k_op<const TILED: bool>(
    dst: *mut sys::ggml_tensor,
    _ith: c_int,
    nth: c_int,
    chunks: *mut c_void,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let product = Product::of(dst);
        Chunks::share(chunks, product.n_weight_rows, nth, |rows| {
            q6_k::mul_rows(&product, rows, TILED)
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    off_x86(dst, _ith, nth, chunks)
}

#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn q8_0_family_op<B: q8_0_family::Block>(
    dst: *mut sys::ggml_tensor,
    _ith: c_int,
    nth: c_int,
    chunks: *mut c_void,
) {
    let product = Product::of(dst);
    q8_0_family::mul_rows::<B>(&product, |work| Chunks::share(chunks, product.n_weight_rows, nth, work));
}

#[cfg(not(target_arch = "x86_64"))]
unsafe extern "C" fn q8_0_family_op(dst: *mut sys::ggml_tensor, ith: c_int, nth: c_int, chunks: *mut c_void) {
    off_x86(dst, ith, nth, chunks)
}

#[cfg(not(target_arch = "x86_64"))]
fn off_x86(_: *mut sys::ggml_tensor, _: c_int, _: c_int, _: *mut c_void) {
    unreachable!("no kernel of ours is chosen off x86-64");
}

/// A product's operands, as its op finds them: `out = w · x`.
#[cfg(target_arch = "x86_64")]
struct Product<W, X = BlockQ8K> {
    /// The weights: `n_weight_rows` rows of `nb` blocks each (stored row by row, or
    /// in groups of eight rows interleaved).
    w: *const W,
    nb: usize,
    n_weight_rows: usize,
    /// The activations, quantized: `n_rows` rows of `nb` blocks.
    x: *const X,
    n_rows: usize,
    /// `n_rows` rows of `out_stride` floats.
    out: *mut f32,
    out_stride: usize,
}

#[cfg(target_arch = "x86_64")]
impl<W, X> Product<W, X> {
    unsafe fn of(dst: *mut sys::ggml_tensor) -> Product<W, X> {
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
    unsafe fn rows_from(&self, first: usize) -> Product<W, X> {
        Product {
            x: self.x.add(first * self.nb),
            n_rows: self.n_rows - first,
            out: self.out.add(first * self.out_stride),
            ..*self
        }
    }

    /// The same product over the first `n_rows` activation rows only.
    fn first_rows(&self, n_rows: usize) -> Product<W, X> {
        Product { n_rows, ..*self }
    }
}

#[cfg(target_arch = "x86_64")]
impl<W> Product<W> {
    /// Runs `dots[R - 1]` for each unit of `units` (a weight row, or a group of
    /// `width` rows stored together) and each run of up to [`ROWS_PER_PASS`]
    /// activation rows: unit by unit, so that a unit read from memory serves every
    /// run while it is in the cache.
    unsafe fn for_each_unit(&self, dots: &[Dot<W>; ROWS_PER_PASS], width: usize, units: std::ops::Range<usize>) {
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

#[cfg(target_arch = "x86_64")]
impl<W, X> Clone for Product<W, X> {
    fn clone(&self) -> Self {
        *self
    }
}

#[cfg(target_arch = "x86_64")]
impl<W, X> Copy for Product<W, X> {}

/// Activation rows one pass over a weight row (or group) serves: their accumulators
/// fill the registers. More rows take more passes over weights then in cache.
#[cfg(target_arch = "x86_64")]
const ROWS_PER_PASS: usize = 8;

/// A kernel's inner loop: one weight row (or group of rows) of `nb` blocks times `R`
/// activation rows, into `out[r·out_stride]` (and the next columns, for a group).
#[cfg(target_arch = "x86_64")]
type Dot<W> = unsafe fn(*const W, usize, *const BlockQ8K, *mut f32, usize);

/// A kernel's inner loops for 1 to [`ROWS_PER_PASS`] rows: `dots!(f)` or, for a
/// kernel with a second generic parameter (a flag or a block type), `dots!(f, P)`.
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
use dots;

/// The six-bit scales and mins of sub-block `s` of a `block_q4_K` (`packed` at
/// `12·s`: one block's twelve bytes, or a `block_q4_Kx8`'s for eight rows), decoded
/// as ggml decodes them: eight scales, then eight mins, a byte each.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn scales_and_mins(packed: &[u8], s: usize) -> (u64, u64) {
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hsum_float_8(x: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let mut res = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "f16c")]
unsafe fn f16_to_f32(h: u16) -> f32 {
    use std::arch::x86_64::*;
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::{Backend, Buffer, Context, CpuDevice, Gallocr, GraphArena};

    /// A deterministic stream of floats in [-1, 1).
    fn floats(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// `w · x` for `x` of `rows` rows, in one pass, with `products`; and whether a
    /// kernel of ours computed it.
    fn product(w: Tensor, x: &[f32], rows: i64, products: Products, backend: &mut Backend) -> (Vec<f32>, bool) {
        let mut arena = GraphArena::new(16);
        let graph = arena.graph().unwrap().use_products(products);
        let input = graph.input("x", sys::GGML_TYPE_F32, &[w.ne()[0], rows]);
        let out = graph.mul_mat(w, input);
        graph.expand(out);
        let ours = unsafe { (*out.as_ptr()).op } == sys::GGML_OP_CUSTOM;
        let mut galloc = Gallocr::new(backend.default_buft()).unwrap();
        galloc.alloc(&graph).unwrap();
        input.write(&x[..(w.ne()[0] * rows) as usize]);
        backend.compute(&graph).unwrap();
        let mut result = vec![0.0; (w.ne()[1] * rows) as usize];
        out.read_f32(0, &mut result);
        (result, ours)
    }

    /// Random weights of `ty` (quantized by ggml) in a buffer of type `buft`, times
    /// random rows (a selection of counts up to MAX_ROWS), with ggml's default kernels
    /// and with its reference kernels: wherever a kernel of ours takes the product, it
    /// has the bits of ggml's product of the same rows; with the reference kernels and
    /// plain weights, each row the bits of that row alone.
    fn ours_have_ggmls_bits(ty: sys::ggml_type, buft: &str) {
        // A short row, and a long one (a feed-forward down projection's) over a count
        // of weight rows that is no multiple of ggml's tiles.
        for (k, n) in [(1024, 64), (8960, 136)] {
            ours_have_ggmls_bits_for_shape(ty, buft, k, n);
        }
    }

    fn ours_have_ggmls_bits_for_shape(ty: sys::ggml_type, buft: &str, k: i64, n: i64) {
        let device = CpuDevice::get().unwrap();
        let Some(&buft) = device.weight_bufts.iter().find(|b| b.name() == buft) else {
            eprintln!("no {buft} buffer type on this CPU: nothing to compare");
            return;
        };
        let ctx = Context::new_no_alloc(1).unwrap();
        let w = ctx.new_tensor(ty, &[k, n]).unwrap();
        let _buffer = Buffer::alloc_ctx_tensors(&ctx, buft, "test weights").unwrap();
        let weights = floats((k * n) as usize, 7);
        let mut quantized = vec![0u8; unsafe { sys::ggml_row_size(ty, k) } * n as usize];
        unsafe {
            sys::ggml_quantize_chunk(
                ty,
                weights.as_ptr(),
                quantized.as_mut_ptr().cast(),
                0,
                n,
                k,
                std::ptr::null(),
            );
        }
        w.write(&quantized);
        // Every count a kernel's inner loops and ggml's tiles tell apart, then a few
        // up to a whole micro-batch.
        let row_counts = (1..=17).chain([23, 24, 25, 33, 40, 41, 63, 64, 100, 255, MAX_ROWS]);
        let x = floats((k * MAX_ROWS) as usize, 11);
        let mut compared = 0;
        for reference in [false, true] {
            let mut backend = Backend::cpu(2).unwrap();
            if reference {
                backend.use_reference_kernels().unwrap();
            }
            // Repacked weights ignore the reference setting (see `Backend::use_reference_kernels`).
            let rows_alone = reference && buft.name() != "CPU_REPACK";
            let alone: Vec<Vec<f32>> = if rows_alone {
                (0..MAX_ROWS as usize)
                    .map(|r| product(w, &x[r * k as usize..], 1, Products::Ggml, &mut backend).0)
                    .collect()
            } else {
                Vec::new()
            };
            for rows in row_counts.clone() {
                let (ours, taken) = product(w, &x, rows, Products::Own { reference }, &mut backend);
                if !taken {
                    continue;
                }
                let (theirs, _) = product(w, &x, rows, Products::Ggml, &mut backend);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&ours),
                    bits(&theirs),
                    "reference {reference}, {rows} rows: not ggml's bits"
                );
                if rows_alone {
                    let alone: Vec<f32> = alone.iter().take(rows as usize).flatten().copied().collect();
                    assert_eq!(bits(&ours), bits(&alone), "{rows} rows: not the bits of each row alone");
                }
                compared += 1;
            }
        }
        if !avx512_vnni() {
            eprintln!("no kernel of ours runs on this CPU: nothing compared");
        } else {
            assert!(compared > 0, "no product of ours was compared");
        }
    }

    #[test]
    fn ours_have_ggmls_bits_for_repacked_q4_k() {
        ours_have_ggmls_bits(sys::GGML_TYPE_Q4_K, "CPU_REPACK");
    }

    #[test]
    fn ours_have_ggmls_bits_for_q4_k() {
        ours_have_ggmls_bits(sys::GGML_TYPE_Q4_K, "CPU");
    }

    #[test]
    fn ours_have_ggmls_bits_for_q6_k() {
        ours_have_ggmls_bits(sys::GGML_TYPE_Q6_K, "CPU");
    }

    #[test]
    fn ours_have_ggmls_bits_for_q5_0() {
        ours_have_ggmls_bits(sys::GGML_TYPE_Q5_0, "CPU");
    }

    #[test]
    fn ours_have_ggmls_bits_for_q8_0() {
        ours_have_ggmls_bits(sys::GGML_TYPE_Q8_0, "CPU");
    }
}
