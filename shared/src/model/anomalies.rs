//! Inconsistencies in the event stream: counted per type with the first few examples, never
//! panicked on. Most come from lost events or a producer bug; the model's state after each
//! one is documented on its type.

/// A type of anomaly and what the model did about it.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AnomalyKind {
    /// `Free`/`AsyncFree` of an address that is not a live allocation (outside a resync
    /// window). Nothing changes.
    FreeUnknown = 0,
    /// A successful allocation at an address that is already live. The old region is
    /// dropped (it must have been freed unseen) and the new one added.
    DoubleAlloc = 1,
    /// A successful allocation overlapping live regions (not at their start). They are
    /// dropped and the new one added.
    AllocOverlap = 2,
    /// A successful allocation with address 0 or size 0 (except `cudaMalloc(0)`'s legal
    /// `addr = 0, size = 0`). Ignored.
    BadAllocRecord = 3,
    /// `MemRelease` of a handle that is not live. Nothing changes.
    ReleaseUnknown = 4,
    /// `MemRelease` of a handle already released (still kept alive by mappings).
    DoubleRelease = 5,
    /// `MemCreate` returned a handle value that is live. The old handle's memory is dropped,
    /// the new one takes its place (and its mappings).
    HandleReused = 6,
    /// `MemMap` of a handle that is not live. The mapping is kept (mapped bytes count) but
    /// holds no physical memory.
    MapUnknownHandle = 7,
    /// `MemMap` of a handle already released. The mapping is kept and holds the handle.
    MapReleasedHandle = 8,
    /// `MemMap` of a range not inside one reservation. The mapping is kept.
    MapOutsideReservation = 9,
    /// `MemMap` over bytes already mapped. The old mappings are cut back first.
    MapOverMapped = 10,
    /// `MemUnmap` of a range that is (partly) not mapped. The mapped parts are unmapped.
    UnmapUnmapped = 11,
    /// `AddressFree` of an address that is not the start of a reservation. Nothing changes.
    AddressFreeUnknown = 12,
    /// `AddressFree` of a reservation that still has mappings: they are unmapped.
    AddressFreeMapped = 13,
    /// `AddressReserve` overlapping live reservations: they (and their mappings) are
    /// dropped first.
    ReserveOverlap = 14,
    /// `ResyncEntry`/`ResyncEnd` without a `ResyncBegin` of that process. Ignored.
    ResyncWithoutBegin = 15,
    /// A `ResyncEntry` whose class (`result`) is unknown. Ignored.
    BadResyncEntry = 16,
    /// `ProcessStart` of a pid whose earlier process still had live state (its exit was
    /// not seen). The old state is dropped.
    RestartedLiveProcess = 17,
}

/// Number of anomaly types.
pub const ANOMALY_KINDS: usize = 18;

/// Examples kept per type.
pub const EXAMPLES_KEPT: usize = 8;

impl AnomalyKind {
    /// Every type, in order.
    pub const ALL: [AnomalyKind; ANOMALY_KINDS] = [
        AnomalyKind::FreeUnknown,
        AnomalyKind::DoubleAlloc,
        AnomalyKind::AllocOverlap,
        AnomalyKind::BadAllocRecord,
        AnomalyKind::ReleaseUnknown,
        AnomalyKind::DoubleRelease,
        AnomalyKind::HandleReused,
        AnomalyKind::MapUnknownHandle,
        AnomalyKind::MapReleasedHandle,
        AnomalyKind::MapOutsideReservation,
        AnomalyKind::MapOverMapped,
        AnomalyKind::UnmapUnmapped,
        AnomalyKind::AddressFreeUnknown,
        AnomalyKind::AddressFreeMapped,
        AnomalyKind::ReserveOverlap,
        AnomalyKind::ResyncWithoutBegin,
        AnomalyKind::BadResyncEntry,
        AnomalyKind::RestartedLiveProcess,
    ];

    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::FreeUnknown => "free_unknown",
            AnomalyKind::DoubleAlloc => "double_alloc",
            AnomalyKind::AllocOverlap => "alloc_overlap",
            AnomalyKind::BadAllocRecord => "bad_alloc_record",
            AnomalyKind::ReleaseUnknown => "release_unknown",
            AnomalyKind::DoubleRelease => "double_release",
            AnomalyKind::HandleReused => "handle_reused",
            AnomalyKind::MapUnknownHandle => "map_unknown_handle",
            AnomalyKind::MapReleasedHandle => "map_released_handle",
            AnomalyKind::MapOutsideReservation => "map_outside_reservation",
            AnomalyKind::MapOverMapped => "map_over_mapped",
            AnomalyKind::UnmapUnmapped => "unmap_unmapped",
            AnomalyKind::AddressFreeUnknown => "address_free_unknown",
            AnomalyKind::AddressFreeMapped => "address_free_mapped",
            AnomalyKind::ReserveOverlap => "reserve_overlap",
            AnomalyKind::ResyncWithoutBegin => "resync_without_begin",
            AnomalyKind::BadResyncEntry => "bad_resync_entry",
            AnomalyKind::RestartedLiveProcess => "restarted_live_process",
        }
    }

    /// Decodes a stored value.
    pub fn from_u8(v: u8) -> Option<AnomalyKind> {
        AnomalyKind::ALL.get(v as usize).copied()
    }
}

/// One example of an anomaly: the event that showed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Example {
    /// The event's seq.
    pub seq: u64,
    /// The address or handle involved.
    pub addr: u64,
    /// The process.
    pub pid: u32,
    /// The event's timestamp.
    pub ts_ns: u64,
}

/// Anomaly counts per type, with the first [`EXAMPLES_KEPT`] examples of each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Anomalies {
    counts: [u64; ANOMALY_KINDS],
    examples: [Vec<Example>; ANOMALY_KINDS],
}

impl Anomalies {
    pub(crate) fn add(&mut self, kind: AnomalyKind, ex: Example) {
        let i = kind as usize;
        self.counts[i] += 1;
        if self.examples[i].len() < EXAMPLES_KEPT {
            self.examples[i].push(ex);
        }
    }

    pub(crate) fn set(&mut self, kind: AnomalyKind, count: u64, examples: Vec<Example>) {
        self.counts[kind as usize] = count;
        self.examples[kind as usize] = examples;
    }

    /// How many of one type.
    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.counts[kind as usize]
    }

    /// All anomalies.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The first examples of one type.
    pub fn examples(&self, kind: AnomalyKind) -> &[Example] {
        &self.examples[kind as usize]
    }

    /// `(type, count)` for every type seen at least once.
    pub fn nonzero(&self) -> impl Iterator<Item = (AnomalyKind, u64)> + '_ {
        AnomalyKind::ALL
            .iter()
            .map(|k| (*k, self.count(*k)))
            .filter(|(_, c)| *c > 0)
    }
}
