//! Writing snapshot pickles, converting to and from fragprobe records, and what-if replays.

#[path = "../../tests/src/snapshots.rs"]
#[allow(dead_code)]
mod snapshots;

use std::path::PathBuf;

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::torch::predict::predict;
use fragprobe_shared::torch::sim::Version;
use fragprobe_shared::torch::snapshot::{Action, BlockState, Snapshot};
use fragprobe_shared::torch::verify::verify;
use fragprobe_shared::torch::{
    from_records, load_snapshot, read_snapshot, to_records, write_snapshot_pickle,
};

fn fixture(name: &str) -> PathBuf {
    snapshots::path(name)
}

const FIXTURES: [&str; 4] = [
    "silmont2000__mem_snapshot.pickle",
    "MAGMA27__memory_snapshot.pickle",
    "Wedsonlin__medium_128_inference_memory_snapshot.pickle",
    "bcrafton__memory_snapshot.pickle",
];

fn same_content(a: &Snapshot, b: &Snapshot) {
    assert_eq!(a.segments.len(), b.segments.len());
    for (x, y) in a.segments.iter().zip(&b.segments) {
        assert_eq!(
            (
                x.address,
                x.total_size,
                x.stream,
                x.pool,
                x.pool_id,
                x.is_expandable
            ),
            (
                y.address,
                y.total_size,
                y.stream,
                y.pool,
                y.pool_id,
                y.is_expandable
            )
        );
        assert_eq!(x.blocks.len(), y.blocks.len());
        for (p, q) in x.blocks.iter().zip(&y.blocks) {
            assert_eq!(
                (p.address, p.size, p.requested_size, p.state),
                (q.address, q.size, q.requested_size, q.state)
            );
            assert!(
                a.stacks.frames(p.stack).eq(b.stacks.frames(q.stack)),
                "block frames"
            );
        }
    }
    assert_eq!(a.traces.len(), b.traces.len());
    for (t, u) in a.traces.iter().zip(&b.traces) {
        assert_eq!(t.len(), u.len());
        for (e, f) in t.iter().zip(u) {
            assert_eq!(
                (e.action, e.addr, e.size, e.stream, e.time_us),
                (f.action, f.addr, f.size, f.stream, f.time_us)
            );
            assert!(
                a.stacks.frames(e.stack).eq(b.stacks.frames(f.stack)),
                "event frames"
            );
        }
    }
    assert_eq!(
        a.settings.as_ref().map(|s| (
            &s.conf,
            s.max_split_size,
            s.expandable_segments,
            s.roundup_power2_divisions
        )),
        b.settings.as_ref().map(|s| (
            &s.conf,
            s.max_split_size,
            s.expandable_segments,
            s.roundup_power2_divisions
        ))
    );
}

#[test]
fn written_pickles_read_back_identically() {
    if snapshots::dir().is_none() {
        return;
    }
    for name in FIXTURES {
        let a = load_snapshot(&fixture(name)).unwrap();
        let bytes = write_snapshot_pickle(Vec::new(), &a).unwrap();
        let b = read_snapshot(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
        same_content(&a, &b);
        // Frames are shared in the output as in PyTorch's: it stays about as small.
        let original = std::fs::metadata(fixture(name)).unwrap().len() as usize;
        assert!(
            bytes.len() < original * 2,
            "{name}: {} vs {original} bytes",
            bytes.len()
        );
        assert!(verify(&b, Version::DEFAULT).unwrap().is_exact(), "{name}");
    }
}

#[test]
fn records_carry_the_device_layer() {
    if snapshots::dir().is_none() {
        return;
    }
    // silmont2000 starts from an empty allocator: the records are its 9 segment_allocs.
    let s = load_snapshot(&fixture(FIXTURES[0])).unwrap();
    let r = to_records(&s);
    assert_eq!(r.len(), 9);
    assert!(r
        .iter()
        .all(|x| x.kind() == Some(EventKind::Alloc) && x.api() == Some(Api::Synthetic)));
    let first = s
        .trace(0)
        .iter()
        .find(|e| e.action == Action::SegmentAlloc)
        .unwrap();
    assert_eq!((r[0].addr, r[0].size), (first.addr, first.size));
    assert!(r
        .windows(2)
        .all(|w| w[0].ts_ns <= w[1].ts_ns && w[0].seq + 1 == w[1].seq));
    // MAGMA27's trace has no segment events: its 216 segments existed before the trace.
    let s = load_snapshot(&fixture(FIXTURES[1])).unwrap();
    let r = to_records(&s);
    assert_eq!(r.len(), 216);
    let reserved: u64 = s.segments.iter().map(|x| x.total_size).sum();
    assert_eq!(r.iter().map(|x| x.size).sum::<u64>(), reserved);
}

#[test]
fn fragprobe_records_become_a_memory_viz_snapshot() {
    let rec = |seq, kind: EventKind, addr, size| Record {
        seq,
        ts_ns: 1_000_000 * (seq + 1),
        addr,
        size,
        kind: kind as u16,
        api: Api::CudaMalloc as u16,
        device: 0,
        ..Record::default()
    };
    let records = [
        rec(0, EventKind::Alloc, 0x7000_0000, 4 << 20),
        rec(1, EventKind::Alloc, 0x7100_0000, 1 << 20),
        rec(2, EventKind::Free, 0x7000_0000, 0),
        Record {
            result: 2,
            ..rec(3, EventKind::Alloc, 0, 1 << 40)
        }, // failed: ignored
    ];
    let s = from_records(&records);
    assert_eq!(s.segments.len(), 1);
    assert_eq!(s.segments[0].address, 0x7100_0000);
    assert_eq!(s.segments[0].blocks[0].state, BlockState::ActiveAllocated);
    let actions: Vec<Action> = s.trace(0).iter().map(|e| e.action).collect();
    use Action::*;
    assert_eq!(
        actions,
        [
            SegmentAlloc,
            Alloc,
            SegmentAlloc,
            Alloc,
            FreeRequested,
            FreeCompleted,
            SegmentFree
        ]
    );
    let bytes = write_snapshot_pickle(Vec::new(), &s).unwrap();
    let back = read_snapshot(&bytes[..]).unwrap();
    same_content(&s, &back);
    assert_eq!(back.trace(0)[0].time_us, Some(1000));
}

#[test]
fn predictions_start_from_the_recorded_run() {
    if snapshots::dir().is_none() {
        return;
    }
    // silmont2000's trace starts empty, so replaying its own settings reproduces the
    // recorded peak exactly.
    let s = load_snapshot(&fixture(FIXTURES[0])).unwrap();
    let confs: Vec<String> = [
        "expandable_segments:True",
        "max_split_size_mb:64",
        "backend:cudaMallocAsync",
        "bogus:1",
    ]
    .iter()
    .map(|c| c.to_string())
    .collect();
    let r = predict(&s, 0, &confs, Version::DEFAULT, None);
    assert!(r.recorded.exact);
    assert_eq!(r.predictions.len(), 5);
    let base = &r.predictions[0];
    assert!(base.baseline && base.error.is_none());
    assert_eq!(base.peak.peak_reserved, r.recorded.peak.peak_reserved);
    assert_eq!(base.peak.peak_allocated, r.recorded.peak.peak_allocated);
    assert_eq!(base.stats.cuda_mallocs, 9);
    let exp = &r.predictions[1];
    assert!(exp.error.is_none());
    assert_eq!(exp.stats.cuda_mallocs, 0);
    assert!(exp.stats.maps > 0);
    // 512 MiB tensors in 20 MiB pages round up to 520 MiB: a little more is reserved, and
    // nothing is stranded in split segments.
    let over = exp.peak.peak_reserved as f64 / base.peak.peak_reserved as f64;
    assert!((1.0..1.01).contains(&over), "{over}");
    assert_eq!(exp.peak.peak_non_releasable, 0);
    assert!(r.predictions[3]
        .error
        .as_deref()
        .unwrap()
        .contains("cannot be simulated"));
    assert!(r.predictions[4].error.as_deref().unwrap().contains("bogus"));
    let j = r.to_json();
    assert!(j.contains("\"configurations\":[") && j.contains("\"baseline\":true"));
}

#[test]
fn capacity_turns_into_ooms_and_retries() {
    if snapshots::dir().is_none() {
        return;
    }
    let s = load_snapshot(&fixture(FIXTURES[3])).unwrap();
    let free = predict(&s, 0, &[], Version::DEFAULT, None);
    let peak = free.predictions[0].peak.peak_reserved;
    assert_eq!(free.predictions[0].stats.ooms, 0);
    // A device 10 % smaller than the unconstrained peak forces the retry path.
    let tight = predict(&s, 0, &[], Version::DEFAULT, Some(peak / 10 * 9));
    let p = &tight.predictions[0];
    assert!(p.stats.alloc_retries > 0 || p.stats.ooms > 0);
    assert!(p.peak.peak_reserved <= peak / 10 * 9);
}

/// A trace long enough to be decoded in two halves on two threads decodes as one pass
/// does: a real trace repeated 80 times (413 k entries) gives every repetition the very
/// events of the original, stack ids included (ids follow first appearance). The file is
/// big enough to be prefaulted and freed on helper threads when loaded from disk, and
/// loads the same as its bytes read through a reader.
#[test]
fn long_traces_decode_in_halves_like_one_pass() {
    if snapshots::dir().is_none() {
        return;
    }
    let dir = snapshots::dir().unwrap();
    let one = load_snapshot(&dir.join("MAGMA27__memory_snapshot.pickle")).unwrap();
    let n = one.traces[0].len();
    let mut tiled = one.clone();
    for _ in 1..80 {
        tiled.traces[0].extend_from_slice(&one.traces[0]);
    }
    let bytes = write_snapshot_pickle(Vec::new(), &tiled).unwrap();
    assert!(bytes.len() > 16 << 20, "{} bytes", bytes.len());
    let back = read_snapshot(&bytes[..]).unwrap();
    assert_eq!(back.traces[0].len(), 80 * n);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiled.pickle");
    std::fs::write(&file, &bytes).unwrap();
    let mapped = load_snapshot(&file).unwrap();
    assert_eq!(format!("{mapped:?}"), format!("{back:?}"));
    let first = write_snapshot_pickle(Vec::new(), &one).unwrap();
    let one_back = read_snapshot(&first[..]).unwrap();
    for (i, ev) in back.traces[0].iter().enumerate() {
        assert_eq!(*ev, one_back.traces[0][i % n], "entry {i}");
    }
    assert_eq!(back.stacks.stack_count(), one_back.stacks.stack_count());
    assert_eq!(back.stacks.frame_count(), one_back.stacks.frame_count());
}

/// Replaces the one `LONG1` int `v` (six bytes) in `bytes` by a six-character string of the
/// same length: that trace entry's field becomes malformed.
fn spoil_long1(bytes: &mut [u8], v: u64) {
    let mut pat = vec![0x8a, 6];
    pat.extend_from_slice(&v.to_le_bytes()[..6]);
    let at: Vec<usize> = (0..bytes.len() - pat.len())
        .filter(|&i| bytes[i..i + pat.len()] == pat[..])
        .collect();
    assert_eq!(at.len(), 1, "the value is written once, as LONG1");
    bytes[at[0]..at[0] + 8].copy_from_slice(b"\x8c\x06spoilt");
}

/// A malformed entry in a long trace is reported the same whichever half of the parallel
/// decode it falls in, and with one in each half, the first one is reported.
#[test]
fn long_traces_report_their_first_malformed_entry() {
    if snapshots::dir().is_none() {
        return;
    }
    let one = load_snapshot(&fixture("MAGMA27__memory_snapshot.pickle")).unwrap();
    let mut tiled = one.clone();
    for _ in 1..80 {
        tiled.traces[0].extend_from_slice(&one.traces[0]);
    }
    let n = tiled.traces[0].len();
    let allocs: Vec<usize> = (0..n)
        .filter(|&i| tiled.traces[0][i].action == Action::Alloc)
        .collect();
    let early = allocs[allocs.len() / 10];
    let late = allocs[allocs.len() / 10 * 9];
    assert!(early < n / 2 && late > n / 2);
    let (a, b) = (0x5a5a_5a5a_5a01u64, 0x5a5a_5a5a_5a02u64);
    tiled.traces[0][early].addr = a;
    tiled.traces[0][late].addr = b;
    let clean = write_snapshot_pickle(Vec::new(), &tiled).unwrap();
    let err = |spoil: &[u64]| {
        let mut bytes = clean.clone();
        for &v in spoil {
            spoil_long1(&mut bytes, v);
        }
        read_snapshot(&bytes[..]).unwrap_err().to_string()
    };
    let at = |j: usize| format!("device_traces[0][{j}]");
    assert!(err(&[b]).contains(&at(late)), "{}", err(&[b]));
    assert!(err(&[a]).contains(&at(early)), "{}", err(&[a]));
    let both = err(&[a, b]);
    assert!(
        both.contains(&at(early)) && !both.contains(&at(late)),
        "{both}"
    );
}

#[test]
fn any_records_export_to_a_snapshot_that_reads_back() {
    // Hostile and damaged traces as a fuzzer makes them: addresses near the top of the
    // address space, sizes that overflow, zero sizes, allocations without their frees,
    // odd devices. Whatever goes in, the pickle written must open again.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..200 {
        let mut records = Vec::new();
        for seq in 0..64u64 {
            let r = next();
            let addr = match r % 5 {
                0 => u64::MAX - (next() % 4096),
                1 => 0,
                _ => 0x7000_0000 + (next() % 64) * 0x1000,
            };
            let size = match (r >> 8) % 4 {
                0 => u64::MAX - (next() % 8),
                1 => 0,
                _ => 1 + next() % (8 << 20),
            };
            let kind = match (r >> 16) % 3 {
                0 => EventKind::Free,
                1 => EventKind::AsyncAlloc,
                _ => EventKind::Alloc,
            };
            records.push(Record {
                seq,
                ts_ns: seq * 1000 + (r >> 40),
                addr,
                size,
                aux: next() % 3,
                kind: kind as u16,
                api: Api::CudaMalloc as u16,
                device: ((r >> 24) % 3) as i16 - 1,
                ..Record::default()
            });
        }
        let s = from_records(&records);
        let bytes = write_snapshot_pickle(Vec::new(), &s).unwrap();
        let back = read_snapshot(&bytes[..])
            .unwrap_or_else(|e| panic!("round {round}: the export does not read back: {e}"));
        same_content(&s, &back);
    }
}
