//! A space: one process's allocations on one device.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};

use super::arena::{Arena, Insert};
use super::metrics::{ArenaFigures, Snapshot, Summary, Totals};
use super::region::Region;
use super::series::SeriesSet;
use super::{DeviceId, SpaceId};

/// One process's view of one device: its arena, managed and imported memory, and the
/// VMM objects attributed to it.
#[derive(Clone, Debug)]
pub struct Space {
    pub(crate) id: SpaceId,
    pub(crate) pid: u32,
    pub(crate) ordinal: i16,
    pub(crate) device: DeviceId,
    pub(crate) process: u32,
    pub(crate) arena: Arena,
    /// Managed and imported pointer regions (not in the arena).
    pub(crate) other: BTreeMap<u64, Region>,
    pub(crate) totals: Totals,
    pub(crate) summary: Summary,
    pub(crate) exit: Option<Snapshot>,
    pub(crate) series: SeriesSet,
    /// The key this space has in its device's arena set (its largest free block).
    pub(crate) set_key: Option<u64>,
}

impl Space {
    pub(crate) fn new(
        id: SpaceId,
        pid: u32,
        ordinal: i16,
        device: DeviceId,
        process: u32,
        cap: usize,
    ) -> Space {
        Space {
            id,
            pid,
            ordinal,
            device,
            process,
            arena: Arena::default(),
            other: BTreeMap::new(),
            totals: Totals::default(),
            summary: Summary::default(),
            exit: None,
            series: SeriesSet::new(cap),
            set_key: None,
        }
    }

    /// This space's id.
    pub fn id(&self) -> SpaceId {
        self.id
    }
    /// The process.
    pub fn pid(&self) -> u32 {
        self.pid
    }
    /// The device ordinal as the process saw it (-1 = unknown).
    pub fn ordinal(&self) -> i16 {
        self.ordinal
    }
    /// The device this space belongs to.
    pub fn device(&self) -> DeviceId {
        self.device
    }
    /// Live totals now.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }
    /// The arena's figures now (`None` until the first plain/pitch/async allocation).
    pub fn arena(&self) -> Option<ArenaFigures> {
        self.arena.figures()
    }
    /// Peaks and extremes.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }
    /// The state just before the process's last exit (`None` if it has not exited).
    pub fn exit_snapshot(&self) -> Option<&Snapshot> {
        self.exit.as_ref()
    }
    /// The time series.
    pub fn series(&self) -> &SeriesSet {
        &self.series
    }
    /// Whether anything is live in the arena or the managed/imported map.
    pub(crate) fn has_pointers(&self) -> bool {
        !self.arena.regions.is_empty() || !self.other.is_empty()
    }
}

/// Inserts a managed/imported region, handling duplicates and overlaps like the arena.
pub(crate) fn insert_other(map: &mut BTreeMap<u64, Region>, a: u64, r: Region) -> Insert {
    let e = a + r.size;
    if let Some(x) = map.get(&a) {
        if x.seq == r.seq {
            return Insert::Duplicate;
        }
    }
    let mut starts = Vec::new();
    if let Some((&ps, pr)) = map.range(..a).next_back() {
        if ps + pr.size > a {
            starts.push(ps);
        }
    }
    if e > a {
        starts.extend(
            map.range((Excluded(a), Unbounded))
                .take_while(|(k, _)| **k < e)
                .map(|(k, _)| *k),
        );
    }
    let mut removed = Vec::with_capacity(starts.len());
    for s in starts {
        if let Some(x) = map.remove(&s) {
            removed.push((s, x));
        }
    }
    let old = map.insert(a, r);
    let double = old.is_some();
    if let Some(x) = old {
        removed.push((a, x));
    }
    if removed.is_empty() {
        return Insert::Inserted;
    }
    Insert::Replaced { removed, double }
}
