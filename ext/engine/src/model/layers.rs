//! The pieces every architecture's graph is built from: embeddings, RMS norm,
//! attention over the KV cache with flash attention, gated feed-forwards, the
//! output head. Each mirrors llama.cpp's `llm_graph_context` op for op, since
//! the ops (and their order of arguments) decide which kernels run and so the
//! bits of the result.

use ggml_sys as sys;

use super::hparams::{ExpertGating, ExpertGroups, HParams, NormType, Pooling};
use super::inputs::{
    Filled, Inputs, MeanWeights, OwnTokensMask, PooledRows, StateRowsInput, TemperatureInput, TokenInput,
};
use super::weights::{
    AttentionWeights, ExpertBiases, FfnWeights, LayerWeights, Mamba2Weights, MlaQuery, MlaWeights, Norm,
    PerLayerEmbeddings, QkvWeights, SharedExpert, SharedGate, Weights,
};
use crate::ggml::{Graph, Rope, Tensor};
use crate::memory::kv_cache::KvCache;
use crate::memory::recurrent::RecurrentState;

/// The activation of a gated feed-forward.
#[derive(Debug, Clone, Copy)]
pub enum Glu {
    /// SwiGLU: llama, qwen2.
    Silu,
    /// GeGLU with ggml's tabulated GELU: gemma3.
    Gelu,
    /// gpt-oss's clamped SwiGLU (llama.cpp's `LLM_FFN_SWIGLU_OAI_MOE`), with its fixed
    /// `alpha` 1.702 and `limit` 7.
    SiluOai,
}

impl Glu {
    /// `act(gate) * up`, the gate and up projections apart.
    fn split(self, g: &Graph, gate: Tensor, up: Tensor) -> Tensor {
        match self {
            Glu::Silu => g.swiglu_split(gate, up),
            Glu::Gelu => g.geglu_split(gate, up),
            Glu::SiluOai => g.swiglu_oai(gate, up, 1.702, 7.0),
        }
    }
}

pub struct GraphBuilder<'a> {
    pub graph: &'a Graph,
    /// The mask of attention over the pass's own tokens, once a layer has asked for it.
    pub(crate) own_mask: std::cell::Cell<Option<Tensor>>,
    pub inputs: Inputs,
    pub(crate) hparams: &'a HParams,
    pub(crate) weights: &'a Weights,
    pub(crate) kv: &'a KvCache,
    pub(crate) recurrent: &'a RecurrentState,
    /// The rows of the recurrent states this pass reads and writes, once a layer has asked.
    pub(crate) state_rows: std::cell::Cell<Option<(Tensor, Tensor)>>,
    pub n_tokens: i64,
    /// The cells a sequence may use (llama.cpp's `n_ctx_seq`): picks LongRoPE's factors.
    pub n_ctx_seq: u32,
    /// What the pass outputs: logits (`None`), or embeddings pooled this way.
    pub pooling: Option<Pooling>,
    /// How many distinct sequences the pass holds: the pooled rows.
    pub n_seqs: i64,
}

impl GraphBuilder<'_> {
    pub fn hparams(&self) -> &HParams {
        self.hparams
    }

    pub fn layers(&self) -> &[LayerWeights] {
        &self.weights.layers
    }

    /// The token embeddings, or the embeddings the pass was given (times the model's
    /// embedding multiplier, if it has one: llama.cpp scales both).
    pub fn embed(&self) -> Tensor {
        let x = match self.inputs.tokens {
            TokenInput::Ids(ids) => self.graph.get_rows(self.weights.tok_embd, ids),
            TokenInput::Embeddings(embd) => embd,
        };
        match self.hparams().embedding_scale {
            Some(scale) => self.graph.scale(x, scale),
            None => x,
        }
        .set_name("inp_embd")
    }

    /// A deepstack model's input rows (llama.cpp's `build_inp_embd` where `n_embd_inp` is
    /// wider than `n_embd`): the given rows as they are, a token's embedding padded with
    /// zeros to their width; and the first `n_embd` values of each, the first layer's input.
    pub fn embed_deepstack(&self) -> (Tensor, Tensor) {
        let g = self.graph;
        let hp = self.hparams();
        if hp.n_embd_inp() == hp.n_embd {
            let x = self.embed();
            return (x, x);
        }
        let rows = match self.inputs.tokens {
            TokenInput::Ids(ids) => {
                let pad = (hp.n_embd_inp() - hp.n_embd) as i32;
                g.pad(g.get_rows(self.weights.tok_embd, ids), [pad, 0, 0, 0])
            }
            TokenInput::Embeddings(embd) => embd,
        };
        let x = g.view_2d(rows, hp.n_embd.into(), self.n_tokens, rows.nb()[1], 0);
        (rows, x.set_name("inp_embd"))
    }

    /// The embeddings times `scale`, multiplied by a [1, n_tokens] input filled with
    /// it, as llama.cpp scales token rows. Given embeddings are not scaled (llama.cpp's
    /// rows are 1 for them, and x × 1 is x).
    pub fn embed_scaled(&self, scale: f32) -> Tensor {
        if matches!(self.inputs.tokens, TokenInput::Embeddings(_)) {
            return self.embed();
        }
        let rows = self
            .graph
            .input("inp_scale_rows", sys::GGML_TYPE_F32, &[1, self.n_tokens]);
        self.inputs.added.borrow_mut().push(Box::new(Filled {
            tensor: rows,
            value: scale,
        }));
        self.graph.mul(self.embed(), rows).set_name("inp_scaled")
    }

    /// Each layer's input of the per-layer embeddings, [width, n_tokens, n_layer]: the
    /// token's rows scaled by sqrt(width), plus the scaled embeddings `x` projected (over
    /// sqrt(n_embd)) and RMS-normed per layer, over sqrt(2) (llama.cpp's
    /// `build_inp_per_layer` and `project_per_layer_inputs`, gemma4's and gemma3n's).
    pub fn per_layer_inputs(&self, ple: &PerLayerEmbeddings, x: Tensor) -> Tensor {
        let g = self.graph;
        let hp = self.hparams();
        let (width, n_layer) = (i64::from(hp.n_embd_per_layer), i64::from(hp.n_layer));
        let TokenInput::Ids(ids) = self.inputs.tokens else {
            unreachable!("Context::decode_embeddings refuses a model with per-layer embeddings")
        };
        let rows = g.get_rows(ple.tok_embd, ids);
        let rows = g.reshape_3d(rows, width, n_layer, self.n_tokens);
        let rows = g.scale(rows, (hp.n_embd_per_layer as f32).sqrt());
        let proj = g.mul_mat(ple.model_proj, x);
        let proj = g.scale(proj, 1.0 / (hp.n_embd as f32).sqrt());
        let proj = g.reshape_3d(proj, width, n_layer, self.n_tokens);
        let proj = self.norm(proj, Some(ple.proj_norm.into()), "per_layer_proj", 0);
        let inputs = g.scale(g.add(proj, rows), 1.0 / 2f32.sqrt());
        g.cont(g.permute(inputs, [0, 2, 1, 3])).set_name("inp_per_layer")
    }

    /// Layer `il`'s per-layer embedding from its hidden state `x`: `x` through the
    /// layer's `inp_gate` and GELU, times its part of `inputs` (of
    /// [`GraphBuilder::per_layer_inputs`]), projected (`proj`) and RMS-normed (`post_norm`).
    pub fn per_layer_embedding(
        &self,
        ple: &PerLayerEmbeddings,
        inputs: Tensor,
        il: usize,
        x: Tensor,
        name: &str,
    ) -> Tensor {
        let g = self.graph;
        let [inp_gate, proj, post_norm] = ple.layers[il];
        let gate = g.gelu(g.mul_mat(inp_gate, x));
        let this_layer = g.view_2d(
            inputs,
            inputs.ne()[0],
            self.n_tokens,
            inputs.nb()[1],
            il * inputs.nb()[2],
        );
        let out = g.mul_mat(proj, g.mul(gate, this_layer));
        self.norm(out, Some(post_norm.into()), name, il)
    }

    /// The attention temperature input of this pass, where the model scales Q by
    /// position (see [`HParams::attn_temperature`]); build it once per graph.
    pub fn attn_temperature(&self) -> Option<Tensor> {
        let temperature = self.hparams().attn_temperature?;
        let tensor = self
            .graph
            .input("inp_attn_scale", sys::GGML_TYPE_F32, &[1, 1, self.n_tokens]);
        self.inputs.added.borrow_mut().push(Box::new(TemperatureInput {
            tensor,
            scale: temperature.scale,
            floor_scale: temperature.floor_scale,
            offset: temperature.offset,
        }));
        Some(tensor)
    }

    /// Rotates Q or K by position, with the frequency factors the model has for this
    /// context's length.
    pub fn rope(&self, x: Tensor, rope: &Rope) -> Tensor {
        let factors = self.weights.rope_factors.for_context(self.n_ctx_seq, rope.n_ctx_orig);
        self.graph.rope(x, self.inputs.pos.0, rope, factors)
    }

    /// An encoder's input: the token embeddings plus the first token type's row and the
    /// positions' rows where the model has them, LayerNormed (bert's `inp_norm`).
    pub fn embed_encoder(&self) -> Tensor {
        let g = self.graph;
        let w = self.weights;
        let mut x = self.embed();
        let Some(input) = &w.input else { return x };
        if let Some(types) = input.token_type {
            x = g.add(x, g.view_1d(types, self.hparams().n_embd.into(), 0));
        }
        if let Some(positions) = input.positions {
            x = g.add(g.get_rows(positions, self.inputs.pos.0), x);
        }
        self.norm(x, Some(input.norm), "inp_norm", 0)
    }

    /// [`GraphBuilder::norm`] where the layer has the weight (per-head Q/K norms), else `x`.
    pub fn norm_if(&self, x: Tensor, weight: Option<Tensor>, name: &str, il: usize) -> Tensor {
        weight.map_or(x, |w| self.norm(x, Some(w.into()), name, il))
    }

    /// The architecture's norm (RMS or LayerNorm, its [`NormType`]) times the
    /// weight plus the bias, as llama.cpp's `build_norm` (the CPU backend fuses the
    /// RMS norm and its weight; values are the same).
    pub fn norm(&self, x: Tensor, norm: Option<Norm>, name: &str, il: usize) -> Tensor {
        let g = self.graph;
        let hp = self.hparams();
        let mut y = match hp.arch.norm {
            NormType::Rms => g.rms_norm(x, hp.norm_eps),
            NormType::Layer => g.layer_norm(x, hp.norm_eps),
        };
        // llama.cpp's build_norm names a weighted norm "norm" in a layer: the output norm is
        // of no layer (its il -1), an encoder's input norm layer 0's (its bert graph passes 0).
        if norm.is_some() && name != "result_norm" {
            g.mark_layer_norm(y, il);
        }
        if let Some(norm) = norm {
            y = g.mul(y, norm.weight);
            if let Some(bias) = norm.bias {
                y = g.add(y, bias);
            }
        }
        y.set_name(&format!("{name}-{il}"))
    }

    /// Q, K and V projections (plus biases where the model has them), shaped
    /// [head_dim, n_heads, n_tokens].
    pub fn qkv(&self, attn: &AttentionWeights, x: Tensor, il: usize) -> (Tensor, Tensor, Tensor) {
        let hp = self.hparams();
        match attn.qkv {
            QkvWeights::Separate { .. } => {
                let (q, k, v) = self.qkv_rows(attn, x);
                self.heads(q, k, v, il)
            }
            // One fused projection: Q, K and V are views of its rows, as llama.cpp takes them.
            QkvWeights::Fused { wqkv, bqkv } => {
                let g = self.graph;
                let qkv = g.mul_mat(wqkv, x);
                let qkv = bqkv.map_or(qkv, |b| g.add(qkv, b));
                let row = |n: u32| unsafe { sys::ggml_row_size(qkv.ggml_type(), n.into()) };
                let view = |head_dim: u32, n_head: u32, offset: usize, name: &str| {
                    g.view_3d(
                        qkv,
                        [head_dim.into(), n_head.into(), self.n_tokens],
                        row(head_dim),
                        qkv.nb()[1],
                        offset,
                    )
                    .set_name(&format!("{name}-{il}"))
                };
                let (head_k, head_v, n_head_kv) = (hp.head_dim_k_of(il), hp.head_dim_v_of(il), hp.n_head_kv_of(il));
                let q_width = head_k * hp.n_head;
                (
                    view(head_k, hp.n_head, 0, "Qcur"),
                    view(head_k, n_head_kv, row(q_width), "Kcur"),
                    view(head_v, n_head_kv, row(q_width + hp.n_embd_k_gqa_of(il)), "Vcur"),
                )
            }
        }
    }

    /// Q, K and V as rows of the full width, [width, n_tokens] (biases added); from a
    /// fused projection, contiguous copies of its parts, as llama.cpp's `build_qkv`
    /// makes them when it does not split heads.
    pub fn qkv_rows(&self, attn: &AttentionWeights, x: Tensor) -> (Tensor, Tensor, Tensor) {
        let g = self.graph;
        match attn.qkv {
            QkvWeights::Separate { wq, wk, wv, bq, bk, bv } => {
                let project = |w: Tensor, b: Option<Tensor>| {
                    let t = g.mul_mat(w, x);
                    b.map_or(t, |b| g.add(t, b))
                };
                (project(wq, bq), project(wk, bk), project(wv, bv))
            }
            QkvWeights::Fused { wqkv, bqkv } => {
                let hp = self.hparams();
                let qkv = g.mul_mat(wqkv, x);
                let qkv = bqkv.map_or(qkv, |b| g.add(qkv, b));
                let row = |n: u32| unsafe { sys::ggml_row_size(qkv.ggml_type(), n.into()) };
                let q_width = hp.head_dim_k * hp.n_head;
                let part = |width: u32, offset: u32| {
                    g.cont(g.view_2d(qkv, width.into(), self.n_tokens, qkv.nb()[1], row(offset)))
                };
                (
                    part(q_width, 0),
                    part(hp.n_embd_k_gqa(), q_width),
                    part(hp.n_embd_v_gqa(), q_width + hp.n_embd_k_gqa()),
                )
            }
        }
    }

    /// Rows of Q, K and V split into heads: [head_dim, n_heads, n_tokens].
    pub fn heads(&self, q: Tensor, k: Tensor, v: Tensor, il: usize) -> (Tensor, Tensor, Tensor) {
        let hp = self.hparams();
        let split = |t: Tensor, head_dim: u32, n_head: u32, name: &str| {
            self.graph
                .reshape_3d(t, head_dim.into(), n_head.into(), self.n_tokens)
                .set_name(&format!("{name}-{il}"))
        };
        let (head_k, head_v, n_head_kv) = (hp.head_dim_k_of(il), hp.head_dim_v_of(il), hp.n_head_kv_of(il));
        (
            split(q, head_k, hp.n_head, "Qcur"),
            split(k, head_k, n_head_kv, "Kcur"),
            split(v, head_v, n_head_kv, "Vcur"),
        )
    }

    /// [`GraphBuilder::attend`], then the output projection (wo, bo).
    pub fn attention(
        &self,
        attn: &AttentionWeights,
        il: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        kq_scale: f32,
    ) -> Tensor {
        let out = self.attend(attn, il, q, k, v, kq_scale);
        let mut out = self.graph.mul_mat(attn.wo, out);
        if let Some(bo) = attn.bo {
            out = self.graph.add(out, bo);
        }
        out.set_name(&format!("attn_out-{il}"))
    }

    /// Stores K and V of the new tokens in the layer's cache cells and attends over
    /// the first `n_kv` cells of its group, with flash attention or llama.cpp's plain
    /// attention (scores, soft-max, weighted sum over a transposed V cache): [n_embd_v,
    /// n_tokens], before the output projection (llama.cpp's `build_attn` without `wo`).
    /// Before a quantized cache Q and K (V) are rotated by a Walsh-Hadamard matrix, and
    /// the output rotated back, as llama.cpp does.
    pub fn attend(&self, attn: &AttentionWeights, il: usize, q: Tensor, k: Tensor, v: Tensor, kq_scale: f32) -> Tensor {
        let g = self.graph;
        let (q, k) = match self.kv.k_rot {
            Some(rot) => (g.mul_mat_hadamard(q, rot), g.mul_mat_hadamard(k, rot)),
            None => (q, k),
        };
        let v = self.kv.v_rot.map_or(v, |rot| g.mul_mat_hadamard(v, rot));
        let attends = "an attention layer has its cache (KvShape::attends)";
        let group = &self.inputs.kv[self.kv.layer_group[il].expect(attends)];
        let (k_cache, v_cache) = (self.kv.k[il].expect(attends), self.kv.v[il].expect(attends));
        let rows = |cur: Tensor| g.view_2d(cur, cur.ne()[0] * cur.ne()[1], self.n_tokens, cur.nb()[2], 0);
        g.expand(g.set_rows(k_cache, rows(k), group.cells));
        match group.v_elements {
            None => g.expand(g.set_rows(v_cache, rows(v), group.cells)),
            // One value a row, each to its column of the transposed cache (llama.cpp's cpy_v).
            Some(elements) => {
                let width = v.ne()[0] * v.ne()[1];
                let row_bytes = unsafe { sys::ggml_row_size(v.ggml_type(), width) };
                let v = if row_bytes == v.nb()[2] {
                    g.reshape_2d(v, width, self.n_tokens)
                } else {
                    g.cont_2d(v, width, self.n_tokens)
                };
                let cache_len = v_cache.ne()[0] * v_cache.ne()[1];
                let values = g.reshape_2d(v, 1, width * self.n_tokens);
                g.expand(g.set_rows(g.reshape_2d(v_cache, 1, cache_len), values, elements))
            }
        }
        self.attend_cache(attn, il, il, q, kq_scale)
    }

    /// Attention of layer `il`'s Q (rotated already before a quantized cache) over the
    /// first `n_kv` cells of layer `src`'s cache, which this pass has written: `il`'s
    /// own, or an earlier layer's it shares (gemma4's KV sharing).
    fn attend_cache(&self, attn: &AttentionWeights, il: usize, src: usize, q: Tensor, kq_scale: f32) -> Tensor {
        let hp = self.hparams();
        let g = self.graph;
        let attends = "an attention layer has its cache (KvShape::attends)";
        let group = &self.inputs.kv[self.kv.layer_group[src].expect(attends)];
        let (k_cache, v_cache) = (self.kv.k[src].expect(attends), self.kv.v[src].expect(attends));
        let row = |cache: Tensor, n: u64| unsafe { sys::ggml_row_size(cache.ggml_type(), n as i64) };
        let [width, cells, ..] = k_cache.ne().map(|n| n as u64);
        let (head_dim_k, head_dim_v, n_head_kv) = (hp.head_dim_k_of(src), hp.head_dim_v_of(src), hp.n_head_kv_of(src));
        let k = g.view_4d(
            k_cache,
            [head_dim_k.into(), n_head_kv.into(), group.n_kv, 1],
            row(k_cache, head_dim_k.into()),
            row(k_cache, width),
            row(k_cache, width * cells),
            0,
        );
        let q = g.permute(q, [0, 2, 1, 3]);
        let k = g.permute(k, [0, 2, 1, 3]);
        let softcap = hp.attn_logit_softcap.unwrap_or(0.0);
        let out = if group.v_elements.is_none() {
            let [v_width, v_cells, ..] = v_cache.ne().map(|n| n as u64);
            let v = g.view_4d(
                v_cache,
                [head_dim_v.into(), n_head_kv.into(), group.n_kv, 1],
                row(v_cache, head_dim_v.into()),
                row(v_cache, v_width),
                row(v_cache, v_width * v_cells),
                0,
            );
            let out = g.flash_attn(
                q,
                k,
                g.permute(v, [0, 2, 1, 3]),
                group.mask,
                kq_scale,
                softcap,
                attn.sinks,
            );
            g.reshape_2d(out, out.ne()[0] * out.ne()[1], out.ne()[2] * out.ne()[3])
        } else {
            // The transposed cache: a row per value dimension, a column per cell.
            let [v_width, v_cells, ..] = v_cache.ne().map(|n| n as u64);
            let v = g.view_4d(
                v_cache,
                [group.n_kv, n_head_kv.into(), head_dim_v.into(), 1],
                row(v_cache, v_cells * u64::from(head_dim_v)),
                row(v_cache, v_cells),
                row(v_cache, v_cells * v_width),
                0,
            );
            let mut kq = g.mul_mat_f32(k, q);
            if softcap != 0.0 {
                kq = g.scale(g.tanh(g.scale(kq, 1.0 / softcap)), softcap);
            }
            let kq = g.soft_max_ext(kq, group.mask, kq_scale, attn.sinks);
            let kqv = g.mul_mat(g.permute(v, [0, 2, 1, 3]), kq);
            let out = g.permute(kqv, [0, 2, 1, 3]);
            g.cont_2d(out, out.ne()[0] * out.ne()[1], out.ne()[2] * out.ne()[3])
        };
        let out = out.set_name(&format!("kqv_out-{il}"));
        self.kv.v_rot.map_or(out, |rot| g.mul_mat_hadamard(out, rot))
    }

    /// Multi-head latent attention on the normed `x` in llama.cpp's absorbed form (its
    /// deepseek2 graph with `is_mla`, then `build_attn` over a K-only cache with `v_mla`),
    /// then the output projection: Q [head_dim_k, n_head, n_tokens] split into the part
    /// without rope, projected into the compressed space by `k_b`, and the rope part,
    /// rotated, after it; the compressed row (normed) and K's rope part (rotated) make
    /// the one KV head, the row alone its value. The heads attend to it as multi-query
    /// attention, and `v_b` decompresses each head's output. Q is multiplied by the
    /// `temperature` input last, where the model has one.
    pub fn mla_attention(
        &self,
        w: &MlaWeights,
        il: usize,
        x: Tensor,
        kq_scale: f32,
        temperature: Option<Tensor>,
    ) -> Tensor {
        let g = self.graph;
        let hp = self.hparams();
        let mla = hp.mla.expect("a latent-attention layer has the model's mla");
        let rope = &hp.rope;
        let n_rot = i64::from(rope.n_dims);
        let [n_head, kv_lora, head_k] = [hp.n_head, mla.kv_lora_rank, mla.head_dim_k].map(i64::from);
        let nope = head_k - n_rot;
        let name = |t: Tensor, what: &str| t.set_name(&format!("{what}-{il}"));
        let q = match w.q {
            MlaQuery::Compressed { a, norm, b } => {
                let q = g.mul_mat(a, x);
                let q = self.norm(q, Some(norm.into()), "q", il);
                g.mul_mat(b, q)
            }
            MlaQuery::Direct(wq) => g.mul_mat(wq, x),
        };
        let q = name(g.reshape_3d(q, head_k, n_head, self.n_tokens), "q");
        let kv_cmpr_pe = name(g.mul_mat(w.kv_a, x), "kv_cmpr_pe");
        let row = |t: Tensor, n: i64| unsafe { sys::ggml_row_size(t.ggml_type(), n) };
        let kv_row = row(kv_cmpr_pe, kv_lora + n_rot);
        let kv_cmpr = g.view_2d(kv_cmpr_pe, kv_lora, self.n_tokens, kv_row, 0);
        let k_pe = g.view_3d(
            kv_cmpr_pe,
            [n_rot, 1, self.n_tokens],
            kv_row,
            kv_row,
            row(kv_cmpr_pe, kv_lora),
        );
        let k_pe = name(self.rope(k_pe, rope), "k_pe");
        let kv_cmpr = self.norm(kv_cmpr, Some(w.kv_a_norm.into()), "kv_cmpr", il);
        let [q_nb1, q_nb2] = [q.nb()[1], q.nb()[2]];
        let q_nope = g.view_3d(q, [nope, n_head, self.n_tokens], q_nb1, q_nb2, 0);
        let q_pe = g.view_3d(q, [n_rot, n_head, self.n_tokens], q_nb1, q_nb2, row(q, nope));
        let q_pe = name(self.rope(q_pe, rope), "q_pe");
        let q_nope = g.permute(q_nope, [0, 2, 1, 3]);
        let q_nope_absorbed = g.permute(g.mul_mat(w.k_b, q_nope), [0, 2, 1, 3]);
        let q = name(g.concat(q_nope_absorbed, q_pe, 0), "Qcur");
        let q = temperature.map_or(q, |t| g.mul(q, t));
        let kv_cmpr = g.reshape_3d(kv_cmpr, kv_lora, 1, self.n_tokens);
        let k = name(g.concat(kv_cmpr, k_pe, 0), "Kcur");
        let out = self.attend_latent(w, il, q, k, kv_cmpr, kq_scale);
        name(g.mul_mat(w.wo, out), "attn_out")
    }

    /// llama.cpp's `build_attn` over a K-only cache (`llm_graph_input_attn_k`) with
    /// `v_mla`: stores K of the new tokens (V is its first `v`-wide columns, no cache of
    /// its own), attends over the group's first `n_kv` cells with flash attention or
    /// plain attention (V then transposed into a copy), and decompresses each head's
    /// output with `v_b`: [head_dim_v · n_head, n_tokens].
    fn attend_latent(&self, w: &MlaWeights, il: usize, q: Tensor, k: Tensor, v: Tensor, kq_scale: f32) -> Tensor {
        let g = self.graph;
        let hp = self.hparams();
        let attends = "an attention layer has its cache (KvShape::attends)";
        let group = &self.inputs.kv[self.kv.layer_group[il].expect(attends)];
        let k_cache = self.kv.k[il].expect(attends);
        let rows = |cur: Tensor| g.view_2d(cur, cur.ne()[0] * cur.ne()[1], self.n_tokens, cur.nb()[2], 0);
        g.expand(q);
        g.expand(v);
        g.expand(g.set_rows(k_cache, rows(k), group.cells));
        let row = |n: u64| unsafe { sys::ggml_row_size(k_cache.ggml_type(), n as i64) };
        let [width, cells, ..] = k_cache.ne().map(|n| n as u64);
        let (nb1, nb2, nb3) = (row(hp.head_dim_k.into()), row(width), row(width * cells));
        let heads_kv = i64::from(hp.n_head_kv);
        let k = g.view_4d(
            k_cache,
            [hp.head_dim_k.into(), heads_kv, group.n_kv, 1],
            nb1,
            nb2,
            nb3,
            0,
        );
        let v = g.view_4d(k_cache, [v.ne()[0], heads_kv, group.n_kv, 1], nb1, nb2, nb3, 0);
        let q = g.permute(q, [0, 2, 1, 3]);
        let k = g.permute(k, [0, 2, 1, 3]);
        let v = g.permute(v, [0, 2, 1, 3]);
        let out = if group.flash_attn() {
            let out = g.flash_attn(q, k, v, group.mask, kq_scale, 0.0, None);
            let out = g.permute(out, [0, 2, 1, 3]);
            let out = g.mul_mat(w.v_b, out).set_name(&format!("fattn_mla-{il}"));
            let out = g.cont(g.permute(out, [0, 2, 1, 3]));
            g.reshape_2d(out, out.ne()[0] * out.ne()[1], out.ne()[2] * out.ne()[3])
        } else {
            let kq = g.mul_mat_f32(k, q);
            let kq = g.soft_max_ext(kq, group.mask, kq_scale, None);
            let v = g.cont(g.transpose(v));
            let kqv = g.mul_mat(v, kq);
            let kqv = g.mul_mat(w.v_b, kqv).set_name(&format!("kqv_mla-{il}"));
            let out = g.permute(kqv, [0, 2, 1, 3]);
            g.cont_2d(out, out.ne()[0] * out.ne()[1], out.ne()[2] * out.ne()[3])
        };
        out.set_name(&format!("kqv_out-{il}"))
    }

    /// Layer `il`'s attention over the cache of the earlier layer `src` (llama.cpp's
    /// `build_attn` without K and V: gemma4's KV sharing), then the output projection.
    pub fn attention_shared(&self, attn: &AttentionWeights, il: usize, src: usize, q: Tensor, kq_scale: f32) -> Tensor {
        let q = self.kv.k_rot.map_or(q, |rot| self.graph.mul_mat_hadamard(q, rot));
        let out = self
            .graph
            .mul_mat(attn.wo, self.attend_cache(attn, il, src, q, kq_scale));
        out.set_name(&format!("attn_out-{il}"))
    }

    /// Attention over the pass's own tokens (an encoder's: no cache), as llama.cpp's
    /// `build_attn` with `llm_graph_input_attn_no_cache` and flash attention: K and V
    /// are cast to F16 for the kernel, the mask is the tokens' own; then wo and bo.
    pub fn attention_own_tokens(
        &self,
        attn: &AttentionWeights,
        il: usize,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        kq_scale: f32,
    ) -> Tensor {
        let g = self.graph;
        let mask = self.own_tokens_mask();
        let q = g.permute(q, [0, 2, 1, 3]);
        let k = g.cast(g.permute(k, [0, 2, 1, 3]), sys::GGML_TYPE_F16);
        let v = g.cast(g.permute(v, [0, 2, 1, 3]), sys::GGML_TYPE_F16);
        let out = g.flash_attn(q, k, v, mask, kq_scale, 0.0, None);
        let out = g
            .reshape_2d(out, out.ne()[0] * out.ne()[1], out.ne()[2] * out.ne()[3])
            .set_name(&format!("kqv_out-{il}"));
        let mut out = g.mul_mat(attn.wo, out);
        if let Some(bo) = attn.bo {
            out = g.add(out, bo);
        }
        out.set_name(&format!("attn_out-{il}"))
    }

    /// The mask of attention over the pass's own tokens: one input, shared by the layers.
    fn own_tokens_mask(&self) -> Tensor {
        if let Some(mask) = self.own_mask.get() {
            return mask;
        }
        let mask = self.graph.input(
            "attn_inp_kq_mask",
            sys::GGML_TYPE_F16,
            &[self.n_tokens, self.n_tokens, 1, 1],
        );
        self.inputs.added.borrow_mut().push(Box::new(OwnTokensMask {
            mask,
            causal: self.hparams().causal_attn,
        }));
        self.own_mask.set(Some(mask));
        mask
    }

    /// Layer `il`'s convolution states of the pass's sequences, [conv_width, n_seqs] (a
    /// fresh sequence's are zeros), as llama.cpp's `build_rs` gathers them.
    fn read_conv_state(&self, il: usize) -> Tensor {
        let (read, _) = self.state_rows();
        self.graph.get_rows(self.conv_states(il), read)
    }

    /// Stores `state` ([conv_width, n_seqs], contiguous) as layer `il`'s convolution
    /// states of the pass's sequences, in the rows the pass writes (see
    /// [`crate::memory::recurrent`]).
    pub fn write_conv_state(&self, il: usize, state: Tensor) {
        let (_, write) = self.state_rows();
        let g = self.graph;
        g.expand(g.set_rows(self.conv_states(il), state, write));
    }

    /// The window a causal convolution of layer `il` reads: the sequences' convolution
    /// states ([width, channels, n_seqs]) in front of `input` ([n_seq_tokens, channels,
    /// n_seqs], a row per channel); its last `width` columns are stored as the next
    /// states, as llama.cpp's short convolutions and Mamba-2 layers both do.
    pub fn conv_window(&self, il: usize, input: Tensor, width: i64, channels: i64) -> Tensor {
        let g = self.graph;
        let state = g.reshape_3d(self.read_conv_state(il), width, channels, self.n_seqs);
        let window = g.concat(state, input, 0);
        let next_state = g.view_3d(
            window,
            [width, channels, self.n_seqs],
            window.nb()[1],
            window.nb()[2],
            (window.ne()[0] - width) as usize * window.nb()[0],
        );
        self.write_conv_state(il, g.reshape_2d(g.cont(next_state), width * channels, self.n_seqs));
        window
    }

    fn conv_states(&self, il: usize) -> Tensor {
        self.recurrent.conv[il].expect("a recurrent layer has its state (RecurrentShape::layers)")
    }

    /// llama.cpp's `build_mamba2_layer` (`src/models/mamba-base.cpp`), op for op, on the
    /// normed input `x` [n_embd, n_tokens] of a pass holding as many tokens of each of
    /// its sequences: `in_proj` gives z, x·B·C and the time steps; x·B·C, transposed to a
    /// row per channel behind the sequence's convolution state, is convolved (the state
    /// keeps its last `d_conv - 1` columns), biased and SiLU'd; the selective scan runs
    /// from the sequence's scan state (and stores the new one); then the skip connection
    /// `D · x`, the gate `silu(z)`, the grouped RMS norm and `out_proj`.
    pub fn mamba2(&self, w: &Mamba2Weights, x: Tensor, il: usize) -> Tensor {
        let g = self.graph;
        let ssm = self.hparams().ssm.expect("a Mamba-2 layer's model has its ssm");
        let [d_conv, d_inner, d_state, n_head, n_group, channels] = [
            ssm.d_conv,
            ssm.d_inner,
            ssm.d_state,
            ssm.n_head,
            ssm.n_group,
            ssm.conv_channels(),
        ]
        .map(i64::from);
        let head_dim = d_inner / n_head;
        let (n_seqs, n_seq_tokens) = (self.n_seqs, self.n_tokens / self.n_seqs);
        let f32_size = std::mem::size_of::<f32>();
        let at = |values: i64| values as usize * f32_size;
        // The projection stays 2D, as llama.cpp keeps it; then [d_in_proj, n_seq_tokens, n_seqs].
        let zxbcdt = g.mul_mat(w.in_proj, x);
        let zxbcdt = g.reshape_3d(zxbcdt, zxbcdt.ne()[0], n_seq_tokens, n_seqs);
        let [nb0, nb1, nb2, _] = zxbcdt.nb();
        let z = g.view_4d(
            zxbcdt,
            [head_dim, n_head, n_seq_tokens, n_seqs],
            head_dim as usize * nb0,
            nb1,
            nb2,
            0,
        );
        let xbc = g.view_3d(zxbcdt, [channels, n_seq_tokens, n_seqs], nb1, nb2, at(d_inner));
        let dt = g.view_3d(zxbcdt, [n_head, n_seq_tokens, n_seqs], nb1, nb2, at(d_inner + channels));

        // The convolution: [d_conv - 1 + n_seq_tokens, channels, n_seqs], its last
        // d_conv - 1 columns the next state.
        let conv_x = self.conv_window(il, g.transpose(xbc), d_conv - 1, channels);
        let xbc = g.ssm_conv(conv_x, w.conv);
        let xbc = w.conv_bias.map_or(xbc, |bias| g.add(xbc, bias));
        let xbc = g.silu(xbc);

        // The scan: x, B and C are views of the convolution's output (V, K and Q in the
        // state-space duality).
        let [nb0, nb1, nb2, _] = xbc.nb();
        let x = g.view_4d(
            xbc,
            [head_dim, n_head, n_seq_tokens, n_seqs],
            head_dim as usize * nb0,
            nb1,
            nb2,
            0,
        );
        let group = |offset: i64| {
            g.view_4d(
                xbc,
                [d_state, n_group, n_seq_tokens, n_seqs],
                d_state as usize * nb0,
                nb1,
                nb2,
                at(offset),
            )
        };
        let (b, c) = (group(d_inner), group(d_inner + n_group * d_state));
        let dt = g.add(g.cont(dt), w.dt_bias);
        let (read, write) = self.state_rows();
        let states = self.ssm_states(il);
        let all = g.reshape_4d(states, [d_state, head_dim, n_head, states.ne()[1]]);
        let y_ssm = g.ssm_scan(all, x, dt, w.a, b, c, read);
        // After y (as many values as x), each sequence's last state.
        let state_values = d_state * d_inner;
        let last_states = g.view_2d(
            y_ssm,
            state_values,
            n_seqs,
            at(state_values),
            at(x.ne().iter().product()),
        );
        g.expand(g.set_rows(states, last_states, write));
        let x_nb1 = x.nb()[1];
        let y = g.view_4d(
            y_ssm,
            [head_dim, n_head, n_seq_tokens, n_seqs],
            x_nb1,
            n_head as usize * x_nb1,
            (n_seq_tokens * n_head) as usize * x_nb1,
            0,
        );
        let y = g.add(y, g.mul(x, w.d)).set_name(&format!("mamba2_y_add_d-{il}"));
        let y = g.swiglu_split(g.cont(z), y);
        // The grouped RMS norm, where the model has it: each group's d_inner / n_group
        // channels normed apart.
        let y = match w.norm {
            Some(norm) => {
                let y = g.reshape_4d(y, [d_inner / n_group, n_group, n_seq_tokens, n_seqs]);
                self.norm(y, Some(norm.into()), "ssm_norm", il)
            }
            None => y,
        };
        let y = g.reshape_2d(y, d_inner, n_seq_tokens * n_seqs);
        g.mul_mat(w.out_proj, y).set_name(&format!("mamba_out-{il}"))
    }

    fn ssm_states(&self, il: usize) -> Tensor {
        self.recurrent.ssm[il].expect("a Mamba-2 or delta-net layer has its state (RecurrentShape::ssm_width)")
    }

    /// llama.cpp's `build_recurrent_attn` (`src/models/delta-net-base.cpp`) as it runs on
    /// the CPU, whose backend has the fused op (`fused_gdn_ar` and `fused_gdn_ch`, so for
    /// one token and for many alike): layer `il`'s delta-rule states of the pass's
    /// sequences, [S_v · S_v · H_v, n_seqs] (a fresh sequence's are zeros), gathered as
    /// `build_rs` gathers them and shaped [S_v, S_v, H_v, n_seqs]; ggml's `gated_delta_net`
    /// over `q`, `k` [S_k, H_k, n_seq_tokens, n_seqs] (H_k dividing H_v: the op
    /// broadcasts them), `v` [S_v, H_v, n_seq_tokens, n_seqs], the decay `g` and the write
    /// strength `beta` [1, H_v, n_seq_tokens, n_seqs]; the new states stored in the rows
    /// the pass writes. Returns the outputs, [S_v, H_v, n_seq_tokens, n_seqs].
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(&self, il: usize, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor {
        let graph = self.graph;
        let [s_v, h_v, n_seq_tokens, n_seqs] = v.ne();
        let (read, write) = self.state_rows();
        let states = self.ssm_states(il);
        let state = graph.get_rows(states, read);
        let state = graph.reshape_4d(state, [s_v, s_v, h_v, n_seqs]);
        let result = graph.gated_delta_net(q, k, v, g, beta, state);
        let row = |n: i64| n as usize * std::mem::size_of::<f32>();
        let output = graph
            .view_4d(
                result,
                [s_v, h_v, n_seq_tokens, n_seqs],
                row(s_v),
                row(s_v * h_v),
                row(s_v * h_v * n_seq_tokens),
                0,
            )
            .set_name(&format!("attn_output-{il}"));
        // After the outputs, each sequence's last state.
        let state_values = s_v * s_v * h_v;
        let new_states = graph.view_2d(
            result,
            state_values,
            n_seqs,
            row(state_values),
            row(s_v * h_v * n_seq_tokens * n_seqs),
        );
        graph.expand(graph.set_rows(states, new_states, write));
        output
    }

    /// The rows each sequence's state is read from (I32) and written to (I64): one
    /// input pair, shared by the layers.
    fn state_rows(&self) -> (Tensor, Tensor) {
        if let Some(rows) = self.state_rows.get() {
            return rows;
        }
        let read = self.graph.input("rs_rows_read", sys::GGML_TYPE_I32, &[self.n_seqs]);
        let write = self.graph.input("rs_rows_write", sys::GGML_TYPE_I64, &[self.n_seqs]);
        self.inputs
            .added
            .borrow_mut()
            .push(Box::new(StateRowsInput { read, write }));
        self.state_rows.set(Some((read, write)));
        (read, write)
    }

    /// In the last layer, keeps only the rows whose logits are wanted (as llama.cpp
    /// does, so the last feed-forward runs on those rows only, with the same kernels).
    pub fn select_outputs_if_last(&self, il: usize, a: Tensor, b: Tensor) -> (Tensor, Tensor) {
        (self.select_output_if_last(il, a), self.select_output_if_last(il, b))
    }

    /// [`GraphBuilder::select_outputs_if_last`] for one tensor.
    pub fn select_output_if_last(&self, il: usize, t: Tensor) -> Tensor {
        if il + 1 == self.layers().len() {
            self.output_rows(t)
        } else {
            t
        }
    }

    /// The rows of `t` whose logits are wanted.
    pub fn output_rows(&self, t: Tensor) -> Tensor {
        self.graph.get_rows(t, self.inputs.out_ids.0)
    }

    /// The feed-forward: gated with activation `act`, or a mixture of experts.
    pub fn ffn(&self, ffn: &FfnWeights, x: Tensor, il: usize, act: Glu) -> Tensor {
        let g = self.graph;
        let out = match *ffn {
            FfnWeights::Gated { gate, up, down } => {
                let up = g.mul_mat(up, x);
                let gate = g.mul_mat(gate, x);
                g.mul_mat(down, act.split(g, gate, up))
            }
            FfnWeights::GatedFused { up, down } => {
                let up = g.mul_mat(up, x);
                let act = match act {
                    Glu::Silu => g.swiglu(up),
                    Glu::Gelu => g.geglu(up),
                    Glu::SiluOai => {
                        let [width, rows, ..] = up.ne();
                        let half =
                            |i: i64| g.view_2d(up, width / 2, rows, up.nb()[1], (i * width / 2) as usize * up.nb()[0]);
                        act.split(g, half(0), half(1))
                    }
                };
                g.mul_mat(down, act)
            }
            FfnWeights::Sequential { up, up_b, down, down_b } => {
                let up = g.mul_mat(up, x);
                let up = up_b.map_or(up, |b| g.add(up, b));
                let down = g.mul_mat(down, g.gelu(up));
                down_b.map_or(down, |b| g.add(down, b))
            }
            FfnWeights::ReluSquared { up, up_b, down, down_b } => {
                let up = g.mul_mat(up, x);
                let up = up_b.map_or(up, |b| g.add(up, b));
                let down = g.mul_mat(down, g.sqr(g.relu(up)));
                down_b.map_or(down, |b| g.add(down, b))
            }
            FfnWeights::Xielu { up, down, params } => g.mul_mat(down, g.xielu(g.mul_mat(up, x), params)),
            FfnWeights::None => unreachable!("a block without a feed-forward has none to build"),
            FfnWeights::Experts {
                router,
                gate,
                up,
                down,
                selection_bias,
                shared,
                biases,
            } => return self.ffn_moe([router, gate, up, down], selection_bias, biases, shared, x, il, act),
        };
        out.set_name(&format!("ffn_out-{il}"))
    }

    /// A mixture of gated experts, as llama.cpp's `build_moe_ffn` builds it: the
    /// router's logits (plus its bias, where the model has one) weigh the experts by
    /// [`ExpertGating`]: with softmax (sigmoid) gating, the softmax (each logit's sigmoid)
    /// plus the selection bias, where the model has one, picks each row's `n_expert_used`
    /// likeliest experts, and their probabilities unbiased are renormalized to sum to one
    /// where the model says so; with softmax-weight gating the logits pick them and a
    /// softmax over the picked ones weighs them. The weights are then scaled where the
    /// model says so. The experts' outputs (each projection plus its bias, where the model
    /// has them), so weighted, are added in rank order; then the shared expert's, where
    /// the model has one. Llama 4's (`experts_weigh_input`) are picked by the logits and
    /// weigh each picked expert's input instead.
    #[allow(clippy::too_many_arguments)]
    fn ffn_moe(
        &self,
        [router, gate_exps, up_exps, down_exps]: [Tensor; 4],
        selection_bias: Option<Tensor>,
        biases: Option<ExpertBiases>,
        shared: Option<SharedExpert>,
        x: Tensor,
        il: usize,
        act: Glu,
    ) -> Tensor {
        let g = self.graph;
        let hp = self.hparams();
        let [n_embd, n_rows, ..] = x.ne();
        let n_used = i64::from(hp.n_expert_used);
        let logits = g.mul_mat(router, x);
        let logits = biases.map_or(logits, |b| g.add(logits, b.router));
        let (selected, weights) = self.pick_experts(logits, selection_bias);
        let rows = x;
        let x = g.reshape_3d(x, n_embd, 1, n_rows);
        let x = match hp.experts_weigh_input {
            true => g.mul(g.repeat_4d(x, [n_embd, n_used, n_rows, 1]), weights),
            false => x,
        };
        let biased = |t: Tensor, bias: Option<Tensor>| bias.map_or(t, |b| g.add_id(t, b, selected));
        let up = biased(g.mul_mat_id(up_exps, x, selected), biases.map(|b| b.up));
        let gate = biased(g.mul_mat_id(gate_exps, x, selected), biases.map(|b| b.gate));
        let experts = g.mul_mat_id(down_exps, act.split(g, gate, up), selected);
        let experts = biased(experts, biases.map(|b| b.down));
        let experts = match hp.experts_weigh_input {
            true => experts,
            false => g.mul(experts, weights),
        };
        let out = self.sum_experts(experts);
        let out = match shared {
            Some(shared) => g.add(out, self.shared_expert(shared, rows)),
            None => out,
        };
        out.set_name(&format!("ffn_moe_out-{il}"))
    }

    /// The experts each row goes to and their weights, from the router's `logits`
    /// [n_expert, n_rows], as [`GraphBuilder::ffn_moe`] describes: the I32 indices
    /// [n_expert_used, n_rows] and the weights [1, n_expert_used, n_rows].
    pub fn pick_experts(&self, logits: Tensor, selection_bias: Option<Tensor>) -> (Tensor, Tensor) {
        let g = self.graph;
        let hp = self.hparams();
        let n_rows = logits.ne()[1];
        let (n_expert, n_used) = (i64::from(hp.n_expert), i64::from(hp.n_expert_used));
        let probs = match hp.expert_gating {
            ExpertGating::Softmax => g.soft_max(logits),
            ExpertGating::Sigmoid => g.sigmoid(logits),
            ExpertGating::SoftmaxWeight => logits,
        };
        let selection = match hp.experts_weigh_input {
            // Llama 4's: the logits pick, the sigmoid weighs.
            true => logits,
            false => selection_bias.map_or(probs, |bias| g.add(probs, bias)),
        };
        let selection = match hp.expert_groups {
            Some(groups) => self.mask_expert_groups(selection, groups, n_expert, n_rows),
            None => selection,
        };
        let selected = g.argsort_top_k(selection, hp.n_expert_used as i32);
        let mut weights = g.get_rows(g.reshape_3d(probs, 1, n_expert, n_rows), selected);
        if hp.expert_gating == ExpertGating::SoftmaxWeight {
            let flat = g.soft_max(g.reshape_2d(weights, n_used, n_rows));
            weights = g.reshape_3d(flat, 1, n_used, n_rows);
        }
        if hp.expert_weights_norm {
            let flat = g.reshape_2d(weights, n_used, n_rows);
            let sum = g.clamp(g.sum_rows(flat), 6.103_515_6e-5, f32::INFINITY);
            weights = g.reshape_3d(g.div(flat, sum), 1, n_used, n_rows);
        }
        if hp.expert_weights_scale != 0.0 && hp.expert_weights_scale != 1.0 {
            weights = g.scale(weights, hp.expert_weights_scale);
        }
        (selected, weights)
    }

    /// The rows' experts' outputs [n_embd, n_expert_used, n_rows], weighted, added up
    /// in rank order: [n_embd, n_rows].
    pub fn sum_experts(&self, experts: Tensor) -> Tensor {
        let g = self.graph;
        let [n_embd, n_used, n_rows, _] = experts.ne();
        let [nb1, nb2] = [experts.nb()[1], experts.nb()[2]];
        let out = (1..n_used as usize).fold(g.view_2d(experts, n_embd, n_rows, nb2, 0), |sum, i| {
            g.add(sum, g.view_2d(experts, n_embd, n_rows, nb2, i * nb1))
        });
        // llama.cpp returns a contiguous tensor when there is nothing to add.
        if n_used == 1 {
            g.cont(out)
        } else {
            out
        }
    }

    /// The experts' selection scores [n_expert, n_rows] with every group but the `used`
    /// best -inf, as llama.cpp's `build_moe_ffn` masks them: a group scores the sum of
    /// its two best experts' scores.
    fn mask_expert_groups(&self, selection: Tensor, groups: ExpertGroups, n_expert: i64, n_rows: i64) -> Tensor {
        let g = self.graph;
        let count = i64::from(groups.count);
        let per_group = n_expert / count;
        let grouped = g.reshape_3d(selection, per_group, count, n_rows);
        let best_two = g.argsort_top_k(grouped, 2);
        let scores = g.get_rows(g.reshape_4d(grouped, [1, per_group, count, n_rows]), best_two);
        let scores = g.sum_rows(g.reshape_3d(scores, 2, count, n_rows));
        let picked = g.argsort_top_k(g.reshape_2d(scores, count, n_rows), groups.used as i32);
        let kept = g.get_rows(grouped, picked);
        let masked = g.set_rows(g.fill(grouped, f32::NEG_INFINITY), kept, picked);
        g.reshape_2d(masked, n_expert, n_rows)
    }

    /// The shared expert's SwiGLU on the rows `x`, times its gate's sigmoid, which
    /// llama.cpp computes as `silu(g) / g` (qwen2moe) or as the sigmoid (qwen35moe).
    fn shared_expert(&self, shared: SharedExpert, x: Tensor) -> Tensor {
        let g = self.graph;
        let out = g.mul_mat(
            shared.down,
            g.swiglu_split(g.mul_mat(shared.gate, x), g.mul_mat(shared.up, x)),
        );
        match shared.gate_inp {
            Some((gate_inp, how)) => {
                let logit = g.mul_mat(gate_inp, x);
                let gate = match how {
                    SharedGate::SiluOverLogit => g.div(g.silu(logit), logit),
                    SharedGate::Sigmoid => g.sigmoid(logit),
                };
                g.mul(out, gate)
            }
            None => out,
        }
    }

    /// [`GraphBuilder::output`] where the last block ran on every row: the final norm
    /// over them all, then the head on the rows whose logits are wanted (llama.cpp's
    /// order where a graph picks them after the norm: qwen35's).
    pub fn output_after_norm(&self, x: Tensor) -> Tensor {
        let head = self.weights.head.as_ref().expect("a decoder has its head");
        let x = self.norm(x, Some(head.norm), "result_norm", 0);
        match self.pooling {
            Some(pooling) => self.pool(x, pooling),
            None => self.logits(self.output_rows(x), head),
        }
    }

    /// What the pass outputs from the last block's `x`: the logits (the final norm and
    /// the head), or the embeddings pooled (after the final norm, for a decoder).
    pub fn output(&self, x: Tensor) -> Tensor {
        let head = self.weights.head.as_ref();
        let x = match head {
            Some(head) => self.norm(x, Some(head.norm), "result_norm", 0),
            None => x,
        };
        match (self.pooling, head) {
            (Some(pooling), _) => self.pool(x, pooling),
            (None, Some(head)) => self.logits(x, head),
            // Context::new refuses an encoder a context for logits.
            (None, None) => unreachable!("an encoder has no logits"),
        }
    }

    /// [`GraphBuilder::output`] with the output rows selected after the final norm, not
    /// before (gemma4's graph, which keeps every row through its last layer).
    pub fn output_selecting_after_norm(&self, x: Tensor) -> Tensor {
        match (self.pooling, self.weights.head.as_ref()) {
            (None, Some(head)) => {
                let x = self.norm(x, Some(head.norm), "result_norm", 0);
                self.logits(self.output_rows(x), head)
            }
            _ => self.output(x),
        }
    }

    /// The embeddings of the pass's sequences from the hidden states `x` (every token a
    /// row), as llama.cpp's `build_pooling`: a row per token (`None`), a row per sequence
    /// (`Mean`, `Cls`, `Last`), or a reranker's scores (`Rank`).
    fn pool(&self, x: Tensor, pooling: Pooling) -> Tensor {
        let g = self.graph;
        let pooled = match pooling {
            Pooling::None => x,
            Pooling::Mean => {
                let mean = g.input("mean", sys::GGML_TYPE_F32, &[self.n_tokens, self.n_seqs]);
                self.inputs.added.borrow_mut().push(Box::new(MeanWeights(mean)));
                g.mul_mat(g.cont(g.transpose(x)), mean)
            }
            Pooling::Cls | Pooling::Last | Pooling::Rank => {
                let rows = g.input("cls", sys::GGML_TYPE_I32, &[self.n_seqs]);
                let last = pooling == Pooling::Last || (pooling == Pooling::Rank && self.hparams().causal_attn);
                self.inputs.added.borrow_mut().push(Box::new(PooledRows { rows, last }));
                let rows = g.get_rows(x, rows);
                if pooling == Pooling::Rank {
                    self.classify(rows)
                } else {
                    rows
                }
            }
        };
        pooled.set_name("result_embd_pooled")
    }

    /// A reranker's head on the pooled rows: `tanh(cls · x + b)`, then `cls_out · _ + b`.
    fn classify(&self, x: Tensor) -> Tensor {
        let g = self.graph;
        let classifier = &self.weights.classifier;
        let linear = |x: Tensor, (w, b): (Tensor, Option<Tensor>)| {
            let y = g.mul_mat(w, x);
            b.map_or(y, |b| g.add(y, b))
        };
        let x = classifier.dense.map_or(x, |dense| g.tanh(linear(x, dense)));
        classifier.out.map_or(x, |out| linear(x, out))
    }

    /// The output head on the normed hidden states.
    fn logits(&self, x: Tensor, head: &super::weights::OutputHead) -> Tensor {
        let g = self.graph;
        let mut logits = g.mul_mat(head.output, x);
        if let Some(b) = head.bias {
            logits = g.add(logits, b);
        }
        if let Some(multiplier) = self.hparams().logit_multiplier {
            logits = g.scale(logits, multiplier);
        }
        if let Some(cap) = self.hparams().final_logit_softcap {
            logits = g.scale(g.tanh(g.scale(logits, 1.0 / cap)), cap);
        }
        logits.set_name("result_output")
    }
}
