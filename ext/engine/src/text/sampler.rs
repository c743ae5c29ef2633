//! Choosing the next token from logits: greedy (llama.cpp's exact choice), or
//! the usual chain of penalties, top-k, top-p, min-p and temperature with a
//! seeded generator, so the same seed gives the same text.

use std::collections::VecDeque;

/// How far the greedy choice is ahead of the runner-up (0 on a tie). Where it is
/// small, a different rounding anywhere in the pass can change the token: the
/// goldens' failure messages print it.
pub fn top_two_margin(logits: &[f32]) -> f32 {
    let (mut first, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &l in logits {
        if l > first {
            second = first;
            first = l;
        } else if l > second {
            second = l;
        }
    }
    first - second
}

/// The index of the largest logit; the lowest index wins ties, as llama.cpp's
/// greedy sampler. NaN never wins, so the result is always a valid id.
pub fn greedy(logits: &[f32]) -> u32 {
    // Once per token over the whole vocabulary (262,144 logits for Gemma 3): with
    // vector registers it takes ~55 µs instead of ~390 µs.
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn avx512(logits: &[f32]) -> u32 {
            first_max(logits)
        }
        #[target_feature(enable = "avx2")]
        fn avx2(logits: &[f32]) -> u32 {
            first_max(logits)
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has the feature.
            return unsafe { avx512(logits) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has the feature.
            return unsafe { avx2(logits) };
        }
    }
    first_max(logits)
}

/// `greedy` in lanes the compiler can keep in vector registers: each lane keeps
/// its own first maximum, then the lanes' best values meet, the lower index
/// winning a tie.
#[inline(always)]
fn first_max(logits: &[f32]) -> u32 {
    const LANES: usize = 16;
    let mut best = [f32::NEG_INFINITY; LANES];
    let mut at = [0u32; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for (k, chunk) in chunks.enumerate() {
        for j in 0..LANES {
            let take = chunk[j] > best[j];
            best[j] = if take { chunk[j] } else { best[j] };
            at[j] = if take { (k * LANES + j) as u32 } else { at[j] };
        }
    }
    let mut winner = (f32::NEG_INFINITY, 0);
    for (&value, &index) in best.iter().zip(&at) {
        if value > winner.0 || (value == winner.0 && index < winner.1) {
            winner = (value, index);
        }
    }
    let base = logits.len() - rest.len();
    for (i, &value) in rest.iter().enumerate() {
        if value > winner.0 {
            winner = (value, (base + i) as u32);
        }
    }
    winner.1
}

#[derive(Debug, Clone, PartialEq)]
pub struct SamplerParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 keeps every token.
    pub top_k: u32,
    /// 1 keeps every token.
    pub top_p: f32,
    /// 0 keeps every token.
    pub min_p: f32,
    /// 1 means no penalty.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub repeat_last_n: u32,
    /// Subtracted from the logit of every token among the recent ones (OpenAI's
    /// `presence_penalty`, llama.cpp's `penalty_present`); 0 means none.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it is among the recent ones
    /// (OpenAI's `frequency_penalty`, llama.cpp's `penalty_freq`); 0 means none.
    pub frequency_penalty: f32,
    /// Added to the logits of these tokens before anything else (OpenAI's
    /// `logit_bias`, llama.cpp's `logit_bias` sampler); `-inf` bans a token.
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

impl SamplerParams {
    pub fn validate(&self) -> Result<(), String> {
        let finite_nonneg = |v: f32| v.is_finite() && v >= 0.0;
        if !finite_nonneg(self.temperature) {
            return Err(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if !(finite_nonneg(self.top_p) && self.top_p <= 1.0) {
            return Err(format!("top_p must be in 0..1, got {}", self.top_p));
        }
        if !(finite_nonneg(self.min_p) && self.min_p <= 1.0) {
            return Err(format!("min_p must be in 0..1, got {}", self.min_p));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(format!("repeat_penalty must be > 0, got {}", self.repeat_penalty));
        }
        for (name, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !value.is_finite() {
                return Err(format!("{name} must be finite, got {value}"));
            }
        }
        if let Some((id, bias)) = self.logit_bias.iter().find(|b| b.1.is_nan() || b.1 == f32::INFINITY) {
            return Err(format!("logit_bias of token {id} must be a number or -inf, got {bias}"));
        }
        Ok(())
    }
}

/// A sampler with its own random state and the window of recent tokens.
pub struct Sampler {
    params: SamplerParams,
    rng: u64,
    recent: VecDeque<u32>,
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(params: SamplerParams) -> Sampler {
        let rng = params.seed;
        Sampler {
            params,
            rng,
            recent: VecDeque::new(),
            candidates: Vec::new(),
        }
    }

    /// Remembers tokens for the repetition penalty (the prompt, then each choice).
    pub fn accept(&mut self, token: u32) {
        if self.params.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.params.repeat_last_n as usize {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 && !self.adjusts_logits() {
            return greedy(logits);
        }
        self.fill_candidates(logits);
        if self.params.temperature <= 0.0 {
            let penalized: Vec<f32> = self.candidates.iter().map(|c| c.1).collect();
            return greedy(&penalized);
        }
        self.sample_distribution().unwrap_or_else(|| greedy(logits))
    }

    /// Whether the bias or a penalty changes these logits before the choice.
    fn adjusts_logits(&self) -> bool {
        let p = &self.params;
        let penalizes = p.repeat_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        !p.logit_bias.is_empty() || (penalizes && !self.recent.is_empty())
    }

    /// llama.cpp's penalties sampler: each recent token's logit divided (multiplied,
    /// when negative) by the repeat penalty, then lowered by the frequency penalty per
    /// occurrence and by the presence penalty once.
    fn apply_penalties(&mut self) {
        let p = &self.params;
        let mut seen: Vec<u32> = self.recent.iter().copied().collect();
        seen.sort_unstable();
        for run in seen.chunk_by(|a, b| a == b) {
            if let Some(c) = self.candidates.get_mut(run[0] as usize) {
                c.1 = if c.1 <= 0.0 { c.1 * p.repeat_penalty } else { c.1 / p.repeat_penalty };
                c.1 -= run.len() as f32 * p.frequency_penalty + p.presence_penalty;
            }
        }
    }

    /// The distribution [`Sampler::sample`] draws from for these logits: (token,
    /// probability) pairs, likeliest first, after penalties, top-k, top-p, min-p and
    /// temperature. Greedy (temperature 0) is a point mass on the greedy choice.
    /// Speculative decoding weighs a draft by it.
    pub fn distribution(&mut self, logits: &[f32]) -> Vec<(u32, f64)> {
        if self.params.temperature <= 0.0 {
            return vec![(self.sample(logits), 1.0)];
        }
        self.fill_candidates(logits);
        match self.truncate() {
            Some(probs) => self.candidates.iter().map(|c| c.0).zip(probs).collect(),
            None => vec![(greedy(logits), 1.0)],
        }
    }

    /// A token drawn from `distribution` (weights need not add up to one).
    pub fn draw(&mut self, distribution: &[(u32, f64)]) -> u32 {
        let total: f64 = distribution.iter().map(|d| d.1).sum();
        let r = self.next_f64() * total;
        let mut cum = 0.0;
        for &(token, p) in distribution {
            cum += p;
            if r < cum {
                return token;
            }
        }
        distribution.last().map_or(0, |d| d.0)
    }

    /// A number drawn uniformly from [0, 1), from the sampler's own stream.
    pub fn uniform(&mut self) -> f64 {
        self.next_f64()
    }

    /// The logits as candidates, NaN as -inf, with the bias and then the penalties
    /// applied (llama.cpp's order).
    fn fill_candidates(&mut self, logits: &[f32]) {
        self.candidates.clear();
        self.candidates.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, if l.is_nan() { f32::NEG_INFINITY } else { l })),
        );
        for &(id, bias) in &self.params.logit_bias {
            if let Some(c) = self.candidates.get_mut(id as usize) {
                c.1 += bias;
            }
        }
        let p = &self.params;
        let penalizes = p.repeat_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        if penalizes && !self.recent.is_empty() {
            self.apply_penalties();
        }
    }

    /// top-k → softmax → top-p → min-p → temperature → draw. `None` when no candidate
    /// has a finite logit.
    fn sample_distribution(&mut self) -> Option<u32> {
        let r = self.next_f64();
        let probs = self.truncate()?;
        let mut cum = 0.0;
        for (x, p) in self.candidates.iter().zip(&probs) {
            cum += p;
            if r < cum {
                return Some(x.0);
            }
        }
        self.candidates.last().map(|x| x.0)
    }

    /// Sorts the candidates and keeps those top-k, top-p and min-p keep; their
    /// probabilities at the temperature. `None` when no candidate has a finite logit.
    fn truncate(&mut self) -> Option<Vec<f64>> {
        let c = &mut self.candidates;
        c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if !c.first()?.1.is_finite() {
            return None;
        }
        c.retain(|x| x.1.is_finite());
        if self.params.top_k > 0 {
            c.truncate(self.params.top_k as usize);
        }
        let probs = softmax(c.iter().map(|x| x.1), 1.0);
        let mut keep = c.len();
        if self.params.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, p) in probs.iter().enumerate() {
                cum += p;
                if cum >= f64::from(self.params.top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if self.params.min_p > 0.0 {
            let floor = probs[0] * f64::from(self.params.min_p);
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        c.truncate(keep);
        Some(softmax(c.iter().map(|x| x.1), self.params.temperature))
    }

    /// SplitMix64 → uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The log-probability of `token` under the raw logits (their log-softmax, in f64),
/// and the `k` likeliest tokens with theirs, likeliest first (lower id first on ties).
pub fn log_softmax_top(logits: &[f32], token: u32, k: usize) -> (f32, Vec<(u32, f32)>) {
    let finite = |l: f32| if l.is_nan() { f64::NEG_INFINITY } else { f64::from(l) };
    let max = logits.iter().map(|&l| finite(l)).fold(f64::NEG_INFINITY, f64::max);
    let log_sum = max + logits.iter().map(|&l| (finite(l) - max).exp()).sum::<f64>().ln();
    let logprob = |id: u32| (finite(logits[id as usize]) - log_sum) as f32;
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(ids.len());
    let by_logit = |a: &u32, b: &u32| {
        finite(logits[*b as usize])
            .total_cmp(&finite(logits[*a as usize]))
            .then(a.cmp(b))
    };
    if k > 0 && k < ids.len() {
        ids.select_nth_unstable_by(k - 1, by_logit);
    }
    ids.truncate(k);
    ids.sort_unstable_by(by_logit);
    (logprob(token), ids.into_iter().map(|id| (id, logprob(id))).collect())
}

fn softmax(logits: impl Iterator<Item = f32> + Clone, temperature: f32) -> Vec<f64> {
    let scaled: Vec<f64> = logits.map(|l| f64::from(l) / f64::from(temperature)).collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = scaled.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.iter().map(|e| e / sum).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn log_probabilities_are_the_log_softmax_and_the_top_is_sorted() {
        let (lp, top) = log_softmax_top(&[0.0, 2.0f32.ln(), f32::NAN, 2.0f32.ln()], 0, 3);
        assert!((lp - 0.2f32.ln()).abs() < 1e-6);
        assert_eq!(top.iter().map(|&(id, _)| id).collect::<Vec<_>>(), [1, 3, 0]);
        assert!((top[0].1 - 0.4f32.ln()).abs() < 1e-6);
        assert!(log_softmax_top(&[1.0, 2.0], 1, 0).1.is_empty());
    }

    #[test]
    fn lowest_index_wins_ties_and_nan_never_wins() {
        assert_eq!(greedy(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(greedy(&[f32::NAN, 2.0, f32::NAN]), 1);
        assert_eq!(greedy(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(greedy(&[f32::NEG_INFINITY, f32::INFINITY]), 1);
    }

    #[test]
    fn vector_lanes_choose_like_one_scalar_pass() {
        let scalar = |logits: &[f32]| {
            let mut best = (0, f32::NEG_INFINITY);
            for (i, &v) in logits.iter().enumerate() {
                if v > best.1 {
                    best = (i as u32, v);
                }
            }
            best.0
        };
        let mut state = 1u64;
        for len in [0, 1, 15, 16, 17, 100, 4099] {
            for _ in 0..300 {
                let logits: Vec<f32> = (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        match (state >> 60) % 9 {
                            0 => f32::NAN,
                            1 => f32::NEG_INFINITY,
                            k => (k % 4) as f32,
                        }
                    })
                    .collect();
                assert_eq!(greedy(&logits), scalar(&logits), "{logits:?}");
                assert_eq!(first_max(&logits), scalar(&logits), "{logits:?}");
            }
        }
    }

    /// A sampler at `temperature` with no truncation (top-k, top-p, min-p off).
    pub(crate) fn sampler(temperature: f32, seed: u64) -> Sampler {
        Sampler::new(SamplerParams {
            temperature,
            seed,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        })
    }

    #[test]
    fn same_seed_same_choices() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let draw = |seed| {
            let mut s = sampler(1.0, seed);
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn never_returns_an_id_outside_the_vocabulary() {
        for logits in [
            vec![f32::NAN; 5],
            vec![f32::NEG_INFINITY; 5],
            vec![f32::INFINITY, f32::NAN, 1.0],
        ] {
            for temperature in [0.0, 0.7] {
                let id = sampler(temperature, 1).sample(&logits);
                assert!((id as usize) < logits.len());
            }
        }
    }

    #[test]
    fn penalty_discourages_recent_tokens() {
        let mut s = Sampler::new(SamplerParams {
            repeat_penalty: 2.0,
            ..Default::default()
        });
        s.accept(0);
        assert_eq!(s.sample(&[2.0, 1.5]), 1);
    }

    #[test]
    fn presence_and_frequency_penalties_lower_recent_tokens() {
        let penalized = |presence_penalty, frequency_penalty| {
            let mut s = Sampler::new(SamplerParams {
                presence_penalty,
                frequency_penalty,
                ..Default::default()
            });
            [0, 0, 1].into_iter().for_each(|t| s.accept(t));
            s.sample(&[3.0, 2.5, 1.2])
        };
        assert_eq!(penalized(0.0, 0.0), 0);
        // Presence: 3.0 - 1 and 2.5 - 1 against 1.2.
        assert_eq!(penalized(1.0, 0.0), 0);
        // Frequency: 3.0 - 2 × 0.9 = 1.2, 2.5 - 0.9 = 1.6.
        assert_eq!(penalized(0.0, 0.9), 1);
        // Both: 3.0 - 2 - 1, 2.5 - 1 - 1 against 1.2.
        assert_eq!(penalized(1.0, 1.0), 2);
    }

    #[test]
    fn logit_bias_moves_and_bans_tokens() {
        let biased = |logit_bias| {
            Sampler::new(SamplerParams {
                logit_bias,
                ..Default::default()
            })
            .sample(&[1.0, 0.5, 0.2])
        };
        assert_eq!(biased(vec![]), 0);
        assert_eq!(biased(vec![(2, 5.0)]), 2);
        assert_eq!(biased(vec![(0, f32::NEG_INFINITY)]), 1);
        // An id past the vocabulary changes nothing.
        assert_eq!(biased(vec![(7, 9.0)]), 0);
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::new(SamplerParams {
            temperature: 5.0,
            top_k: 1,
            seed: 3,
            ..Default::default()
        });
        assert_eq!(s.sample(&[0.1, 0.9, 0.5]), 1);
    }
}
