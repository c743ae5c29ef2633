//! What is text-shaped and model-free: sampling from logits, structured-output
//! constraints (llguidance, GBNF), tool-call parsing, chat templates, and the stream
//! of a generation's text with its stop strings.

pub mod chat;
pub mod constraint;
mod gbnf;
pub mod sampler;
pub mod stream;
pub mod tool_calls;

pub use constraint::{Constraint, ConstraintFactory, ConstraintSpec};
pub use stream::{FinishReason, GenerateParams, StopReason, TextParams, TextStream};
