//! `Elelem::Defaults`: the defaults and limits the engine owns, defined for Ruby
//! at load so that each is written once and both sides read the same value.

use elelem_engine as engine;
use magnus::{prelude::*, Error, RHash, RModule, Ruby, Value};

pub fn init(ruby: &Ruby, elelem: &RModule) -> Result<(), Error> {
    let defaults = elelem.define_module("Defaults")?;
    let sym = |k: &str| ruby.to_symbol(k);
    defaults.const_set("MAX_N_CTX", engine::runtime::context::MAX_N_CTX)?;
    defaults.const_set("MAX_THREADS", engine::runtime::context::MAX_THREADS)?;

    let open = engine::OpenParams::default();
    let h = ruby.hash_new();
    h.aset(sym("n_ctx"), open.n_ctx)?;
    h.aset(sym("n_threads"), open.n_threads)?;
    h.aset(sym("adaptive_threads"), open.adaptive_threads)?;
    h.aset(sym("parallel"), open.parallel)?;
    h.aset(sym("queue"), open.max_queue)?;
    h.aset(sym("flash_attn"), open.flash_attn)?;
    h.aset(sym("cache_type_k"), sym(open.type_k.name()))?;
    h.aset(sym("cache_type_v"), sym(open.type_v.name()))?;
    h.aset(sym("batch_invariant"), open.batch_invariant)?;
    h.aset(sym("own_kernels"), open.own_kernels)?;
    defaults.const_set("OPEN", frozen(h))?;

    let generate = engine::GenerateParams::default();
    let sampler = engine::text::sampler::SamplerParams::default();
    let h = ruby.hash_new();
    h.aset(sym("max_tokens"), generate.max_tokens)?;
    h.aset(sym("ignore_eos"), generate.ignore_eos)?;
    h.aset(sym("temperature"), decimal(sampler.temperature))?;
    h.aset(sym("top_k"), sampler.top_k)?;
    h.aset(sym("top_p"), decimal(sampler.top_p))?;
    h.aset(sym("min_p"), decimal(sampler.min_p))?;
    h.aset(sym("repeat_penalty"), decimal(sampler.repeat_penalty))?;
    h.aset(sym("repeat_last_n"), sampler.repeat_last_n)?;
    h.aset(sym("presence_penalty"), decimal(sampler.presence_penalty))?;
    h.aset(sym("frequency_penalty"), decimal(sampler.frequency_penalty))?;
    h.aset(sym("reuse_prefix"), generate.reuse_prefix)?;
    defaults.const_set("GENERATION", frozen(h))
}

/// A sampling parameter as it is written: the engine keeps them as `f32`, whose 0.95
/// widens to 0.949999988…; its shortest decimal form is the number the code says,
/// and narrows back to the same `f32`.
fn decimal(x: f32) -> f64 {
    x.to_string().parse().expect("a float's own digits parse")
}

fn frozen(h: RHash) -> Value {
    h.freeze();
    h.as_value()
}
