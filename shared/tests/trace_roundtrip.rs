//! Trace files: write, read back, follow while written.

use std::io::Write;

use fragprobe_shared::format::{MetaKind, MetaWriter, Record};
use fragprobe_shared::trace::{Trace, TraceTail, TraceWriter};

fn rec(i: u64) -> Record {
    Record {
        seq: i,
        ts_ns: 1_000 + i,
        addr: 0x7f00_0000_0000 + i * 4096,
        size: i * 7,
        pid: 42,
        tid: 43,
        kind: 1,
        api: 2,
        device: (i % 3) as i16 - 1,
        meta: if i.is_multiple_of(5) { 1 } else { 0 },
        ..Record::default()
    }
}

fn entry(kind: MetaKind, k: &[u8], v: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let mut w = MetaWriter::new(&mut buf, kind);
    w.field(k, v);
    let (n, overflow) = w.finish();
    assert!(!overflow);
    buf.truncate(n);
    buf
}

#[test]
fn records_metas_checkpoints_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.fpt");
    let recs: Vec<Record> = (0..10_000).map(rec).collect();
    let mut w = TraceWriter::create(&path).unwrap();
    w.write_run_info(&entry(MetaKind::RunInfo, b"label", b"baseline"))
        .unwrap();
    w.write_meta(
        42,
        1,
        &entry(MetaKind::ProcessInfo, b"cmdline", b"python\0train.py"),
    )
    .unwrap();
    w.write_records(&recs[..5000]).unwrap();
    w.write_checkpoint(5000, b"model state at 5000").unwrap();
    for r in &recs[5000..] {
        w.write_records(std::slice::from_ref(r)).unwrap();
    }
    assert_eq!(w.events_written(), 10_000);
    w.finish().unwrap();

    let t = Trace::open(&path).unwrap();
    assert!(t.complete(), "{:?}", t.warnings());
    assert!(t.warnings().is_empty() && t.truncated().is_none());
    assert_eq!(t.len(), 10_000);
    assert!(t.records().eq(recs.iter().copied()));
    assert_eq!(t.record(0), Some(recs[0]));
    assert_eq!(t.record(4095), Some(recs[4095]));
    assert_eq!(t.record(4096), Some(recs[4096]));
    assert_eq!(t.record(9999), Some(recs[9999]));
    assert_eq!(t.record(10_000), None);
    let cmd = t
        .meta_of(&recs[0])
        .expect("record 0 refers to meta 1")
        .get("cmdline");
    assert_eq!(cmd, Some(&b"python\0train.py"[..]));
    assert!(t.meta(42, 2).is_none() && t.meta(41, 1).is_none());
    assert_eq!(t.metas().len(), 1);
    let labels: Vec<_> = t
        .run_infos()
        .map(|e| e.get_str("label").unwrap().to_string())
        .collect();
    assert_eq!(labels, ["baseline"]);
    assert_eq!(t.checkpoints().len(), 1);
    assert_eq!(t.checkpoints()[0].0, 5000);
    assert_eq!(t.checkpoint_bytes(0), b"model state at 5000");
    assert_eq!(t.checkpoint_bytes(1), b"");
    // Chunks hold at most 4096 records, read in place.
    let sizes: Vec<usize> = t.record_chunks().map(|c| c.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 10_000);
    assert!(sizes.iter().all(|&n| n <= 4096));

    let u = Trace::open_unverified(&path).unwrap();
    assert!(u.records().eq(recs.iter().copied()));
}

#[test]
fn dropped_writer_keeps_records_but_warns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.fpt");
    {
        let mut w = TraceWriter::create(&path).unwrap();
        w.write_records(&[rec(1), rec(2)]).unwrap();
    }
    let t = Trace::open(&path).unwrap();
    assert_eq!(t.len(), 2);
    assert!(!t.complete());
    assert!(
        t.warnings()[0].contains("no end marker"),
        "{:?}",
        t.warnings()
    );
    assert!(t.warnings()[0].contains("t.fpt"));
    assert_eq!(
        t.truncated().unwrap().valid_up_to,
        std::fs::metadata(&path).unwrap().len()
    );
}

#[test]
fn empty_trace_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.fpt");
    TraceWriter::create(&path).unwrap().finish().unwrap();
    let t = Trace::open(&path).unwrap();
    assert!(t.complete() && t.is_empty());
    assert_eq!(t.records().count(), 0);
}

/// Grows a file piece by piece, polling in between: records appear exactly when their chunk
/// is complete.
#[test]
fn tail_sees_only_whole_chunks() {
    let mut bytes = Vec::new();
    let mut w = TraceWriter::with_created(&mut bytes, 1).unwrap();
    w.set_chunk_records(4);
    w.write_meta(42, 1, &entry(MetaKind::ProcessInfo, b"k", b"v"))
        .unwrap();
    w.write_records(&(0..10).map(rec).collect::<Vec<_>>())
        .unwrap();
    w.write_checkpoint(10, b"cp").unwrap();
    w.finish().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.fpt");
    let mut f = std::fs::File::create(&path).unwrap();
    let mut tail = TraceTail::open(&path).unwrap();
    let mut got = Vec::new();
    let mut counts = Vec::new();
    for piece in bytes.chunks(13) {
        f.write_all(piece).unwrap();
        f.flush().unwrap();
        got.extend(tail.poll().unwrap());
        counts.push(got.len());
    }
    assert!(tail.ended());
    assert!(got.iter().copied().eq((0..10).map(rec)));
    // Chunks of 4, 4 and 2 records: the count only ever jumps by whole chunks.
    let mut steps: Vec<usize> = counts
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&d| d > 0)
        .collect();
    steps.insert(0, counts[0]);
    steps.retain(|&d| d > 0);
    assert_eq!(steps, vec![4, 4, 2]);
    assert_eq!(tail.meta(42, 1).unwrap().get("k"), Some(&b"v"[..]));
    assert_eq!(tail.checkpoints(), &[(10, b"cp".to_vec())]);
    assert_eq!(tail.events(), 10);
}

#[test]
fn tail_follows_a_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.fpt");
    let mut w = TraceWriter::create(&path).unwrap();
    let mut tail = TraceTail::open(&path).unwrap();
    assert!(
        tail.poll().unwrap().is_empty(),
        "header not flushed yet: nothing, no error"
    );
    let writer = std::thread::spawn(move || {
        for batch in 0..50u64 {
            let recs: Vec<Record> = (batch * 100..batch * 100 + 100).map(rec).collect();
            w.write_records(&recs).unwrap();
            w.flush().unwrap();
        }
        w.finish().unwrap();
    });
    let mut got = Vec::new();
    while !tail.ended() {
        got.extend(tail.poll().unwrap());
        std::thread::yield_now();
    }
    writer.join().unwrap();
    assert_eq!(got.len(), 5000);
    assert!(got.iter().copied().eq((0..5000).map(rec)));
}
