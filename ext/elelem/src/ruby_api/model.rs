//! `Elelem::Model`: an opened model (an [`engine::Runtime`]) and its lifecycle:
//! open, describe, close. The Ruby class (lib/elelem/model.rb) offers the friendly
//! API; these are its native primitives, one file per concern as the Ruby side
//! splits them: `generation.rs` and `speculation.rs` (Model#generate and its kin),
//! `chat.rs` (Elelem::Replies), `embeddings.rs` (Elelem::Embeddings). Nothing here
//! takes turns: generations from many threads run together in the scheduler's passes.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use elelem_engine as engine;
use magnus::{function, method, prelude::*, Error, RHash, RModule, RString, Ruby};

use super::errors::{self, engine_error};
use super::nogvl::without_gvl;
use super::open_params::OpenParams;
use super::tokenizer::Tokenizer;
use super::{chat, embeddings, generation};

#[magnus::wrap(class = "Elelem::Model", free_immediately, size)]
pub struct Model {
    /// `None` once closed. Calls clone the scheduler out and never hold this lock
    /// while they wait or compute.
    state: Mutex<Option<Arc<engine::Runtime>>>,
}

impl Model {
    /// Opens the model at `path` (bytes: file names need not be UTF-8) with
    /// `Elelem.open`'s options, converted by [`OpenParams`]; the engine assembles the rest.
    fn open(ruby: &Ruby, path: RString, options: RHash) -> Result<Model, Error> {
        let OpenParams { path, params } = OpenParams::new(ruby, path, options)?;
        let never = AtomicBool::new(false);
        let runtime =
            without_gvl(ruby, &never, || engine::Runtime::open(&path, &params))?.map_err(|e| engine_error(ruby, e))?;
        Ok(Model {
            state: Mutex::new(Some(Arc::new(runtime))),
        })
    }

    /// The open model; `ClosedError` after [`Model::close`].
    pub(super) fn runtime(&self, ruby: &Ruby) -> Result<Arc<engine::Runtime>, Error> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.clone().ok_or_else(|| errors::closed(ruby))
    }

    pub(super) fn model(&self, ruby: &Ruby) -> Result<Arc<engine::Model>, Error> {
        Ok(Arc::clone(self.runtime(ruby)?.model()))
    }

    /// The model's tokenizer, shared with it.
    fn tokenizer(ruby: &Ruby, rb_self: &Self) -> Result<Tokenizer, Error> {
        let model = rb_self.model(ruby)?;
        let tokenizer = model.tokenizer().map_err(|e| engine_error(ruby, e))?;
        Ok(Tokenizer(Arc::clone(tokenizer)))
    }

    /// Frees the context now (a pass in flight finishes first); generations still
    /// running on other threads raise `ClosedError`. The weights go with the last
    /// of them.
    fn close(&self) -> bool {
        let runtime = self.state.lock().unwrap_or_else(|p| p.into_inner()).take();
        runtime.inspect(|r| r.close()).is_some()
    }

    fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    fn info(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        let runtime = rb_self.runtime(ruby)?;
        let hp = &runtime.model().hparams;
        let h = ruby.hash_new();
        let sym = |k: &str| ruby.to_symbol(k);
        h.aset(sym("architecture"), hp.arch.name)?;
        h.aset(sym("name"), hp.name.clone())?;
        h.aset(sym("size_label"), hp.size_label.clone())?;
        h.aset(sym("file_type"), hp.file_type)?;
        h.aset(sym("path"), runtime.path())?;
        h.aset(sym("n_layer"), hp.n_layer)?;
        h.aset(sym("n_embd"), hp.n_embd)?;
        h.aset(sym("n_head"), hp.n_head)?;
        h.aset(sym("n_head_kv"), hp.n_head_kv)?;
        h.aset(sym("head_dim"), hp.head_dim_k)?;
        h.aset(sym("n_ff"), hp.n_ff)?;
        h.aset(sym("n_vocab"), hp.n_vocab)?;
        h.aset(sym("n_ctx_train"), hp.n_ctx_train)?;
        h.aset(sym("rope_freq_base"), hp.rope.freq_base)?;
        h.aset(sym("n_ctx"), runtime.params().n_ctx)?;
        h.aset(sym("parallel"), runtime.scheduler().map_or(0, |s| s.params().n_seq_max))?;
        h.aset(sym("n_threads"), runtime.params().n_threads)?;
        h.aset(sym("adaptive_threads"), runtime.params().adaptive_threads)?;
        h.aset(sym("batch_invariant"), runtime.params().batch_invariant)?;
        h.aset(
            sym("flash_attn"),
            runtime.scheduler().is_none_or(|s| s.params().flash_attn),
        )?;
        let cache_types = runtime.scheduler().map(|s| (s.params().type_k, s.params().type_v));
        h.aset(sym("cache_type_k"), cache_types.map(|t| sym(t.0.name())))?;
        h.aset(sym("cache_type_v"), cache_types.map(|t| sym(t.1.name())))?;
        h.aset(sym("kind"), sym(hp.arch.kind.name()))?;
        h.aset(sym("pooling"), hp.pooling.map(|p| sym(p.name())))?;
        h.aset(sym("embedding_length"), hp.n_embd)?;
        h.aset(sym("causal"), hp.causal_attn)?;
        // Both types of a file with both encoders, the vision encoder's first.
        h.aset(sym("mmproj"), runtime.vision().map(|v| v.projector_names().join("+")))?;
        h.aset(sym("vision"), runtime.vision().is_some_and(|v| v.vision()))?;
        h.aset(sym("audio"), runtime.vision().is_some_and(|v| v.audio()))?;
        h.aset(
            sym("draft"),
            match runtime.speculation().map(|s| s.source) {
                Some(engine::DraftSource::Model) => runtime.draft_name().map(|name| ruby.into_value(name)),
                Some(source) => Some(sym(source.name()).as_value()),
                None => None,
            },
        )?;
        h.aset(
            sym("draft_tokens"),
            match runtime.speculation().map(|s| s.length) {
                Some(engine::DraftLength::Fixed(k)) => Some(ruby.into_value(k)),
                Some(engine::DraftLength::Adaptive) => Some(sym("auto").as_value()),
                None => None,
            },
        )?;
        let model = runtime.model();
        let placement = model.placement();
        h.aset(sym("n_gpu_layers"), placement.offloaded())?;
        let mut backends: Vec<String> = placement.devices.iter().map(|d| d.name.clone()).collect();
        backends.push("CPU".into());
        h.aset(sym("backend"), backends.join(","))?;
        let devices = ruby.ary_new();
        for (i, (device, bytes)) in placement.devices.iter().zip(model.device_bytes()).enumerate() {
            let d = ruby.hash_new();
            d.aset(sym("name"), device.name.as_str())?;
            d.aset(sym("description"), device.description.as_str())?;
            d.aset(
                sym("layers"),
                placement.layers.iter().filter(|&&l| l == Some(i)).count(),
            )?;
            d.aset(sym("output"), placement.output == Some(i))?;
            d.aset(sym("weights_bytes"), *bytes)?;
            devices.push(d)?;
        }
        h.aset(sym("devices"), devices)?;
        h.aset(sym("rpc"), runtime.params().rpc.clone())?;
        let (split_mode, main_gpu) = match runtime.params().split {
            engine::Split::Layer => ("layer", None),
            engine::Split::None { main } => ("none", Some(main)),
        };
        h.aset(sym("split_mode"), sym(split_mode))?;
        h.aset(sym("main_gpu"), main_gpu)?;
        h.aset(sym("kv_offload"), runtime.params().kv_offload)?;
        Ok(h)
    }

    /// Memory use, as of the last pass (the speed of a generation is in its result).
    fn stats(ruby: &Ruby, rb_self: &Self) -> Result<RHash, Error> {
        let runtime = rb_self.runtime(ruby)?;
        let model = runtime.model();
        let h = ruby.hash_new();
        let sym = |k: &str| ruby.to_symbol(k);
        if let Some(scheduler) = runtime.scheduler() {
            let snapshot = scheduler.snapshot();
            h.aset(sym("compute_buffer_bytes"), snapshot.compute_buffer_bytes)?;
            h.aset(sym("compute_buffer_bytes_min"), snapshot.stats.compute_buffer_bytes_min)?;
            h.aset(sym("compute_buffer_bytes_max"), snapshot.stats.compute_buffer_bytes_max)?;
            h.aset(sym("kv_cache_bytes"), snapshot.kv_cache_bytes)?;
            h.aset(sym("recurrent_state_bytes"), snapshot.recurrent_state_bytes)?;
            h.aset(sym("kv_cells_used"), snapshot.kv_usage.cells_used)?;
            h.aset(sym("kv_cells"), snapshot.kv_usage.cells)?;
            h.aset(sym("kv_tokens"), snapshot.kv_usage.tokens)?;
            // Per backend: the devices' (with their weights), then the CPU's (the rest).
            let backends = ruby.ary_new();
            let on_devices: usize = model.device_bytes().iter().sum();
            for (i, b) in snapshot.backends.iter().enumerate() {
                let weights = model
                    .device_bytes()
                    .get(i)
                    .copied()
                    .unwrap_or(model.weights_bytes() - on_devices);
                let row = ruby.hash_new();
                row.aset(sym("name"), b.name.as_str())?;
                row.aset(sym("weights_bytes"), weights)?;
                row.aset(sym("cache_bytes"), b.cache_bytes)?;
                row.aset(sym("compute_buffer_bytes"), b.compute_bytes)?;
                backends.push(row)?;
            }
            h.aset(sym("backends"), backends)?;
        }
        h.aset(sym("weights_bytes"), model.weights_bytes())?;
        h.aset(sym("repacked_weights_bytes"), model.repacked_bytes())?;
        Ok(h)
    }
}

pub fn init(ruby: &Ruby, elelem: &RModule) -> Result<(), Error> {
    let class = elelem.define_class("Model", ruby.class_object())?;
    // The natives are private: callers go through the Ruby methods that check arguments.
    class
        .singleton_class()?
        .define_private_method("_open", function!(Model::open, 2))?;
    class.const_set("MAX_SEQUENCES", engine::MAX_SEQUENCES)?;
    class.const_set("MAX_DRAFT_TOKENS", engine::runtime::speculative::MAX_DRAFT_TOKENS)?;
    class.define_private_method("_tokenizer", method!(Model::tokenizer, 0))?;
    class.define_private_method("_close", method!(Model::close, 0))?;
    class.define_private_method("_closed?", method!(Model::is_closed, 0))?;
    class.define_private_method("_info", method!(Model::info, 0))?;
    class.define_private_method("_stats", method!(Model::stats, 0))?;
    generation::init(&class)?;
    chat::init(&class)?;
    embeddings::init(&class)
}
