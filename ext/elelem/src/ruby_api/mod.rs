mod errors;
mod model;
mod nogvl;

use magnus::{function, prelude::*, Error, Ruby};

pub fn init(ruby: &Ruby) -> Result<(), Error> {
    let elelem = ruby.define_module("Elelem")?;
    elelem.define_singleton_method("ggml_version", function!(elelem_engine::ggml_version, 0))?;
    elelem.define_singleton_method("system_info", function!(elelem_engine::system_info, 0))?;
    model::init(ruby, &elelem)
}
