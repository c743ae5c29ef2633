//! What Python's jinja2, as Hugging Face transformers sets it up, does where
//! minijinja's own behavior differs: printing values as Python's `str()` does,
//! transformers' `tojson` (Python's `json.dumps`), and `strftime_now`.

use std::fmt::{self, Write};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Rest, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, State, Value};

/// The longest text `tojson` or `strftime_now` builds before giving up (the
/// template's output is capped as well; this bounds the work before the cap is checked).
const MAX_JSON: usize = 16 << 20;

/// Python's `None` as the caller passes it (`tools` unless given, a `nil` content).
/// minijinja's own none is iterable (as empty) and has a length; Python's is
/// neither, and templates rely on that: `{% for tool in tools %}` and `'x' in
/// tools` raise, and `tools is iterable and tools | length > 0` is false. It is an
/// iterable whose only item is the error, so that whatever iterates it fails.
/// (minijinja compares objects with its none as unequal: `tools == none` is false
/// where Python says True; templates test `is none` instead.)
#[derive(Debug)]
pub struct PyNone;

impl Object for PyNone {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let error = Error::new(ErrorKind::InvalidOperation, "'NoneType' object is not iterable");
        Enumerator::Values(vec![Value::from(error)])
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        None
    }

    /// `None[0]` and `None.x` are undefined in jinja2's sandbox, not an error.
    fn get_value(self: &Arc<Self>, _key: &Value) -> Option<Value> {
        Some(Value::UNDEFINED)
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("None")
    }
}

/// Python's `None`.
pub fn none() -> Value {
    Value::from_object(PyNone)
}

/// Whether `value` is a None, Python's or minijinja's: the `none` test.
pub fn is_none(value: &Value) -> bool {
    value.is_none() || value.downcast_object_ref::<PyNone>().is_some()
}

/// What jinja2's `map`, `select`, `reject`, `selectattr` and `rejectattr` return:
/// a generator, which is iterable and always true but has no length and no JSON.
#[derive(Debug)]
pub struct Generator(Vec<Value>);

impl Object for Generator {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.0.clone())
    }

    /// A generator has no `len()`.
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        None
    }

    fn is_true(self: &Arc<Self>) -> bool {
        true
    }
}

/// Registers the filters that make generators in jinja2 in place of minijinja's,
/// which make lists. Like jinja2's, they give nothing for a false value (None).
pub fn add_generator_filters(env: &mut minijinja::Environment) {
    use minijinja::filters;
    fn generator(value: &Value, items: impl FnOnce() -> Result<Vec<Value>, Error>) -> Result<Value, Error> {
        let items = if value.is_true() { items()? } else { Vec::new() };
        Ok(Value::from_object(Generator(items)))
    }
    env.add_filter("map", |state: &mut State, value: Value, args: Rest<ValueOrKwargs>| {
        generator(&value, || filters::map(state, value.clone(), args))
    });
    env.add_filter(
        "select",
        |state: &mut State, value: Value, test: Option<String>, args: Rest<ValueOrKwargs>| {
            generator(&value, || {
                filters::select(state, value.clone(), test.map(Into::into), args)
            })
        },
    );
    env.add_filter(
        "reject",
        |state: &mut State, value: Value, test: Option<String>, args: Rest<ValueOrKwargs>| {
            generator(&value, || {
                filters::reject(state, value.clone(), test.map(Into::into), args)
            })
        },
    );
    env.add_filter(
        "selectattr",
        |state: &mut State, value: Value, attr: String, test: Option<String>, args: Rest<ValueOrKwargs>| {
            generator(&value, || {
                filters::selectattr(state, value.clone(), attr.into(), test.map(Into::into), args)
            })
        },
    );
    env.add_filter(
        "rejectattr",
        |state: &mut State, value: Value, attr: String, test: Option<String>, args: Rest<ValueOrKwargs>| {
            generator(&value, || {
                filters::rejectattr(state, value.clone(), attr.into(), test.map(Into::into), args)
            })
        },
    );
}

/// jinja2's `iterable` test: not None.
pub fn is_iterable(value: &Value) -> bool {
    !is_none(value) && value.try_iter().is_ok()
}

/// jinja2's `sequence` test: what has a length and items (strings and dicts too).
pub fn is_sequence(value: &Value) -> bool {
    value.is_undefined() || matches!(value.kind(), ValueKind::String | ValueKind::Seq | ValueKind::Map)
}

/// `str(value)`: what `{{ value }}` prints in jinja2.
pub fn str(value: &Value) -> String {
    match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        _ => repr(value),
    }
}

/// `repr(value)`: how Python shows a value inside a list or dict (`{'a': None}`).
pub fn repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    if is_none(value) {
        out.push_str("None");
        return;
    }
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number(value)),
        ValueKind::String => string_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key);
                out.push_str(": ");
                write_repr(out, &value.get_item(&key).unwrap_or_default());
            }
            out.push('}');
        }
        // Objects of the engine (a namespace, a macro, `loop`) have no Python form to copy.
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// An integer as is, a float as Python's `repr` writes it (`1.0`, `1e-05`, `1e+16`).
fn number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    float(f64::try_from(value.clone()).unwrap_or(f64::NAN))
}

fn float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's `{:e}` gives the shortest digits that read back as `f`, as Python's repr does.
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits = mantissa.replace('.', "");
    // Python writes positional notation for exponents -4 to 15, else scientific.
    if (-4..16).contains(&exponent) {
        if exponent >= 0 {
            let whole = exponent as usize + 1;
            if digits.len() <= whole {
                format!("{sign}{digits}{}.0", "0".repeat(whole - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..whole], &digits[whole..])
            }
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exponent - 1) as usize))
        }
    } else {
        let mantissa = if digits.len() == 1 {
            digits
        } else {
            format!("{}.{}", &digits[..1], &digits[1..])
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.abs())
    }
}

/// A string as Python's `repr` quotes it: single quotes unless it holds one and
/// no double quote, and escapes for the characters Python deems unprintable.
fn string_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => {
                let _ = match c as u32 {
                    n @ 0..=0xff => write!(out, "\\x{n:02x}"),
                    n @ 0x100..=0xffff => write!(out, "\\u{n:04x}"),
                    n => write!(out, "\\U{n:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable` for one character: false for control, format,
/// separator (but the space), private-use and noncharacter code points. Python
/// also escapes unassigned code points, which this does not know.
fn printable(c: char) -> bool {
    !matches!(c as u32,
        0..=0x1f | 0x7f..=0xa0 | 0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891
        | 0x8e2 | 0x1680 | 0x180e | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064
        | 0x2066..=0x206f | 0x3000 | 0xe000..=0xf8ff | 0xfdd0..=0xfdef | 0xfeff | 0xfff9..=0xfffb
        | 0xfffe..=0xffff | 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3
        | 0x1d173..=0x1d17a | 0xe0001 | 0xe0020..=0xe007f | 0xf0000..=0x10ffff)
        && (c as u32 & 0xfffe) != 0xfffe
}

/// Python's `str.isspace`: Unicode's white space and the four ASCII separators.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// How `json.dumps` lays out its text.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, each option also positional, in that order.
pub fn tojson(state: &State, value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<String, Error> {
    let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        let named: Option<Value> = kwargs.get(name)?;
        Ok(named.or_else(|| args.get(i).cloned()))
    };
    let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_string(),
            None => {
                let n = v
                    .as_i64()
                    .ok_or_else(|| type_error("indent must be an integer or a string"))?;
                let n = usize::try_from(n).unwrap_or(0);
                state.consume_fuel((n / 64) as u64)?;
                if n > MAX_JSON {
                    return Err(too_long());
                }
                " ".repeat(n)
            }
        }),
    };
    let (item_separator, key_separator) = match arg(2, "separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [item, key] => (str(item), str(key)),
                _ => return Err(type_error("separators must be a pair of strings")),
            }
        }
        // Python's defaults: no space before a newline.
        _ if indent.is_some() => (",".into(), ": ".into()),
        _ => (", ".into(), ": ".into()),
    };
    let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let style = JsonStyle {
        ensure_ascii,
        indent,
        item_separator,
        key_separator,
        sort_keys,
    };
    let mut out = String::new();
    write_json(&mut out, value, &style, 0)?;
    Ok(out)
}

fn write_json(out: &mut String, value: &Value, style: &JsonStyle, depth: usize) -> Result<(), Error> {
    if out.len() > MAX_JSON {
        return Err(too_long());
    }
    if is_none(value) {
        out.push_str("null");
        return Ok(());
    }
    match value.kind() {
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&json_number(value)),
        ValueKind::String => json_string(out, value.as_str().unwrap_or_default(), style.ensure_ascii),
        ValueKind::Iterable => return Err(type_error("Object of type generator is not JSON serializable")),
        ValueKind::Seq => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separate(out, style, depth + 1, i > 0);
                write_json(out, item, style, depth + 1)?;
            }
            newline(out, style, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((json_key(&key)?, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                separate(out, style, depth + 1, i > 0);
                json_string(out, key, style.ensure_ascii);
                out.push_str(&style.key_separator);
                write_json(out, item, style, depth + 1)?;
            }
            newline(out, style, depth);
            out.push('}');
        }
        _ => {
            return Err(type_error(&format!(
                "Object of type {} is not JSON serializable",
                value.kind()
            )))
        }
    }
    Ok(())
}

/// What goes before an item: the item separator after the first, and with an
/// indent a new line at the item's depth.
fn separate(out: &mut String, style: &JsonStyle, depth: usize, after_first: bool) {
    if after_first {
        out.push_str(&style.item_separator);
    }
    newline(out, style, depth);
}

fn newline(out: &mut String, style: &JsonStyle, depth: usize) {
    if let Some(indent) = &style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(indent);
        }
    }
}

/// A map key as `json.dumps` writes it: strings as they are, numbers, booleans
/// and None as their JSON text.
fn json_key(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => Ok(json_number(key)),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        kind => Err(type_error(&format!(
            "keys must be str, int, float, bool or None, not {kind}"
        ))),
    }
}

fn json_number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()).unwrap_or(f64::NAN) {
        f if f.is_nan() => "NaN".into(),
        f if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.into(),
        f => float(f),
    }
}

/// A JSON string as `json.dumps` escapes it: quotes, backslashes and control
/// characters, and with `ensure_ascii` everything past ASCII.
fn json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn type_error(msg: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("tojson: {msg}"))
}

fn too_long() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("tojson: more than {MAX_JSON} bytes"),
    )
}

/// `datetime.now().strftime(format)` at `now`, in local time: Python turns the
/// directives it handles itself (`%f`, and `%z` and `%Z`, empty for a naive
/// datetime) into text and hands the rest to the C library's `strftime`.
pub fn strftime(now: SystemTime, format: &str) -> Result<String, Error> {
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut c_format = String::with_capacity(format.len());
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            c_format.push(c);
            continue;
        }
        match chars.next() {
            Some('f') => {
                let _ = write!(c_format, "{:06}", since_epoch.subsec_micros());
            }
            Some('z' | 'Z') => {}
            Some(d) => {
                c_format.push('%');
                c_format.push(d);
            }
            None => c_format.push('%'),
        }
    }
    if c_format.is_empty() {
        return Ok(String::new());
    }
    let c_format = std::ffi::CString::new(c_format)
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "strftime_now: embedded null character"))?;
    let seconds = since_epoch.as_secs() as libc::time_t;
    // Python's buffer grows up to 256 bytes per format byte, then it gives an empty
    // string; this one stops where the prompt would be too long anyway.
    let python_limit = 256 * format.len();
    let mut size = 1024;
    // SAFETY: plain C calls on buffers we own; localtime_r is the thread-safe form.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&seconds, &mut tm).is_null() {
            return Err(Error::new(ErrorKind::InvalidOperation, "strftime_now: no local time"));
        }
        loop {
            let mut buf = vec![0u8; size];
            let n = libc::strftime(buf.as_mut_ptr().cast(), size, c_format.as_ptr(), &tm);
            if n > 0 || size >= python_limit {
                buf.truncate(n);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
            if size >= MAX_JSON {
                return Err(too_long());
            }
            size *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_pythons_repr() {
        for (f, python) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789012345.6, "123456789012345.6"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-1.25e-7, "-1.25e-07"),
            (1e100, "1e+100"),
        ] {
            assert_eq!(float(f), python);
        }
    }

    #[test]
    fn strings_repr_as_python_quotes_them() {
        let repr_of = |s: &str| {
            let mut out = String::new();
            string_repr(&mut out, s);
            out
        };
        assert_eq!(repr_of("it's"), "\"it's\"");
        assert_eq!(repr_of("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(
            repr_of("t\u{e9}\t\u{1}\u{a0}\u{2028}\u{1F600}"),
            "'t\u{e9}\\t\\x01\\xa0\\u2028\u{1F600}'"
        );
    }

    #[test]
    fn json_strings_escape_as_json_dumps_does() {
        let json_of = |s: &str, ensure_ascii| {
            let mut out = String::new();
            json_string(&mut out, s, ensure_ascii);
            out
        };
        assert_eq!(
            json_of("<b>\"caf\u{e9}\"\n\u{1}\u{7f}", false),
            "\"<b>\\\"caf\u{e9}\\\"\\n\\u0001\u{7f}\""
        );
        assert_eq!(
            json_of("\u{e9}\u{1F600}\u{7f}", true),
            "\"\\u00e9\\ud83d\\ude00\\u007f\""
        );
    }
}
