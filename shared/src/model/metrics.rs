//! The figures the model keeps up to date after every event.

use super::region::{RegionKind, When};

/// Fragmentation ratio `1 − largest_free / total_free`; 0 when nothing is free.
///
/// 0 means all free memory is one block; values near 1 mean the free memory is scattered in
/// many small blocks.
pub fn frag_ratio(largest_free: u64, total_free: u64) -> f64 {
    if total_free == 0 {
        return 0.0;
    }
    (1.0 - largest_free as f64 / total_free as f64).clamp(0.0, 1.0)
}

/// Live totals of a space (one process on one device) or of a device (sum of its spaces).
///
/// Byte sums use wrapping arithmetic, so nonsense input (sizes near `u64::MAX`) cannot
/// overflow; for real traces the sums are exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Device memory live: plain + pitch + async (pool) allocations + VMM physical handles
    /// that are still live (not yet both released and unmapped everywhere).
    pub live_bytes: u64,
    /// Number of objects counted in `live_bytes`.
    pub live_count: u64,
    /// Managed (unified) memory, counted separately: it occupies device memory only when
    /// touched, and may be migrated out.
    pub managed_bytes: u64,
    /// Number of managed allocations.
    pub managed_count: u64,
    /// Bytes of VMM virtual ranges currently mapped to a handle.
    pub mapped_bytes: u64,
    /// Number of live mappings.
    pub mapping_count: u64,
    /// Bytes of VMM virtual address space reserved.
    pub reserved_bytes: u64,
    /// Number of live reservations.
    pub reservation_count: u64,
    /// Imported memory (IPC, shareable handles, pool imports): not new memory.
    pub imported_bytes: u64,
    /// Number of imported objects.
    pub imported_count: u64,
}

impl Totals {
    /// Adds (`add`) or removes one object of `kind` and `bytes`.
    #[inline]
    pub(crate) fn account(&mut self, kind: RegionKind, bytes: u64, add: bool) {
        let (b, c) = match kind {
            RegionKind::Device | RegionKind::Pitch | RegionKind::Async | RegionKind::Handle => {
                (&mut self.live_bytes, &mut self.live_count)
            }
            RegionKind::Managed => (&mut self.managed_bytes, &mut self.managed_count),
            RegionKind::Imported => (&mut self.imported_bytes, &mut self.imported_count),
            RegionKind::Reservation => (&mut self.reserved_bytes, &mut self.reservation_count),
            RegionKind::Mapping => (&mut self.mapped_bytes, &mut self.mapping_count),
        };
        if add {
            *b = b.wrapping_add(bytes);
            *c = c.wrapping_add(1);
        } else {
            *b = b.wrapping_sub(bytes);
            *c = c.wrapping_sub(1);
        }
    }

    /// Adds (`add`) or removes all of `o`, field by field.
    pub(crate) fn merge(&mut self, o: &Totals, add: bool) {
        let f = |a: &mut u64, b: u64| {
            *a = if add {
                a.wrapping_add(b)
            } else {
                a.wrapping_sub(b)
            };
        };
        f(&mut self.live_bytes, o.live_bytes);
        f(&mut self.live_count, o.live_count);
        f(&mut self.managed_bytes, o.managed_bytes);
        f(&mut self.managed_count, o.managed_count);
        f(&mut self.mapped_bytes, o.mapped_bytes);
        f(&mut self.mapping_count, o.mapping_count);
        f(&mut self.reserved_bytes, o.reserved_bytes);
        f(&mut self.reservation_count, o.reservation_count);
        f(&mut self.imported_bytes, o.imported_bytes);
        f(&mut self.imported_count, o.imported_count);
    }
}

/// The arena's free-space figures at one moment (see the module documentation for the
/// arena's definition).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaFigures {
    /// Lowest address of any plain/pitch/async allocation ever seen in the space.
    pub base: u64,
    /// One past the arena's last byte: `max(base + device total, highest end ever seen)`.
    pub end: u64,
    /// Bytes of plain/pitch/async allocations live inside the arena.
    pub live: u64,
    /// Number of live plain/pitch/async regions.
    pub regions: u64,
    /// Number of free blocks (maximal gaps, including before the first and after the last
    /// live region).
    pub free_blocks: u64,
    /// The largest free block.
    pub largest_free: u64,
    /// All free bytes: `end − base − live`.
    pub total_free: u64,
}

impl ArenaFigures {
    /// [`frag_ratio`] of these figures.
    pub fn ratio(&self) -> f64 {
        frag_ratio(self.largest_free, self.total_free)
    }
    /// Bytes the arena spans.
    pub fn len(&self) -> u64 {
        self.end - self.base
    }
    /// Whether the arena spans no bytes.
    pub fn is_empty(&self) -> bool {
        self.end == self.base
    }
}

/// Historical figures: peaks and extremes, with when they happened.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Highest `live_bytes` seen after any event.
    pub peak_live: u64,
    /// When `peak_live` was first reached (`None` while it is 0).
    pub peak_at: Option<When>,
    /// Fragmentation ratio at the moment of the peak.
    pub ratio_at_peak: f64,
    /// Largest free block at the moment of the peak (`None` without an arena).
    pub largest_free_at_peak: Option<u64>,
    /// Highest fragmentation ratio seen.
    pub max_ratio: f64,
    /// When `max_ratio` was first reached.
    pub max_ratio_at: Option<When>,
    /// Smallest largest-free-block seen (`None` until the arena exists).
    pub min_largest_free: Option<u64>,
    /// When `min_largest_free` was first reached.
    pub min_largest_free_at: Option<When>,
    /// Highest managed bytes seen.
    pub peak_managed: u64,
    /// Highest mapped bytes seen.
    pub peak_mapped: u64,
    /// Highest reserved bytes seen.
    pub peak_reserved: u64,
}

impl Summary {
    /// Folds in the state after one event; `ratio` is the arena's fragmentation ratio (0
    /// without an arena).
    #[inline]
    pub(crate) fn observe(
        &mut self,
        t: &Totals,
        arena: Option<&ArenaFigures>,
        ratio: f64,
        now: When,
    ) {
        if t.live_bytes > self.peak_live {
            self.peak_live = t.live_bytes;
            self.peak_at = Some(now);
            self.ratio_at_peak = ratio;
            self.largest_free_at_peak = arena.map(|a| a.largest_free);
        }
        if ratio > self.max_ratio {
            self.max_ratio = ratio;
            self.max_ratio_at = Some(now);
        }
        if let Some(a) = arena {
            if self.min_largest_free.is_none_or(|m| a.largest_free < m) {
                self.min_largest_free = Some(a.largest_free);
                self.min_largest_free_at = Some(now);
            }
        }
        self.peak_managed = self.peak_managed.max(t.managed_bytes);
        self.peak_mapped = self.peak_mapped.max(t.mapped_bytes);
        self.peak_reserved = self.peak_reserved.max(t.reserved_bytes);
    }
}

/// A space's or device's state at one moment (at process exit, or now).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// When it was taken (`None`: now, after the last event).
    pub at: Option<When>,
    /// Live totals.
    pub totals: Totals,
    /// Arena figures (`None` without an arena).
    pub arena: Option<ArenaFigures>,
}

impl Snapshot {
    /// The fragmentation ratio of the snapshot (0 without an arena).
    pub fn ratio(&self) -> f64 {
        self.arena.map_or(0.0, |a| a.ratio())
    }
}

/// Event counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Every record given to the model.
    pub events: u64,
    /// Records with a kind or api this build does not know (skipped).
    pub unknown: u64,
    /// Records per [`EventKind`](crate::format::EventKind) value (index = the kind's u16).
    pub by_kind: [u64; 32],
    /// Successful `Alloc`, `ManagedAlloc`, `AsyncAlloc` and `MemCreate` calls.
    pub ok_allocs: u64,
    /// Failed allocation calls (the same kinds, result ≠ 0).
    pub failed_allocs: u64,
    /// All failed calls (any call kind with result ≠ 0), allocations included.
    pub failed_calls: u64,
    /// Calls that gave device memory back: successful `Free` and `AsyncFree`, and VMM
    /// handles freed (by `MemRelease` of an unmapped handle, or by the last `MemUnmap`
    /// of one released while mapped, as llama.cpp does).
    pub frees: u64,
    /// Successful `MemRelease` calls, whether or not the memory went back then.
    pub releases: u64,
    /// Events the producer reported lost (sum of `Loss` records' sizes).
    pub lost: u64,
    /// Allocation records skipped as duplicates of a live object with the same seq
    /// (after a resync).
    pub duplicates: u64,
    /// Frees of unknown addresses inside a resync window: benign, not anomalies.
    pub benign_frees: u64,
    /// Anomalies of all types (see [`Anomalies`](super::Anomalies)).
    pub anomalies: u64,
}

impl Counts {
    /// Records of one kind.
    pub fn of(&self, kind: crate::format::EventKind) -> u64 {
        self.by_kind.get(kind as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_is_zero_without_free_and_for_one_block() {
        assert_eq!(frag_ratio(0, 0), 0.0);
        assert_eq!(frag_ratio(100, 100), 0.0);
        assert!((frag_ratio(25, 100) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn summary_keeps_first_peak_and_its_ratio() {
        let mut s = Summary::default();
        let a = ArenaFigures {
            largest_free: 50,
            total_free: 100,
            ..Default::default()
        };
        let t = Totals {
            live_bytes: 10,
            ..Default::default()
        };
        let w1 = When {
            ts_ns: 1,
            seq: 1,
            pid: 1,
        };
        s.observe(&t, Some(&a), a.ratio(), w1);
        s.observe(
            &t,
            Some(&a),
            a.ratio(),
            When {
                ts_ns: 2,
                seq: 2,
                pid: 1,
            },
        );
        assert_eq!(s.peak_live, 10);
        assert_eq!(s.peak_at, Some(w1));
        assert!((s.ratio_at_peak - 0.5).abs() < 1e-12);
        assert_eq!(s.min_largest_free, Some(50));
    }
}
