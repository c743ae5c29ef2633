//! Running native work without the GVL, interruptibly.
//!
//! `rb_thread_call_without_gvl2` (not the plain variant, which may longjmp out
//! of Rust frames when an interrupt is pending) runs the work; its unblock
//! function, which Ruby calls on Ctrl-C, `Thread#raise`, `Thread#kill` or a
//! `Timeout`, sets the engine's abort flag, and ggml stops between two graph
//! nodes. Back under the GVL, pending interrupts are delivered through magnus
//! (as `Err`, never a longjmp over our frames).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use magnus::{Error, Ruby};

use super::errors;

struct Call<F, R> {
    work: Option<F>,
    result: Option<std::thread::Result<R>>,
}

unsafe extern "C" fn run<F: FnOnce() -> R, R>(data: *mut c_void) -> *mut c_void {
    let call = &mut *(data as *mut Call<F, R>);
    let work = call.work.take().expect("run once");
    call.result = Some(catch_unwind(AssertUnwindSafe(work)));
    std::ptr::null_mut()
}

unsafe extern "C" fn unblock(data: *mut c_void) {
    (*(data as *const AtomicBool)).store(true, Ordering::Relaxed);
}

/// Runs `work` without the GVL. `abort` is the flag the work polls; an interrupt
/// sets it. If Ruby has an interrupt pending, it is raised here (as `Err`).
pub fn without_gvl<F, R>(ruby: &Ruby, abort: &AtomicBool, work: F) -> Result<R, Error>
where
    F: FnOnce() -> R,
{
    let mut call = Call {
        work: Some(work),
        result: None,
    };
    unsafe {
        rb_sys::rb_thread_call_without_gvl2(
            Some(run::<F, R>),
            &mut call as *mut Call<F, R> as *mut c_void,
            Some(unblock),
            abort as *const AtomicBool as *mut c_void,
        );
    }
    // Delivers Ctrl-C, Thread#raise/#kill and Timeout as Ruby exceptions, now that no
    // native work is in flight.
    ruby.thread_check_ints()?;
    match call.result {
        Some(Ok(r)) => Ok(r),
        Some(Err(_)) => Err(errors::panicked(ruby)),
        // Ruby had an interrupt pending and did not run the work; thread_check_ints
        // consumed it without raising (e.g. a trap handler), so report the interruption.
        None => Err(Error::new(ruby.exception_interrupt(), "interrupted")),
    }
}
