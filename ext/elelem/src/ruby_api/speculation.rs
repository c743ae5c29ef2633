//! Speculative decoding of one generation (`draft:` and `draft_tokens:` of
//! `Model#generate`; lib/elelem/speculation.rb checks them): the call's choice
//! against the model's default, and the loop that runs it on the leased context.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use elelem_engine as engine;
use magnus::{Error, RHash, Ruby};

use super::errors::{self, engine_error};
use super::generation::Delivery;
use super::nogvl::{resumable, Interrupt};

/// How a call speculates: `draft:` (nil: the model's default, or "none", "lookup",
/// "copy", "model") and `draft_tokens:` (nil: the model's default); the engine
/// decides what the model allows ([`engine::Runtime::speculation_for`]).
pub(super) fn speculation(
    ruby: &Ruby,
    runtime: &engine::Runtime,
    opts: RHash,
    constrained: bool,
) -> Result<Option<engine::SpeculativeParams>, Error> {
    let draft: Option<String> = opts.lookup(ruby.to_symbol("draft"))?;
    let draft_tokens: Option<u32> = opts.lookup(ruby.to_symbol("draft_tokens"))?;
    let draft = match draft.as_deref() {
        None => None,
        Some("none") => Some(None),
        Some(name) => Some(Some(engine::DraftSource::from_name(name).ok_or_else(|| {
            Error::new(ruby.exception_arg_error(), format!("unknown draft {name}"))
        })?)),
    };
    runtime
        .speculation_for(draft, draft_tokens, constrained)
        .map_err(|e| engine_error(ruby, e))
}

/// An interrupt of a speculative generation: both contexts' abort flags.
struct SpeculationInterrupt(Arc<AtomicBool>, Option<Arc<AtomicBool>>);

impl Interrupt for SpeculationInterrupt {
    fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
        if let Some(draft) = &self.1 {
            draft.store(false, Ordering::SeqCst);
        }
    }

    fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
        if let Some(draft) = &self.1 {
            draft.store(true, Ordering::SeqCst);
        }
    }
}

/// Runs a speculative generation on the leased context (and the draft model's).
pub(super) fn speculate(
    ruby: &Ruby,
    runtime: &engine::Runtime,
    mut lease: engine::Lease<'_>,
    request: engine::Request<'static>,
    params: engine::SpeculativeParams,
    deliver: &mut Delivery,
) -> Result<RHash, Error> {
    let mut draft = match params.source {
        engine::DraftSource::Model => runtime.draft_context(),
        engine::DraftSource::Lookup | engine::DraftSource::Copy => None,
    };
    let mut speculation =
        engine::Speculation::new(&lease, draft.as_deref(), request, params).map_err(|e| engine_error(ruby, e))?;
    let interrupt = SpeculationInterrupt(lease.abort_flag(), draft.as_ref().map(|d| d.abort_flag()));
    loop {
        // A close from the streaming block ends the generation, as it ends a plain one.
        if lease.is_closed() {
            return Err(errors::closed(ruby));
        }
        let mut draft_ctx = draft.as_deref_mut();
        let event = resumable(ruby, &interrupt, || {
            speculation.next_event(&mut lease, draft_ctx.as_deref_mut())
        })?
        .map_err(|e| engine_error(ruby, e))?;
        if let Some(result) = deliver.event(event)? {
            return Ok(result);
        }
    }
}
