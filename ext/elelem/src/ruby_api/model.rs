//! `Elelem::Model`: a model and its one context. The Ruby class
//! (lib/elelem/model.rb) validates options, serializes calls with a Mutex and
//! offers the friendly API; these are its native primitives.

use std::sync::{Arc, Mutex};

use elelem_engine as engine;
use magnus::{function, method, prelude::*, Error, RArray, RHash, RModule, Ruby, Value};

use super::errors::{self, engine_error};
use super::nogvl::without_gvl;

struct Loaded {
    ctx: engine::Context,
    path: String,
}

#[magnus::wrap(class = "Elelem::Model", free_immediately, size)]
pub struct Model {
    // The Ruby side serializes calls; try_lock turns any overlap into an error,
    // never a wait while holding the GVL.
    state: Mutex<Option<Loaded>>,
}

impl Model {
    fn open(ruby: &Ruby, path: String, n_ctx: u32, n_threads: usize, n_gpu_layers: u32) -> Result<Model, Error> {
        let never = std::sync::atomic::AtomicBool::new(false);
        let loaded = without_gvl(ruby, &never, || -> engine::Result<Loaded> {
            let model = engine::Model::open(&path, &engine::ModelParams { n_gpu_layers })?;
            let params = engine::ContextParams {
                n_ctx,
                n_threads,
                ..Default::default()
            };
            let ctx = engine::Context::new(Arc::new(model), params)?;
            Ok(Loaded {
                ctx,
                path: path.clone(),
            })
        })?
        .map_err(|e| engine_error(ruby, e))?;
        Ok(Model {
            state: Mutex::new(Some(loaded)),
        })
    }

    fn with_loaded<R>(&self, ruby: &Ruby, f: impl FnOnce(&mut Loaded) -> Result<R, Error>) -> Result<R, Error> {
        let mut guard = self.state.try_lock().map_err(|_| errors::busy(ruby))?;
        let loaded = guard.as_mut().ok_or_else(|| errors::closed(ruby))?;
        f(loaded)
    }

    /// Greedy generation from token ids; yields each id when a block is given.
    /// Returns `[ids, stop_reason]`.
    fn generate(
        ruby: &Ruby,
        rb_self: &Self,
        ids: Vec<i64>,
        max_tokens: u32,
        ignore_eos: bool,
    ) -> Result<RArray, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            let n_vocab = loaded.ctx.model().hparams.n_vocab;
            let prompt: Vec<u32> = ids
                .iter()
                .map(|&id| {
                    u32::try_from(id).ok().filter(|&t| t < n_vocab).ok_or_else(|| {
                        Error::new(
                            ruby.exception_arg_error(),
                            format!("token id {id} is out of range (vocabulary size {n_vocab})"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            let abort = loaded.ctx.abort_flag();
            let params = engine::GenerateParams { max_tokens, ignore_eos };
            let mut generator = without_gvl(ruby, &abort, || {
                engine::Generator::start(&mut loaded.ctx, &prompt, params)
            })?
            .map_err(|e| engine_error(ruby, e))?;
            let block = ruby.block_given();
            loop {
                let step = without_gvl(ruby, &abort, || generator.step(engine::sampler::greedy))?;
                match step.map_err(|e| engine_error(ruby, e))? {
                    Some(token) if block => {
                        let _: Value = ruby.yield_value(token)?;
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            let reason = generator.stop_reason().map_or("length", engine::StopReason::as_str);
            let out = ruby.ary_new();
            out.push(ruby.ary_from_vec(generator.tokens().to_vec()))?;
            out.push(ruby.to_symbol(reason))?;
            Ok(out)
        })
    }

    fn close(&self) -> bool {
        match self.state.lock() {
            Ok(mut guard) => guard.take().is_some(),
            Err(poisoned) => poisoned.into_inner().take().is_some(),
        }
    }

    fn is_closed(&self) -> bool {
        self.state.try_lock().map(|g| g.is_none()).unwrap_or(false)
    }

    fn info(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            let hp = &loaded.ctx.model().hparams;
            let params = loaded.ctx.params();
            let h = ruby.hash_new();
            let sym = |k: &str| ruby.to_symbol(k);
            h.aset(sym("architecture"), hp.arch.name())?;
            h.aset(sym("name"), hp.name.clone())?;
            h.aset(sym("size_label"), hp.size_label.clone())?;
            h.aset(sym("file_type"), hp.file_type)?;
            h.aset(sym("path"), loaded.path.clone())?;
            h.aset(sym("n_layer"), hp.n_layer)?;
            h.aset(sym("n_embd"), hp.n_embd)?;
            h.aset(sym("n_head"), hp.n_head)?;
            h.aset(sym("n_head_kv"), hp.n_head_kv)?;
            h.aset(sym("head_dim"), hp.head_dim_k)?;
            h.aset(sym("n_ff"), hp.n_ff)?;
            h.aset(sym("n_vocab"), hp.n_vocab)?;
            h.aset(sym("n_ctx_train"), hp.n_ctx_train)?;
            h.aset(sym("rope_freq_base"), hp.rope.freq_base)?;
            h.aset(sym("n_ctx"), params.n_ctx)?;
            h.aset(sym("n_threads"), params.n_threads)?;
            h.aset(sym("n_gpu_layers"), 0)?;
            h.aset(sym("backend"), "CPU")?;
            Ok(h)
        })
    }

    fn stats(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        rb_self.with_loaded(ruby, |loaded| {
            let ctx = &loaded.ctx;
            let s = ctx.stats();
            let rate = |n: u64, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
            let h = ruby.hash_new();
            let sym = |k: &str| ruby.to_symbol(k);
            h.aset(sym("compute_buffer_bytes"), ctx.compute_buffer_bytes())?;
            h.aset(sym("compute_buffer_bytes_min"), s.compute_buffer_bytes_min)?;
            h.aset(sym("compute_buffer_bytes_max"), s.compute_buffer_bytes_max)?;
            h.aset(sym("kv_cache_bytes"), ctx.kv_cache_bytes())?;
            h.aset(sym("weights_bytes"), ctx.model().weights_bytes())?;
            h.aset(sym("repacked_weights_bytes"), ctx.model().repacked_bytes())?;
            h.aset(sym("n_past"), ctx.n_past())?;
            h.aset(sym("prompt_tokens"), s.prompt_tokens)?;
            h.aset(sym("prompt_seconds"), s.prompt_seconds)?;
            h.aset(sym("prompt_tokens_per_s"), rate(s.prompt_tokens, s.prompt_seconds))?;
            h.aset(sym("decode_tokens"), s.decode_tokens)?;
            h.aset(sym("decode_seconds"), s.decode_seconds)?;
            h.aset(sym("decode_tokens_per_s"), rate(s.decode_tokens, s.decode_seconds))?;
            Ok(h)
        })
    }
}

pub fn init(ruby: &Ruby, elelem: &RModule) -> Result<(), Error> {
    let class = elelem.define_class("Model", ruby.class_object())?;
    class.define_singleton_method("_open", function!(Model::open, 4))?;
    class.define_method("_generate", method!(Model::generate, 3))?;
    class.define_method("_close", method!(Model::close, 0))?;
    class.define_method("_closed?", method!(Model::is_closed, 0))?;
    class.define_method("_info", method!(Model::info, 0))?;
    class.define_method("_stats", method!(Model::stats, 0))?;
    Ok(())
}
