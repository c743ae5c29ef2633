mod chat;
mod constraint;
mod convert;
mod defaults;
mod embeddings;
mod errors;
mod generation;
mod model;
mod nogvl;
mod open_params;
mod speculation;
mod template_value;
mod tokenizer;

use magnus::{function, prelude::*, Error, RHash, RString, Ruby};

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    nogvl::init();
    let elelem = ruby.define_module("Elelem")?;
    elelem.define_singleton_method("ggml_version", function!(elelem_engine::ggml_version, 0))?;
    elelem.define_singleton_method("system_info", function!(system_info, 0))?;
    elelem.define_singleton_method("build_profile", function!(build_profile, 0))?;
    elelem.define_singleton_method("cpu_variants", function!(cpu_variants, 0))?;
    elelem.define_singleton_method("supported_architectures", function!(supported_architectures, 0))?;
    elelem.define_singleton_method("_serve_rpc", function!(serve_rpc, 4))?;
    elelem.define_singleton_method("_audio?", function!(is_audio, 1))?;
    defaults::init(ruby, &elelem)?;
    tokenizer::init(ruby, &elelem)?;
    convert::init(ruby, &elelem)?;
    model::init(ruby, &elelem)
}

/// `Elelem.system_info`: ggml's CPU features, after the variant in use in the platform gem.
fn system_info(ruby: &Ruby) -> Result<String, Error> {
    elelem_engine::system_info().map_err(|e| errors::engine_error(ruby, e))
}

/// `Elelem.cpu_variants`: the CPU variants of the precompiled gem (none in a source build).
fn cpu_variants(ruby: &Ruby) -> Result<magnus::RArray, Error> {
    let list = ruby.ary_new();
    for v in elelem_engine::ggml::cpu_variants() {
        let h = ruby.hash_new();
        h.aset(ruby.to_symbol("name"), v.name)?;
        h.aset(ruby.to_symbol("features"), v.features.to_vec())?;
        h.aset(ruby.to_symbol("runnable"), v.runnable)?;
        h.aset(ruby.to_symbol("in_use"), v.in_use)?;
        list.push(h)?;
    }
    Ok(list)
}

/// `Elelem.serve_rpc` (lib/elelem.rb checks its arguments): ggml's RPC server on this
/// process's CPU, until the process ends.
fn serve_rpc(ruby: &Ruby, host: String, port: u16, n_threads: usize, cache_dir: Option<String>) -> Result<(), Error> {
    elelem_engine::ggml::rpc::serve(&host, port, n_threads, cache_dir.as_deref())
        .map_err(|e| errors::engine_error(ruby, e))
}

/// `Elelem::Media.audio?`: whether bytes are audio, by the rule the engine decodes by.
fn is_audio(bytes: RString) -> bool {
    // SAFETY: the slice is read before any Ruby code can run and move or change the string.
    elelem_engine::audio::is_audio(unsafe { bytes.as_slice() })
}

/// `Elelem.supported_architectures`: the engine's registry, by `general.architecture` name.
fn supported_architectures(ruby: &Ruby) -> Result<RHash, Error> {
    let list = ruby.hash_new();
    for spec in elelem_engine::arch::REGISTRY {
        let h = ruby.hash_new();
        h.aset(ruby.to_symbol("kind"), ruby.to_symbol(spec.kind.name()))?;
        h.aset(ruby.to_symbol("experts"), spec.experts)?;
        h.aset(ruby.to_symbol("models"), spec.models)?;
        list.aset(spec.name, h)?;
    }
    Ok(list)
}

/// `Elelem.build_profile`: what decides the bits of this build's results.
fn build_profile(ruby: &Ruby) -> Result<RHash, Error> {
    let profile = elelem_engine::BuildProfile::current().map_err(|e| errors::engine_error(ruby, e))?;
    let h = ruby.hash_new();
    let sym = |k: &str| ruby.to_symbol(k);
    h.aset(sym("id"), profile.id())?;
    h.aset(sym("arch"), profile.arch)?;
    h.aset(sym("ggml"), profile.ggml_version)?;
    h.aset(sym("compiler"), profile.compiler)?;
    h.aset(sym("isa"), profile.isa)?;
    h.aset(sym("cpu_flags"), profile.cpu_flags)?;
    h.aset(sym("variant"), profile.variant)?;
    h.aset(sym("libm"), profile.libm)?;
    h.aset(sym("cpu"), elelem_engine::cpu_model())?;
    Ok(h)
}
