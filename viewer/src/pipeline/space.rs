//! What the viewer draws about one address space: plain values copied out of the model
//! under a brief lock, so the panels never hold the model while they lay out widgets.

use fragprobe_shared::format::Api;

/// One address space: a process on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SpaceKey {
    /// Process id.
    pub pid: u32,
    /// Device ordinal (-1 unknown).
    pub device: i16,
}

impl std::fmt::Display for SpaceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} · GPU {}", self.pid, self.device)
    }
}

/// How a region came to be; the map colours by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegionKind {
    /// `cuMemAlloc`/`cudaMalloc` (and pitch).
    Plain,
    /// Managed (unified) memory.
    Managed,
    /// Stream-ordered allocation from a memory pool.
    Pool,
    /// VMM: a mapped range.
    VmmMapped,
    /// VMM: reserved address range with nothing mapped there.
    VmmReserved,
    /// Imported from another process (IPC / shareable handle): not this process's memory.
    Imported,
}

impl RegionKind {
    /// Every kind, in legend order.
    pub const ALL: [RegionKind; 6] = [
        RegionKind::Plain,
        RegionKind::Managed,
        RegionKind::Pool,
        RegionKind::VmmMapped,
        RegionKind::VmmReserved,
        RegionKind::Imported,
    ];

    /// Short name for legends and tooltips.
    pub fn name(self) -> &'static str {
        match self {
            RegionKind::Plain => "plain",
            RegionKind::Managed => "managed",
            RegionKind::Pool => "pool",
            RegionKind::VmmMapped => "VMM mapped",
            RegionKind::VmmReserved => "VMM reserved (unmapped)",
            RegionKind::Imported => "imported",
        }
    }

    /// Index into [`RegionKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One region as the map aggregates it (small: millions are visited per redraw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionView {
    /// Start address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Kind.
    pub kind: RegionKind,
    /// When it was allocated (ns, the trace's clock).
    pub ts_ns: u64,
}

/// Everything known about one region (hover and pinned details).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionDetail {
    /// The region.
    pub region: RegionView,
    /// The API that created it.
    pub api: Option<Api>,
    /// Thread that allocated it.
    pub tid: u32,
    /// Stream (stream-ordered allocations), 0 otherwise.
    pub stream: u64,
    /// Sequence number of the allocating record.
    pub seq: u64,
}

/// A free range between live regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Hole {
    /// Start address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
}

/// Per-space facts the map needs besides the regions themselves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpaceInfo {
    /// Which space.
    pub key: SpaceKey,
    /// The address ranges the map can draw: the allocation arena first, then VMM
    /// reservations and managed memory when there are any (they live far apart).
    pub segments: Vec<Segment>,
    /// The largest free block inside the arena, if any.
    pub largest_hole: Option<Hole>,
    /// Live regions now.
    pub live_count: u64,
}

/// A contiguous address range the map draws as one band.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// "arena", "VMM", "managed".
    pub name: String,
    /// First address.
    pub lo: u64,
    /// One past the last address.
    pub hi: u64,
}

/// Read access to regions; implemented over the model and over plain vectors (tests).
pub trait RegionSource {
    /// The spaces there are, in a stable order.
    fn spaces(&self) -> Vec<SpaceInfo>;
    /// Calls `f` for each region overlapping `[lo, hi)` in address order.
    fn visit(&self, space: SpaceKey, lo: u64, hi: u64, f: &mut dyn FnMut(&RegionView));
    /// The region containing `addr`, with everything known about it.
    fn detail(&self, space: SpaceKey, addr: u64) -> Option<RegionDetail>;
}

/// Formats a byte count for people: `1.50 GiB`, `512 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// Signed byte count for people (`-12.00 MiB`).
pub fn human_bytes_signed(b: i64) -> String {
    if b < 0 {
        format!("-{}", human_bytes(b.unsigned_abs()))
    } else {
        human_bytes(b as u64)
    }
}

/// Formats trace nanoseconds as seconds with millisecond precision.
pub fn human_time(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_people_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(3 << 30), "3.00 GiB");
        assert_eq!(human_bytes_signed(-(64 << 20)), "-64.00 MiB");
        assert_eq!(human_time(1_500_000_000), "1.500 s");
    }
}
