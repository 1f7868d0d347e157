//! Allocator-level memory and fragmentation figures.
//!
//! Several definitions of "fragmentation" are in use; each figure here says which one it
//! is:
//!
//! | figure | definition |
//! |---|---|
//! | [`Figures::unallocated_fraction`] | reserved-but-unallocated: `1 − allocated / reserved` |
//! | [`PeakFigures::unallocated_at_peak_fraction`] | the same, at the moment reserved peaked |
//! | [`PeakFigures::gmlake_utilization`] | GMLake (ASPLOS '24): `peak active / peak reserved` |
//! | [`Figures::non_releasable`] | PyTorch's `inactive_split_bytes`: free blocks in segments that also hold other blocks; `empty_cache()` cannot return them |
//! | [`Figures::external_fragmentation`] | `1 − largest free block / total free` (0 when nothing is free) |
//! | [`Figures::memory_viz_fragmentation`] | MemoryViz's console metric: `Σ free gap² / reserved²` |
//! | [`Figures::internal_waste`] | rounding loss: `Σ (size − requested)` over allocated blocks |

use super::sim::allocator::Stats;
use super::snapshot::{BlockState, PoolId, PoolKind, Segment};

/// Free space of one pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolFree {
    /// Small or large.
    pub pool: PoolKind,
    /// Memory pool id.
    pub pool_id: PoolId,
    /// Largest free block.
    pub largest_free: u64,
    /// All free bytes.
    pub total_free: u64,
    /// Segments (mapped ranges for expandable segments).
    pub segments: usize,
    /// Reserved bytes.
    pub reserved: u64,
}

/// Figures of one allocator state (one device's segments).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Figures {
    /// Segments (each mapped range of an expandable segment counts once).
    pub segments: usize,
    /// Bytes reserved from the device (`memory_reserved`).
    pub reserved: u64,
    /// Bytes of blocks handed out (`memory_allocated`: rounded sizes).
    pub allocated: u64,
    /// Bytes the program asked for, of allocated blocks.
    pub requested: u64,
    /// Allocated plus pending-free bytes (PyTorch's "active").
    pub active: u64,
    /// Free (inactive) bytes inside segments.
    pub free: u64,
    /// PyTorch's `inactive_split_bytes`: free blocks in non-expandable segments that are
    /// split (hold more than one block). `empty_cache()` cannot release them.
    pub non_releasable: u64,
    /// Rounding loss of allocated blocks: `Σ (size − requested_size)`.
    pub internal_waste: u64,
    /// Largest free block over all pools.
    pub largest_free: u64,
    /// Largest free block of the small pools.
    pub largest_free_small: u64,
    /// Largest free block of the large pools.
    pub largest_free_large: u64,
    /// Σ over free gaps (runs of non-active bytes inside a segment) of gap², as f64.
    pub free_gap_sq_sum: f64,
    /// Per (pool kind, pool id).
    pub per_pool: Vec<PoolFree>,
}

fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

impl Figures {
    /// Reserved-but-unallocated fraction: `1 − allocated / reserved` (0 when nothing is
    /// reserved).
    pub fn unallocated_fraction(&self) -> f64 {
        if self.reserved == 0 {
            0.0
        } else {
            1.0 - ratio(self.allocated as f64, self.reserved as f64)
        }
    }

    /// External fragmentation: `1 − largest_free / total_free` (0 when nothing is free).
    pub fn external_fragmentation(&self) -> f64 {
        if self.free == 0 {
            0.0
        } else {
            1.0 - ratio(self.largest_free as f64, self.free as f64)
        }
    }

    /// MemoryViz's console metric: `Σ gap² / reserved²` (gaps are runs of bytes not held by
    /// an allocated or pending-free block inside a segment).
    pub fn memory_viz_fragmentation(&self) -> f64 {
        let r = self.reserved as f64;
        ratio(self.free_gap_sq_sum, r * r)
    }
}

/// Computes [`Figures`] for the segments of one device.
pub fn figures(segments: &[Segment]) -> Figures {
    let mut f = Figures {
        segments: segments.len(),
        ..Figures::default()
    };
    for s in segments {
        f.reserved += s.total_size;
        let split = s.blocks.len() > 1;
        let mut gap = 0u64;
        let mut seg_largest = 0u64;
        let mut seg_free = 0u64;
        for b in &s.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    f.allocated += b.size;
                    f.active += b.size;
                    f.requested += b.requested_size;
                    f.internal_waste += b.size.saturating_sub(b.requested_size);
                }
                BlockState::ActivePendingFree => f.active += b.size,
                BlockState::Inactive => {
                    f.free += b.size;
                    seg_free += b.size;
                    seg_largest = seg_largest.max(b.size);
                    if split && !s.is_expandable {
                        f.non_releasable += b.size;
                    }
                }
            }
            if b.state.is_active() {
                f.free_gap_sq_sum += (gap as f64) * (gap as f64);
                gap = 0;
            } else {
                gap += b.size;
            }
        }
        f.free_gap_sq_sum += (gap as f64) * (gap as f64);
        f.largest_free = f.largest_free.max(seg_largest);
        match s.pool {
            PoolKind::Small => f.largest_free_small = f.largest_free_small.max(seg_largest),
            PoolKind::Large => f.largest_free_large = f.largest_free_large.max(seg_largest),
        }
        let entry = match f
            .per_pool
            .iter_mut()
            .position(|p| p.pool == s.pool && p.pool_id == s.pool_id)
        {
            Some(i) => &mut f.per_pool[i],
            None => {
                f.per_pool.push(PoolFree {
                    pool: s.pool,
                    pool_id: s.pool_id,
                    largest_free: 0,
                    total_free: 0,
                    segments: 0,
                    reserved: 0,
                });
                f.per_pool.last_mut().expect("just pushed")
            }
        };
        entry.largest_free = entry.largest_free.max(seg_largest);
        entry.total_free += seg_free;
        entry.segments += 1;
        entry.reserved += s.total_size;
    }
    f.per_pool.sort_by_key(|p| (p.pool_id, p.pool));
    f
}

/// Peak figures over a replayed trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PeakFigures {
    /// Highest reserved bytes.
    pub peak_reserved: u64,
    /// Highest allocated bytes.
    pub peak_allocated: u64,
    /// Highest active (allocated + pending-free) bytes.
    pub peak_active: u64,
    /// Highest requested bytes.
    pub peak_requested: u64,
    /// The most bytes allocated while reserved stood at its peak.
    pub allocated_at_peak_reserved: u64,
    /// Highest non-releasable (`inactive_split`) bytes.
    pub peak_non_releasable: u64,
}

impl PeakFigures {
    /// Reserved-but-unallocated at the peak: `1 − allocated_at_peak_reserved /
    /// peak_reserved`.
    pub fn unallocated_at_peak_fraction(&self) -> f64 {
        if self.peak_reserved == 0 {
            0.0
        } else {
            1.0 - ratio(
                self.allocated_at_peak_reserved as f64,
                self.peak_reserved as f64,
            )
        }
    }

    /// GMLake's utilisation: `peak_active / peak_reserved`.
    pub fn gmlake_utilization(&self) -> f64 {
        ratio(self.peak_active as f64, self.peak_reserved as f64)
    }

    /// GMLake's fragmentation: `1 − peak_active / peak_reserved`.
    pub fn gmlake_fragmentation(&self) -> f64 {
        if self.peak_reserved == 0 {
            0.0
        } else {
            1.0 - self.gmlake_utilization()
        }
    }
}

impl From<&Stats> for PeakFigures {
    fn from(s: &Stats) -> Self {
        PeakFigures {
            peak_reserved: s.reserved_peak,
            peak_allocated: s.allocated_peak,
            peak_active: s.active_peak,
            peak_requested: s.requested_peak,
            allocated_at_peak_reserved: s.allocated_at_reserved_peak,
            peak_non_releasable: s.inactive_split_peak,
        }
    }
}

/// The caching allocator's side of an OOM: a failed request judged against the allocator
/// state at that moment (a snapshot dumped at the OOM), with PyTorch's own `device_free`.
///
/// The same rule as the driver-level verdict ([`crate::model::verdict()`]), one layer up:
/// free in total is what the driver still has plus what PyTorch holds unallocated in its
/// segments; the largest piece is the larger of the driver's free bytes and the largest
/// free block inside the segments. (An expandable segment can also grow its free tail
/// into the driver's free memory; that is not counted as one piece here.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorOom {
    /// Bytes asked for (PyTorch's rounded size).
    pub request: u64,
    /// The device's free bytes, as PyTorch saw them.
    pub device_free: u64,
    /// Reserved but unallocated bytes inside PyTorch's segments.
    pub cached_free: u64,
    /// Largest free block inside the segments.
    pub largest_free: u64,
    /// Capacity, fragmentation or other.
    pub verdict: crate::model::Verdict,
}

/// Judges an OOM of `request` bytes with `device_free` bytes free on the device, against
/// the figures of that device's segments at the OOM.
pub fn allocator_oom(request: u64, device_free: u64, f: &Figures) -> AllocatorOom {
    let cached_free = f.reserved.saturating_sub(f.allocated);
    let total = device_free.saturating_add(cached_free);
    let largest = f.largest_free.max(device_free);
    AllocatorOom {
        request,
        device_free,
        cached_free,
        largest_free: f.largest_free,
        verdict: crate::model::verdict(request, Some((total, largest)), None),
    }
}

#[cfg(test)]
mod tests {
    use crate::model::Verdict;

    #[test]
    fn an_oom_is_judged_with_the_free_memory_inside_the_segments() {
        const MIB: u64 = 1 << 20;
        // 52 segments of 20 MiB, each with a live 12 MiB block and an 8 MiB hole
        let f = Figures {
            reserved: 52 * 20 * MIB,
            allocated: 52 * 12 * MIB,
            largest_free: 8 * MIB,
            ..Figures::default()
        };
        let o = allocator_oom(915 * MIB, 706 * MIB, &f);
        assert_eq!(
            (o.cached_free, o.verdict),
            (416 * MIB, Verdict::Fragmentation)
        );
        assert_eq!(
            allocator_oom(1200 * MIB, 706 * MIB, &f).verdict,
            Verdict::Capacity
        );
        assert_eq!(
            allocator_oom(700 * MIB, 706 * MIB, &f).verdict,
            Verdict::Other
        );
        let one_hole = Figures {
            largest_free: 416 * MIB,
            ..f.clone()
        };
        assert_eq!(
            allocator_oom(400 * MIB, 0, &one_hole).verdict,
            Verdict::Other
        );
    }

    use super::*;
    use crate::torch::snapshot::Block;

    fn seg(addr: u64, pool: PoolKind, blocks: &[(u64, BlockState, u64)]) -> Segment {
        let mut at = addr;
        let blocks = blocks
            .iter()
            .map(|&(size, state, req)| {
                let b = Block {
                    address: at,
                    size,
                    requested_size: req,
                    state,
                    stack: 0,
                };
                at += size;
                b
            })
            .collect::<Vec<_>>();
        Segment {
            device: 0,
            address: addr,
            total_size: at - addr,
            stream: 0,
            pool,
            pool_id: (0, 0),
            is_expandable: false,
            stack: 0,
            blocks,
        }
    }

    #[test]
    fn every_definition_on_a_hand_built_state() {
        use BlockState::*;
        let segs = [
            // 20 MiB large segment: 4 MiB allocated (3 MiB requested), 16 MiB free.
            seg(
                0x1000_0000,
                PoolKind::Large,
                &[(4 << 20, ActiveAllocated, 3 << 20), (16 << 20, Inactive, 0)],
            ),
            // 2 MiB small segment entirely free (releasable).
            seg(0x2000_0000, PoolKind::Small, &[(2 << 20, Inactive, 0)]),
            // 12 MiB: 2 free, 4 pending, 6 free.
            seg(
                0x3000_0000,
                PoolKind::Large,
                &[
                    (2 << 20, Inactive, 0),
                    (4 << 20, ActivePendingFree, 4 << 20),
                    (6 << 20, Inactive, 0),
                ],
            ),
        ];
        let f = figures(&segs);
        let mib = 1u64 << 20;
        assert_eq!(f.reserved, 34 * mib);
        assert_eq!(f.allocated, 4 * mib);
        assert_eq!(f.requested, 3 * mib);
        assert_eq!(f.active, 8 * mib);
        assert_eq!(f.free, 26 * mib);
        assert_eq!(
            f.non_releasable,
            24 * mib,
            "16 + 2 + 6: only the whole-free segment can go"
        );
        assert_eq!(f.internal_waste, mib);
        assert_eq!(f.largest_free, 16 * mib);
        assert_eq!(f.largest_free_small, 2 * mib);
        assert_eq!(f.largest_free_large, 16 * mib);
        assert!((f.unallocated_fraction() - (1.0 - 4.0 / 34.0)).abs() < 1e-12);
        assert!((f.external_fragmentation() - (1.0 - 16.0 / 26.0)).abs() < 1e-12);
        let gaps: f64 = [16.0f64, 2.0, 2.0, 6.0].iter().map(|g| g * g).sum();
        assert!((f.memory_viz_fragmentation() - gaps / (34.0 * 34.0)).abs() < 1e-12);
        assert_eq!(f.per_pool.len(), 2);
    }

    #[test]
    fn empty_state_has_zero_fragmentation() {
        let f = figures(&[]);
        assert_eq!(f.unallocated_fraction(), 0.0);
        assert_eq!(f.external_fragmentation(), 0.0);
        assert_eq!(f.memory_viz_fragmentation(), 0.0);
        let p = PeakFigures::default();
        assert_eq!(p.gmlake_fragmentation(), 0.0);
    }
}
