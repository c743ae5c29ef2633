//! Constrained decoding on the real Qwen2.5-Coder-0.5B: JSON Schemas of every
//! kind llguidance enforces, greedy and at temperature 1.0, each output
//! checked by the `jsonschema` crate (an independent validator, formats
//! included). Plus GBNF, Lark, regex, choices and a lazy tool-call constraint.
//!
//! The model comes from `ELELEM_TEST_MODEL` or elelem's model cache; without
//! it the tests say so and pass. `cargo test --release -- --ignored
//! constrained_json_full` runs the long version (≥ 500 generations).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use elelem_engine::text::sampler::{Sampler, SamplerParams};
use elelem_engine::text::tool_calls::ToolCallFormat;
use elelem_engine::{Constraint, ConstraintSpec, Context, ContextParams, Model, ModelParams};
use serde_json::{json, Value};

fn model_path() -> Option<PathBuf> {
    let path = std::env::var_os("ELELEM_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/elelem/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        });
    // A missing model is a failure, not a skip: `rake models` fetches it.
    assert!(path.exists(), "{} is missing: run `rake models`", path.display());
    Some(path)
}

/// One model test at a time: ggml's threads spin while they wait, so two
/// contexts on the same cores slow each other down many times over.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn open() -> Option<(MutexGuard<'static, ()>, Context)> {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let model = Arc::new(Model::open(model_path()?, &ModelParams::default()).unwrap());
    let params = ContextParams {
        n_ctx: 2048,
        n_threads: 2,
        ..Default::default()
    };
    Some((turn, Context::new(model, params).unwrap()))
}

/// Qwen's chat template for one user turn (no tools).
fn chat_prompt(user: &str) -> String {
    format!(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )
}

#[derive(Debug, PartialEq)]
enum Finish {
    /// The constraint completed or the model ended its turn where allowed.
    Done,
    /// `max_tokens` cut it short.
    Length,
}

/// The sampling loop the batcher will run, for one sequence: mask, sample,
/// commit.
fn generate(
    ctx: &mut Context,
    prompt: &str,
    constraint: &mut Constraint,
    sampler: &mut Sampler,
    max_tokens: usize,
) -> (String, Finish) {
    let tokenizer = ctx.model().tokenizer().unwrap().clone();
    let prompt = tokenizer.tokenize(prompt, false, true);
    let kept = ctx.restart_with_prefix(&prompt);
    let mut logits = ctx.decode(&prompt[kept..]).unwrap().to_vec();
    let mut output = Vec::new();
    let finish = loop {
        constraint.mask(&mut logits).unwrap();
        let token = sampler.sample(&logits);
        constraint.commit(token).unwrap();
        if tokenizer.is_eog(token) || constraint.is_finished() {
            if !tokenizer.is_eog(token) {
                output.push(token);
            }
            break Finish::Done;
        }
        output.push(token);
        sampler.accept(token);
        if output.len() == max_tokens {
            break Finish::Length;
        }
        logits = ctx.decode(&[token]).unwrap().to_vec();
    };
    // Special tokens stay in the text, as llama.cpp's server keeps a tool-call
    // format's tags ("preserved tokens") for its parser.
    (String::from_utf8(tokenizer.detokenize(&output, true)).unwrap(), finish)
}

/// (name, task for the model, schema).
fn schemas() -> Vec<(&'static str, &'static str, Value)> {
    let point = json!({"type": "object", "properties": {"x": {"type": "number", "minimum": -100, "maximum": 100},
        "y": {"type": "number", "minimum": -100, "maximum": 100}}, "required": ["x", "y"], "additionalProperties": false});
    vec![
        (
            "person",
            "Describe a person.",
            json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"], "additionalProperties": false}),
        ),
        (
            "enum",
            "Pick a primary colour.",
            json!({"type": "string", "enum": ["red", "green", "blue"]}),
        ),
        (
            "nested",
            "Describe a user account.",
            json!({"type": "object", "properties": {
            "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
                "email": {"type": "string", "format": "email", "maxLength": 30}}, "required": ["id", "email"],
                "additionalProperties": false},
            "active": {"type": "boolean"}}, "required": ["user", "active"], "additionalProperties": false}),
        ),
        (
            "bounded array",
            "List a few digits.",
            json!({"type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 4}),
        ),
        (
            "anyOf",
            "Give an identifier, a number or a short word.",
            json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 10}]}),
        ),
        (
            "$ref",
            "Give a line segment.",
            json!({"$defs": {"point": point}, "type": "object", "properties": {
            "from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}}, "required": ["from", "to"],
            "additionalProperties": false}),
        ),
        (
            "pattern",
            "Give a flight code.",
            json!({"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}),
        ),
        (
            "date",
            "When is the meeting?",
            json!({"type": "object", "properties": {
            "date": {"type": "string", "format": "date"}}, "required": ["date"], "additionalProperties": false}),
        ),
        (
            "exclusive range",
            "Give a probability.",
            json!({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
        ),
        (
            "optional properties",
            "Describe a book.",
            json!({"type": "object", "properties": {
            "title": {"type": "string", "maxLength": 30}, "subtitle": {"type": "string", "maxLength": 30},
            "pages": {"type": "integer", "minimum": 1, "maximum": 2000}}, "required": ["title"],
            "additionalProperties": false}),
        ),
        (
            "const",
            "Describe the report header.",
            json!({"type": "object", "properties": {
            "version": {"const": 2}, "kind": {"const": "report"}}, "required": ["version", "kind"]}),
        ),
        ("boolean", "Is water wet?", json!({"type": "boolean"})),
        (
            "array of objects",
            "Fill a small order.",
            json!({"type": "array", "items": {"type": "object",
            "properties": {"sku": {"type": "string", "pattern": "^[a-z]{2}[0-9]{2}$"},
                "qty": {"type": "integer", "minimum": 1, "maximum": 5}}, "required": ["sku", "qty"],
            "additionalProperties": false}, "minItems": 1, "maxItems": 2}),
        ),
        (
            "uuid",
            "Make up a request id.",
            json!({"type": "string", "format": "uuid"}),
        ),
        (
            "date-time",
            "When did it happen?",
            json!({"type": "string", "format": "date-time"}),
        ),
        (
            "ipv4",
            "Give a server address.",
            json!({"type": "string", "format": "ipv4"}),
        ),
        (
            "multipleOf",
            "Give a discount percentage.",
            json!({"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100}),
        ),
        (
            "nullable",
            "What is the middle name, if any?",
            json!({"type": ["string", "null"], "maxLength": 12}),
        ),
        (
            "allOf",
            "Fill in a and b.",
            json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string", "maxLength": 5}}, "required": ["b"]}]}),
        ),
        (
            "recursive $ref",
            "Give a tiny tree of numbers.",
            json!({"$defs": {"node": {"type": "object", "properties": {
            "value": {"type": "integer", "minimum": 0, "maximum": 99},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
            "required": ["value"], "additionalProperties": false}}, "$ref": "#/$defs/node"}),
        ),
        ("mixed enum", "Pick one.", json!({"enum": [1, "two", null, true]})),
        (
            "string length",
            "Give a nickname.",
            json!({"type": "string", "minLength": 3, "maxLength": 8}),
        ),
        (
            "tuple",
            "Give a label and a count.",
            json!({"type": "array",
            "prefixItems": [{"type": "string", "maxLength": 10}, {"type": "integer", "minimum": 0}], "items": false,
            "minItems": 2}),
        ),
        (
            "email",
            "What is the support address?",
            json!({"type": "string", "format": "email", "maxLength": 40}),
        ),
        (
            "coordinates",
            "Where is Paris?",
            json!({"type": "object", "properties": {
            "lat": {"type": "number", "minimum": -90, "maximum": 90},
            "lon": {"type": "number", "minimum": -180, "maximum": 180}}, "required": ["lat", "lon"],
            "additionalProperties": false}),
        ),
        (
            "anyOf objects",
            "Describe a shape.",
            json!({"anyOf": [
            {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number", "minimum": 0, "maximum": 10}},
                "required": ["kind", "r"], "additionalProperties": false},
            {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number", "minimum": 0, "maximum": 10}},
                "required": ["kind", "side"], "additionalProperties": false}]}),
        ),
        (
            "enum array",
            "Pick some letters.",
            json!({"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}),
        ),
        (
            "typed map",
            "Count a few fruits.",
            json!({"type": "object", "properties": {"counts": {"type": "object",
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 50}, "maxProperties": 3}},
            "required": ["counts"], "additionalProperties": false}),
        ),
    ]
}

struct Tally {
    generations: usize,
    valid: usize,
    cut_short: usize,
    failures: Vec<String>,
}

/// Greedy once per schema, then `sampled` draws at temperature 1.0.
fn run_schemas(sampled: u64, max_tokens: usize) -> Option<Tally> {
    let (_turn, mut ctx) = open()?;
    let tokenizer = ctx.model().tokenizer().unwrap().clone();
    let mut tally = Tally {
        generations: 0,
        valid: 0,
        cut_short: 0,
        failures: Vec::new(),
    };
    let started = Instant::now();
    for (name, task, schema) in schemas() {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .unwrap();
        let prompt = chat_prompt(&format!("{task} Reply with JSON matching this schema: {schema}"));
        for draw in 0..=sampled {
            let params = if draw == 0 {
                SamplerParams::default()
            } else {
                SamplerParams {
                    temperature: 1.0,
                    seed: draw,
                    ..SamplerParams::default()
                }
            };
            let mut constraint = Constraint::new(&tokenizer, &ConstraintSpec::JsonSchema(schema.clone()))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let (text, finish) = generate(
                &mut ctx,
                &prompt,
                &mut constraint,
                &mut Sampler::new(params),
                max_tokens,
            );
            tally.generations += 1;
            if finish == Finish::Length {
                tally.cut_short += 1;
                continue;
            }
            match serde_json::from_str::<Value>(&text) {
                Ok(value) => match validator.iter_errors(&value).map(|e| e.to_string()).next() {
                    None => tally.valid += 1,
                    Some(e) => tally.failures.push(format!("{name} (draw {draw}): {text} → {e}")),
                },
                Err(e) => tally
                    .failures
                    .push(format!("{name} (draw {draw}): {text:?} does not parse: {e}")),
            }
        }
    }
    eprintln!(
        "{} schemas, {} generations: {} valid, {} cut short by max_tokens {max_tokens}, {} invalid, in {:.1} s",
        schemas().len(),
        tally.generations,
        tally.valid,
        tally.cut_short,
        tally.failures.len(),
        started.elapsed().as_secs_f64()
    );
    Some(tally)
}

/// One greedy and `ELELEM_JSON_SWEEP` (default 1) temperature-1.0 draws per schema; the
/// full sweep (`ELELEM_JSON_SWEEP=19`, 560 generations, max 96 tokens) takes minutes.
#[test]
fn constrained_json_is_valid() {
    let draws: u64 = std::env::var("ELELEM_JSON_SWEEP").map_or(1, |n| n.parse().expect("a count"));
    let max_tokens = if draws > 1 { 96 } else { 64 };
    let Some(tally) = run_schemas(draws, max_tokens) else {
        return;
    };
    assert!(tally.failures.is_empty(), "{:#?}", tally.failures);
    assert_eq!(tally.valid + tally.cut_short, tally.generations);
    assert!(
        tally.cut_short * 20 <= tally.generations,
        "{} of {} cut short",
        tally.cut_short,
        tally.generations
    );
}

#[test]
fn grammars_regexes_and_choices() {
    let Some((_turn, mut ctx)) = open() else { return };
    let tokenizer = ctx.model().tokenizer().unwrap().clone();
    let cases = [
        (
            "Is Paris in France? Answer yes or no.",
            ConstraintSpec::Gbnf("root ::= answer \".\"\nanswer ::= (\"yes\" | \"no\")\n".into()),
            r"^(yes|no)\.$",
        ),
        (
            "Give a date.",
            ConstraintSpec::Gbnf("root ::= year \"-\" [0-1] [0-9] \"-\" [0-3] [0-9]\nyear ::= [1-2] [0-9]{3}\n".into()),
            r"^[12][0-9]{3}-[01][0-9]-[0-3][0-9]$",
        ),
        (
            "Name a fruit.",
            ConstraintSpec::Lark("start: \"fruit: \" /[a-z]{3,10}/".into()),
            r"^fruit: [a-z]{3,10}$",
        ),
        (
            "Give a phone number.",
            ConstraintSpec::Regex(r"\+?[0-9]{2,3}-[0-9]{3}-[0-9]{4}".into()),
            r"^\+?[0-9]{2,3}-[0-9]{3}-[0-9]{4}$",
        ),
        (
            "Which is a planet?",
            ConstraintSpec::Choice(vec!["Mars".into(), "the Moon".into(), "Sirius".into()]),
            r"^(Mars|the Moon|Sirius)$",
        ),
    ];
    for (task, spec, expected) in cases {
        let pattern = regex::Regex::new(expected).unwrap();
        for draw in 0..3u64 {
            let params = SamplerParams {
                temperature: if draw == 0 { 0.0 } else { 1.0 },
                seed: draw,
                ..Default::default()
            };
            let mut constraint = Constraint::new(&tokenizer, &spec).unwrap();
            let (text, finish) = generate(
                &mut ctx,
                &chat_prompt(task),
                &mut constraint,
                &mut Sampler::new(params),
                32,
            );
            assert_eq!(finish, Finish::Done, "{spec:?}: {text:?}");
            assert!(pattern.is_match(&text), "{spec:?} (draw {draw}): {text:?}");
        }
    }
}

/// A grammar as llama.cpp's `json_schema_to_grammar` writes it (here for
/// `{"name": string, "age": integer}`), checked by the schema it came from.
#[test]
fn gbnf_from_llama_cpps_schema_converter() {
    let Some((_turn, mut ctx)) = open() else { return };
    let tokenizer = ctx.model().tokenizer().unwrap().clone();
    let gbnf = r#"age-kv ::= "\"age\"" space ":" space integer
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= ("-"? integral-part) space
integral-part ::= [0] | [1-9] [0-9]{0,15}
name-kv ::= "\"name\"" space ":" space string
root ::= "{" space name-kv "," space age-kv "}" space
space ::= | " " | "\n"{1,2} [ \t]{0,20}
string ::= "\"" char* "\"" space
"#;
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false});
    let validator = jsonschema::validator_for(&schema).unwrap();
    for draw in 0..3u64 {
        let params = SamplerParams {
            temperature: if draw == 0 { 0.0 } else { 1.0 },
            seed: draw,
            ..Default::default()
        };
        let mut constraint = Constraint::new(&tokenizer, &ConstraintSpec::Gbnf(gbnf.into())).unwrap();
        let prompt = chat_prompt("Describe a person as JSON with a name and an age.");
        let (text, finish) = generate(&mut ctx, &prompt, &mut constraint, &mut Sampler::new(params), 48);
        assert_eq!(finish, Finish::Done, "{text:?}");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(validator.is_valid(&value), "{text}");
    }
}

#[test]
fn every_formats_call_constraint_compiles() {
    let Some(path) = model_path() else { return };
    let tokenizer = Arc::new(elelem_engine::open_tokenizer(&path).unwrap());
    let tools = [
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"]}}}),
        json!({"name": "get_time", "description": "no parameters"}),
    ];
    for format in [
        ToolCallFormat::Hermes,
        ToolCallFormat::Llama3Json,
        ToolCallFormat::Mistral,
        ToolCallFormat::MistralArgs,
        ToolCallFormat::FunctionaryV31,
        ToolCallFormat::FunctionaryV32,
        ToolCallFormat::FireFunction,
    ] {
        let triggers = format.triggers(&tools).unwrap();
        assert!(!triggers.is_empty(), "{format:?}");
        Constraint::lazy(&tokenizer, &triggers).unwrap_or_else(|e| panic!("{format:?}: {e}"));
    }
    // A reply that is a bare call object switches the constraint on after
    // `{"name":` (the token that completes it may go further), and off after
    // the object; the same text in mid-sentence does not.
    let triggers = ToolCallFormat::Hermes.triggers(&tools).unwrap();
    let commit_all = |constraint: &mut Constraint, text: &str| {
        for token in tokenizer.tokenize(text, false, true) {
            constraint.commit(token).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        }
    };
    let mut constraint = Constraint::lazy(&tokenizer, &triggers).unwrap();
    commit_all(&mut constraint, "```json\n{\"name\": \"get_weather\", ");
    assert!(constraint.is_active());
    commit_all(&mut constraint, "\"arguments\": {\"city\": \"Paris\"}}");
    assert!(!constraint.is_active());
    let mut constraint = Constraint::lazy(&tokenizer, &triggers).unwrap();
    commit_all(&mut constraint, "Write {\"name\": \"x\"} to call it.");
    assert!(!constraint.is_active());
}

#[test]
fn refuses_what_llguidance_cannot_enforce_before_decoding() {
    let Some(path) = model_path() else { return };
    let tokenizer = Arc::new(elelem_engine::open_tokenizer(&path).unwrap());
    for (spec, part) in [
        (
            ConstraintSpec::JsonSchema(json!({"type": "object", "dependentSchemas": {"a": {}}})),
            "dependentSchemas",
        ),
        (ConstraintSpec::Gbnf("root ::= missing\n".into()), "missing"),
        (ConstraintSpec::Lark("start: undefined_rule".into()), "undefined_rule"),
        (ConstraintSpec::Regex("(unclosed".into()), "regex"),
        (ConstraintSpec::Choice(vec![]), "choice"),
    ] {
        let error = Constraint::new(&tokenizer, &spec)
            .err()
            .unwrap_or_else(|| panic!("{spec:?} was accepted"));
        assert!(matches!(error, elelem_engine::Error::InvalidArgument(_)), "{error:?}");
        assert!(error.to_string().contains(part), "{spec:?}: {error}");
    }
}

#[test]
fn lazy_tool_call_constraint_switches_on_at_the_tag() {
    let Some((_turn, mut ctx)) = open() else { return };
    let tokenizer = ctx.model().tokenizer().unwrap().clone();
    let template = ctx.model().chat_template().unwrap().to_string();
    let format = ToolCallFormat::detect(&template);
    assert_eq!(format, ToolCallFormat::Hermes);
    let tool = json!({"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
            "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}});
    let triggers = format.triggers(std::slice::from_ref(&tool)).unwrap();
    // Qwen 2.5's template with these tools, as transformers renders it.
    let prompt = format!(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n\
         You may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tool}\n</tools>\n\n\
         For each function call, return a json object with function name and arguments within \
         <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n\
         </tool_call><|im_end|>\n<|im_start|>user\nWhat's the weather like in Paris?<|im_end|>\n<|im_start|>assistant\n"
    );
    for draw in 0..3u64 {
        let params = SamplerParams {
            temperature: if draw == 0 { 0.0 } else { 1.0 },
            seed: draw,
            ..Default::default()
        };
        let mut constraint = Constraint::lazy(&tokenizer, &triggers).unwrap();
        assert!(!constraint.is_active());
        let (text, finish) = generate(&mut ctx, &prompt, &mut constraint, &mut Sampler::new(params), 96);
        assert_eq!(finish, Finish::Done, "{text:?}");
        let reply = format.parse(&text);
        assert_eq!(reply.tool_calls.len(), 1, "draw {draw}: {text:?}");
        let call = &reply.tool_calls[0];
        assert_eq!(call.name, "get_weather");
        let validator = jsonschema::validator_for(&tool["function"]["parameters"]).unwrap();
        assert!(validator.is_valid(&call.arguments), "{text:?}");
    }
    // Plain replies stay free: without the tag nothing is masked.
    let mut constraint = Constraint::lazy(&tokenizer, &triggers).unwrap();
    let mut logits = vec![0.0f32; tokenizer.n_vocab()];
    constraint.mask(&mut logits).unwrap();
    assert!(logits.iter().all(|l| *l == 0.0));
    for token in tokenizer.tokenize("Sure! <tool_call>", false, true) {
        constraint.commit(token).unwrap();
    }
    assert!(constraint.is_active());
    constraint.mask(&mut logits).unwrap();
    assert!(logits.contains(&f32::NEG_INFINITY));
}

/// The batcher runs the same loop: a constrained request decoded by it gives the
/// tokens of the mask-sample-commit loop above, next to an unconstrained one, and
/// `max_tokens` cutting the structure short says `length`.
#[test]
fn batcher_masks_and_commits() {
    use elelem_engine::{Batcher, Event, FinishReason, GenerateParams, Request, StopReason, TextParams};
    let Some((_turn, mut ctx)) = open() else { return };
    let tokenizer = ctx.model().tokenizer().unwrap().clone();
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0}}, "required": ["name", "age"], "additionalProperties": false});
    let spec = ConstraintSpec::JsonSchema(schema);
    let prompt = chat_prompt("Describe a person as JSON.");
    let mut constraint = Constraint::new(&tokenizer, &spec).unwrap();
    let (expected, finish) = generate(
        &mut ctx,
        &prompt,
        &mut constraint,
        &mut Sampler::new(SamplerParams::default()),
        64,
    );
    assert_eq!(finish, Finish::Done);
    let ids = tokenizer.tokenize(&prompt, false, true);
    let run = |ctx: &mut Context, max_tokens: u32, constrained: bool| {
        let mut batcher = Batcher::new(ctx, 1);
        let request = Request {
            prompt: ids.clone(),
            embeddings: Vec::new(),
            params: TextParams {
                generate: GenerateParams {
                    max_tokens,
                    ..Default::default()
                },
                ..Default::default()
            },
            logprobs: Some(1),
            choose: None,
            constraint: constrained.then(|| Constraint::new(&tokenizer, &spec).unwrap()),
        };
        let id = batcher.submit(request).unwrap();
        let mut logprobs = Vec::new();
        loop {
            while let Some(event) = batcher.next_event(id).unwrap() {
                match event {
                    Event::Token { logprob, .. } => logprobs.push(logprob.unwrap()),
                    Event::Done { summary, .. } => return (summary, logprobs),
                }
            }
            assert!(batcher.step(ctx).unwrap());
        }
    };
    let (summary, logprobs) = run(&mut ctx, 64, true);
    let text = String::from_utf8(tokenizer.detokenize(&summary.tokens, false)).unwrap();
    assert_eq!(text.trim_end(), expected.trim_end());
    assert!(matches!(
        summary.finish_reason,
        FinishReason::Stop | FinishReason::Generation(StopReason::Eos)
    ));
    // Logprobs are the model's own: the first token's top alternative is what the
    // unconstrained model would say (not necessarily "{").
    let (free, free_logprobs) = run(&mut ctx, 4, false);
    assert_eq!(logprobs[0].top, free_logprobs[0].top);
    assert_eq!(free.finish_reason, FinishReason::Generation(StopReason::Length));
    let (cut, _) = run(&mut ctx, 3, true);
    assert_eq!(cut.finish_reason, FinishReason::Generation(StopReason::Length));
    assert_eq!(cut.tokens.len(), 3);
}
