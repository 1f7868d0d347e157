//! The arena of one space: live plain/pitch/async regions by address with the free block
//! after each, updated in O(log n) per allocation or free.
//!
//! The regions are a [`RegionTree`]: each entry stores the free bytes from its region's end
//! to the next region's start (for the last region: to the arena's end), and the tree keeps
//! the largest of them at its root. The bytes before the first region are `head`. Inserting
//! into a gap changes only the region before it; removing changes only the region before it;
//! both are found by the same descent. The number of non-zero gaps is counted as they
//! change.

use super::metrics::ArenaFigures;
use super::region::Region;
use super::tree::RegionTree;

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
    pub(crate) regions: RegionTree,
    seen: bool,
    base: u64,
    high: u64,
    capacity: u64,
    head: u64,
    live: u64,
    /// Non-zero gaps, `head` included.
    blocks: u64,
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
            free_blocks: self.blocks,
            largest_free: self.head.max(self.regions.max_gap()),
            total_free: end - self.base - self.live,
        })
    }

    /// Bytes free before the first live region (the whole arena when none is live).
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Counts a gap going from `old` to `new` bytes.
    #[inline]
    fn count(&mut self, old: u64, new: u64) {
        self.blocks = self.blocks + u64::from(new > 0) - u64::from(old > 0);
    }

    #[inline]
    fn set_head(&mut self, h: u64) {
        self.count(self.head, h);
        self.head = h;
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
        let end = base.saturating_add(cap).max(high);
        match self.regions.last() {
            None => self.set_head(end - base),
            Some(c) => {
                if let Some((last, r, g)) = self.regions.at(&c) {
                    // last + size ≤ high ≤ end: `high` is the highest end ever seen.
                    let ng = end - (last + r.size);
                    self.count(g, ng);
                    self.regions.set_gap(&c, ng);
                }
                let first = self.regions.iter().next().map_or(base, |e| e.0);
                self.set_head(first - base);
            }
        }
        self.base = base;
        self.high = high;
        self.capacity = cap;
    }

    /// Adds a region at `a` (`r.size > 0`, `a + r.size` must not overflow: the caller clamps).
    pub(crate) fn insert(&mut self, a: u64, r: Region) -> Insert {
        let e = a + r.size;
        if !self.seen {
            self.seen = true;
            self.base = a;
            self.high = e;
            self.set_head(self.end() - a);
        } else if a < self.base || e > self.end() {
            if self.regions.get(a).is_some_and(|x| x.seq == r.seq) {
                return Insert::Duplicate;
            }
            self.rebound(self.base.min(a), self.high.max(e), self.capacity);
        } else if e > self.high {
            // A new highest end inside the arena: the arena's end, and so every gap, stay as
            // they are. Only `high` moves, unless the record turns out to be a duplicate.
            let out = self.place(a, r);
            if !matches!(out, Insert::Duplicate) {
                self.high = e;
            }
            return out;
        }
        self.place(a, r)
    }

    /// Inserts `r` at `a` inside the arena's current bounds, replacing what it overlaps.
    #[inline(always)]
    fn place(&mut self, a: u64, r: Region) -> Insert {
        let e = a + r.size;
        match self.try_insert(a, r) {
            Ok(true) => Insert::Inserted,
            Ok(false) => Insert::Duplicate,
            Err(r) => {
                let starts = self.overlapping(a, e);
                let double = starts.contains(&a);
                let mut removed = Vec::with_capacity(starts.len());
                for s in starts {
                    if let Some(x) = self.remove(s) {
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
    #[inline(always)]
    fn try_insert(&mut self, a: u64, r: Region) -> Result<bool, Region> {
        let e = a + r.size;
        let c = self.regions.seek(a);
        // The key only: the next region's own fields are read only if it starts at `a`
        // (a duplicate or an overlap), so a plain insertion does not load its slot.
        let at = self.regions.at(&c).map(|(k, x, _)| (k, x));
        if let Some((k, x)) = at {
            if k == a {
                return if x.seq == r.seq { Ok(false) } else { Err(r) };
            }
        }
        // The previous entry: index `i` of `pc`'s leaf, usually `c`'s own (no cursor copy).
        let mut far = None;
        // `placed`: the new entry is in already (see `split_gap`).
        let (g, placed) = match self.regions.prev(&c, &mut far) {
            Some((pc, i)) => {
                let Some((ps, pr, pg)) = self.regions.at_pos(pc, i) else {
                    return Err(r);
                };
                let pend = ps + pr.size;
                let next = pend + pg;
                if pend > a || next < e {
                    return Err(r);
                }
                self.count(pg, a - pend);
                let g = next - e;
                // One step when the previous entry is in `c`'s leaf and it has room.
                let placed = self.regions.split_gap(&c, i, a - pend, a, r, g);
                if !placed {
                    self.regions.set_gap_pos(pc, i, a - pend);
                }
                (g, placed)
            }
            None => {
                // `at` is the first region, if any.
                let next = match at {
                    Some((k, _)) if k < e => return Err(r),
                    Some((k, _)) => k,
                    None => self.end(),
                };
                self.set_head(a - self.base);
                (next - e, false)
            }
        };
        self.count(0, g);
        self.live += r.size;
        if !placed {
            self.regions.insert_at(&c, a, r, g);
        }
        Ok(true)
    }

    /// Starts of the live regions overlapping `[a, e)`.
    fn overlapping(&self, a: u64, e: u64) -> Vec<u64> {
        let mut v = Vec::new();
        if let Some((ps, pr, _)) = self.regions.below(a) {
            if ps + pr.size > a {
                v.push(ps);
            }
        }
        v.extend(self.regions.from(a).take_while(|x| x.0 < e).map(|x| x.0));
        v
    }

    /// Removes the region starting exactly at `a`.
    #[inline]
    pub(crate) fn remove(&mut self, a: u64) -> Option<Region> {
        self.remove_with(a, |r| *r)
    }

    /// Removes the region starting exactly at `a`, returning what `f` reads of it: a small
    /// result comes back in registers, where a whole region goes through memory (and its
    /// reload stalled on store forwarding).
    #[inline]
    pub(crate) fn remove_with<T>(&mut self, a: u64, f: impl FnOnce(&Region) -> T) -> Option<T> {
        let c = self.regions.seek(a);
        let (k, r, g) = self.regions.at(&c)?;
        if k != a {
            return None;
        }
        let size = r.size;
        let out = f(r);
        self.live -= size;
        // a + size + gap ≤ end, so this cannot overflow.
        let merged = size + g;
        self.count(g, 0);
        let mut far = None;
        match self.regions.prev(&c, &mut far) {
            Some((pc, i)) => {
                if let Some((_, _, pg)) = self.regions.at_pos(pc, i) {
                    self.count(pg, pg + merged);
                    if self.regions.merge_gap(&c, i, pg + merged) {
                        // The previous entry was in `c`'s leaf, which stays full enough.
                        return Some(out);
                    }
                    self.regions.set_gap_pos(pc, i, pg + merged);
                }
            }
            None => self.set_head(self.head + merged),
        }
        self.regions.remove_at(&c);
        Some(out)
    }

    /// Removes every region; the arena's bounds stay (they are "ever seen").
    pub(crate) fn clear(&mut self) {
        self.regions.clear();
        self.live = 0;
        self.blocks = 0;
        self.head = 0;
        if self.seen {
            self.set_head(self.end() - self.base);
        }
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
        let mut cursor = base;
        let n = regions.len();
        for (i, &(addr, r)) in regions.iter().enumerate() {
            if r.size == 0 || addr < cursor || r.size > high - addr.min(high) || addr > high {
                return Err("arena regions overlap or lie outside the arena");
            }
            if i == 0 {
                a.set_head(addr - base);
            }
            let next = regions.get(i + 1).map_or(end, |x| x.0);
            let g = next.saturating_sub(addr + r.size);
            a.count(0, g);
            a.live += r.size;
            cursor = addr + r.size;
            let c = a.regions.seek(addr);
            a.regions.insert_at(&c, addr, r, g);
        }
        if n == 0 {
            a.set_head(end - base);
        }
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
        let parts = a.regions.iter().map(|(k, v, _)| (k, *v)).collect();
        let b = Arena::from_parts(seen, base, high, 10_000, parts).unwrap();
        assert_eq!(a.figures(), b.figures());
        assert_eq!(a.regions, b.regions);
        assert_eq!((a.head, a.blocks), (b.head, b.blocks));
    }
}
