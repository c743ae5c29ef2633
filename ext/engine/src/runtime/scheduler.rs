//! Many threads generating on one context at once. Whichever thread waits for
//! an event while no pass is running runs the next one for everybody (its
//! [`Batcher`] plans it from every request), with the lock released while ggml
//! computes; the others sleep until a pass has completed. There is no thread of
//! its own to start, stop or lose in a fork, and a lone caller runs every pass of
//! its request itself, exactly as before.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crate::memory::KvUsage;
use crate::runtime::batcher::{Batcher, Event, Request, RequestId};
use crate::{Context, ContextParams, DecodeStats, Error, Model, Result};

/// How often a waiting thread looks at its interrupt flag.
const INTERRUPT_POLL: Duration = Duration::from_millis(20);

pub struct Scheduler {
    inner: Mutex<Inner>,
    /// Signalled after every pass, and when a request is interrupted or cancelled.
    changed: Condvar,
    /// The context's abort flag.
    abort: Arc<AtomicBool>,
    /// The request whose thread is running a pass (0: none): interrupting that
    /// thread aborts the pass.
    stepper: AtomicU64,
    model: Arc<Model>,
    params: ContextParams,
}

/// The context's memory and counters as of its last pass (readable while one runs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextSnapshot {
    pub compute_buffer_bytes: usize,
    /// Per backend, its share of the caches and compute buffer.
    pub backends: Vec<crate::runtime::context::BackendMemory>,
    pub kv_cache_bytes: usize,
    /// The recurrent layers' state (0 for a transformer).
    pub recurrent_state_bytes: usize,
    pub kv_usage: KvUsage,
    pub stats: DecodeStats,
}

impl ContextSnapshot {
    fn of(ctx: &Context) -> ContextSnapshot {
        ContextSnapshot {
            compute_buffer_bytes: ctx.compute_buffer_bytes(),
            backends: ctx.backend_memory(),
            kv_cache_bytes: ctx.kv_cache_bytes(),
            recurrent_state_bytes: ctx.recurrent_state_bytes(),
            kv_usage: ctx.kv_usage(),
            stats: ctx.stats(),
        }
    }

    /// Brings it up to date after a pass. The caches never move and the compute buffers are
    /// reserved once, so the per-backend figures are taken again only if those grew.
    fn refresh(&mut self, ctx: &Context) {
        let compute_buffer_bytes = ctx.compute_buffer_bytes();
        if compute_buffer_bytes != self.compute_buffer_bytes {
            self.backends = ctx.backend_memory();
        }
        self.compute_buffer_bytes = compute_buffer_bytes;
        self.kv_cache_bytes = ctx.kv_cache_bytes();
        self.recurrent_state_bytes = ctx.recurrent_state_bytes();
        self.kv_usage = ctx.kv_usage();
        self.stats = ctx.stats();
    }
}

struct Inner {
    /// `None` while a pass computes, or once closed.
    ctx: Option<Context>,
    snapshot: ContextSnapshot,
    batcher: Batcher<'static>,
    /// A thread is running a pass (and has the context).
    stepping: bool,
    /// The thread holding the context on a [`Lease`]: requests from it (from the
    /// streaming block of its own generation) could only wait for themselves.
    leased_by: Option<ThreadId>,
    closed: bool,
}

impl Scheduler {
    /// Schedules requests over `ctx`'s sequences, with at most `max_queue` waiting.
    pub fn new(ctx: Context, max_queue: usize) -> Scheduler {
        let batcher = Batcher::new(&ctx, max_queue);
        Scheduler {
            abort: ctx.abort_flag(),
            stepper: AtomicU64::new(0),
            model: Arc::clone(ctx.model()),
            params: ctx.params().clone(),
            changed: Condvar::new(),
            inner: Mutex::new(Inner {
                snapshot: ContextSnapshot::of(&ctx),
                ctx: Some(ctx),
                batcher,
                stepping: false,
                leased_by: None,
                closed: false,
            }),
        }
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic is caught at the Ruby boundary and never leaves the state half-changed
        // in a way later passes depend on.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn submit(&self, request: Request<'static>) -> Result<RequestId> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(Error::Closed);
        }
        if inner.leased_by == Some(std::thread::current().id()) {
            return Err(Error::Busy(
                "this thread's speculative generation holds the model: a call from its block would wait for it \
                 for ever (decode the outer call with draft: false)"
                    .into(),
            ));
        }
        inner.batcher.submit(request)
    }

    /// The next event of `id`, waiting for it (and running passes while no other
    /// thread does); `None` once the request is over. `Err(Aborted)` once
    /// `interrupted` is set (see [`Scheduler::abort_if_running`]); the request's own
    /// error if it failed.
    pub fn next_event(&self, id: RequestId, interrupted: &AtomicBool) -> Result<Option<Event>> {
        let mut inner = self.lock();
        loop {
            if interrupted.load(Ordering::SeqCst) {
                return Err(Error::Aborted);
            }
            if let Some(event) = inner.batcher.next_event(id)? {
                return Ok(Some(event));
            }
            if inner.batcher.finished(id) {
                return Ok(None);
            }
            let Some(mut ctx) = inner.ctx.take() else {
                if inner.closed {
                    return Err(Error::Closed);
                }
                if !inner.stepping {
                    return Err(Error::Internal("the context was lost to a panic in a pass".into()));
                }
                inner = self.wait(inner);
                continue;
            };
            let Some(plan) = inner.batcher.plan(&mut ctx) else {
                // Nothing to evaluate for anyone, yet this request is not over: it waits
                // for room another request's end will make.
                inner.ctx = Some(ctx);
                inner = self.wait(inner);
                continue;
            };
            self.stepper.store(id.0, Ordering::SeqCst);
            self.abort.store(false, Ordering::SeqCst);
            inner.stepping = true;
            drop(inner);
            let start = Instant::now();
            // Checked after the stepper is published: an interrupt from here on aborts
            // the pass, and one from before is seen here.
            let result = if interrupted.load(Ordering::SeqCst) {
                Err(Error::Aborted)
            } else {
                plan.decode(&mut ctx)
            };
            let seconds = start.elapsed().as_secs_f64();
            self.stepper.store(0, Ordering::SeqCst);
            ctx.count(plan.batch.len(), seconds);
            inner = self.lock();
            inner.stepping = false;
            inner.batcher.complete(&ctx, plan, result, seconds);
            if inner.batcher.has_no_work() {
                ctx.rest();
            }
            inner.snapshot.refresh(&ctx);
            if inner.closed {
                drop(ctx);
            } else {
                inner.ctx = Some(ctx);
            }
            self.changed.notify_all();
        }
    }

    /// The context alone, for a generation that runs passes of its own (speculative
    /// decoding), when nothing else is running or waiting; `None` otherwise (the
    /// caller generates as a request among the others). Until the lease is dropped,
    /// requests that arrive wait, as they wait for a pass.
    pub fn try_lease(&self) -> Result<Option<Lease<'_>>> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(Error::Closed);
        }
        if inner.stepping || !inner.batcher.is_idle() {
            return Ok(None);
        }
        let ctx = inner
            .ctx
            .take()
            .ok_or_else(|| Error::Internal("the context was lost to a panic in a pass".into()))?;
        inner.stepping = true;
        inner.leased_by = Some(std::thread::current().id());
        Ok(Some(Lease {
            scheduler: self,
            ctx: Some(ctx),
        }))
    }

    /// The next event of `id` if one is ready, without waiting or running a pass.
    pub fn poll_event(&self, id: RequestId) -> Result<Option<Event>> {
        self.lock().batcher.next_event(id)
    }

    /// Whether `id` has nothing more to give.
    pub fn finished(&self, id: RequestId) -> bool {
        self.lock().batcher.finished(id)
    }

    /// Sleeps until a pass completes or a request changes, or briefly: an interrupt
    /// only sets an atomic flag (it may come from a signal), so waiters look again.
    fn wait<'g>(&self, inner: MutexGuard<'g, Inner>) -> MutexGuard<'g, Inner> {
        self.changed
            .wait_timeout(inner, INTERRUPT_POLL)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// The other half of an interrupt of the thread waiting on `id` (the first sets
    /// the flag it passed to [`Scheduler::next_event`]): aborts the pass that thread
    /// runs, if it runs one; the pass's other requests are evaluated again in the
    /// next. Only atomics: safe from a signal handler or Ruby's unblocking function.
    pub fn abort_if_running(&self, id: RequestId) {
        if self.stepper.load(Ordering::SeqCst) == id.0 {
            self.abort.store(true, Ordering::SeqCst);
        }
    }

    /// Drops a request, waiting, running or over; its sequence is free for the next.
    pub fn cancel(&self, id: RequestId) {
        let mut inner = self.lock();
        inner.batcher.cancel(id);
        self.changed.notify_all();
    }

    /// The context's memory and counters as of its last pass.
    pub fn snapshot(&self) -> ContextSnapshot {
        self.lock().snapshot.clone()
    }

    /// Frees the context now: every request still there fails with
    /// [`Error::Closed`]; a pass running finishes first. Idempotent.
    pub fn close(&self) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        inner.closed = true;
        inner.batcher.fail_all(&Error::Closed);
        // A pass in flight drops the context when it completes.
        inner.ctx = None;
        self.changed.notify_all();
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

/// The context on loan from a [`Scheduler`] ([`Scheduler::try_lease`]); dropping the
/// lease gives it back (or frees it, if the scheduler closed meanwhile) and wakes
/// the requests that waited.
pub struct Lease<'a> {
    scheduler: &'a Scheduler,
    /// Taken only by `drop`.
    ctx: Option<Context>,
}

impl Lease<'_> {
    /// Whether the scheduler was closed meanwhile: the generation should stop.
    pub fn is_closed(&self) -> bool {
        self.scheduler.is_closed()
    }
}

impl std::ops::Deref for Lease<'_> {
    type Target = Context;

    fn deref(&self) -> &Context {
        self.ctx.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Lease<'_> {
    fn deref_mut(&mut self) -> &mut Context {
        self.ctx.as_mut().expect("held until dropped")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut ctx = self.ctx.take().expect("held until dropped");
        ctx.rest();
        let mut inner = self.scheduler.lock();
        inner.stepping = false;
        inner.leased_by = None;
        inner.snapshot.refresh(&ctx);
        if !inner.closed {
            inner.ctx = Some(ctx);
        }
        self.scheduler.changed.notify_all();
    }
}
