//! A tiny deterministic random source (xorshift64) for benchmarks and tests that need
//! repeatable, dependency-free workloads.

/// xorshift64; the seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
