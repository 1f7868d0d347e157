//! Every real snapshot fixture decodes, with the shape PROVENANCE.md describes.

#[path = "../../tests/src/snapshots.rs"]
#[allow(dead_code)]
mod snapshots;

use std::path::PathBuf;

use fragprobe_shared::torch::snapshot::SnapshotLayout;
use fragprobe_shared::torch::{load_snapshot, Action, BlockState, PoolKind};

fn fixture(name: &str) -> PathBuf {
    snapshots::path(name)
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
    if snapshots::dir().is_none() {
        return;
    }
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

// torch.cuda.memory_snapshot() of the 2.0 era, from CPython (pickle protocol 2): a bare list
// of segments whose blocks carry `history` instead of `address` / `requested_size`.
const LEGACY_LIST: &[&str] = &[
    "80025d7100287d710128580600000064657669636571024b0058070000006164647265737371038a0600000000007f58",
    "0a000000746f74616c5f73697a6571044a00004001580e000000616c6c6f63617465645f73697a6571054a0000300058",
    "0b0000006163746976655f73697a6571064a00003000580600000073747265616d71074b00580c0000007365676d656e",
    "745f74797065710858050000006c6172676571095806000000626c6f636b73710a5d710b287d710c2858040000007369",
    "7a65710d4a0000300058050000007374617465710e58100000006163746976655f616c6c6f6361746564710f58070000",
    "00686973746f727971105d71117d71122858040000006164647271138a0600000000007f58090000007265616c5f7369",
    "7a6571144ac0c62d0058060000006672616d657371155d71167d711728580800000066696c656e616d65711858080000",
    "00747261696e2e7079711958040000006c696e65711a4b0a58040000006e616d65711b5807000000666f727761726471",
    "1c75617561757d711d28680d4a00001001680e5808000000696e616374697665711e68105d711f7565757d7120286802",
    "4b0068038a0600004001007f68044a0000200068054d000268064d000468074b0068085805000000736d616c6c712168",
    "0a5d7122287d712328680d4d0002680e680f68105d71247d71252868138a0600004001007f68144b047561757d712628",
    "680d4d0002680e58130000006163746976655f70656e64696e675f66726565712768105d71287d71292868138a060002",
    "4001007f68144b64681568167561757d712a28680d4a00fc1f00680e681e756575652e",
];

// A 2.1-era dict (protocol 3): trace entries without `time_us`, no `allocator_settings`,
// an `oom` entry with `device_free`.
const LEGACY_DICT: &[&str] = &[
    "80037d71002858080000007365676d656e747371015d7102287d710328580600000064657669636571044b0058070000",
    "006164647265737371058a0600000000007f580a000000746f74616c5f73697a6571064a00004001580e000000616c6c",
    "6f63617465645f73697a6571074a00003000580b0000006163746976655f73697a6571084a0000300058060000007374",
    "7265616d71094b00580c0000007365676d656e745f74797065710a58050000006c61726765710b5806000000626c6f63",
    "6b73710c5d710d287d710e28580400000073697a65710f4a000030005805000000737461746571105810000000616374",
    "6976655f616c6c6f636174656471115807000000686973746f727971125d71137d71142858040000006164647271158a",
    "0600000000007f58090000007265616c5f73697a6571164ac0c62d0058060000006672616d657371175d71187d711928",
    "580800000066696c656e616d65711a5808000000747261696e2e7079711b58040000006c696e65711c4b0a5804000000",
    "6e616d65711d5807000000666f7277617264711e75617561757d711f28680f4a0000100168105808000000696e616374",
    "697665712068125d71217565757d71222868044b0068058a0600004001007f68064a0000200068074d000268084d0004",
    "68094b00680a5805000000736d616c6c7123680c5d7124287d712528680f4d00026810681168125d71267d7127286815",
    "8a0600004001007f68164b047561757d712828680f4d0002681058130000006163746976655f70656e64696e675f6672",
    "6565712968125d712a7d712b2868158a0600024001007f68164b64681768187561757d712c28680f4a00fc1f00681068",
    "2075657565580d0000006465766963655f747261636573712d5d712e5d712f287d7130285806000000616374696f6e71",
    "31580d0000007365676d656e745f616c6c6f63713268158a0600000000007f680f4a0000400168094b0068176818757d",
    "71332868315805000000616c6c6f63713468158a0600000000007f680f4ac0c62d0068094b0068176818757d71352868",
    "3158030000006f6f6d7136580b0000006465766963655f6672656571374dd204680f8a0600000000000168094b006817",
    "5d7138756561752e",
];

fn unhex(parts: &[&str]) -> Vec<u8> {
    let s: String = parts.concat();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn legacy_layouts_decode() {
    use fragprobe_shared::torch::read_snapshot;
    let s = read_snapshot(&unhex(LEGACY_LIST)[..]).unwrap();
    assert_eq!(s.format.layout, SnapshotLayout::SegmentList);
    assert!(s.format.legacy_history && !s.format.has_settings && s.traces.is_empty());
    assert_eq!(s.segments.len(), 2);
    let big = &s.segments[0];
    assert_eq!((big.pool, big.blocks.len()), (PoolKind::Large, 2));
    // Addresses are placed back to back; requested sizes come from history[0].real_size.
    assert_eq!(big.blocks[1].address, big.address + 3145728);
    assert_eq!(big.blocks[0].requested_size, 3_000_000);
    assert_eq!(
        s.stacks
            .frames(big.blocks[0].stack)
            .next()
            .unwrap()
            .name
            .as_ref(),
        "forward"
    );
    let small = &s.segments[1];
    assert_eq!(small.blocks[1].state, BlockState::ActivePendingFree);
    assert_eq!(small.blocks[1].requested_size, 100);
    assert_eq!(small.blocks[2].address, small.address + 1024);

    let s = read_snapshot(&unhex(LEGACY_DICT)[..]).unwrap();
    assert_eq!(s.format.layout, SnapshotLayout::Dict);
    assert!(!s.format.has_time_us && !s.format.has_settings);
    let t = s.trace(0);
    assert_eq!(t.len(), 3);
    assert_eq!(t[2].action, Action::Oom);
    assert_eq!(t[2].addr, 1234, "an OOM's device_free lands in addr");
    assert!(t.iter().all(|e| e.time_us.is_none()));
    // The trace starts from an empty allocator and replays exactly.
    let r =
        fragprobe_shared::torch::verify::verify(&s, fragprobe_shared::torch::sim::Version::DEFAULT)
            .unwrap();
    assert_eq!((r.alloc_events(), r.alloc_address_matches()), (1, 1));
    assert_eq!((r.segment_allocs(), r.segment_size_matches()), (1, 1));
}
