//! jinja2's `Markup` with auto-escaping off, as transformers renders: a string
//! from `|safe` or `|escape` is a `Markup`, and `+` between a `Markup` and a
//! plain string HTML-escapes the plain one and gives a `Markup`
//! (`Markup.__add__` and `__radd__`), while `~` gives a plain string
//! (jinja2's `str_join`). minijinja's safe strings are jinja2's `Markup`, but
//! its `+` escapes only under auto-escaping, which would escape every printed
//! value too, and its `~` keeps two safe strings safe. So a template's `+`
//! and `~` become calls to [`add`] and [`concat`], under names no template can
//! shadow, [`ADD`] and [`CONCAT`]: [`jinja2_operators`] rewrites the compiled
//! template, one instruction for another, so that every jump stays where it was.
//!
//! functionary v3.1's template writes its tools so: `"Use the function
//! '"|safe + name + ... + "'\n"|safe + t["function"] | tojson`, in jinja2
//! `{&#34;name&#34;: ...`.

use minijinja::machinery::{Instruction, Instructions};
use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, State, Value};

/// The function a template's `+` calls: not a name a template can assign.
pub const ADD: &str = "+";
/// The function a template's `~` calls.
pub const CONCAT: &str = "~";

/// Replaces each `+` and `~` of compiled template code with a call to [`ADD`]
/// or [`CONCAT`], which take the same two operands from the stack.
pub fn jinja2_operators(instructions: &mut Instructions) {
    let mut idx = 0;
    while let Some(instruction) = instructions.get_mut(idx) {
        match instruction {
            Instruction::Add => *instruction = Instruction::CallFunction(ADD, Some(2)),
            Instruction::StringConcat => *instruction = Instruction::CallFunction(CONCAT, Some(2)),
            _ => {}
        }
        idx += 1;
    }
}

/// jinja2's `+`: for two strings, their concatenation, a `Markup` if either is
/// one, the other then escaped; for anything else minijinja's own `+`.
pub fn add(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    let strings = a.kind() == ValueKind::String && b.kind() == ValueKind::String;
    if let (true, Some(x), Some(y)) = (strings, a.as_str(), b.as_str()) {
        let (safe_a, safe_b) = (a.is_safe(), b.is_safe());
        let len = |s: &str, safe: bool| if safe { s.len() } else { escaped_len(s) };
        if safe_a == safe_b {
            ensure_bytes(state, x.len() + y.len())?;
            let joined = [x, y].concat();
            return Ok(if safe_a {
                Value::from_safe_string(joined)
            } else {
                Value::from(joined)
            });
        }
        ensure_bytes(state, len(x, safe_a) + len(y, safe_b))?;
        let mut out = String::new();
        for (s, safe) in [(x, safe_a), (y, safe_b)] {
            if safe {
                out.push_str(s);
            } else {
                escape_into(&mut out, s);
            }
        }
        return Ok(Value::from_safe_string(out));
    }
    if let (true, true, Some(x), Some(y)) = (a.is_integer(), b.is_integer(), a.as_i64(), b.as_i64()) {
        if let Some(sum) = x.checked_add(y) {
            return Ok(Value::from(sum));
        }
    }
    // minijinja's `+`, its error without the expression's location, so that the
    // template's is given.
    state
        .env()
        .compile_expression("a + b")?
        .eval(minijinja::context! { a => a, b => b })
        .map_err(|e| Error::new(e.kind(), e.detail().unwrap_or_default().to_string()))
}

/// jinja2's `~` with auto-escaping off: `str(a) + str(b)`, never a `Markup`
/// (minijinja's: each value as it prints).
pub fn concat(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    let (x, y) = (a.to_string(), b.to_string());
    ensure_bytes(state, x.len() + y.len())?;
    Ok(Value::from(x + &y))
}

/// jinja2's `escape` (`e`): a `Markup` stays as it is, anything else becomes
/// `str(value)` escaped as markupsafe escapes it (`&#34;` and `&#39;` for the
/// quotes, `/` as it is), a `Markup`.
pub fn escape(value: &Value) -> Value {
    if value.is_safe() {
        return value.clone();
    }
    let s = super::python::str(value);
    let mut out = String::with_capacity(escaped_len(&s));
    escape_into(&mut out, &s);
    Value::from_safe_string(out)
}

/// `value` as a `Markup` again if `of` was one: what jinja2's `Markup` methods
/// and `soft_str` filters (`string`, `trim`, `strip`) give for a `Markup`.
pub fn like(of: &Value, value: String) -> Value {
    if of.kind() == ValueKind::String && of.is_safe() {
        Value::from_safe_string(value)
    } else {
        Value::from(value)
    }
}

/// markupsafe's escape of one character, if it changes it.
fn escaped(c: char) -> Option<&'static str> {
    Some(match c {
        '&' => "&amp;",
        '<' => "&lt;",
        '>' => "&gt;",
        '"' => "&#34;",
        '\'' => "&#39;",
        _ => return None,
    })
}

fn escaped_len(s: &str) -> usize {
    s.chars().map(|c| escaped(c).map_or(c.len_utf8(), str::len)).sum()
}

fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match escaped(c) {
            Some(e) => out.push_str(e),
            None => out.push(c),
        }
    }
}

/// Fails as minijinja's own `+` and `~` do when the fuel left would not pay for
/// a string of `len` bytes, before it is made (fuel pays for 64 bytes a unit).
fn ensure_bytes(state: &State, len: usize) -> Result<(), Error> {
    match state.fuel_levels() {
        Some((_, remaining)) if len as u64 >= remaining.saturating_mul(64) => Err(Error::from(ErrorKind::OutOfFuel)),
        _ => Ok(()),
    }
}
