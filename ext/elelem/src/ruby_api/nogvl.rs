//! Running native work without the GVL, interruptibly.
//!
//! `rb_nogvl` runs the work; its unblock function, which Ruby calls on Ctrl-C,
//! `Thread#raise`, `Thread#kill` or a `Timeout`, raises an [`Interrupt`]: the
//! engine's abort flag, so ggml stops between two graph nodes, or a request's,
//! so its thread stops waiting and the pass it runs, if any, is aborted. Back under the GVL, pending
//! interrupts are delivered through magnus (as `Err`).
//!
//! Two flags keep Ruby from ever longjmp-ing over our Rust frames (which would
//! skip their destructors, leaving e.g. a mutex locked forever):
//! `RB_NOGVL_INTR_FAIL` makes it return instead of raising when an interrupt is
//! pending, and `RB_NOGVL_UBF_ASYNC_SAFE` (our unblock function only stores an
//! atomic) spares the main thread the helper "unblock thread" whose join, on the
//! way out, raises pending interrupts right through the caller.

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

/// What an interrupt does to the work in flight. Both methods may only store
/// atomics: Ruby calls `raise` as an asynchronous unblocking function.
pub trait Interrupt: Sync {
    /// Forgets an earlier interrupt, before the work starts.
    fn clear(&self);
    /// Tells the work to stop.
    fn raise(&self);
}

/// The flag the work polls (the engine's abort flag).
impl Interrupt for AtomicBool {
    fn clear(&self) {
        self.store(false, Ordering::Relaxed);
    }

    fn raise(&self) {
        self.store(true, Ordering::Relaxed);
    }
}

unsafe extern "C" fn unblock<I: Interrupt>(data: *mut c_void) {
    (*(data as *const I)).raise();
}

/// Runs `work` without the GVL; an interrupt raises `interrupt`. If Ruby has an
/// interrupt pending, it is raised here (as `Err`).
pub fn without_gvl<I, F, R>(ruby: &Ruby, interrupt: &I, work: F) -> Result<R, Error>
where
    I: Interrupt,
    F: FnOnce() -> R,
{
    let mut call = Call {
        work: Some(work),
        result: None,
    };
    loop {
        // Cleared before, not inside, the call: an interrupt from now on either is
        // pending when Ruby enters the call (which then does not run the work) or
        // sets the flag while the work runs.
        interrupt.clear();
        unsafe {
            rb_sys::rb_nogvl(
                Some(run::<F, R>),
                &mut call as *mut Call<F, R> as *mut c_void,
                Some(unblock::<I>),
                interrupt as *const I as *mut c_void,
                (rb_sys::RB_NOGVL_INTR_FAIL | rb_sys::RB_NOGVL_UBF_ASYNC_SAFE) as i32,
            );
        }
        // Delivers Ctrl-C, Thread#raise/#kill and Timeout as Ruby exceptions, now that no
        // native work is in flight.
        ruby.thread_check_ints()?;
        match call.result.take() {
            Some(Ok(r)) => return Ok(r),
            Some(Err(_)) => return Err(errors::panicked(ruby)),
            // An interrupt that raises nothing (a thread switch, a trap handler) was
            // pending, so Ruby did not run the work; it is handled now: run it.
            None => continue,
        }
    }
}
