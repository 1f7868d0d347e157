//! Applying records in batches: the same as applying them one by one, but while one
//! record is applied the memory the next few will touch in a large arena is already being
//! loaded, so their cache misses overlap instead of stalling one after another.

use crate::format::{EventKind, MetaEntry, Record};

use super::tree::Walk;
use super::Model;

/// Arenas with fewer regions than this stay in the caches: hints would only cost.
const PREFETCH_MIN: usize = 1 << 14;

/// Records between the steps of one record's prefetch walk: each step reads what the
/// step before started loading, so a step should come about a miss's latency later.
const STEP: usize = 2;

/// Steps of a walk: the lowest inner node, the leaf, the gaps and regions.
const STEPS: usize = 3;

/// Walks in flight: a power of two above the farthest look-ahead.
const RING: usize = 8;
const _: () = assert!(RING.is_power_of_two() && RING > STEP * STEPS);

impl Model {
    /// The space whose arena `rec` will change, if it allocates or frees an arena region
    /// of an existing space.
    #[inline]
    fn arena_space(&self, rec: &Record) -> Option<u32> {
        // `ManagedAlloc` goes elsewhere; a failed call or a free of another kind of object
        // only makes the hint useless.
        const ARENA: u32 = 1 << EventKind::Alloc as u32
            | 1 << EventKind::AsyncAlloc as u32
            | 1 << EventKind::Free as u32
            | 1 << EventKind::AsyncFree as u32;
        if ARENA.checked_shr(u32::from(rec.kind)).unwrap_or(0) & 1 == 0 {
            return None;
        }
        match self.cache {
            Some((p, o, s)) if p == rec.pid && o == rec.device => Some(s),
            _ => self.space_index.get(&(rec.pid, rec.device)).copied(),
        }
    }

    /// Starts the prefetch walk of `rec` (see [`RegionTree::walk`](super::tree::RegionTree::walk)).
    #[inline]
    fn walk_start(&self, rec: &Record) -> (u32, Walk) {
        match self
            .arena_space(rec)
            .and_then(|s| Some((s, self.spaces.get(s as usize)?)))
        {
            Some((s, sp)) => (s, sp.arena.regions.walk(rec.addr)),
            None => (u32::MAX, Walk::DONE),
        }
    }

    /// The next step of a prefetch walk started by [`Model::walk_start`].
    #[inline]
    fn walk_on(&self, rec: &Record, (s, w): (u32, Walk)) -> (u32, Walk) {
        match self.spaces.get(s as usize) {
            Some(sp) => (s, sp.arena.regions.walk_on(w, rec.addr)),
            None => (s, Walk::DONE),
        }
    }

    /// Applies `recs` in order: the same as [`Model::apply`] on each.
    pub fn apply_batch(&mut self, recs: &[Record]) {
        self.apply_batch_with(recs, |_| None, |_, _| {});
    }

    /// Applies `recs` in order with the metadata `meta` gives for each, calling `after`
    /// with the model after each record: the same as [`Model::apply_with_meta`] on each
    /// followed by `after`, with the memory of the records ahead being loaded meanwhile.
    pub fn apply_batch_with<'m>(
        &mut self,
        recs: &[Record],
        mut meta: impl FnMut(&Record) -> Option<MetaEntry<'m>>,
        mut after: impl FnMut(&Model, &Record),
    ) {
        // Small arenas stay in the caches: no hints, no cost. (An arena growing past the
        // size within this batch gets them from the next.)
        if !self
            .spaces
            .iter()
            .any(|sp| sp.arena.regions.len() >= PREFETCH_MIN)
        {
            for r in recs {
                let m = meta(r);
                self.apply_with_meta(r, m.as_ref());
                after(self, r);
            }
            return;
        }
        // Walk `j` is in slot `j % RING`; record `i + k·STEP` takes its step `STEPS − k`
        // while record `i` is applied.
        let mut ring = [(u32::MAX, Walk::DONE); RING];
        let ahead = STEP * STEPS;
        for (j, r) in recs.iter().enumerate().take(ahead) {
            ring[j % RING] = self.walk_start(r);
        }
        for (i, r) in recs.iter().enumerate() {
            if let Some(x) = recs.get(i + ahead) {
                ring[(i + ahead) % RING] = self.walk_start(x);
            }
            for k in 1..STEPS {
                let j = i + k * STEP;
                if let Some(x) = recs.get(j) {
                    ring[j % RING] = self.walk_on(x, ring[j % RING]);
                }
            }
            let m = meta(r);
            self.apply_with_meta(r, m.as_ref());
            after(self, r);
        }
    }
}
