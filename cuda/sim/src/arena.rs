//! A simulated address range handed out first-fit, lowest address first.
//!
//! Every request takes the lowest-addressed hole that can hold it (at the requested
//! alignment); freed ranges merge with free neighbours. The same sequence of calls always
//! produces the same addresses. All operations are O(log n) in the number of holes
//! (alignment larger than the hole granularity may visit several holes).

use crate::holes::Holes;

/// Why a free was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeError {
    /// The range lies outside the arena.
    OutOfRange,
    /// Part of the range is already free.
    Overlap,
}

/// A contiguous range of simulated addresses.
#[derive(Clone, Debug)]
pub struct Arena {
    base: u64,
    size: u64,
    holes: Holes,
    free_bytes: u64,
}

pub fn round_up(x: u64, to: u64) -> u64 {
    debug_assert!(to.is_power_of_two());
    x.div_ceil(to) * to
}

impl Arena {
    /// An arena whose whole range is free.
    pub fn new(base: u64, size: u64) -> Arena {
        let mut a = Arena::empty(base, size);
        if size > 0 {
            a.holes.insert(base, size);
            a.free_bytes = size;
        }
        a
    }

    /// An arena covering `[base, base + size)` with nothing free yet; ranges become
    /// usable through [`Arena::add_free_range`].
    pub fn empty(base: u64, size: u64) -> Arena {
        Arena {
            base,
            size,
            holes: Holes::new(),
            free_bytes: 0,
        }
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn end(&self) -> u64 {
        self.base + self.size
    }

    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.end()
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    pub fn longest_hole(&self) -> u64 {
        self.holes.longest()
    }

    pub fn hole_count(&self) -> usize {
        self.holes.len()
    }

    /// Holes in address order (O(n)).
    pub fn holes(&self) -> Vec<(u64, u64)> {
        self.holes.to_vec()
    }

    /// Takes the lowest-addressed `len` bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        if len == 0 {
            return None;
        }
        let mut from = self.base;
        loop {
            let (start, hole_len) = self.holes.first_fit_from(from, len)?;
            let at = round_up(start, align);
            if at.checked_add(len)? <= start + hole_len {
                self.carve(start, hole_len, at, len);
                return Some(at);
            }
            from = start + 1;
        }
    }

    /// Takes exactly `[addr, addr + len)` if all of it is free.
    pub fn alloc_at(&mut self, addr: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        match self.holes.at_or_before(addr) {
            Some((start, hole_len)) if addr + len <= start + hole_len => {
                self.carve(start, hole_len, addr, len);
                true
            }
            _ => false,
        }
    }

    fn carve(&mut self, start: u64, hole_len: u64, at: u64, len: u64) {
        let front = at - start;
        let back = start + hole_len - (at + len);
        match (front, back) {
            (0, 0) => {
                self.holes.remove(start);
            }
            (0, _) => {
                self.holes.reshape(start, at + len, back);
            }
            (_, 0) => {
                self.holes.reshape(start, start, front);
            }
            _ => {
                self.holes.reshape(start, start, front);
                self.holes.insert(at + len, back);
            }
        }
        self.free_bytes -= len;
    }

    /// Returns `[addr, addr + len)` to the free set, merging with free neighbours.
    pub fn free(&mut self, addr: u64, len: u64) -> Result<(), FreeError> {
        self.free_bounded(addr, len, self.base, self.end())
    }

    /// Like [`Arena::free`] but merges only with neighbours inside `[lo, hi)` (pools keep
    /// their chunks apart).
    pub fn free_bounded(&mut self, addr: u64, len: u64, lo: u64, hi: u64) -> Result<(), FreeError> {
        if len == 0 || addr < self.base || addr.saturating_add(len) > self.end() {
            return Err(FreeError::OutOfRange);
        }
        let end = addr + len;
        let before = self.holes.at_or_before(addr);
        if let Some((s, l)) = before {
            if s + l > addr {
                return Err(FreeError::Overlap);
            }
        }
        let after = self.holes.at_or_after(addr);
        if let Some((s, _)) = after {
            if s < end {
                return Err(FreeError::Overlap);
            }
        }
        let join_before = before.filter(|&(s, l)| s + l == addr && s >= lo);
        let join_after = after.filter(|&(s, l)| s == end && s + l <= hi);
        match (join_before, join_after) {
            (Some((bs, bl)), Some((as_, al))) => {
                self.holes.remove(as_);
                self.holes.reshape(bs, bs, bl + len + al);
            }
            (Some((bs, bl)), None) => {
                self.holes.reshape(bs, bs, bl + len);
            }
            (None, Some((as_, al))) => {
                self.holes.reshape(as_, addr, len + al);
            }
            (None, None) => self.holes.insert(addr, len),
        }
        self.free_bytes += len;
        Ok(())
    }

    /// Makes a range free without merging it with anything (a pool's new chunk).
    pub fn add_free_range(&mut self, addr: u64, len: u64) {
        self.holes.insert(addr, len);
        self.free_bytes += len;
    }

    /// Removes a hole that is exactly `[addr, addr + len)`; false if there is none.
    pub fn take_free_range(&mut self, addr: u64, len: u64) -> bool {
        match self.holes.at_or_before(addr) {
            Some((s, l)) if s == addr && l == len => {
                self.holes.remove(s);
                self.free_bytes -= len;
                true
            }
            _ => false,
        }
    }

    /// True when `[addr, addr + len)` is exactly one hole.
    pub fn is_single_hole(&self, addr: u64, len: u64) -> bool {
        matches!(self.holes.at_or_before(addr), Some((s, l)) if s == addr && l == len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_lowest_address_and_coalescing() {
        let mut a = Arena::new(0x1000, 0x1000);
        let x = a.alloc(0x200, 0x200).unwrap();
        let y = a.alloc(0x200, 0x200).unwrap();
        let z = a.alloc(0x200, 0x200).unwrap();
        assert_eq!((x, y, z), (0x1000, 0x1200, 0x1400));
        a.free(y, 0x200).unwrap();
        // the hole at y is the lowest that fits
        assert_eq!(a.alloc(0x100, 0x100), Some(0x1200));
        assert_eq!(a.alloc(0x200, 0x200), Some(0x1600));
        a.free(0x1200, 0x100).unwrap();
        a.free(x, 0x200).unwrap();
        a.free(z, 0x200).unwrap();
        assert_eq!(a.holes(), vec![(0x1000, 0x600), (0x1800, 0x800)]);
        a.free(0x1600, 0x200).unwrap();
        assert_eq!(a.holes(), vec![(0x1000, 0x1000)]);
        assert_eq!(a.free_bytes(), 0x1000);
    }

    #[test]
    fn fragmentation_refuses_when_no_single_hole_fits() {
        let mut a = Arena::new(0, 1024);
        let blocks: Vec<u64> = (0..8).map(|_| a.alloc(128, 128).unwrap()).collect();
        for b in blocks.iter().step_by(2) {
            a.free(*b, 128).unwrap();
        }
        assert_eq!(a.free_bytes(), 512);
        assert_eq!(a.longest_hole(), 128);
        assert_eq!(a.alloc(256, 128), None);
    }

    #[test]
    fn alignment_and_alloc_at() {
        let mut a = Arena::new(0, 0x10000);
        assert_eq!(a.alloc(0x100, 0x100), Some(0));
        assert_eq!(a.alloc(0x1000, 0x1000), Some(0x1000));
        assert_eq!(a.alloc(0x100, 0x100), Some(0x100));
        assert!(a.alloc_at(0x8000, 0x1000));
        assert!(!a.alloc_at(0x8800, 0x100));
        assert!(a.alloc_at(0x9000, 0x100));
    }

    #[test]
    fn double_free_is_refused() {
        let mut a = Arena::new(0, 4096);
        let x = a.alloc(512, 512).unwrap();
        a.free(x, 512).unwrap();
        assert_eq!(a.free(x, 512), Err(FreeError::Overlap));
        assert_eq!(a.free(8192, 512), Err(FreeError::OutOfRange));
    }

    #[test]
    fn bounded_free_keeps_chunks_apart() {
        let mut a = Arena::empty(0, 4096);
        a.add_free_range(0, 1024);
        a.add_free_range(1024, 1024);
        let x = a.alloc(1024, 512).unwrap();
        assert_eq!(x, 0);
        a.free_bounded(x, 1024, 0, 1024).unwrap();
        assert_eq!(a.holes(), vec![(0, 1024), (1024, 1024)]);
        assert!(a.take_free_range(1024, 1024));
        assert_eq!(a.free_bytes(), 1024);
    }
}
