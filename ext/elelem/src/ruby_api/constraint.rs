//! The constraint of a generation (`json_schema:`, `grammar:`, `lark:`, `regex:`,
//! `choice:`, `tools:`), as lib/elelem/options.rb passes it, compiled for a request.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use elelem_engine as engine;
use engine::serde_json;
use magnus::{Error, RArray, Ruby};

use super::chat::tool_call_format;
use super::errors::engine_error;
use super::nogvl::without_gvl;

/// A constraint as the Ruby side passes it (checked there): `[kind, payload]`,
/// the kind one of `json_schema` (a JSON document), `grammar` (GBNF), `lark`,
/// `regex`, `choice` (a JSON array of strings), or `tools` (a JSON array of
/// tool definitions, and the chat template as a third element: the lazy
/// constraint on the calls of the template's format).
pub(super) enum ConstraintArg {
    None,
    Eager(engine::ConstraintSpec),
    Tools(Vec<serde_json::Value>, Option<String>),
}

impl ConstraintArg {
    pub(super) fn new(ruby: &Ruby, arg: Option<RArray>) -> Result<ConstraintArg, Error> {
        let Some(arg) = arg else { return Ok(ConstraintArg::None) };
        let kind: String = arg.entry(0)?;
        let payload: String = arg.entry(1)?;
        let json = |what: &str| -> Result<serde_json::Value, Error> {
            serde_json::from_str(&payload)
                .map_err(|e| Error::new(ruby.exception_arg_error(), format!("{what} is not valid JSON: {e}")))
        };
        Ok(match kind.as_str() {
            "json_schema" => ConstraintArg::Eager(engine::ConstraintSpec::JsonSchema(json("json_schema")?)),
            "grammar" => ConstraintArg::Eager(engine::ConstraintSpec::Gbnf(payload)),
            "lark" => ConstraintArg::Eager(engine::ConstraintSpec::Lark(payload)),
            "regex" => ConstraintArg::Eager(engine::ConstraintSpec::Regex(payload)),
            "choice" => {
                let choices: Vec<String> = serde_json::from_value(json("choice")?)
                    .map_err(|e| Error::new(ruby.exception_arg_error(), format!("choice: {e}")))?;
                ConstraintArg::Eager(engine::ConstraintSpec::Choice(choices))
            }
            "tools" => {
                let tools = match json("tools")? {
                    serde_json::Value::Array(tools) => tools,
                    _ => return Err(Error::new(ruby.exception_arg_error(), "tools must be an Array")),
                };
                ConstraintArg::Tools(tools, arg.entry(2)?)
            }
            other => {
                return Err(Error::new(
                    ruby.exception_arg_error(),
                    format!("unknown constraint kind {other}"),
                ))
            }
        })
    }

    /// Compiles the constraint for one request, without the GVL (a large schema
    /// takes a while); an unsupported one is an `ArgumentError` naming the part.
    pub(super) fn build(&self, ruby: &Ruby, model: &Arc<engine::Model>) -> Result<Option<engine::Constraint>, Error> {
        if matches!(self, ConstraintArg::None) {
            return Ok(None);
        }
        let tokenizer = Arc::clone(model.tokenizer().map_err(|e| engine_error(ruby, e))?);
        let never = AtomicBool::new(false);
        without_gvl(ruby, &never, || -> engine::Result<Option<engine::Constraint>> {
            match self {
                ConstraintArg::None => Ok(None),
                ConstraintArg::Eager(spec) => engine::Constraint::new(&tokenizer, spec).map(Some),
                ConstraintArg::Tools(tools, template) => {
                    let template = template.as_deref().or_else(|| model.chat_template());
                    let triggers = tool_call_format(template).triggers(tools)?;
                    if triggers.is_empty() {
                        return Ok(None);
                    }
                    engine::Constraint::lazy(&tokenizer, &triggers).map(Some)
                }
            }
        })?
        .map_err(|e| engine_error(ruby, e))
    }
}
