//! The allocator layer of an imported PyTorch snapshot: every segment with the blocks
//! inside it (address, size, requested size, state, the stack that allocated it) and the
//! allocator-level figures per device, built once on the ingest thread and published in the
//! run's head. The device layer (segments as regions) goes through the model like any
//! trace; this is what the model cannot hold.
//!
//! For drawing, the segments of a device are laid end to end ("packed offsets": the gaps
//! between segments are left out) and each block's bytes fall in one of four
//! [`Category`]s. Cumulative bytes per category are kept per block, so the bytes of each
//! category inside any packed range cost two binary searches: a band of N cells is coloured
//! in O(N log blocks), however many blocks there are.

use fragprobe_shared::torch::figures::{figures, Figures, PeakFigures};
use fragprobe_shared::torch::sim::Version;
use fragprobe_shared::torch::stacks::{StackId, Stacks};
use fragprobe_shared::torch::verify::verify;
use fragprobe_shared::torch::{BlockState, PoolId, PoolKind, Segment, Snapshot};

/// What a byte of a segment is used for, as the blocks view colours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// Bytes of an allocated block that the program asked for.
    Requested,
    /// Bytes of an allocated block beyond the request (rounding).
    Waste,
    /// A block freed by the program but still in use by another stream.
    PendingFree,
    /// A free (inactive) block cached by the allocator.
    Free,
}

/// Number of [`Category`] values.
pub const CATEGORIES: usize = 4;

impl Category {
    /// Every category, in legend order.
    pub const ALL: [Category; CATEGORIES] = [
        Category::Requested,
        Category::Waste,
        Category::PendingFree,
        Category::Free,
    ];

    /// Legend text.
    pub fn name(self) -> &'static str {
        match self {
            Category::Requested => "allocated",
            Category::Waste => "rounding waste",
            Category::PendingFree => "pending free",
            Category::Free => "inactive (free)",
        }
    }

    /// Index into [`Category::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One block, as published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockView {
    /// Device address.
    pub address: u64,
    /// Bytes the block spans.
    pub size: u64,
    /// Bytes the program asked for (0 for free blocks in new snapshots).
    pub requested: u64,
    /// State.
    pub state: BlockState,
    /// Where it was last allocated (see [`AllocatorLayer::frames`]).
    pub stack: StackId,
    /// Index of its segment in [`DeviceLayer::segments`].
    pub segment: u32,
}

impl BlockView {
    /// Bytes of the block beyond the request, when allocated (rounding waste).
    pub fn waste(&self) -> u64 {
        if self.state == BlockState::ActiveAllocated {
            self.size.saturating_sub(self.requested)
        } else {
            0
        }
    }
}

/// One segment, as published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentView {
    /// Start address.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Small or large pool.
    pub pool: PoolKind,
    /// Memory pool id.
    pub pool_id: PoolId,
    /// CUDA stream.
    pub stream: u64,
    /// Part of an expandable segment.
    pub expandable: bool,
    /// Where the segment was allocated.
    pub stack: StackId,
    /// Packed offset of its first byte.
    pub offset: u64,
    /// Index of its first block in [`DeviceLayer::blocks`].
    pub first_block: usize,
    /// Number of blocks.
    pub blocks: usize,
}

/// Peak figures over the snapshot's trace, replayed through the allocator simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peak {
    /// The figures.
    pub figures: PeakFigures,
    /// Whether the replay reproduced every recorded address and the final state.
    pub exact: bool,
}

/// The allocator layer of one device.
#[derive(Clone, Debug)]
pub struct DeviceLayer {
    /// Device ordinal.
    pub device: i32,
    /// Segments by address.
    pub segments: Vec<SegmentView>,
    /// Blocks by address (each segment's blocks are contiguous).
    pub blocks: Vec<BlockView>,
    /// Packed offset of each block.
    offsets: Vec<u64>,
    /// Bytes per category of the blocks before each block.
    before: Vec<[u64; CATEGORIES]>,
    /// Sum of segment sizes (the packed span).
    pub span: u64,
    /// Blocks per [`BlockState`]: allocated, pending free, inactive.
    pub counts: [usize; 3],
    /// Allocator-level figures of the snapshot's state.
    pub now: Figures,
    /// Peaks over the trace (`None`: the snapshot has no trace for this device).
    pub peak: Option<Peak>,
}

/// Index of a state in [`DeviceLayer::counts`].
pub fn state_index(s: BlockState) -> usize {
    match s {
        BlockState::ActiveAllocated => 0,
        BlockState::ActivePendingFree => 1,
        BlockState::Inactive => 2,
    }
}

impl DeviceLayer {
    /// The layer of `segments` (all of one device, any order).
    pub fn new(device: i32, segments: &[Segment]) -> DeviceLayer {
        let mut segs: Vec<&Segment> = segments.iter().collect();
        segs.sort_by_key(|s| s.address);
        let nblocks = segs.iter().map(|s| s.blocks.len()).sum();
        let mut layer = DeviceLayer {
            device,
            segments: Vec::with_capacity(segs.len()),
            blocks: Vec::with_capacity(nblocks),
            offsets: Vec::with_capacity(nblocks),
            before: Vec::with_capacity(nblocks),
            span: 0,
            counts: [0; 3],
            now: figures(segments),
            peak: None,
        };
        let mut acc = [0u64; CATEGORIES];
        for (si, s) in segs.iter().enumerate() {
            let first = layer.blocks.len();
            for b in &s.blocks {
                // Blocks outside their segment (a corrupt file) are left out of the band.
                if b.address < s.address || b.address.saturating_add(b.size) > s.end() {
                    continue;
                }
                let v = BlockView {
                    address: b.address,
                    size: b.size,
                    requested: b.requested_size,
                    state: b.state,
                    stack: b.stack,
                    segment: si as u32,
                };
                layer.offsets.push(layer.span + (b.address - s.address));
                layer.before.push(acc);
                for (c, bytes) in parts(&v, v.size) {
                    acc[c.index()] += bytes;
                }
                layer.counts[state_index(b.state)] += 1;
                layer.blocks.push(v);
            }
            layer.segments.push(SegmentView {
                address: s.address,
                size: s.total_size,
                pool: s.pool,
                pool_id: s.pool_id,
                stream: s.stream,
                expandable: s.is_expandable,
                stack: s.stack,
                offset: layer.span,
                first_block: first,
                blocks: layer.blocks.len() - first,
            });
            layer.span += s.total_size;
        }
        layer
    }

    /// Packed offset of block `i`.
    pub fn offset_of(&self, i: usize) -> u64 {
        self.offsets[i]
    }

    /// Bytes per category in the packed range `[0, x)`.
    pub fn below(&self, x: u64) -> [u64; CATEGORIES] {
        let i = self.offsets.partition_point(|&o| o < x);
        if i == 0 {
            return [0; CATEGORIES];
        }
        let mut out = self.before[i - 1];
        let b = &self.blocks[i - 1];
        let into = (x - self.offsets[i - 1]).min(b.size);
        for (c, bytes) in parts(b, into) {
            out[c.index()] += bytes;
        }
        out
    }

    /// Bytes per category in the packed range `[lo, hi)`.
    pub fn covered(&self, lo: u64, hi: u64) -> [u64; CATEGORIES] {
        let (a, b) = (self.below(lo), self.below(hi.max(lo)));
        std::array::from_fn(|c| b[c] - a[c])
    }

    /// The block covering packed offset `x`.
    pub fn block_at(&self, x: u64) -> Option<usize> {
        let i = self.offsets.partition_point(|&o| o <= x).checked_sub(1)?;
        (x < self.offsets[i] + self.blocks[i].size).then_some(i)
    }

    /// The segment covering packed offset `x`.
    pub fn segment_at(&self, x: u64) -> Option<usize> {
        let i = self
            .segments
            .partition_point(|s| s.offset <= x)
            .checked_sub(1)?;
        (x < self.segments[i].offset + self.segments[i].size).then_some(i)
    }

    /// Segments overlapping the packed range `[lo, hi)`.
    pub fn segments_in(&self, lo: u64, hi: u64) -> &[SegmentView] {
        let a = self
            .segments
            .partition_point(|s| s.offset + s.size <= lo)
            .min(self.segments.len());
        let b = self.segments.partition_point(|s| s.offset < hi).max(a);
        &self.segments[a..b]
    }

    /// Bytes of the allocator layer per category over the whole device.
    pub fn totals(&self) -> [u64; CATEGORIES] {
        self.below(self.span)
    }
}

/// How the first `len` bytes of block `b` split into categories.
fn parts(b: &BlockView, len: u64) -> impl Iterator<Item = (Category, u64)> {
    let len = len.min(b.size);
    let (first, second) = match b.state {
        BlockState::ActiveAllocated => {
            let req = b.requested.min(b.size).min(len);
            (
                (Category::Requested, req),
                Some((Category::Waste, len - req)),
            )
        }
        BlockState::ActivePendingFree => ((Category::PendingFree, len), None),
        BlockState::Inactive => ((Category::Free, len), None),
    };
    std::iter::once(first).chain(second)
}

fn frame_text(f: &fragprobe_shared::torch::stacks::Frame) -> String {
    format!("{}:{} {}", f.filename, f.line, f.name)
}

/// The allocator layer of a snapshot: one [`DeviceLayer`] per device and the frames.
#[derive(Clone, Debug, Default)]
pub struct AllocatorLayer {
    /// Devices with segments or a trace, by ordinal.
    pub devices: Vec<DeviceLayer>,
    /// Interned frames and stacks (blocks name theirs by [`StackId`]).
    pub stacks: Stacks,
    /// The snapshot's `PYTORCH_CUDA_ALLOC_CONF`, when recorded.
    pub alloc_conf: Option<String>,
}

impl AllocatorLayer {
    /// Builds the layer of `snap`; with `peaks`, replays each device's trace through the
    /// allocator simulator for the peak figures (as `fragprobe import` does).
    pub fn from_snapshot(snap: &Snapshot, peaks: bool) -> AllocatorLayer {
        let verified = if peaks && snap.event_count() > 0 {
            verify(snap, Version::DEFAULT).ok()
        } else {
            None
        };
        let devices = snap
            .devices()
            .into_iter()
            .map(|d| {
                let segs: Vec<Segment> = snap.device_segments(d).cloned().collect();
                let mut layer = DeviceLayer::new(d, &segs);
                layer.peak = verified
                    .as_ref()
                    .and_then(|v| v.devices.iter().find(|x| x.device == d))
                    .filter(|_| !snap.trace(d).is_empty())
                    .map(|x| Peak {
                        figures: PeakFigures::from(&x.stats),
                        exact: x.alloc_address_matches == x.alloc_events && x.final_state_matches,
                    });
                layer
            })
            .collect();
        AllocatorLayer {
            devices,
            stacks: snap.stacks.clone(),
            alloc_conf: snap
                .settings
                .as_ref()
                .map(|s| s.conf.clone())
                .filter(|c| !c.is_empty()),
        }
    }

    /// The layer of device `ordinal`.
    pub fn device(&self, ordinal: i32) -> Option<&DeviceLayer> {
        self.devices.iter().find(|d| d.device == ordinal)
    }

    /// The frames of `stack` a viewer shows, innermost first, as `filename:line name`:
    /// PyTorch's unwinder, the C start-up and CPython's interpreter frames are left out, as
    /// PyTorch's memory_viz leaves them out ([`fragprobe_shared::torch::stacks::Frame::is_shown`]).
    pub fn frames(&self, stack: StackId) -> Vec<String> {
        self.stacks.shown_frames(stack).map(frame_text).collect()
    }

    /// How many frames of `stack` [`AllocatorLayer::frames`] leaves out.
    pub fn hidden_frames(&self, stack: StackId) -> usize {
        self.stacks.frames(stack).filter(|f| !f.is_shown()).count()
    }

    /// The one frame that says where a block came from: the innermost Python frame (the
    /// program's own line), else the innermost shown frame.
    pub fn site(&self, stack: StackId) -> Option<String> {
        let mut shown = self.stacks.shown_frames(stack).peekable();
        let first = shown.peek().cloned();
        shown.find(|f| f.is_python()).or(first).map(frame_text)
    }

    /// Blocks over every device.
    pub fn block_count(&self) -> usize {
        self.devices.iter().map(|d| d.blocks.len()).sum()
    }
}

/// A device-0 segment at `addr` of blocks `(size, state, requested)` laid end to end.
#[cfg(test)]
pub(crate) fn seg(addr: u64, blocks: &[(u64, BlockState, u64)]) -> Segment {
    let mut at = addr;
    let blocks = blocks
        .iter()
        .map(|&(size, state, req)| {
            let b = fragprobe_shared::torch::Block {
                address: at,
                size,
                requested_size: req,
                state,
                stack: 0,
            };
            at += size;
            b
        })
        .collect();
    Segment {
        device: 0,
        address: addr,
        total_size: at - addr,
        stream: 0,
        pool: PoolKind::Large,
        pool_id: (0, 0),
        is_expandable: false,
        stack: 0,
        blocks,
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use fragprobe_shared::torch::Block;

    const MIB: u64 = 1 << 20;

    fn fixture(name: &str) -> std::path::PathBuf {
        fragprobe_tests::snapshots::path(name)
    }

    #[test]
    fn packed_ranges_split_bytes_by_category() {
        use BlockState::*;
        // Two segments far apart: packed, they are 6 MiB then 4 MiB.
        let segs = [
            seg(
                0x7000_0000,
                &[
                    (2 * MIB, ActiveAllocated, MIB + MIB / 2),
                    (4 * MIB, Inactive, 0),
                ],
            ),
            seg(
                0x1000_0000,
                &[(MIB, ActivePendingFree, MIB), (3 * MIB, Inactive, 0)],
            ),
        ];
        let l = DeviceLayer::new(0, &segs);
        assert_eq!(l.span, 10 * MIB);
        assert_eq!(l.segments[0].address, 0x1000_0000, "sorted by address");
        assert_eq!(l.counts, [1, 1, 2]);
        // Whole span: requested 1.5, waste 0.5, pending 1, free 7 MiB.
        assert_eq!(l.totals(), [MIB + MIB / 2, MIB / 2, MIB, 7 * MIB]);
        // [0.5, 1.5) MiB: half of the pending block, half a MiB of free.
        assert_eq!(l.covered(MIB / 2, MIB + MIB / 2), [0, 0, MIB / 2, MIB / 2]);
        // The allocated block starts at packed 4 MiB: [5, 6) MiB = 0.5 requested + 0.5 waste.
        assert_eq!(l.covered(5 * MIB, 6 * MIB), [MIB / 2, MIB / 2, 0, 0]);
        assert_eq!(l.block_at(4 * MIB), Some(2));
        assert_eq!(l.blocks[2].address, 0x7000_0000);
        assert_eq!(l.block_at(10 * MIB), None);
        assert_eq!(l.segment_at(4 * MIB - 1), Some(0));
        assert_eq!(l.segment_at(4 * MIB), Some(1));
        assert_eq!(l.segments_in(3 * MIB, 5 * MIB).len(), 2);
        assert_eq!(l.segments_in(5 * MIB, 6 * MIB).len(), 1);
        assert_eq!(l.now.non_releasable, 7 * MIB);
    }

    #[test]
    fn the_published_layer_matches_a_real_snapshot() {
        if fragprobe_tests::snapshots::dir().is_none() {
            return;
        }
        for name in [
            "MAGMA27__memory_snapshot.pickle",
            "bcrafton__memory_snapshot.pickle",
            "silmont2000__mem_snapshot.pickle",
        ] {
            let snap = fragprobe_shared::torch::load_snapshot(&fixture(name)).unwrap();
            let layer = AllocatorLayer::from_snapshot(&snap, true);
            assert_eq!(layer.devices.len(), snap.devices().len(), "{name}");
            for d in &layer.devices {
                let segs: Vec<&Segment> = snap.device_segments(d.device).collect();
                let blocks: Vec<&Block> = segs.iter().flat_map(|s| &s.blocks).collect();
                assert_eq!(d.segments.len(), segs.len(), "{name}");
                assert_eq!(d.blocks.len(), blocks.len(), "{name}");
                for (i, st) in [
                    BlockState::ActiveAllocated,
                    BlockState::ActivePendingFree,
                    BlockState::Inactive,
                ]
                .into_iter()
                .enumerate()
                {
                    let want = blocks.iter().filter(|b| b.state == st).count();
                    assert_eq!(d.counts[i], want, "{name}: {st:?} blocks");
                }
                assert_eq!(d.span, segs.iter().map(|s| s.total_size).sum::<u64>());
                let t = d.totals();
                assert_eq!(t[0] + t[1], d.now.allocated, "{name}: allocated bytes");
                assert_eq!(t[1], d.now.internal_waste, "{name}: rounding waste");
                assert_eq!(t[2], d.now.active - d.now.allocated, "{name}: pending");
                assert_eq!(t[3], d.now.free, "{name}: free bytes");
                assert!(d.now.allocated > 0, "{name}: something is allocated");
                // Every block is found again at its own offset.
                for i in 0..d.blocks.len() {
                    assert_eq!(d.block_at(d.offset_of(i)), Some(i));
                    let b = &d.blocks[i];
                    let s = &d.segments[b.segment as usize];
                    assert_eq!(d.offset_of(i) - s.offset, b.address - s.address);
                }
                // With a trace, the peak is at least what is reserved now.
                let p = d.peak.expect("these snapshots carry a trace");
                assert!(p.figures.peak_reserved >= d.now.reserved, "{name}");
                assert!(p.figures.gmlake_utilization() > 0.0, "{name}");
            }
        }
    }

    #[test]
    fn a_chosen_blocks_frames_are_the_snapshots() {
        if fragprobe_tests::snapshots::dir().is_none() {
            return;
        }
        let snap =
            fragprobe_shared::torch::load_snapshot(&fixture("MAGMA27__memory_snapshot.pickle"))
                .unwrap();
        let layer = AllocatorLayer::from_snapshot(&snap, false);
        // The largest allocated block with a recorded stack.
        let want = snap
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated && b.stack != 0)
            .max_by_key(|b| (b.size, b.address))
            .expect("an allocated block with frames");
        let d = layer.device(snap.segments[0].device).unwrap();
        let got = d.blocks.iter().find(|b| b.address == want.address).unwrap();
        assert_eq!((got.size, got.requested), (want.size, want.requested_size));
        let frames = layer.frames(got.stack);
        let expect: Vec<String> = snap
            .stacks
            .frames(want.stack)
            .filter(|f| f.is_shown())
            .map(|f| format!("{}:{} {}", f.filename, f.line, f.name))
            .collect();
        assert!(!frames.is_empty());
        assert_eq!(frames, expect);
        assert!(
            frames
                .iter()
                .all(|f| !f.contains("unwind::unwind") && !f.contains("ceval.c")),
            "{frames:?}"
        );
        assert!(layer.site(got.stack).is_some_and(|s| s.contains(".py:")));
        assert!(
            frames.iter().any(|f| f.contains(".py:")),
            "Python frames: {frames:?}"
        );
        assert!(d.peak.is_none(), "peaks not asked for");
    }
}
