//! Where new segments land: the simulator asks an [`AddressSource`] for the address of
//! every `cudaMalloc` and every expandable-segment reservation.
//!
//! When verifying a recorded trace, the source hands out the addresses the real
//! `cudaMalloc` returned (see `verify`); when predicting, [`FirstFit`] models the device's
//! virtual address space.

use std::collections::BTreeMap;

/// Supplies virtual addresses for new segments.
pub trait AddressSource {
    /// Address for a new `cudaMalloc` segment of `size` bytes.
    fn segment_alloc(&mut self, size: u64, stream: u64, small: bool) -> u64;
    /// A segment was `cudaFree`d.
    fn segment_free(&mut self, addr: u64, size: u64);
    /// Address for a new expandable segment's virtual reservation (`cuMemAddressReserve`).
    fn reserve(&mut self, size: u64, stream: u64, small: bool) -> u64;
    /// A reservation was released (`cuMemAddressFree`).
    fn release(&mut self, addr: u64, size: u64) {
        self.segment_free(addr, size);
    }
}

/// First-fit over a virtual address space, 2 MiB aligned — a plain model of where the
/// driver places allocations.
#[derive(Clone, Debug)]
pub struct FirstFit {
    free: BTreeMap<u64, u64>,
    align: u64,
}

impl FirstFit {
    /// Base of the modelled address space (a typical-looking device address).
    pub const BASE: u64 = 0x7f00_0000_0000;
    /// Size of the modelled address space (16 TiB).
    pub const SPAN: u64 = 1 << 44;

    /// A fresh address space.
    pub fn new() -> FirstFit {
        let mut free = BTreeMap::new();
        free.insert(Self::BASE, Self::SPAN);
        FirstFit {
            free,
            align: 2 << 20,
        }
    }

    fn take(&mut self, size: u64) -> u64 {
        let size = size.max(1).div_ceil(self.align) * self.align;
        let found = self
            .free
            .iter()
            .find(|(_, &len)| len >= size)
            .map(|(&a, &l)| (a, l));
        match found {
            Some((a, l)) => {
                self.free.remove(&a);
                if l > size {
                    self.free.insert(a + size, l - size);
                }
                a
            }
            // The modelled space is exhausted (16 TiB): hand out addresses past it.
            None => Self::BASE + Self::SPAN + size,
        }
    }

    fn give(&mut self, addr: u64, size: u64) {
        let mut start = addr;
        let mut len = size.max(1).div_ceil(self.align) * self.align;
        if let Some((&pa, &pl)) = self.free.range(..addr).next_back() {
            if pa + pl == addr {
                self.free.remove(&pa);
                start = pa;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += nl;
        }
        self.free.insert(start, len);
    }
}

impl Default for FirstFit {
    fn default() -> Self {
        FirstFit::new()
    }
}

impl AddressSource for FirstFit {
    fn segment_alloc(&mut self, size: u64, _stream: u64, _small: bool) -> u64 {
        self.take(size)
    }
    fn segment_free(&mut self, addr: u64, size: u64) {
        self.give(addr, size)
    }
    fn reserve(&mut self, size: u64, _stream: u64, _small: bool) -> u64 {
        self.take(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuses_freed_space_and_merges() {
        let mut f = FirstFit::new();
        let a = f.segment_alloc(20 << 20, 0, false);
        let b = f.segment_alloc(2 << 20, 0, true);
        let c = f.segment_alloc(4 << 20, 0, false);
        assert_eq!(a, FirstFit::BASE);
        assert_eq!(b, a + (20 << 20));
        assert_eq!(c, b + (2 << 20));
        f.segment_free(a, 20 << 20);
        f.segment_free(b, 2 << 20);
        // a and b merged: a 22 MiB hole at the base.
        assert_eq!(f.segment_alloc(22 << 20, 0, false), a);
    }
}
