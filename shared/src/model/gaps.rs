//! The multiset of an arena's free blocks, kept only as far as the figures need it: how
//! many there are and the largest.
//!
//! A max-heap of block sizes with lazy deletion: removing a block that is not the largest
//! pushes it on a second heap of removed sizes, and a size that is on top of both heaps is
//! popped from both. The top of the first heap is therefore always a live block. Adding is
//! a heap push (O(1) on average), removing is a push, or a pop when the block is the largest
//! (O(log n)). This is several times cheaper than an ordered map of `size → count`, which
//! walks a tree on every change. Removed sizes that never reach the top are dropped when
//! they outnumber the live blocks: the owner rebuilds the heap from its live blocks
//! ([`Gaps::needs_rebuild`], [`Gaps::rebuild`]), O(n) once per Θ(n) changes.
//!
//! Callers must only remove sizes that are in the multiset (the arena removes exactly the
//! gaps it added).

use std::collections::BinaryHeap;

#[derive(Clone, Debug, Default)]
pub(crate) struct Gaps {
    /// Every live size, plus removed sizes still waiting in `dead`.
    heap: BinaryHeap<u64>,
    /// Removed sizes not yet popped from `heap` (a sub-multiset of it).
    dead: BinaryHeap<u64>,
    /// Live blocks.
    count: u64,
}

/// Below this many removed sizes the heap is never rebuilt.
const REBUILD_MIN: usize = 1024;

impl Gaps {
    /// Adds a free block of `g` bytes (nothing for 0).
    #[inline]
    pub(crate) fn add(&mut self, g: u64) {
        if g > 0 {
            self.heap.push(g);
            self.count += 1;
        }
    }

    /// Removes a free block of `g` bytes (nothing for 0); `g` must be in the multiset.
    #[inline]
    pub(crate) fn del(&mut self, g: u64) {
        if g == 0 {
            return;
        }
        debug_assert!(self.count > 0, "removing a free block that is not there");
        self.count = self.count.saturating_sub(1);
        if self.heap.peek() == Some(&g) {
            self.heap.pop();
            self.settle();
        } else {
            self.dead.push(g);
        }
    }

    /// Pops sizes on top of both heaps until the top of `heap` is live.
    #[inline]
    fn settle(&mut self) {
        while let (Some(h), Some(d)) = (self.heap.peek(), self.dead.peek()) {
            if h != d {
                break;
            }
            self.heap.pop();
            self.dead.pop();
        }
    }

    /// Number of free blocks.
    #[inline]
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The largest free block (0 when none).
    #[inline]
    pub(crate) fn largest(&self) -> u64 {
        self.heap.peek().copied().unwrap_or(0)
    }

    /// Whether removed sizes outnumber the live ones enough that [`Gaps::rebuild`] pays.
    #[inline]
    pub(crate) fn needs_rebuild(&self) -> bool {
        self.dead.len() > REBUILD_MIN && self.dead.len() as u64 > self.count
    }

    /// Replaces the contents by the live blocks `live` (zeros are skipped).
    pub(crate) fn rebuild(&mut self, live: impl Iterator<Item = u64>) {
        let mut v = std::mem::take(&mut self.heap).into_vec();
        v.clear();
        v.extend(live.filter(|g| *g > 0));
        self.count = v.len() as u64;
        self.heap = BinaryHeap::from(v);
        self.dead.clear();
    }

    /// Removes everything.
    pub(crate) fn clear(&mut self) {
        self.heap.clear();
        self.dead.clear();
        self.count = 0;
    }

    /// The live sizes, sorted (tests).
    #[cfg(test)]
    pub(crate) fn sorted(&self) -> Vec<u64> {
        let mut live = self.heap.clone().into_sorted_vec();
        for d in self.dead.clone().into_sorted_vec() {
            if let Ok(i) = live.binary_search(&d) {
                live.remove(i);
            }
        }
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random adds and removes against a sorted vector, with rebuilds.
    #[test]
    fn matches_a_sorted_multiset() {
        let mut g = Gaps::default();
        let mut naive: Vec<u64> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if naive.is_empty() || !x.is_multiple_of(3) {
                let v = x % 50;
                g.add(v);
                if v > 0 {
                    naive.push(v);
                }
            } else {
                let i = (x >> 8) as usize % naive.len();
                let v = naive.swap_remove(i);
                g.del(v);
            }
            if g.needs_rebuild() || step.is_multiple_of(5000) {
                g.rebuild(naive.iter().copied());
            }
            assert_eq!(g.count(), naive.len() as u64);
            assert_eq!(g.largest(), naive.iter().copied().max().unwrap_or(0));
        }
        naive.sort_unstable();
        assert_eq!(g.sorted(), naive);
    }
}
