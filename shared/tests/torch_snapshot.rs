//! Every real snapshot fixture decodes, with the shape PROVENANCE.md describes.

use std::path::PathBuf;

use fragprobe_shared::torch::snapshot::SnapshotLayout;
use fragprobe_shared::torch::{load_snapshot, Action, BlockState, PoolKind};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/pytorch-snapshots")
        .join(name)
}

const FIXTURES: [&str; 4] = [
    "silmont2000__mem_snapshot.pickle",
    "MAGMA27__memory_snapshot.pickle",
    "Wedsonlin__medium_128_inference_memory_snapshot.pickle",
    "bcrafton__memory_snapshot.pickle",
];

fn count(s: &fragprobe_shared::torch::Snapshot, a: Action) -> usize {
    s.trace(0).iter().filter(|e| e.action == a).count()
}

#[test]
fn every_fixture_decodes_with_its_documented_shape() {
    // (file, segments, events, segment_allocs, allocs) from PROVENANCE.md and the files.
    let expect = [
        (FIXTURES[0], 9, 97, 9, 36),
        (FIXTURES[1], 216, 5163, 0, 1721),
        (FIXTURES[2], 98, 3840, 0, 1280),
        (FIXTURES[3], 96, 6486, 0, 2162),
    ];
    for (name, segs, events, seg_allocs, allocs) in expect {
        let s = load_snapshot(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.format.layout, SnapshotLayout::Dict, "{name}");
        assert!(s.format.has_settings && s.format.has_time_us, "{name}");
        assert_eq!(s.segments.len(), segs, "{name}");
        assert_eq!(s.event_count(), events, "{name}");
        assert_eq!(count(&s, Action::SegmentAlloc), seg_allocs, "{name}");
        assert_eq!(count(&s, Action::Alloc), allocs, "{name}");
        let settings = s.settings.as_ref().unwrap();
        assert_eq!(settings.max_split_size, None, "{name}: default settings");
        assert!(!settings.expandable_segments);
        for seg in &s.segments {
            // Blocks tile their segment exactly.
            let mut at = seg.address;
            for b in &seg.blocks {
                assert_eq!(b.address, at, "{name}: gap in segment {:#x}", seg.address);
                at += b.size;
                if b.state == BlockState::ActiveAllocated {
                    assert!(b.requested_size <= b.size);
                }
            }
            assert_eq!(at, seg.end(), "{name}");
            if seg.pool == PoolKind::Small {
                assert_eq!(seg.total_size, 2 << 20, "{name}: small segments are 2 MiB");
            }
        }
        // Frames are interned: far fewer distinct frames than references.
        assert!(s.stacks.frame_count() > 0, "{name}");
    }
}
