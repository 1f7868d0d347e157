//! Where simulated addresses and handles live.
//!
//! ```text
//! legacy 32-bit window   [0x4000_0000, 0x1_0000_0000)                 per process
//! managed memory         [0x1000_0000_0000, +4 TiB)                    per process
//! VMM reservations, d    [0x2000_0000_0000 + d·4 TiB, +4 TiB)          per process
//! device arena, d        [0x7000_0000_0000 + d·512 GiB, +device size)  per process
//! ```
//!
//! Each process has its own address space (as with a real GPU, where device virtual
//! addresses are per process); only the physical usage is shared between processes.

use crate::arena::round_up;

pub const DEVICE_ARENA_BASE: u64 = 0x7000_0000_0000;
pub const DEVICE_ARENA_STRIDE: u64 = 1 << 39;
pub const VMM_VA_BASE: u64 = 0x2000_0000_0000;
pub const VMM_VA_STRIDE: u64 = 1 << 42;
pub const MANAGED_BASE: u64 = 0x1000_0000_0000;
pub const MANAGED_SIZE: u64 = 1 << 42;
pub const LEGACY_BASE: u64 = 0x4000_0000;
pub const LEGACY_SIZE: u64 = 0xC000_0000;

/// Alignment and size granularity of `cuMemAlloc`-family allocations.
pub const ALLOC_ALIGN: u64 = 512;
/// Pitch alignment of `cuMemAllocPitch`.
pub const PITCH_ALIGN: u64 = 512;
/// VMM page size: `cuMemGetAllocationGranularity`, reservation and handle granularity.
pub const VMM_GRANULARITY: u64 = 2 << 20;
/// Stream-ordered pools take device memory in multiples of this.
pub const POOL_CHUNK: u64 = 2 << 20;

pub fn device_arena_base(d: usize) -> u64 {
    DEVICE_ARENA_BASE + d as u64 * DEVICE_ARENA_STRIDE
}

pub fn vmm_va_base(d: usize) -> u64 {
    VMM_VA_BASE + d as u64 * VMM_VA_STRIDE
}

/// Allocation size after rounding to [`ALLOC_ALIGN`].
pub fn alloc_len(size: u64) -> u64 {
    round_up(size, ALLOC_ALIGN)
}

/// Handle kinds, kept in bits 40..48 of every handle value so that a handle of one kind is
/// never accepted as another and never equals `CU_STREAM_LEGACY` (1) or
/// `CU_STREAM_PER_THREAD` (2).
pub const TAG_CONTEXT: u64 = 0xC1;
pub const TAG_STREAM: u64 = 0xC2;
pub const TAG_EVENT: u64 = 0xC3;
pub const TAG_POOL: u64 = 0xC4;
pub const TAG_MEM_HANDLE: u64 = 0xC5;

pub fn make_handle(tag: u64, id: u64) -> u64 {
    (tag << 40) | id
}

pub fn handle_tag(h: u64) -> u64 {
    h >> 40
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::MAX_DEVICES;

    #[test]
    fn ranges_do_not_overlap() {
        let mut ranges = vec![(LEGACY_BASE, LEGACY_SIZE), (MANAGED_BASE, MANAGED_SIZE)];
        for d in 0..MAX_DEVICES {
            ranges.push((vmm_va_base(d), VMM_VA_STRIDE));
            ranges.push((device_arena_base(d), DEVICE_ARENA_STRIDE));
        }
        ranges.sort();
        for w in ranges.windows(2) {
            assert!(
                w[0].0 + w[0].1 <= w[1].0,
                "{:x?} overlaps {:x?}",
                w[0],
                w[1]
            );
        }
        const { assert!(LEGACY_BASE + LEGACY_SIZE <= 1 << 32) };
        let last = ranges.last().unwrap();
        assert!(last.0 + last.1 <= 0x7fff_ffff_ffff);
    }
}
