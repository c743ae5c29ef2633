//! Time to compute one token mask under a JSON Schema over a model's whole
//! vocabulary (151,936 tokens for Qwen 2.5) and apply it to the logits
//! ([`Constraint::mask`], what a generation pays per token):
//! `cargo run --release --example mask_bench -- [MODEL.gguf] [ROUNDS]`.
//!
//! No model pass is needed: each schema's constraint walks the tokens of a
//! valid document, computing the mask before every token as a generation
//! would. Each round builds the constraints anew, as each request does, and
//! the time to build one (compiling the schema) is reported too.
use std::sync::Arc;
use std::time::{Duration, Instant};

use elelem_engine::{Constraint, ConstraintFactory, ConstraintSpec};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).cloned().unwrap_or_else(|| {
        format!(
            "{}/.cache/elelem/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let rounds: usize = args.get(2).map_or(Ok(5), |s| s.parse())?;
    let tokenizer = Arc::new(elelem_engine::open_tokenizer(path.as_ref())?);

    let started = Instant::now();
    ConstraintFactory::for_tokenizer(&tokenizer)?;
    println!(
        "vocabulary: {} tokens; trie built in {:.0} ms",
        tokenizer.n_vocab(),
        ms(started.elapsed())
    );

    let cases = [
        (
            json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
                "required": ["name", "age"]}),
            r#"{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["math", "engines", "poetry"]}"#,
        ),
        (
            json!({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "number"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}}, "$ref": "#/$defs/node"}),
            r#"{"value": 1.5, "children": [{"value": 2, "children": []}, {"value": -3.25e2, "children": [{"value": 4}]}]}"#,
        ),
        (
            json!({"type": "array", "items": {"anyOf": [{"type": "object", "properties": {"kind": {"const": "circle"},
                "r": {"type": "number"}}, "required": ["kind", "r"]}, {"type": "object", "properties": {"kind": {"const": "text"},
                "body": {"type": "string", "pattern": "^[A-Za-z ,.!?]+$"}}, "required": ["kind", "body"]}]}}),
            r#"[{"kind": "circle", "r": 2.5}, {"kind": "text", "body": "Hello, world! How are you today?"}]"#,
        ),
    ];

    let mut logits = vec![0.0f32; tokenizer.n_vocab()];
    let (mut builds, mut masks) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (schema, document) in &cases {
            let started = Instant::now();
            let mut constraint = Constraint::new(&tokenizer, &ConstraintSpec::JsonSchema(schema.clone()))?;
            builds.push(started.elapsed());
            for token in tokenizer.tokenize(document, false, false) {
                logits.fill(0.0);
                let started = Instant::now();
                constraint.mask(&mut logits)?;
                masks.push(started.elapsed());
                constraint.commit(token)?;
            }
        }
    }
    report("constraint built (schema compiled)", &mut builds);
    report("mask computed and applied", &mut masks);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(what: &str, times: &mut [Duration]) {
    if times.is_empty() {
        return;
    }
    times.sort();
    let at = |q: f64| ms(times[((times.len() - 1) as f64 * q).round() as usize]);
    println!(
        "{what}: {} times, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        times.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        ms(times[times.len() - 1])
    );
}
