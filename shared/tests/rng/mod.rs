//! A small deterministic xorshift generator for the randomised tests of this crate (the
//! workspace's test helpers depend on this crate, so they cannot be used here).

/// xorshift64: seed it with any non-zero value.
pub struct Rng(pub u64);

impl Rng {
    /// The next pseudo-random value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
