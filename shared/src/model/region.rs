//! What a live object is, and the moment an event happened.

/// The kind of a live object.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegionKind {
    /// Plain device memory (`cuMemAlloc`, `cudaMalloc`). In the arena.
    Device = 1,
    /// Pitched device memory (`cuMemAllocPitch`). In the arena.
    Pitch = 2,
    /// Stream-ordered allocation from a memory pool (`cuMemAllocAsync`). In the arena.
    Async = 3,
    /// Managed (unified) memory. Counted in `managed_bytes`, not in the arena.
    Managed = 4,
    /// Imported memory (IPC, pool import): not new memory, not counted, not in the arena.
    Imported = 5,
    /// VMM virtual address reservation (no memory).
    Reservation = 6,
    /// VMM mapping of a physical handle inside a reservation.
    Mapping = 7,
    /// VMM physical memory handle (has no address; `addr` is the handle value).
    Handle = 8,
}

impl RegionKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [RegionKind] = &[
        RegionKind::Device,
        RegionKind::Pitch,
        RegionKind::Async,
        RegionKind::Managed,
        RegionKind::Imported,
        RegionKind::Reservation,
        RegionKind::Mapping,
        RegionKind::Handle,
    ];

    /// Decodes a stored value.
    pub fn from_u8(v: u8) -> Option<RegionKind> {
        RegionKind::ALL.iter().copied().find(|k| *k as u8 == v)
    }

    /// The stable name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            RegionKind::Device => "device",
            RegionKind::Pitch => "pitch",
            RegionKind::Async => "async",
            RegionKind::Managed => "managed",
            RegionKind::Imported => "imported",
            RegionKind::Reservation => "reservation",
            RegionKind::Mapping => "mapping",
            RegionKind::Handle => "handle",
        }
    }

    /// Whether regions of this kind take part in the arena (plain, pitch, async).
    pub fn in_arena(self) -> bool {
        matches!(
            self,
            RegionKind::Device | RegionKind::Pitch | RegionKind::Async
        )
    }
}

/// When something happened: the event's timestamp, sequence number and process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct When {
    /// CLOCK_MONOTONIC nanoseconds of the event.
    pub ts_ns: u64,
    /// The event's per-process sequence number.
    pub seq: u64,
    /// The process that recorded the event.
    pub pid: u32,
}

/// A live pointer region (arena or managed/imported map). The arena keeps the free gap after
/// each region next to it (see `RegionTree`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub size: u64,
    pub seq: u64,
    pub ts_ns: u64,
    pub aux: u64,
    pub aux2: u64,
    pub api: u16,
    pub kind: RegionKind,
}

/// `size`, shortened so that `addr + size` does not pass `u64::MAX`.
#[inline]
pub(crate) fn clamp_size(addr: u64, size: u64) -> u64 {
    size.min(u64::MAX - addr)
}
