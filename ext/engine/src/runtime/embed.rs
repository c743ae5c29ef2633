//! Embeddings and reranking, as llama.cpp's `llama-embedding` computes them: texts
//! (token ids) packed into passes of a context that outputs pooled embeddings, each
//! text its own sequence, then normalized as `--embd-normalize` does.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::context::{BatchToken, Context, ContextParams};
use crate::memory::kv_cache::{SeqId, MAX_SEQUENCES};
use crate::model::inputs::distinct_seqs;
use crate::model::Model;
pub use crate::model::Pooling;
use crate::{Error, Result};

/// How an embedding is scaled after pooling, as `llama-embedding --embd-normalize`
/// (common's `common_embd_normalize`, whose float and double arithmetic this keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalize {
    /// As pooled (`-1`).
    None,
    /// Scaled so the largest magnitude is 32760, an int16 range (`0`).
    MaxAbs,
    /// Unit length: the L2 norm, llama.cpp's default (`2`).
    Euclidean,
    /// Unit p-norm (`1` is taxicab, `p > 2` others).
    PNorm(u32),
}

impl Normalize {
    /// From llama-embedding's `--embd-normalize` number.
    pub fn from_id(id: i32) -> Option<Normalize> {
        match id {
            -1 => Some(Normalize::None),
            0 => Some(Normalize::MaxAbs),
            2 => Some(Normalize::Euclidean),
            p if p > 0 => Some(Normalize::PNorm(p as u32)),
            _ => None,
        }
    }

    pub fn apply(self, embedding: &mut [f32]) {
        let sum: f64 = match self {
            Normalize::None => return,
            Normalize::MaxAbs => embedding.iter().fold(0.0f64, |max, &x| max.max(f64::from(x.abs()))) / 32760.0,
            Normalize::Euclidean => embedding.iter().map(|&x| f64::from(x * x)).sum::<f64>().sqrt(),
            Normalize::PNorm(p) => {
                let p = f64::from(p);
                embedding
                    .iter()
                    .map(|&x| f64::from(x.abs()).powf(p))
                    .sum::<f64>()
                    .powf(1.0 / p)
            }
        };
        let scale = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
        embedding.iter_mut().for_each(|x| *x *= scale);
    }
}

/// The fewest tokens a pass of an encoder may hold: llama-embedding's default batch,
/// which it keeps when `n_ctx` is smaller (llama.cpp caps a batch at `n_ctx` only
/// for causal attention, which keeps a cache of `n_ctx` cells).
pub const MIN_ENCODER_BATCH: u32 = 2048;

/// The most tokens one text may have in an embedding context of `n_ctx` tokens:
/// learned positions (BERT's) end at the training context, and a longer text would
/// have no row for them.
pub fn max_tokens(model: &Model, n_ctx: u32) -> u32 {
    let learned_positions = model.weights().input.as_ref().is_some_and(|i| i.positions.is_some());
    let n_batch = batch_tokens(model, n_ctx);
    if learned_positions {
        n_batch.min(model.hparams.n_ctx_train)
    } else {
        n_batch
    }
}

/// The most tokens of one pass (one batch of texts) in a context of `n_ctx` tokens.
fn batch_tokens(model: &Model, n_ctx: u32) -> u32 {
    if model.hparams.causal_attn {
        n_ctx
    } else {
        n_ctx.max(MIN_ENCODER_BATCH)
    }
}

/// What an [`Embedder`] is made with.
#[derive(Debug, Clone)]
pub struct EmbedParams {
    /// The context's size: the most tokens one pass (one batch of texts, evaluated
    /// whole) holds, at least [`MIN_ENCODER_BATCH`] for an encoder, as llama-embedding
    /// sizes its batches.
    pub n_ctx: u32,
    pub n_threads: usize,
    /// As [`ContextParams::adaptive_threads`].
    pub adaptive_threads: bool,
    /// As [`ContextParams::own_kernels`].
    pub own_kernels: bool,
    /// The model's own (`pooling_type`) when `None`.
    pub pooling: Option<Pooling>,
    /// The most texts packed into one batch, each its own sequence.
    pub batch_texts: u32,
}

/// A context that gives embeddings: texts in, one vector per text out (per token, for
/// [`Pooling::None`]).
pub struct Embedder {
    ctx: Context,
    pooling: Pooling,
    batch_texts: usize,
    /// The most tokens of one text.
    max_tokens: usize,
}

impl Embedder {
    pub fn new(model: Arc<Model>, params: EmbedParams) -> Result<Embedder> {
        let hp = &model.hparams;
        let pooling = params.pooling.or(hp.pooling).unwrap_or(Pooling::None);
        if params.batch_texts == 0 || params.batch_texts > MAX_SEQUENCES {
            return Err(Error::InvalidArgument(format!(
                "batch_texts must be between 1 and {MAX_SEQUENCES}, got {}",
                params.batch_texts
            )));
        }
        let max_tokens = max_tokens(&model, params.n_ctx) as usize;
        let n_batch = batch_tokens(&model, params.n_ctx);
        // A batch is one pass (llama-embedding's n_ubatch is its n_batch): a text's tokens
        // all see each other, and its pooled row comes from one graph.
        let ctx = Context::new(
            model,
            ContextParams {
                n_ctx: n_batch,
                n_threads: params.n_threads,
                adaptive_threads: params.adaptive_threads,
                own_kernels: params.own_kernels,
                n_ubatch: n_batch,
                n_seq_max: params.batch_texts,
                pooling: Some(pooling),
                flash_attn: true,
                ..ContextParams::default()
            },
        )?;
        Ok(Embedder {
            ctx,
            pooling,
            batch_texts: params.batch_texts as usize,
            max_tokens,
        })
    }

    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    pub fn batch_texts(&self) -> u32 {
        self.batch_texts as u32
    }

    /// How many values each embedding has (a reranker's: how many scores).
    pub fn width(&self) -> usize {
        self.ctx.embedding_width()
    }

    /// The most tokens one text may have.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// See [`Context::abort_flag`].
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        self.ctx.abort_flag()
    }

    /// The embedding of each input, normalized. Texts are packed as llama-embedding
    /// packs them: in order, into a batch while its tokens stay within the context's
    /// and its texts within `batch_texts`; each batch is one pass from an empty cache.
    /// With [`Pooling::None`] a text's vector is its tokens' rows, one after another.
    pub fn embed(&mut self, inputs: &[Vec<u32>], normalize: Normalize) -> Result<Vec<Vec<f32>>> {
        let max = self.max_tokens();
        let n_batch = self.ctx.max_batch() as usize;
        if let Some((i, input)) = inputs.iter().enumerate().find(|(_, t)| t.is_empty() || t.len() > max) {
            return Err(Error::InvalidArgument(format!(
                "input {i} has {} tokens: an input has 1 to {max}",
                input.len()
            )));
        }
        let mut out = vec![Vec::new(); inputs.len()];
        let mut start = 0;
        while start < inputs.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < inputs.len() && end - start < self.batch_texts && tokens + inputs[end].len() <= n_batch {
                tokens += inputs[end].len();
                end += 1;
            }
            self.embed_batch(&inputs[start..end], &mut out[start..end])?;
            start = end;
        }
        for embedding in &mut out {
            for row in embedding.chunks_mut(self.width()) {
                normalize.apply(row);
            }
        }
        Ok(out)
    }

    fn embed_batch(&mut self, texts: &[Vec<u32>], out: &mut [Vec<f32>]) -> Result<()> {
        self.ctx.clear();
        let batch: Vec<BatchToken> = texts
            .iter()
            .enumerate()
            .flat_map(|(seq, text)| {
                text.iter().map(move |&token| BatchToken {
                    token,
                    seq: seq as SeqId,
                    output: true,
                })
            })
            .collect();
        self.ctx.decode_batch(&batch)?;
        let rows = self.ctx.embeddings().chunks(self.width());
        if self.pooling == Pooling::None {
            for (token, row) in batch.iter().zip(rows) {
                out[token.seq as usize].extend_from_slice(row);
            }
        } else {
            let seqs: Vec<SeqId> = batch.iter().map(|t| t.seq).collect();
            for (seq, row) in distinct_seqs(&seqs).into_iter().zip(rows) {
                out[seq as usize] = row.to_vec();
            }
        }
        Ok(())
    }
}
