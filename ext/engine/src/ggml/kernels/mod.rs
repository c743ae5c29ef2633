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

use super::tensor::Tensor;
use isa::{isa, Isa};
#[cfg(target_arch = "x86_64")]
use product::Product;

mod isa;
#[cfg(target_arch = "x86_64")]
mod product;
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
/// ours took 0.87 of its time at 40 rows, 1.10 at 48, 1.9 at 128; with AVX2 0.83 at
/// 40).
const TILED_Q6_K_MAX_ROWS: i64 = 40;

/// The most rows our Q8_0 kernel takes beside tinyBLAS. Ours would be faster further
/// (an Intel Xeon, `product_times`, 2 threads, AVX-512: 0.87–0.97 of tinyBLAS's time
/// at 32 to 64 rows), but a higher limit has not been checked against every CPU
/// variant's goldens yet. With AVX2 (a Zen 3, the 0.5B's head) 1.00 of its time at 16
/// rows, 1.08 at 24. With the reference kernels (`vec_dot` per output) ours stays
/// ahead at any count.
const TINYBLAS_Q8_0_MAX_ROWS: i64 = 24;
const TINYBLAS_Q8_0_MAX_ROWS_AVX2: i64 = 16;

/// From this many rows on, ggml's default kernels multiply plain K-quant weights with
/// their tiled product (`ggml_tiled_min_batch`), whose bits are not `vec_dot`'s.
/// Unless there is a kernel of ours for the tiled order, the products stay ggml's.
/// What this module mirrors of ggml's private choices (this number, its switches'
/// parsing, the repacking buffer's name) is checked against the vendored source by
/// `tests::ggmls_private_choices_are_the_ones_mirrored_here`; the block layouts are
/// checked against ggml's headers at compile time (`same_layout!`).
const TILED_MIN_ROWS: i64 = 8;

/// The name of ggml's repacking buffer type (`ggml_backend_cpu_repack_buffer_type`).
const REPACK_BUFFER: &str = "CPU_REPACK";

/// A lone row gains nothing from our plain Q4_K, Q5_0 and Q8_0 kernels, nor with AVX2
/// from our Q6_K one (1.08 of `vec_dot`'s time, 0.75 at two rows): `vec_dot` streams
/// one weight row at a time as fast (ours pays its per-block decoding for one row
/// only, or reads more rows at once than the prefetcher follows).
const VEC_DOT_ROWS: i64 = 1;

/// Which matrix products a graph uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// ggml's, always.
    #[default]
    Ggml,
    /// Ours wherever one gives the bits ggml's product would give in the same pass,
    /// with ggml's default kernels or, when `reference`, with its reference kernels
    /// (`use_ref`: one `vec_dot` per output at any row count). Weights in ggml's
    /// repacking buffer take ours only when `repacked`: where the CPU backend runs the
    /// whole graph. A scheduler would not: ggml's CPU backend declines a custom op whose
    /// weight is not in host memory, so the pass would copy the weight to another
    /// backend, and the repacking buffer cannot be read back.
    Own { reference: bool, repacked: bool },
}

/// The kernel of ours for `w · x` under `products`, if there is one for this weight
/// layout, this CPU and this many rows. `w` is a model weight (already in its
/// buffer), `x` an F32 activation matrix.
pub fn for_product(w: Tensor, x: Tensor, products: Products) -> Option<Kernel> {
    let Products::Own {
        reference,
        repacked: repacked_allowed,
    } = products
    else {
        return None;
    };
    let [k, n, w2, w3] = w.ne();
    let [xk, rows, x2, x3] = x.ne();
    let shapes_fit = xk == k && w2 == 1 && w3 == 1 && x2 == 1 && x3 == 1 && rows >= 1;
    if !shapes_fit
        || k % unsafe { sys::ggml_blck_size(w.ggml_type()) } != 0
        || x.ggml_type() != sys::GGML_TYPE_F32
        || !unsafe { sys::ggml_is_contiguous(x.as_ptr()) }
    {
        return None;
    }
    let isa = isa()?;
    let repacked = is_repacked(w);
    if !(repacked && repacked_allowed || in_host_memory(w)) {
        return None;
    }
    // ggml multiplies plain K-quant weights with `vec_dot` (reference kernels, or
    // below eight rows) or its tiled kernel, repacked Q4_K ones with a gemm per four
    // rows and a gemv for the rest: each kernel here follows whichever ggml runs.
    // Q5_0 and Q8_0 take the same float steps in `vec_dot` and in tinyBLAS.
    let tiled = !reference && tiled_takes(rows);
    let kernel = match (w.ggml_type(), repacked) {
        (sys::GGML_TYPE_Q4_K, true) if n % 8 == 0 => Kernel::Q4Kx8,
        (sys::GGML_TYPE_Q4_K, false) if !tiled && rows > VEC_DOT_ROWS => Kernel::Q4K,
        (sys::GGML_TYPE_Q6_K, false) if isa == Isa::Avx512Vnni || rows > VEC_DOT_ROWS => Kernel::Q6K { tiled },
        (sys::GGML_TYPE_Q5_0, false) if rows > VEC_DOT_ROWS => Kernel::Q5_0,
        (sys::GGML_TYPE_Q8_0, false) if rows > VEC_DOT_ROWS => Kernel::Q8_0,
        _ => return None,
    };
    (rows <= kernel.max_rows(reference, isa)).then_some(kernel)
}

/// Whether ggml's tiled kernel takes a product of `rows` activation rows (of a type it
/// has): `GGML_CPU_TILED_MM` unset or not 0 (ggml's master switch), and `rows` at least
/// [`TILED_MIN_ROWS`] or `GGML_CPU_TILED_MM_FORCE=1` (`ggml_tiled_min_batch`), each
/// parsed with C's `atoi` as ggml parses it.
fn tiled_takes(rows: i64) -> bool {
    static SWITCHES: OnceLock<(bool, bool)> = OnceLock::new();
    let (enabled, forced) = *SWITCHES.get_or_init(|| {
        let switch = |name: &str| std::env::var(name).ok().map(|v| atoi(&v));
        (
            switch("GGML_CPU_TILED_MM").is_none_or(|n| n != 0),
            switch("GGML_CPU_TILED_MM_FORCE") == Some(1),
        )
    });
    enabled && (rows >= TILED_MIN_ROWS || forced)
}

/// C's `atoi`: blanks, a sign, then the digits up to the first other character (0 when
/// there are none).
fn atoi(text: &str) -> i64 {
    let text = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (sign, digits) = match text.as_bytes().first() {
        Some(b'-') => (-1, &text[1..]),
        Some(b'+') => (1, &text[1..]),
        _ => (1, text),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| n.wrapping_mul(10).wrapping_add(i64::from(d - b'0')));
    sign * n
}

/// Whether `w`'s data is in host memory, where a custom op on the CPU backend can
/// read it (another backend's weights stay with ggml's products; the CPU's
/// repacking buffer, also in host memory, does not say so).
fn in_host_memory(w: Tensor) -> bool {
    let buffer = unsafe { (*w.as_ptr()).buffer };
    !buffer.is_null() && unsafe { sys::ggml_backend_buffer_is_host(buffer) }
}

/// Whether `w` lives in ggml's repacking buffer (which holds Q4_K as `block_q4_Kx8`
/// on x86 CPUs with AVX2, the only ones our kernels run on).
fn is_repacked(w: Tensor) -> bool {
    let buffer = unsafe { (*w.as_ptr()).buffer };
    !buffer.is_null()
        && unsafe { std::ffi::CStr::from_ptr(sys::ggml_backend_buft_name(sys::ggml_backend_buffer_get_type(buffer))) }
            .to_bytes()
            == REPACK_BUFFER.as_bytes()
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
    /// to [`MAX_ROWS`] (with AVX-512, repacked Q4_K: 0.63 of ggml's time at 512 rows;
    /// Q5_0 0.88 at 96, within the noise at 512; with AVX2, repacked Q4_K 0.76 at 128,
    /// plain Q4_K 0.91 and Q5_0 0.92 at 512).
    fn max_rows(self, reference: bool, isa: Isa) -> i64 {
        match (self, isa) {
            (Kernel::Q6K { tiled: true }, _) => TILED_Q6_K_MAX_ROWS,
            (Kernel::Q8_0, Isa::Avx512Vnni) if !reference => TINYBLAS_Q8_0_MAX_ROWS,
            (Kernel::Q8_0, Isa::Avx2) if !reference => TINYBLAS_Q8_0_MAX_ROWS_AVX2,
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
            q4_k_x8::mul_rows(&product, chosen_isa(), groups)
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
            q4_k::mul_rows(&product, chosen_isa(), rows)
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
            q6_k::mul_rows(&product, chosen_isa(), rows, TILED)
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
    q8_0_family::mul_rows::<B>(&product, chosen_isa(), |work| {
        Chunks::share(chunks, product.n_weight_rows, nth, work)
    });
}

#[cfg(not(target_arch = "x86_64"))]
unsafe extern "C" fn q8_0_family_op(dst: *mut sys::ggml_tensor, ith: c_int, nth: c_int, chunks: *mut c_void) {
    off_x86(dst, ith, nth, chunks)
}

/// The instruction set of the kernel an op runs.
#[cfg(target_arch = "x86_64")]
fn chosen_isa() -> Isa {
    isa().expect("a kernel of ours is chosen only on a CPU that runs one")
}

#[cfg(not(target_arch = "x86_64"))]
fn off_x86(_: *mut sys::ggml_tensor, _: c_int, _: c_int, _: *mut c_void) {
    unreachable!("no kernel of ours is chosen off x86-64");
}

#[cfg(test)]
mod tests;
