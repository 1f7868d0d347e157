//! The arena of one space: live plain/pitch/async regions by address, and the multiset of
//! the free blocks between them, both updated in O(log n) per allocation or free.
//!
//! Each region stores `gap_after`, the free bytes from its end to the next region's start
//! (for the last region: to the arena's end); the bytes before the first region are `head`.
//! Inserting into a gap needs only the region before it; removing needs only the region
//! before it. Non-zero gaps are kept in a max-heap with lazy deletion ([`Gaps`]) whose top
//! is the largest free block.

use std::collections::BTreeMap;

use super::gaps::Gaps;
use super::metrics::ArenaFigures;
use super::region::Region;

/// What an insertion did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Insert {
    /// The region was added.
    Inserted,
    /// A live region at the same address has the same seq: the record was a duplicate and
    /// nothing changed.
    Duplicate,
    /// The region overlapped live regions, which were removed first (an anomaly). `double`:
    /// one of them started at the same address.
    Replaced {
        removed: Vec<(u64, Region)>,
        double: bool,
    },
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Arena {
    pub(crate) regions: BTreeMap<u64, Region>,
    gaps: Gaps,
    seen: bool,
    base: u64,
    high: u64,
    capacity: u64,
    head: u64,
    first: u64,
    last: u64,
    live: u64,
}

impl Arena {
    /// One past the arena's last byte.
    #[inline]
    fn end(&self) -> u64 {
        self.base.saturating_add(self.capacity).max(self.high)
    }

    /// `(seen, base, high)`: what the checkpoint stores.
    pub(crate) fn bounds(&self) -> (bool, u64, u64) {
        (self.seen, self.base, self.high)
    }

    /// The current figures; `None` until the first arena allocation.
    #[inline]
    pub(crate) fn figures(&self) -> Option<ArenaFigures> {
        if !self.seen {
            return None;
        }
        let end = self.end();
        Some(ArenaFigures {
            base: self.base,
            end,
            live: self.live,
            regions: self.regions.len() as u64,
            free_blocks: self.gaps.count(),
            largest_free: self.gaps.largest(),
            total_free: end - self.base - self.live,
        })
    }

    /// Bytes free before the first live region (the whole arena when none is live).
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Sets the device's total bytes (0 = unknown).
    pub(crate) fn set_capacity(&mut self, cap: u64) {
        if cap == self.capacity {
            return;
        }
        if self.seen {
            self.rebound(self.base, self.high, cap);
        } else {
            self.capacity = cap;
        }
    }

    /// Moves the arena's bounds; only the head gap and the last region's gap change.
    fn rebound(&mut self, base: u64, high: u64, cap: u64) {
        self.gaps.del(self.head);
        let end = base.saturating_add(cap).max(high);
        if self.regions.is_empty() {
            self.head = end - base;
        } else {
            if let Some(l) = self.regions.get_mut(&self.last) {
                self.gaps.del(l.gap_after);
                // last + size ≤ high ≤ end: `high` is the highest end ever seen.
                l.gap_after = end - (self.last + l.size);
                self.gaps.add(l.gap_after);
            }
            self.head = self.first - base;
        }
        self.base = base;
        self.high = high;
        self.capacity = cap;
        self.gaps.add(self.head);
    }

    /// Adds a region at `a` (`r.size > 0`, `a + r.size` must not overflow: the caller clamps).
    pub(crate) fn insert(&mut self, a: u64, r: Region) -> Insert {
        let e = a + r.size;
        if !self.seen {
            self.seen = true;
            self.base = a;
            self.high = e;
            self.head = self.end() - a;
            self.gaps.add(self.head);
        } else if a < self.base || e > self.high {
            if self.regions.get(&a).is_some_and(|x| x.seq == r.seq) {
                return Insert::Duplicate;
            }
            self.rebound(self.base.min(a), self.high.max(e), self.capacity);
        }
        let out = self.try_insert_or_replace(a, e, r);
        self.tidy();
        out
    }

    #[inline]
    fn try_insert_or_replace(&mut self, a: u64, e: u64, r: Region) -> Insert {
        match self.try_insert(a, r) {
            Ok(true) => Insert::Inserted,
            Ok(false) => Insert::Duplicate,
            Err(r) => {
                let starts = self.overlapping(a, e);
                let double = starts.contains(&a);
                let mut removed = Vec::with_capacity(starts.len());
                for s in starts {
                    if let Some(x) = self.remove_inner(s) {
                        removed.push((s, x));
                    }
                }
                // Nothing overlaps any more, so this inserts.
                let _ = self.try_insert(a, r);
                Insert::Replaced { removed, double }
            }
        }
    }

    /// Inserts when `[a, a + size)` lies in one gap: `Ok(true)`. `Ok(false)`: a duplicate
    /// (same address and seq). `Err`: it overlaps a live region.
    #[inline]
    fn try_insert(&mut self, a: u64, mut r: Region) -> Result<bool, Region> {
        let e = a + r.size;
        let last = self.last;
        let nonempty = !self.regions.is_empty();
        let end = self.end();
        match self.regions.range_mut(..=a).next_back() {
            Some((&ps, pr)) => {
                if ps == a {
                    return if pr.seq == r.seq { Ok(false) } else { Err(r) };
                }
                let pend = ps + pr.size;
                if pend > a {
                    return Err(r);
                }
                let next = pend + pr.gap_after;
                if ps != last && next < e {
                    return Err(r);
                }
                let g = pr.gap_after;
                pr.gap_after = a - pend;
                r.gap_after = next - e;
                self.gaps.del(g);
                self.gaps.add(pr.gap_after);
                self.gaps.add(r.gap_after);
                if ps == last {
                    self.last = a;
                }
            }
            None => {
                let next = if nonempty {
                    if self.first < e {
                        return Err(r);
                    }
                    self.first
                } else {
                    end
                };
                let g = self.head;
                self.head = a - self.base;
                r.gap_after = next - e;
                self.gaps.del(g);
                self.gaps.add(self.head);
                self.gaps.add(r.gap_after);
                self.first = a;
                if !nonempty {
                    self.last = a;
                }
            }
        }
        self.live += r.size;
        self.regions.insert(a, r);
        Ok(true)
    }

    /// Starts of the live regions overlapping `[a, e)`.
    fn overlapping(&self, a: u64, e: u64) -> Vec<u64> {
        let mut v = Vec::new();
        if let Some((&ps, pr)) = self.regions.range(..a).next_back() {
            if ps + pr.size > a {
                v.push(ps);
            }
        }
        v.extend(self.regions.range(a..e).map(|(k, _)| *k));
        v
    }

    /// Drops removed sizes from the gap heap once they outnumber the live ones.
    #[inline]
    fn tidy(&mut self) {
        if self.gaps.needs_rebuild() {
            self.rebuild_gaps();
        }
    }

    #[cold]
    #[inline(never)]
    fn rebuild_gaps(&mut self) {
        let live = std::iter::once(self.head).chain(self.regions.values().map(|r| r.gap_after));
        self.gaps.rebuild(live);
    }

    /// Removes the region starting exactly at `a`.
    #[inline]
    pub(crate) fn remove(&mut self, a: u64) -> Option<Region> {
        let r = self.remove_inner(a)?;
        self.tidy();
        Some(r)
    }

    #[inline]
    fn remove_inner(&mut self, a: u64) -> Option<Region> {
        let r = self.regions.remove(&a)?;
        self.live -= r.size;
        // a + size + gap_after ≤ end, so this cannot overflow.
        let merged = r.size + r.gap_after;
        match self.regions.range_mut(..a).next_back() {
            Some((&ps, pr)) => {
                self.gaps.del(pr.gap_after);
                self.gaps.del(r.gap_after);
                pr.gap_after += merged;
                self.gaps.add(pr.gap_after);
                if a == self.last {
                    self.last = ps;
                }
            }
            None => {
                self.gaps.del(self.head);
                self.gaps.del(r.gap_after);
                self.head += merged;
                self.gaps.add(self.head);
                if !self.regions.is_empty() {
                    self.first = a + merged;
                }
            }
        }
        Some(r)
    }

    /// Removes every region; the arena's bounds stay (they are "ever seen").
    pub(crate) fn clear(&mut self) -> BTreeMap<u64, Region> {
        let out = std::mem::take(&mut self.regions);
        self.gaps.clear();
        self.live = 0;
        if self.seen {
            self.head = self.end() - self.base;
            self.gaps.add(self.head);
        }
        out
    }

    /// Rebuilds an arena from stored parts (checkpoint restore). Regions must be sorted,
    /// non-empty, non-overlapping and inside `[base, high]`.
    pub(crate) fn from_parts(
        seen: bool,
        base: u64,
        high: u64,
        capacity: u64,
        regions: Vec<(u64, Region)>,
    ) -> Result<Arena, &'static str> {
        let mut a = Arena {
            capacity,
            ..Arena::default()
        };
        if !seen {
            if !regions.is_empty() {
                return Err("arena regions without an arena");
            }
            return Ok(a);
        }
        if high < base {
            return Err("arena high below base");
        }
        a.seen = true;
        a.base = base;
        a.high = high;
        let end = a.end();
        let mut prev: Option<u64> = None;
        let mut cursor = base;
        for (addr, mut r) in regions {
            if r.size == 0 || addr < cursor || r.size > high - addr.min(high) || addr > high {
                return Err("arena regions overlap or lie outside the arena");
            }
            let gap = addr - cursor;
            match prev {
                None => {
                    a.head = gap;
                    a.first = addr;
                }
                Some(p) => {
                    if let Some(pr) = a.regions.get_mut(&p) {
                        pr.gap_after = gap;
                    }
                }
            }
            a.gaps.add(gap);
            r.gap_after = 0;
            a.live += r.size;
            cursor = addr + r.size;
            a.last = addr;
            prev = Some(addr);
            a.regions.insert(addr, r);
        }
        let tail = end - cursor;
        match prev {
            None => a.head = tail,
            Some(p) => {
                if let Some(pr) = a.regions.get_mut(&p) {
                    pr.gap_after = tail;
                }
            }
        }
        a.gaps.add(tail);
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::super::region::RegionKind;
    use super::*;

    fn reg(size: u64, seq: u64) -> Region {
        Region {
            size,
            gap_after: 0,
            seq,
            ts_ns: 0,
            aux: 0,
            aux2: 0,
            api: 0,
            kind: RegionKind::Device,
        }
    }

    #[test]
    fn gaps_follow_inserts_and_removes() {
        let mut a = Arena::default();
        a.set_capacity(1000);
        assert_eq!(a.insert(0, reg(100, 1)), Insert::Inserted);
        assert_eq!(a.insert(100, reg(200, 2)), Insert::Inserted);
        assert_eq!(a.insert(300, reg(100, 3)), Insert::Inserted);
        let f = a.figures().unwrap();
        assert_eq!((f.free_blocks, f.largest_free, f.total_free), (1, 600, 600));
        assert!(a.remove(100).is_some());
        let f = a.figures().unwrap();
        assert_eq!((f.free_blocks, f.largest_free, f.total_free), (2, 600, 800));
        assert!(a.remove(0).is_some());
        let f = a.figures().unwrap();
        assert_eq!((f.free_blocks, f.largest_free, f.total_free), (2, 600, 900));
        assert!(a.remove(300).is_some());
        let f = a.figures().unwrap();
        assert_eq!(
            (f.free_blocks, f.largest_free, f.total_free),
            (1, 1000, 1000)
        );
    }

    #[test]
    fn lower_base_and_overlap_are_handled() {
        let mut a = Arena::default();
        assert_eq!(a.insert(500, reg(100, 1)), Insert::Inserted);
        assert_eq!(a.insert(100, reg(100, 2)), Insert::Inserted);
        let f = a.figures().unwrap();
        assert_eq!(
            (f.base, f.end, f.largest_free, f.total_free),
            (100, 600, 300, 300)
        );
        assert_eq!(a.insert(500, reg(100, 1)), Insert::Duplicate);
        match a.insert(150, reg(400, 3)) {
            Insert::Replaced { removed, double } => {
                assert!(!double);
                assert_eq!(
                    removed.iter().map(|r| r.0).collect::<Vec<_>>(),
                    vec![100, 500]
                );
            }
            other => panic!("{other:?}"),
        }
        let f = a.figures().unwrap();
        assert_eq!((f.live, f.free_blocks, f.total_free), (400, 2, 100));
    }

    #[test]
    fn from_parts_matches_incremental() {
        let mut a = Arena::default();
        a.set_capacity(10_000);
        for (i, (addr, size)) in [(1000, 10), (1010, 5), (2000, 100), (5000, 1)]
            .iter()
            .enumerate()
        {
            a.insert(*addr, reg(*size, i as u64));
        }
        let (seen, base, high) = a.bounds();
        let parts = a.regions.iter().map(|(k, v)| (*k, *v)).collect();
        let b = Arena::from_parts(seen, base, high, 10_000, parts).unwrap();
        assert_eq!(a.figures(), b.figures());
        assert_eq!(a.regions, b.regions);
        assert_eq!(a.gaps.sorted(), b.gaps.sorted());
        assert_eq!(a.head, b.head);
    }
}
