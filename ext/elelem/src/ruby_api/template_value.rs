//! Ruby objects as chat-template values, as transformers hands Python's to
//! jinja2: Hashes keep their order, Symbols become strings, nil is Python's None.

use elelem_engine::text::chat::{self, Value as TemplateValue};
use magnus::r_hash::ForEach;
use magnus::{prelude::*, Error, Float, Integer, RArray, RHash, RString, Ruby, Symbol, Value};

/// Deeper nesting is refused: a Ruby structure may contain itself.
const MAX_DEPTH: usize = 100;

/// `value` for a template: nil, true, false, Integers, Floats, Strings, Symbols,
/// and Arrays and Hashes of them.
pub fn to_template(ruby: &Ruby, value: Value) -> Result<TemplateValue, Error> {
    convert(ruby, value, 0)
}

/// A Hash of variables (Symbol or String names) as name-value pairs, in order.
pub fn variables(ruby: &Ruby, hash: RHash) -> Result<Vec<(String, TemplateValue)>, Error> {
    let mut out = Vec::with_capacity(hash.len());
    hash.foreach(|name: Value, value: Value| {
        out.push((name_of(ruby, name)?, convert(ruby, value, 1)?));
        Ok(ForEach::Continue)
    })?;
    Ok(out)
}

fn convert(ruby: &Ruby, value: Value, depth: usize) -> Result<TemplateValue, Error> {
    if depth > MAX_DEPTH {
        return Err(arg_error(
            ruby,
            format!("a chat template value nests more than {MAX_DEPTH} deep (or contains itself)"),
        ));
    }
    if value.is_nil() {
        return Ok(chat::none());
    }
    if value.is_kind_of(ruby.class_true_class()) {
        return Ok(TemplateValue::from(true));
    }
    if value.is_kind_of(ruby.class_false_class()) {
        return Ok(TemplateValue::from(false));
    }
    if let Some(s) = RString::from_value(value) {
        return Ok(TemplateValue::from(text(ruby, s)?));
    }
    if let Some(sym) = Symbol::from_value(value) {
        return Ok(TemplateValue::from(sym.name()?.into_owned()));
    }
    if let Some(i) = Integer::from_value(value) {
        return integer(ruby, i);
    }
    if let Some(f) = Float::from_value(value) {
        return Ok(TemplateValue::from(f.to_f64()));
    }
    if let Some(array) = RArray::from_value(value) {
        return (0..array.len())
            .map(|i| convert(ruby, array.entry(i as isize)?, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(TemplateValue::from);
    }
    if let Some(hash) = RHash::from_value(value) {
        let mut entries = Vec::with_capacity(hash.len());
        hash.foreach(|key: Value, item: Value| {
            let key = match Integer::from_value(key) {
                Some(i) => integer(ruby, i)?,
                None => TemplateValue::from(name_of(ruby, key)?),
            };
            entries.push((key, convert(ruby, item, depth + 1)?));
            Ok(ForEach::Continue)
        })?;
        return Ok(chat::map(entries));
    }
    Err(arg_error(
        ruby,
        format!(
            "a chat template takes nil, true, false, numbers, Strings, Symbols, Arrays and Hashes, got a {}",
            value.class().inspect()
        ),
    ))
}

/// An Integer, as a value or a Hash key: up to 128 bits, as the template engine takes them.
fn integer(ruby: &Ruby, i: Integer) -> Result<TemplateValue, Error> {
    i.to_i128()
        .map(TemplateValue::from)
        .map_err(|_| arg_error(ruby, format!("{i} is too large for a chat template (at most 128 bits)")))
}

/// A Hash key or variable name: a String or a Symbol.
fn name_of(ruby: &Ruby, key: Value) -> Result<String, Error> {
    if let Some(sym) = Symbol::from_value(key) {
        return Ok(sym.name()?.into_owned());
    }
    match RString::from_value(key) {
        Some(s) => text(ruby, s),
        None => Err(arg_error(
            ruby,
            format!(
                "chat template names and keys must be Strings or Symbols, got {}",
                key.inspect()
            ),
        )),
    }
}

fn text(ruby: &Ruby, s: RString) -> Result<String, Error> {
    s.to_string().map_err(|_| {
        arg_error(
            ruby,
            format!("a String for a chat template is not UTF-8: {}", s.inspect()),
        )
    })
}

fn arg_error(ruby: &Ruby, msg: String) -> Error {
    Error::new(ruby.exception_arg_error(), msg)
}
