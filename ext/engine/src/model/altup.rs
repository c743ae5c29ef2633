//! Gemma 3n's pieces, op for op as llama.cpp's gemma3n graph builds them: the
//! alternating updates (AltUp: the hidden state as several streams, predicted before
//! a layer and corrected after it), LAuReL (a low-rank learned residual), and the
//! activation sparsity of the first layers' gates (a Gaussian top-k).

use ggml_sys as sys;

use super::layers::GraphBuilder;
use super::weights::{AltUp, Laurel};
use crate::ggml::Tensor;

impl GraphBuilder<'_> {
    /// Stream `i` of `x` [n, m, streams]: its slice [n, m] (llama.cpp's
    /// `gemma3n_view_2d_slice`).
    pub fn stream(&self, x: Tensor, i: usize) -> Tensor {
        let [n, m, ..] = x.ne();
        let element = unsafe { sys::ggml_element_size(x.as_ptr()) };
        let row = unsafe { sys::ggml_row_size(x.ggml_type(), n) };
        self.graph.view_2d(x, n, m, row, i * (n * m) as usize * element)
    }

    /// The streams of `x` [n_embd, n_tokens, streams] after the first, a view.
    fn streams_after_first(&self, x: Tensor) -> Tensor {
        let [n, m, streams, _] = x.ne();
        let element = unsafe { sys::ggml_element_size(x.as_ptr()) };
        let row = |k: i64| unsafe { sys::ggml_row_size(x.ggml_type(), k) };
        self.graph
            .view_3d(x, [n, m, streams - 1], row(n), row(n * m), (n * m) as usize * element)
    }

    /// The L2 norm of each row (llama.cpp's gemma3n `calc_magnitude`).
    fn magnitude(&self, x: Tensor) -> Tensor {
        let g = self.graph;
        g.sqrt(g.sum_rows(g.sqr(x)))
    }

    /// `x` projected by `proj` and rescaled to the magnitude `target` of its rows.
    fn rescaled(&self, proj: Tensor, x: Tensor, target: Tensor) -> Tensor {
        let g = self.graph;
        let projected = g.mul_mat(proj, x);
        let magnitude = self.magnitude(projected);
        g.div(g.mul(projected, target), magnitude)
    }

    /// The embeddings `x` [n_embd, n_tokens] as AltUp's streams [n_embd, n_tokens,
    /// streams]: `x` itself, then its projections by `proj`, each rescaled to `x`'s
    /// magnitude.
    pub fn altup_streams(&self, altup: &AltUp, x: Tensor) -> Tensor {
        let g = self.graph;
        let [n_embd, n_tokens, ..] = x.ne();
        let target = self.magnitude(x);
        let repeated = g.repeat_4d(x, [n_embd, n_tokens, altup.n_streams - 1, 1]);
        let added = self.rescaled(altup.proj, repeated, target);
        g.concat(x, added, 2).set_name("inp_stacked")
    }

    /// The streams merged back into one [n_embd, n_tokens]: the others projected by
    /// `unembd_proj` and rescaled to the active stream's magnitude, then the mean of all.
    pub fn altup_merge(&self, altup: &AltUp, streams: Tensor) -> Tensor {
        let g = self.graph;
        let target = self.magnitude(self.stream(streams, altup.active));
        let unembd = self
            .rescaled(altup.unembd_proj, self.streams_after_first(streams), target)
            .set_name("altup_unembd");
        let merged = (0..altup.n_streams as usize - 1)
            .fold(self.stream(streams, 0), |cur, i| g.add(cur, self.stream(unembd, i)));
        g.scale(merged, 1.0 / altup.n_streams as f32).set_name("unembd_merged")
    }

    /// Each token's modalities [streams, n_tokens] from the active stream `x`: RMS-normed,
    /// scaled by 1/n_embd, routed, tanh (llama.cpp's `altup_compute_router_modalities`).
    fn altup_modalities(&self, altup: &AltUp, x: Tensor, il: usize) -> Tensor {
        let g = self.graph;
        let layer = &altup.layers[il];
        let inputs = self.norm(x, Some(layer.router_norm.into()), "altup_router_norm", il);
        let inputs = g.scale(inputs, 1.0 / self.hparams().n_embd as f32);
        g.tanh(g.mul_mat(layer.router, inputs))
            .set_name(&format!("modalities-{il}"))
    }

    /// Layer `il`'s predictions of the streams [n_embd, n_tokens, streams]: each a mix
    /// of all, by coefficients from the active stream's modalities, plus itself.
    pub fn altup_predict(&self, altup: &AltUp, streams: Tensor, il: usize) -> Tensor {
        let g = self.graph;
        let n = altup.n_streams;
        let n_tokens = streams.ne()[1];
        let modalities = self.altup_modalities(altup, self.stream(streams, altup.active), il);
        let coefs = g.mul_mat(altup.layers[il].predict_coef, modalities);
        let coefs = g.reshape_3d(coefs, n, n, n_tokens);
        let permuted = g.cont(g.permute(streams, [1, 2, 0, 3]));
        let predictions = g.cont(g.permute(g.mul_mat(permuted, coefs), [0, 2, 1, 3]));
        g.add(predictions, streams).set_name(&format!("predictions-{il}"))
    }

    /// The predictions corrected by what the layer made of the active one (`activated`,
    /// [n_embd, n_tokens]): its innovation over the prediction, weighted per stream by
    /// coefficients (plus one) from its modalities, added to each prediction.
    pub fn altup_correct(&self, altup: &AltUp, predictions: Tensor, activated: Tensor, il: usize) -> Tensor {
        let g = self.graph;
        let [n_embd, n_tokens, n, _] = predictions.ne();
        let modalities = self.altup_modalities(altup, activated, il);
        let innovation = g.sub(activated, self.stream(predictions, altup.active));
        let coefs = g.mul_mat(altup.layers[il].correct_coef, modalities);
        let coefs = g.scale_bias(coefs, 1.0, 1.0);
        let coefs = g.cont_3d(g.transpose(coefs), 1, n_tokens, n);
        let innovation = g.repeat_4d(innovation, [n_embd, n_tokens, n, 1]);
        g.add(g.mul(innovation, coefs), predictions)
            .set_name(&format!("corrected-{il}"))
    }

    /// `x` added to every stream of `streams` but the first (llama.cpp's
    /// `corrected_predictions[1:] += first_prediction`).
    pub fn altup_add_to_others(&self, streams: Tensor, x: Tensor) -> Tensor {
        let g = self.graph;
        let rest = g.add(self.streams_after_first(streams), x);
        g.concat(self.stream(streams, 0), rest, 2)
    }

    /// LAuReL: `x` plus `r · (l · x)` RMS-normed by its `post_norm`.
    pub fn laurel(&self, laurel: &Laurel, x: Tensor, il: usize) -> Tensor {
        let g = self.graph;
        let low_rank = g.mul_mat(laurel.r, g.mul_mat(laurel.l, x));
        let normed = self.norm(low_rank, Some(laurel.post_norm.into()), "laurel_post_norm", il);
        g.add(normed, x).set_name(&format!("laurel_out-{il}"))
    }

    /// Activation sparsity (llama.cpp's gemma3n `gaussian_topk`): each row of `x` less
    /// its mean plus `std_multiplier` sample standard deviations, negative parts zeroed.
    pub fn gaussian_top_k(&self, x: Tensor, std_multiplier: f32) -> Tensor {
        let g = self.graph;
        let mean = g.mean(x);
        let variance = g.scale(g.sum_rows(g.sqr(g.sub(x, mean))), 1.0 / (x.ne()[0] - 1) as f32);
        let cutoff = g.add(mean, g.scale(g.sqrt(variance), std_multiplier));
        g.relu(g.sub(x, cutoff))
    }
}
