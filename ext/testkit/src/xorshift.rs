//! The tests' generator of samples, pixels and byte damage: xorshift64*, tiny and the same
//! everywhere (the synthetic weights come from [`crate::canary::Rng`], SplitMix64).

/// xorshift64* over a nonzero state.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The next value's top byte.
    pub fn byte(&mut self) -> u8 {
        (self.next_u64() >> 56) as u8
    }

    /// The next value modulo `n` (not 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
