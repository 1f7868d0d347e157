//! Expandable segments (`expandable_segments:True`): one virtual reservation per
//! (pool, stream), mapped on demand in pages of 2 MiB (small pool) or
//! `large_segment_size` (large pool, 20 MiB by default).
//!
//! Follows `find_expandable_block`, `map_block`, `try_allocate_expandable_block`,
//! `unmap_block` and `release_expandable_segment` of `CUDACachingAllocator.cpp`.

use super::address::AddressSource;
use super::allocator::{Allocator, ExpSeg};
use super::pools::{Block, NIL};
use super::rounding::SMALL_BUFFER;
use crate::torch::snapshot::Action;

/// Address space reserved per expandable segment when the device total is unknown.
pub const DEFAULT_RESERVATION: u64 = 1 << 40;

impl Allocator {
    fn allocatable(&self, id: u32) -> bool {
        id != NIL && self.arena.get(id).is_free()
    }

    fn page_size(&self, small: bool) -> u64 {
        if small {
            SMALL_BUFFER
        } else {
            self.cfg.large_segment_size
        }
    }

    /// The live expandable-segment reservations as (base, size).
    pub fn reservations(&self) -> Vec<(u64, u64)> {
        self.exps
            .iter()
            .flatten()
            .map(|e| (e.base, e.size))
            .collect()
    }

    /// Size of a new reservation: 1⅛ × device memory, in whole pages.
    pub(super) fn reservation_size(&self, page: u64) -> u64 {
        let total = self
            .cfg
            .device_total
            .or(self.cfg.capacity)
            .unwrap_or(DEFAULT_RESERVATION);
        (total + total / 8).div_ceil(page) * page
    }

    /// `find_expandable_block`: the lowest-addressed run of free + unmapped space of the
    /// stream that can hold `size` bytes, or a fresh reservation.
    fn find_expandable_block<A: AddressSource + ?Sized>(
        &mut self,
        pool: usize,
        stream: u64,
        size: u64,
        src: &mut A,
    ) -> u32 {
        // The lowest unmapped run whose free predecessor plus itself (and what follows)
        // holds `size`; checked without collecting (this runs on every new mapping).
        let found = self.pools[pool].unmapped_of(stream).find_map(|c| {
            let prev = self.arena.get(c).prev;
            let start = if self.allocatable(prev) { prev } else { c };
            let mut bytes = 0u64;
            let mut b = start;
            while bytes < size && self.allocatable(b) {
                bytes += self.arena.get(b).size;
                b = self.arena.get(b).next;
            }
            (bytes >= size).then_some(start)
        });
        if let Some(start) = found {
            return start;
        }
        let small = self.pools[pool].small;
        let page = self.page_size(small);
        let va = self.reservation_size(page);
        let base = src.reserve(va, stream, small);
        let n_pages = (va / page) as usize;
        let exp = self.exps.len() as u32;
        self.exps.push(Some(ExpSeg {
            base,
            size: va,
            page,
            stream,
            pool: pool as u16,
            mapped: vec![false; n_pages.min(1 << 24)],
        }));
        let id = self.arena.add(Block {
            addr: base,
            size: va,
            requested: 0,
            stream,
            prev: NIL,
            next: NIL,
            pool: pool as u16,
            allocated: false,
            pending: false,
            mapped: false,
            exp,
            gc_base: 0,
        });
        self.pools[pool].insert_unmapped(stream, base, id);
        id
    }

    /// `map_block`: maps the pages covering the first `size` bytes of unmapped block `id`.
    pub(super) fn map_block(&mut self, id: u32, size: u64) -> bool {
        let b = self.arena.get(id).clone();
        let Some(seg) = self.exps[b.exp as usize].as_ref() else {
            return false;
        };
        let (base, page) = (seg.base, seg.page);
        let begin = (b.addr - base) / page;
        let end = (b.addr + size - base).div_ceil(page);
        if begin >= end {
            return false;
        }
        let bytes = (end - begin) * page;
        // cuMemCreate fails when the device is full (all pages of this call are released).
        if let Some(cap) = self.cfg.capacity {
            if self.total + bytes > cap {
                return false;
            }
        }
        if let Some(seg) = self.exps[b.exp as usize].as_mut() {
            for p in begin..end {
                if let Some(slot) = seg.mapped.get_mut(p as usize) {
                    *slot = true;
                }
            }
        }
        self.pools[b.pool as usize].remove_unmapped(b.stream, b.addr);
        self.arena.get_mut(id).mapped = true;
        if bytes < b.size {
            let rest = self.arena.add(Block {
                addr: b.addr + bytes,
                size: b.size - bytes,
                requested: 0,
                stream: b.stream,
                prev: id,
                next: b.next,
                pool: b.pool,
                allocated: false,
                pending: false,
                mapped: false,
                exp: b.exp,
                gc_base: 0,
            });
            if b.next != NIL {
                self.arena.get_mut(b.next).prev = rest;
            }
            let bm = self.arena.get_mut(id);
            bm.next = rest;
            bm.size = bytes;
            self.pools[b.pool as usize].insert_unmapped(b.stream, b.addr + bytes, rest);
        }
        let prev = self.arena.get(id).prev;
        self.try_merge(id, prev);
        let next = self.arena.get(id).next;
        self.try_merge(id, next);
        self.insert_free(id);
        self.add_reserved(bytes);
        self.stats.maps += 1;
        self.stats.pages_mapped += end - begin;
        self.event(Action::SegmentMap, b.addr, bytes, b.stream);
        true
    }

    /// `try_allocate_expandable_block`: maps enough pages for `size` bytes and returns the
    /// (free, mapped, out-of-pool) block that now holds them.
    pub(super) fn try_allocate_expandable_block<A: AddressSource + ?Sized>(
        &mut self,
        pool: usize,
        stream: u64,
        size: u64,
        src: &mut A,
    ) -> Option<u32> {
        let mut c = self.find_expandable_block(pool, stream, size, src);
        if !self.arena.get(c).mapped {
            let want = self.arena.get(c).size.min(size);
            if !self.map_block(c, want) {
                return None;
            }
        }
        while self.arena.get(c).size < size {
            let remaining = size - self.arena.get(c).size;
            let next = self.arena.get(c).next;
            if next == NIL {
                return None;
            }
            let want = remaining.min(self.arena.get(next).size);
            if !self.map_block(next, want) {
                return None;
            }
            c = next;
        }
        self.remove_free(c);
        Some(c)
    }

    /// `unmap_block`: unmaps the whole pages inside free block `id`.
    /// Returns the bytes unmapped.
    pub(super) fn unmap_block<A: AddressSource + ?Sized>(&mut self, id: u32, _src: &mut A) -> u64 {
        let b = self.arena.get(id).clone();
        let Some(seg) = self.exps.get(b.exp as usize).and_then(|s| s.as_ref()) else {
            return 0;
        };
        let (base, page) = (seg.base, seg.page);
        let begin = (b.addr - base).div_ceil(page);
        let end = (b.addr + b.size - base) / page;
        if begin >= end {
            return 0;
        }
        if let Some(seg) = self.exps[b.exp as usize].as_mut() {
            for p in begin..end {
                if let Some(slot) = seg.mapped.get_mut(p as usize) {
                    *slot = false;
                }
            }
        }
        let ustart = base + begin * page;
        let usize_ = (end - begin) * page;
        self.remove_free(id);
        let before = ustart - b.addr;
        if before > 0 {
            let bf = self.arena.add(Block {
                addr: b.addr,
                size: before,
                requested: 0,
                stream: b.stream,
                prev: b.prev,
                next: id,
                pool: b.pool,
                allocated: false,
                pending: false,
                mapped: true,
                exp: b.exp,
                gc_base: 0,
            });
            if b.prev != NIL {
                self.arena.get_mut(b.prev).next = bf;
            }
            self.arena.get_mut(id).prev = bf;
            self.insert_free(bf);
        }
        let after = b.size - before - usize_;
        if after > 0 {
            let af = self.arena.add(Block {
                addr: ustart + usize_,
                size: after,
                requested: 0,
                stream: b.stream,
                prev: id,
                next: b.next,
                pool: b.pool,
                allocated: false,
                pending: false,
                mapped: true,
                exp: b.exp,
                gc_base: 0,
            });
            if b.next != NIL {
                self.arena.get_mut(b.next).prev = af;
            }
            self.arena.get_mut(id).next = af;
            self.insert_free(af);
        }
        {
            let bm = self.arena.get_mut(id);
            bm.addr = ustart;
            bm.size = usize_;
            bm.mapped = false;
        }
        let prev = self.arena.get(id).prev;
        self.try_merge(id, prev);
        let next = self.arena.get(id).next;
        self.try_merge(id, next);
        let nb = self.arena.get(id);
        let (st, ad) = (nb.stream, nb.addr);
        self.pools[b.pool as usize].insert_unmapped(st, ad, id);
        self.sub_reserved(usize_);
        self.stats.unmaps += 1;
        self.stats.pages_unmapped += end - begin;
        self.event(Action::SegmentUnmap, ustart, usize_, b.stream);
        usize_
    }

    /// `release_expandable_segment`: drops a reservation whose pages are all unmapped.
    pub(super) fn release_expandable_segment<A: AddressSource + ?Sized>(
        &mut self,
        id: u32,
        src: &mut A,
    ) {
        let b = self.arena.get(id).clone();
        if b.mapped || b.is_split() {
            return;
        }
        self.pools[b.pool as usize].remove_unmapped(b.stream, b.addr);
        if let Some(seg) = self.exps.get_mut(b.exp as usize).and_then(Option::take) {
            src.release(seg.base, seg.size);
        }
        self.arena.remove(id);
    }

    /// Maps `size` bytes at `addr`, the start of an unmapped run (used to apply the pages a
    /// failed malloc mapped before it gave up). Returns whether it could.
    pub fn map_at(&mut self, addr: u64, size: u64) -> bool {
        let found = self
            .arena
            .iter()
            .find(|(_, b)| b.exp != NIL && !b.mapped && b.addr == addr && size <= b.size)
            .map(|(id, _)| id);
        match found {
            Some(id) => {
                let saved = self.cfg.capacity.take();
                let ok = self.map_block(id, size);
                self.cfg.capacity = saved;
                ok
            }
            None => false,
        }
    }

    /// Unmaps the free expandable block that contains `addr` (how a recorded
    /// `segment_unmap` came about), releasing the reservation when nothing stays mapped.
    /// Returns the bytes unmapped.
    pub fn unmap_at<A: AddressSource + ?Sized>(&mut self, addr: u64, src: &mut A) -> u64 {
        let found = self
            .arena
            .iter()
            .find(|(_, b)| {
                b.exp != NIL && b.mapped && b.is_free() && b.addr <= addr && addr < b.addr + b.size
            })
            .map(|(id, _)| id);
        let Some(id) = found else { return 0 };
        let bytes = self.unmap_block(id, src);
        let b = self.arena.get(id);
        if !b.mapped && !b.is_split() {
            self.release_expandable_segment(id, src);
        }
        bytes
    }
}
