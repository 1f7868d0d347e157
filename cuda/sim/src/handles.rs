//! Maps keyed by handle values (contexts, streams, events, pools, VMM handles): a
//! multiplicative hash is enough for these keys and much cheaper than SipHash on the
//! allocation path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one `u64`.
#[derive(Default, Clone, Copy)]
pub struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
}

pub type HandleMap<V> = HashMap<u64, V, BuildHasherDefault<HandleHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_map() {
        let mut m: HandleMap<u32> = HandleMap::default();
        for i in 0..1000u64 {
            m.insert((0xC1 << 40) | i, i as u32);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get(&((0xC1 << 40) | 77)), Some(&77));
        assert_eq!(m.remove(&((0xC1 << 40) | 999)), Some(999));
    }
}
