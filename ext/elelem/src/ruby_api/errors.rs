//! Engine errors as Ruby exceptions. The classes are defined in
//! `lib/elelem/errors.rb` (before the extension loads) and looked up here.

use magnus::{prelude::*, value::Lazy, Error, ExceptionClass, RModule, Ruby};

fn elelem_class(ruby: &Ruby, name: &str) -> ExceptionClass {
    let module: RModule = ruby.class_object().const_get("Elelem").expect("Elelem is defined");
    module
        .const_get(name)
        .unwrap_or_else(|_| panic!("Elelem::{name} is defined in lib/elelem/errors.rb"))
}

pub static ERROR: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "Error"));
static LOAD_ERROR: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "LoadError"));
static UNSUPPORTED: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "UnsupportedModel"));
static CONTEXT_FULL: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "ContextFullError"));
static CLOSED: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "ClosedError"));
static TEMPLATE: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "TemplateError"));
static INTERRUPTED: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "InterruptedError"));
static BUSY: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "BusyError"));
static INCOMPATIBLE_DRAFT: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "IncompatibleDraftError"));
static CPU: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "CpuError"));
static BACKEND: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "BackendError"));
static IMAGE: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "ImageError"));
static AUDIO: Lazy<ExceptionClass> = Lazy::new(|ruby| elelem_class(ruby, "AudioError"));

pub fn engine_error(ruby: &Ruby, e: elelem_engine::Error) -> Error {
    use elelem_engine::Error as E;
    let class = match &e {
        E::Load(_) => ruby.get_inner(&LOAD_ERROR),
        E::Unsupported(_) => ruby.get_inner(&UNSUPPORTED),
        E::InvalidArgument(_) => ruby.exception_arg_error(),
        E::Image(_) => ruby.get_inner(&IMAGE),
        E::Audio(_) => ruby.get_inner(&AUDIO),
        E::ContextFull(_) => ruby.get_inner(&CONTEXT_FULL),
        E::Aborted => ruby.get_inner(&INTERRUPTED),
        E::OutOfMemory(_) => ruby.exception_no_mem_error(),
        E::Template(_) => ruby.get_inner(&TEMPLATE),
        E::Busy(_) => ruby.get_inner(&BUSY),
        E::IncompatibleDraft(_) => ruby.get_inner(&INCOMPATIBLE_DRAFT),
        E::Closed => ruby.get_inner(&CLOSED),
        E::Cpu(_) => ruby.get_inner(&CPU),
        E::Backend(_) => ruby.get_inner(&BACKEND),
        E::Internal(_) | E::Tokenizer(_) => ruby.get_inner(&ERROR),
    };
    Error::new(class, e.to_string())
}

pub fn closed(ruby: &Ruby) -> Error {
    Error::new(ruby.get_inner(&CLOSED), "the model is closed")
}

pub fn panicked(ruby: &Ruby) -> Error {
    Error::new(ruby.get_inner(&ERROR), "internal error: the native code panicked")
}
