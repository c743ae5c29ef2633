//! Choosing the next token from logits.

/// The index of the largest logit; the lowest index wins ties, as llama.cpp's
/// greedy sampler. NaN never wins, so the result is always a valid id.
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_value = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_value {
            best = i;
            best_value = v;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::greedy;

    #[test]
    fn lowest_index_wins_ties_and_nan_never_wins() {
        assert_eq!(greedy(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(greedy(&[f32::NAN, 2.0, f32::NAN]), 1);
        assert_eq!(greedy(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(greedy(&[f32::NEG_INFINITY, f32::INFINITY]), 1);
    }
}
