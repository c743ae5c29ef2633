//! `Elelem.convert` (lib/elelem/convert.rb): a Hugging Face BERT directory to a
//! GGUF with elelem-convert, without the GVL. lib/elelem/convert.rb validates
//! the arguments and documents the Ruby API.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use elelem_convert::{ConvertError, Options, OutType};
use magnus::{function, prelude::*, value::Lazy, Error, ExceptionClass, RHash, RModule, RString, Ruby};

use super::nogvl::without_gvl;

static CONVERT_ERROR: Lazy<ExceptionClass> = Lazy::new(|ruby| {
    let module: RModule = ruby.class_object().const_get("Elelem").expect("Elelem is defined");
    module
        .const_get("ConvertError")
        .expect("Elelem::ConvertError is defined in lib/elelem/errors.rb")
});

/// A Ruby String as a path (file names need not be UTF-8).
fn path_of(s: RString) -> PathBuf {
    // SAFETY: copied at once, before any Ruby code can run.
    PathBuf::from(OsStr::from_bytes(unsafe { s.as_slice() }))
}

fn convert(ruby: &Ruby, dir: RString, out: Option<RString>, f32: bool, pre: Option<String>) -> Result<RHash, Error> {
    let dir = path_of(dir);
    let out = out.map(path_of);
    let options = Options {
        out_type: if f32 { OutType::F32 } else { OutType::F16 },
        pre_tokenizer: pre,
    };
    let never = AtomicBool::new(false);
    let report = without_gvl(ruby, &never, || elelem_convert::convert(&dir, out.as_deref(), &options))?
        .map_err(|e: ConvertError| Error::new(ruby.get_inner(&CONVERT_ERROR), e.to_string()))?;
    let h = ruby.hash_new();
    let sym = |k: &str| ruby.to_symbol(k);
    h.aset(sym("path"), ruby.str_from_slice(report.path.as_os_str().as_bytes()))?;
    h.aset(sym("tensors"), report.tensors)?;
    h.aset(sym("bytes"), report.bytes)?;
    h.aset(sym("parameters"), report.parameters)?;
    h.aset(sym("name"), report.name)?;
    h.aset(sym("notes"), ruby.ary_from_vec(report.notes))?;
    Ok(h)
}

pub fn init(_ruby: &Ruby, elelem: &RModule) -> Result<(), Error> {
    elelem
        .singleton_class()?
        .define_private_method("_convert", function!(convert, 4))?;
    Ok(())
}
