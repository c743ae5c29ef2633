//! `Elelem::Embeddings` (`Model#embed`, `#rerank`): texts' vectors from the
//! model's embedding context, which the engine makes on first use.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use elelem_engine as engine;
use magnus::{method, prelude::*, Error, RArray, RClass, Ruby};

use super::errors::engine_error;
use super::model::Model;
use super::nogvl::{resumable, without_gvl, Interrupt};

/// The flag that interrupts an embedding call: its context's abort flag.
struct AbortInterrupt(Arc<AtomicBool>);

impl Interrupt for AbortInterrupt {
    fn clear(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Model {
    /// Embeds each input (an Array of token-id Arrays, checked in Ruby) with `pooling`
    /// (a name, or nil for the model's own) and llama-embedding's `normalize` number,
    /// packing at most `batch_texts` into a pass. Returns an Array of Float Arrays (for
    /// pooling `none`, each text's token rows one after another).
    fn embed(
        ruby: &Ruby,
        rb_self: &Self,
        inputs: Vec<Vec<u32>>,
        pooling: Option<String>,
        normalize: i32,
        batch_texts: u32,
    ) -> Result<RArray, Error> {
        let runtime = rb_self.runtime(ruby)?;
        let invalid = |msg: String| Error::new(ruby.exception_arg_error(), msg);
        let pooling = match pooling.as_deref() {
            None => None,
            Some(name) => {
                Some(engine::Pooling::from_name(name).ok_or_else(|| invalid(format!("unknown pooling {name}")))?)
            }
        };
        let normalize = engine::Normalize::from_id(normalize)
            .ok_or_else(|| invalid(format!("unknown normalization {normalize}")))?;
        // Made or kept without the GVL: making one reserves its buffers, and another
        // thread's embedding call may hold it.
        let never = AtomicBool::new(false);
        let mut embedder =
            without_gvl(ruby, &never, || runtime.embedder(pooling, batch_texts))?.map_err(|e| engine_error(ruby, e))?;
        let interrupt = AbortInterrupt(embedder.abort_flag());
        // The embedder itself crosses to the work, not the guard (a lock guard is not Send).
        let embedder = &mut *embedder;
        let vectors =
            resumable(ruby, &interrupt, || embedder.embed(&inputs, normalize))?.map_err(|e| engine_error(ruby, e))?;
        Ok(ruby.ary_from_iter(vectors.into_iter().map(|v| ruby.ary_from_vec(v))))
    }

    /// The most tokens an input to `embed` may have.
    fn embed_max_tokens(ruby: &Ruby, rb_self: &Self) -> Result<usize, Error> {
        let runtime = rb_self.runtime(ruby)?;
        Ok(engine::runtime::embed::max_tokens(runtime.model(), runtime.params().n_ctx) as usize)
    }
}

pub fn init(class: &RClass) -> Result<(), Error> {
    class.define_private_method("_embed", method!(Model::embed, 4))?;
    class.define_private_method("_embed_max_tokens", method!(Model::embed_max_tokens, 0))
}
