//! The accuracy of a quantized KV cache: the mean negative log-likelihood of each
//! next token of a text (and its perplexity), decoded one token at a time with each
//! cache type, and how often the most likely next token agrees with F16's.
//!
//! cargo run --release -p elelem-testkit --example kv_nll -- MODEL TEXT_FILE [N_TOKENS] [TYPES]
//! (TYPES: comma-separated, default f16,q8_0,q4_0; N_TOKENS default 2048)

use std::sync::Arc;

use elelem_engine::{CacheType, Context, ContextParams, Model, ModelParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model_path, text_path, rest @ ..] = args.as_slice() else {
        return Err("usage: kv_nll MODEL TEXT_FILE [N_TOKENS] [TYPES]".into());
    };
    let n_tokens: usize = rest.first().map_or(Ok(2048), |n| n.parse())?;
    let types = rest.get(1).map_or("f16,q8_0,q4_0", String::as_str);
    let model = Arc::new(Model::open(model_path, &ModelParams::default())?);
    let text = std::fs::read_to_string(text_path)?;
    let mut tokens = model.tokenizer()?.tokenize(&text, true, false);
    tokens.truncate(n_tokens + 1);
    println!("{} tokens of {text_path}, {model_path}", tokens.len() - 1);
    let mut reference_top: Option<Vec<u32>> = None;
    for name in types.split(',') {
        let ty = CacheType::from_name(name).ok_or_else(|| format!("unknown cache type {name}"))?;
        let params = ContextParams {
            n_ctx: (tokens.len() as u32).next_multiple_of(256),
            n_threads: 2,
            type_k: ty,
            type_v: ty,
            ..Default::default()
        };
        let mut ctx = Context::new(Arc::clone(&model), params)?;
        let (mut nll, mut top) = (0.0f64, Vec::with_capacity(tokens.len()));
        for pair in tokens.windows(2) {
            let logits = ctx.decode(&pair[..1])?;
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
            nll -= f64::from(logits[pair[1] as usize] - max) - sum.ln();
            top.push(
                (0..logits.len())
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                    .unwrap() as u32,
            );
        }
        let n = (tokens.len() - 1) as f64;
        let agree = reference_top.as_ref().map_or(String::new(), |r| {
            let same = r.iter().zip(&top).filter(|(a, b)| a == b).count();
            format!(
                ", top-1 agrees with {} at {same}/{} ({:.2}%)",
                types.split(',').next().unwrap(),
                top.len(),
                100.0 * same as f64 / n
            )
        });
        println!(
            "KV {name}: mean NLL {:.5} nats, perplexity {:.4}{agree}",
            nll / n,
            (nll / n).exp()
        );
        reference_top.get_or_insert(top);
    }
    Ok(())
}
