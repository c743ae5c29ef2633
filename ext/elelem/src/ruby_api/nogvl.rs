//! Running native work without the GVL, interruptibly.
//!
//! `rb_nogvl` runs the work; its unblock function, which Ruby calls on Ctrl-C,
//! `Thread#raise`, `Thread#kill`, a `Timeout` or any signal Ruby traps (SIGCHLD
//! included), raises an [`Interrupt`]: the engine's abort flag, so ggml stops
//! between two graph nodes, or a request's, so its thread stops waiting and the
//! pass it runs, if any, is aborted. Back under the GVL, pending interrupts are
//! delivered through magnus (as `Err`); work stopped by one that Ruby raises
//! nothing for (a SIGCHLD) goes on through [`resumable`].
//!
//! Two flags keep Ruby from ever longjmp-ing over our Rust frames (which would
//! skip their destructors, leaving e.g. a mutex locked forever):
//! `RB_NOGVL_INTR_FAIL` makes it return instead of raising when an interrupt is
//! pending, and `RB_NOGVL_UBF_ASYNC_SAFE` (our unblock function only touches
//! atomics) spares the main thread the helper "unblock thread" whose join, on the
//! way out, raises pending interrupts right through the caller (Ruby 3.1's
//! `rb_nogvl`, thread.c:1678-1700).
//!
//! # When Ruby calls the unblock function
//!
//! The interrupt lives in the caller's frame, which is gone once `without_gvl`
//! returns, so no call may reach it after that. Ruby 3.1 calls it two ways:
//! - From `rb_threadptr_interrupt_common` (thread.c:486-503: `Thread#raise`,
//!   `#kill`, a trap for a thread other than the main one), holding the thread's
//!   `interrupt_lock`. `blocking_region_end` clears the function under the same
//!   lock (`unblock_function_clear`, thread.c:478-483) before `rb_nogvl` returns,
//!   so every such call has finished by then.
//! - From Ruby's signal handler, for the main thread while it is the only Ruby
//!   thread and has claimed `RB_NOGVL_UBF_ASYNC_SAFE` (thread_pthread.c:1562-1565):
//!   `if (vm->ubf_async_safe && mth->unblock.func) (mth->unblock.func)(mth->unblock.arg);`.
//!   No lock: the handler runs on whichever thread the kernel picked (a ggml
//!   worker, say, when the main thread already has a signal pending), so it can
//!   read the function and its argument just before the main thread leaves the
//!   region and call them just after, with an argument pointing into a frame that
//!   is gone (`unblock_function_clear` resets only the function, not the
//!   argument). So on the main thread the argument is never the interrupt: Ruby
//!   gets [`unblock_main`], which reaches the interrupt through [`MAIN`], a static
//!   that the caller clears, and waits on until no call is inside, before its
//!   frame can go.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

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

/// What an interrupt does to the work in flight. Both methods may only use
/// atomics: Ruby calls `raise` from a signal handler, on any thread.
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

/// The interrupt of the work the main Ruby thread runs without the GVL, for Ruby's
/// signal handler (see the module docs): a static, so a late call finds this and
/// not a frame that is gone.
static MAIN: MainInterrupt = MainInterrupt {
    current: AtomicPtr::new(ptr::null_mut()),
    calls: AtomicUsize::new(0),
};

struct MainInterrupt {
    /// The interrupt (a `&dyn Interrupt` in [`without_gvl`]'s frame) while the main
    /// thread's work runs; null otherwise.
    current: AtomicPtr<&'static dyn Interrupt>,
    /// How many calls of [`unblock_main`] are running: the frame that `current`
    /// points into stays until none is.
    calls: AtomicUsize,
}

/// Publishes the main thread's interrupt for [`unblock_main`] until dropped.
struct Published;

impl Published {
    /// `target` must stay where it is until the returned value is dropped.
    fn new(target: &&dyn Interrupt) -> Published {
        let target = ptr::from_ref(target).cast::<&'static dyn Interrupt>().cast_mut();
        let previous = MAIN.current.swap(target, Ordering::SeqCst);
        debug_assert!(previous.is_null(), "the main thread runs one piece of work at a time");
        Published
    }
}

impl Drop for Published {
    /// Unpublishes the interrupt, then waits out the calls that may have read it
    /// before: a call counts itself before it reads `current` (all `SeqCst`), so once
    /// `calls` is seen at 0 after the store, none can still hold the pointer. The
    /// wait is the few instructions of a call in flight.
    fn drop(&mut self) {
        MAIN.current.store(ptr::null_mut(), Ordering::SeqCst);
        while MAIN.calls.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

/// The main thread's unblock function; its argument (stale, maybe) is not read.
unsafe extern "C" fn unblock_main(_: *mut c_void) {
    MAIN.calls.fetch_add(1, Ordering::SeqCst);
    let current = MAIN.current.load(Ordering::SeqCst);
    if let Some(interrupt) = current.as_ref() {
        interrupt.raise();
    }
    MAIN.calls.fetch_sub(1, Ordering::SeqCst);
}

/// The unblock function of any other thread: Ruby calls it only under the thread's
/// `interrupt_lock`, so never after `rb_nogvl` has returned.
unsafe extern "C" fn unblock<I: Interrupt>(data: *mut c_void) {
    (*(data as *const I)).raise();
}

/// A fork's child has only the thread that forked, which was not inside
/// [`unblock_main`]: calls counted by the parent's other threads will never end.
extern "C" fn forgot_calls() {
    MAIN.calls.store(0, Ordering::SeqCst);
}

extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

/// Once, as the extension loads.
pub fn init() {
    // SAFETY: registers a function that only stores an atomic.
    unsafe { pthread_atfork(None, None, Some(forgot_calls)) };
}

/// Runs `work` without the GVL; an interrupt raises `interrupt`. If Ruby has an
/// interrupt pending, it is raised here (as `Err`). `work` is `Send` because it
/// runs where no Ruby object may be touched: magnus's values and `&Ruby` are not.
pub fn without_gvl<I, F, R>(ruby: &Ruby, interrupt: &I, work: F) -> Result<R, Error>
where
    I: Interrupt,
    F: FnOnce() -> R + Send,
{
    let mut call = Call {
        work: Some(work),
        result: None,
    };
    // SAFETY: called with the GVL, as every function here is.
    let main = unsafe { rb_sys::rb_thread_current() == rb_sys::rb_thread_main() };
    let target: &dyn Interrupt = interrupt;
    loop {
        // Cleared before, not inside, the call: an interrupt from now on either is
        // pending when Ruby enters the call (which then does not run the work) or
        // sets the flag while the work runs.
        interrupt.clear();
        let published = main.then(|| Published::new(&target));
        let (ubf, ubf_data): (unsafe extern "C" fn(*mut c_void), *mut c_void) = if main {
            (unblock_main, ptr::null_mut())
        } else {
            (unblock::<I>, ptr::from_ref(interrupt).cast_mut().cast())
        };
        unsafe {
            rb_sys::rb_nogvl(
                Some(run::<F, R>),
                ptr::from_mut(&mut call).cast(),
                Some(ubf),
                ubf_data,
                (rb_sys::RB_NOGVL_INTR_FAIL | rb_sys::RB_NOGVL_UBF_ASYNC_SAFE) as i32,
            );
        }
        drop(published);
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

/// Runs engine `work` as [`without_gvl`] does, and again while it ends `Aborted` by an
/// interrupt for which Ruby then raised nothing: a signal Ruby handles itself (SIGCHLD,
/// whenever a child process exits, calls the unblock function too) or with a trap handler
/// that returns, a `Thread#wakeup`. Only for work that can start again where it stopped: a
/// request's next event (the aborted pass is planned again), an embedding call.
pub fn resumable<I, F, T>(ruby: &Ruby, interrupt: &I, mut work: F) -> Result<elelem_engine::Result<T>, Error>
where
    I: Interrupt,
    F: FnMut() -> elelem_engine::Result<T> + Send,
{
    loop {
        match without_gvl(ruby, interrupt, &mut work)? {
            Err(elelem_engine::Error::Aborted) => continue,
            result => return Ok(result),
        }
    }
}
