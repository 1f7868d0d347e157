//! Why an allocation failed: capacity, fragmentation or something else.

use crate::format::EventKind;

/// The verdict on one failed allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The request exceeded the free memory: the arena's total free, or the driver's free
    /// bytes from the last `cuMemGetInfo`.
    Capacity,
    /// Enough memory was free in total but no free block was large enough.
    Fragmentation,
    /// Enough was free and a block fit, yet the call failed: other processes (see NVML),
    /// an injected failure, an invalid argument, or a pool limit.
    Other,
}

impl Verdict {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Capacity => "capacity",
            Verdict::Fragmentation => "fragmentation",
            Verdict::Other => "other",
        }
    }
}

/// Judges a failed request of `request` bytes.
///
/// `arena` is `(total_free, largest_free)` of the space's arena, given only for allocations
/// that are placed in it (plain, pitch, async) and only once the arena exists. `driver_free`
/// is the free bytes of the device's last `cuMemGetInfo` answer, if any.
pub fn verdict(request: u64, arena: Option<(u64, u64)>, driver_free: Option<u64>) -> Verdict {
    if driver_free.is_some_and(|f| request > f) {
        return Verdict::Capacity;
    }
    match arena {
        Some((total, _)) if request > total => Verdict::Capacity,
        Some((_, largest)) if request > largest => Verdict::Fragmentation,
        _ => Verdict::Other,
    }
}

/// A failed allocation call and the state at that moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailedAlloc {
    /// The process.
    pub pid: u32,
    /// The device ordinal of the record.
    pub ordinal: i16,
    /// The event's seq.
    pub seq: u64,
    /// The event's timestamp.
    pub ts_ns: u64,
    /// Which allocation kind failed.
    pub kind: EventKind,
    /// The API the program called (raw value).
    pub api: u16,
    /// Bytes requested.
    pub size: u64,
    /// The result code as returned.
    pub result: u32,
    /// The arena's total free bytes then (`None` without an arena).
    pub total_free: Option<u64>,
    /// The arena's largest free block then.
    pub largest_free: Option<u64>,
    /// The driver's free bytes from the last `cuMemGetInfo` of the device.
    pub driver_free: Option<u64>,
    /// The device's used bytes from the last NVML sample.
    pub nvml_used: Option<u64>,
    /// The verdict.
    pub verdict: Verdict,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_free_is_capacity() {
        assert_eq!(verdict(101, Some((100, 100)), None), Verdict::Capacity);
        assert_eq!(verdict(50, Some((100, 100)), Some(40)), Verdict::Capacity);
        assert_eq!(verdict(50, None, Some(40)), Verdict::Capacity);
    }

    #[test]
    fn fits_in_total_but_not_in_a_block_is_fragmentation() {
        assert_eq!(verdict(60, Some((100, 50)), None), Verdict::Fragmentation);
        assert_eq!(
            verdict(60, Some((100, 50)), Some(1000)),
            Verdict::Fragmentation
        );
    }

    #[test]
    fn fitting_request_is_other() {
        assert_eq!(verdict(50, Some((100, 50)), None), Verdict::Other);
        assert_eq!(verdict(50, None, None), Verdict::Other);
        assert_eq!(verdict(50, None, Some(50)), Verdict::Other);
    }
}
