//! Handles to ggml tensors, and the ggml contexts that own their metadata.

use std::ffi::{CStr, CString};
use std::ptr::NonNull;

use ggml_sys as sys;

use crate::{Error, Result};

/// A tensor in some ggml context this module owns. Copyable: it is only a handle,
/// valid while the context that holds it lives (the graph builder's or the model's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor(NonNull<sys::ggml_tensor>);

// SAFETY: tensors are plain descriptors; all access goes through the owning context,
// whose users serialize it.
unsafe impl Send for Tensor {}
unsafe impl Sync for Tensor {}

impl Tensor {
    pub(crate) fn from_raw(ptr: *mut sys::ggml_tensor) -> Result<Tensor> {
        NonNull::new(ptr)
            .map(Tensor)
            .ok_or_else(|| Error::Internal("ggml returned a null tensor".into()))
    }

    pub fn as_ptr(self) -> *mut sys::ggml_tensor {
        self.0.as_ptr()
    }

    pub fn ne(self) -> [i64; 4] {
        unsafe { (*self.as_ptr()).ne }
    }

    pub fn nb(self) -> [usize; 4] {
        unsafe { (*self.as_ptr()).nb }
    }

    pub fn ggml_type(self) -> sys::ggml_type {
        unsafe { (*self.as_ptr()).type_ }
    }

    pub fn nbytes(self) -> usize {
        unsafe { sys::ggml_nbytes(self.as_ptr()) }
    }

    pub fn set_name(self, name: &str) -> Tensor {
        let name = CString::new(name).expect("tensor names have no NUL");
        unsafe { sys::ggml_set_name(self.as_ptr(), name.as_ptr()) };
        self
    }

    pub fn name(self) -> String {
        unsafe { CStr::from_ptr((*self.as_ptr()).name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Whether the tensor has memory: a graph input the graph never reads gets none
    /// from the allocator.
    pub fn is_allocated(self) -> bool {
        unsafe { !(*self.as_ptr()).buffer.is_null() }
    }

    /// Copies `data` into the tensor through its backend buffer. A graph input that no
    /// node of the graph reads has no memory (see [`Tensor::is_allocated`]): nothing
    /// reads what would be written, and ggml would abort on the write, so it is skipped.
    pub fn write<T: Copy>(self, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        assert_eq!(bytes, self.nbytes(), "input size for {}", self.name());
        self.write_at(0, data);
    }

    /// Writes `data` at byte `offset`, through the backend buffer (skipped where the
    /// tensor has no memory, as [`Tensor::write`]).
    pub fn write_at<T: Copy>(self, offset: usize, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        assert!(offset + bytes <= self.nbytes(), "input range for {}", self.name());
        if self.is_allocated() {
            unsafe { sys::ggml_backend_tensor_set(self.as_ptr(), data.as_ptr().cast(), offset, bytes) };
        }
    }

    /// Reads `out.len()` elements starting at byte `offset`, through the backend buffer.
    pub fn read_f32(self, offset: usize, out: &mut [f32]) {
        assert!(offset + std::mem::size_of_val(out) <= self.nbytes());
        unsafe {
            sys::ggml_backend_tensor_get(
                self.as_ptr(),
                out.as_mut_ptr().cast(),
                offset,
                std::mem::size_of_val(out),
            )
        };
    }
}

/// An owned `ggml_context`.
pub struct Context(NonNull<sys::ggml_context>);

unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Context {
    /// A context that holds tensor descriptors only (their data lives in backend buffers),
    /// for `n_tensors` tensors, in its own allocation.
    pub fn new_no_alloc(n_tensors: usize) -> Result<Context> {
        let params = sys::ggml_init_params {
            mem_size: n_tensors * unsafe { sys::ggml_tensor_overhead() },
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        Self::init(params)
    }

    /// A no-alloc context over a caller-owned metadata buffer (reused for every graph).
    pub(super) fn over_buffer(buffer: &mut [u8]) -> Result<Context> {
        let params = sys::ggml_init_params {
            mem_size: buffer.len(),
            mem_buffer: buffer.as_mut_ptr().cast(),
            no_alloc: true,
        };
        Self::init(params)
    }

    fn init(params: sys::ggml_init_params) -> Result<Context> {
        NonNull::new(unsafe { sys::ggml_init(params) })
            .map(Context)
            .ok_or_else(|| Error::OutOfMemory("ggml context".into()))
    }

    pub fn as_ptr(&self) -> *mut sys::ggml_context {
        self.0.as_ptr()
    }

    /// A new tensor descriptor of `ty` with dimensions `ne` (1 to 4 of them).
    pub fn new_tensor(&self, ty: sys::ggml_type, ne: &[i64]) -> Result<Tensor> {
        Tensor::from_raw(unsafe { sys::ggml_new_tensor(self.as_ptr(), ty, ne.len() as i32, ne.as_ptr()) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::ggml_free(self.as_ptr()) }
    }
}
