//! A pass may start from given embeddings instead of token ids (an image's, from its
//! projector: `Context::decode_embeddings`, as llama.cpp's `batch.embd`). Given the rows
//! the tokens would look up (and scale, where llama.cpp scales token rows only), it
//! computes the tokens' bits exactly, through attention, sliding windows, recurrent
//! state and an embedding multiplier alike. Without causal attention (Gemma 3's image
//! tokens) the rows see each other both ways, which changes what follows.

use std::sync::Arc;

use elelem_engine::{BatchToken, Context, ContextParams, Model, PromptEmbeddings, Request};
use elelem_gguf::{Gguf, TensorType};
use elelem_testkit::canary;

fn synthetic(name: &str) -> Arc<Model> {
    let (_, shape) = canary::synthetic()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no synthetic model {name}"));
    Arc::new(Model::from_gguf(Gguf::from_bytes(canary::writer(&shape).to_bytes()).unwrap()).unwrap())
}

/// The token rows `ids` would look up, dequantized as ggml's get_rows does, times
/// `scale` (in f32, as the graph multiplies them).
fn token_rows(name: &str, ids: &[u32], scale: f32) -> Vec<f32> {
    let (_, shape) = canary::synthetic().into_iter().find(|(n, _)| n == name).unwrap();
    let gguf = Gguf::from_bytes(canary::writer(&shape).to_bytes()).unwrap();
    let info = gguf.tensor("token_embd.weight").unwrap();
    let n_embd = info.dims[0] as usize;
    let data = gguf.tensor_data(info);
    let ty = info.tensor_type;
    let row_bytes = data.len() / info.dims[1] as usize;
    let mut rows = vec![0f32; ids.len() * n_embd];
    for (row, &id) in rows.chunks_mut(n_embd).zip(ids) {
        let bytes = &data[id as usize * row_bytes..(id as usize + 1) * row_bytes];
        if ty == TensorType::F32 {
            row.iter_mut()
                .zip(bytes.chunks(4))
                .for_each(|(x, b)| *x = f32::from_le_bytes(b.try_into().unwrap()));
        } else {
            // SAFETY: the traits of a type the model loaded; `bytes` holds one row of it.
            unsafe {
                let traits = ggml_sys::ggml_get_type_traits(ty.id() as ggml_sys::ggml_type);
                let to_float = (*traits).to_float.expect("a type with a dequantizer");
                to_float(bytes.as_ptr().cast(), row.as_mut_ptr(), n_embd as i64);
            }
        }
        row.iter_mut().for_each(|x| *x *= scale);
    }
    rows
}

fn context(model: &Arc<Model>) -> Context {
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 2,
        adaptive_threads: false,
        ..Default::default()
    };
    Context::new(Arc::clone(model), params).unwrap()
}

fn batch(ids: &[u32]) -> Vec<BatchToken> {
    ids.iter()
        .map(|&token| BatchToken {
            token,
            seq: 0,
            output: false,
        })
        .collect()
}

const PROMPT: [u32; 6] = [1, 50, 60, 70, 80, 90];
const NEXT: u32 = 33;

/// The logits after the prompt's last token and after one more token, from tokens and
/// from the prompt's rows given as embeddings.
fn both_ways(name: &str, scale: f32, causal: bool) -> ([Vec<f32>; 2], [Vec<f32>; 2]) {
    let model = synthetic(name);
    let mut tokens = context(&model);
    tokens.decode_batch(&batch(&PROMPT)).unwrap();
    let from_tokens = [tokens.logits().to_vec(), tokens.decode(&[NEXT]).unwrap().to_vec()];
    let mut embeddings = context(&model);
    let rows = token_rows(name, &PROMPT, scale);
    embeddings.decode_embeddings(&batch(&PROMPT), &rows, causal).unwrap();
    let from_rows = [
        embeddings.logits().to_vec(),
        embeddings.decode(&[NEXT]).unwrap().to_vec(),
    ];
    assert_eq!(
        embeddings.seq_tokens(0)[..PROMPT.len()],
        PROMPT,
        "the sequence records the ids given"
    );
    (from_tokens, from_rows)
}

#[test]
fn token_rows_given_as_embeddings_compute_the_tokens_bits() {
    // Attention; quantized matrices with F16 embeddings; sliding windows; a recurrent
    // state; an embedding multiplier (applied to given rows too, as llama.cpp does).
    for name in ["tiny-llama3", "tiny-qwen3", "tiny-gemma2", "tiny-lfm2", "tiny-granite"] {
        let (tokens, rows) = both_ways(name, 1.0, true);
        assert!(tokens == rows, "{name}: embeddings did not compute the tokens' bits");
    }
    // Gemma 4 scales token rows by sqrt(n_embd) and given rows by 1 (llama.cpp's
    // `inp_scale_rows`): rows scaled beforehand are the tokens'.
    let model = synthetic("tiny-gemma4");
    let scale = (model.hparams.n_embd as f32).sqrt();
    let (tokens, rows) = both_ways("tiny-gemma4", scale, true);
    assert!(
        tokens == rows,
        "tiny-gemma4: scaled embeddings did not compute the tokens' bits"
    );
}

#[test]
fn rows_that_see_each_other_both_ways_change_what_follows() {
    let (tokens, rows) = both_ways("tiny-llama3", 1.0, false);
    // The last row sees every row either way, but the earlier rows' keys and values,
    // from the second layer on, come from rows that saw what followed them.
    assert!(tokens[0] != rows[0] && tokens[1] != rows[1]);
    // One row alone sees only itself and what came before, either way.
    let model = synthetic("tiny-llama3");
    let rows = token_rows("tiny-llama3", &PROMPT[..1], 1.0);
    let [mut causal, mut both] = [context(&model), context(&model)];
    causal.decode_embeddings(&batch(&PROMPT[..1]), &rows, true).unwrap();
    both.decode_embeddings(&batch(&PROMPT[..1]), &rows, false).unwrap();
    assert!(causal.logits() == both.logits());
}

#[test]
fn embeddings_are_refused_where_they_do_not_fit() {
    let model = synthetic("tiny-llama3");
    let n_embd = model.hparams.n_embd as usize;
    let mut ctx = context(&model);
    let err = ctx
        .decode_embeddings(&batch(&PROMPT), &vec![0.0; n_embd], true)
        .unwrap_err();
    assert!(err.to_string().contains("each takes n_embd"), "{err}");
    // Gemma 4's per-layer embeddings are looked up by token: E-models take no embeddings.
    let e_model = synthetic("tiny-gemma4-e");
    assert!(!e_model.takes_embeddings());
    let mut ctx = context(&e_model);
    let rows = vec![0.0; e_model.hparams.n_embd as usize];
    let err = ctx.decode_embeddings(&batch(&[1]), &rows, true).unwrap_err();
    assert!(err.to_string().contains("does not take embeddings"), "{err}");
    assert!(ctx.seq_tokens(0).is_empty());
}

/// A request whose prompt holds rows given as embeddings: the batcher decodes them in a
/// pass of their own, between the tokens around them, and generates what the tokens would.
#[test]
fn a_request_with_embeddings_generates_what_its_tokens_would() {
    let model = synthetic("tiny-llama3");
    let generate = |embeddings: Vec<PromptEmbeddings>| {
        let mut ctx = context(&model);
        let mut prompt = PROMPT.to_vec();
        // The rows given as embeddings are recorded under ids beyond the vocabulary.
        for e in &embeddings {
            let n = e.embd.len() / model.hparams.n_embd as usize;
            prompt[e.start..e.start + n].fill(model.hparams.n_vocab + 7);
        }
        let mut batcher = elelem_engine::Batcher::new(&ctx, 1);
        let id = batcher
            .submit(Request {
                prompt,
                embeddings,
                params: elelem_engine::TextParams {
                    generate: elelem_engine::GenerateParams {
                        max_tokens: 8,
                        ignore_eos: true,
                        ..Default::default()
                    },
                    ..Default::default()
                },
                logprobs: None,
                choose: None,
                constraint: None,
            })
            .unwrap();
        loop {
            match batcher.next_event(id).unwrap() {
                Some(elelem_engine::Event::Done { summary, .. }) => return summary.tokens,
                Some(_) => {}
                None => {
                    batcher.step(&mut ctx).unwrap();
                }
            }
        }
    };
    let from_tokens = generate(Vec::new());
    let rows = token_rows("tiny-llama3", &PROMPT[2..4], 1.0);
    let from_rows = generate(vec![PromptEmbeddings {
        start: 2,
        embd: rows.into(),
        causal: true,
        grid: None,
    }]);
    assert_eq!(from_tokens, from_rows);
    assert_eq!(from_tokens.len(), 8);
}
