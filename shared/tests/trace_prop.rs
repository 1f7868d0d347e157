//! Property: whatever is written comes back unchanged.

use fragprobe_shared::format::{MetaKind, MetaWriter, Record};
use fragprobe_shared::trace::{Trace, TraceWriter};
use proptest::prelude::*;

fn record() -> impl Strategy<Value = Record> {
    (any::<[u64; 7]>(), any::<[u32; 4]>(), any::<[u16; 4]>()).prop_map(|(a, b, c)| Record {
        seq: a[0],
        ts_ns: a[1],
        addr: a[2],
        size: a[3],
        aux: a[4],
        aux2: a[5],
        pid: b[0],
        tid: b[1],
        result: b[2],
        dur_ns: b[3],
        kind: c[0],
        api: c[1],
        device: c[2] as i16,
        flags: c[3],
        meta: a[6],
    })
}

#[derive(Debug, Clone)]
enum Op {
    Records(Vec<Record>),
    Meta(u32, u64, Vec<u8>),
    Checkpoint(Vec<u8>),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec(record(), 0..40).prop_map(Op::Records),
        1 => (any::<u32>(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(p, r, v)| Op::Meta(p, r, v)),
        1 => prop::collection::vec(any::<u8>(), 0..50).prop_map(Op::Checkpoint),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn trace_round_trip(ops in prop::collection::vec(op(), 0..30), per in 1usize..50) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.fpt");
        let mut w = TraceWriter::create(&path).unwrap();
        w.set_chunk_records(per);
        let mut recs = Vec::new();
        let mut metas = Vec::new();
        let mut cps = Vec::new();
        for op in &ops {
            match op {
                Op::Records(r) => {
                    w.write_records(r).unwrap();
                    recs.extend_from_slice(r);
                }
                Op::Meta(pid, mref, val) => {
                    let mut buf = vec![0u8; 64 + val.len()];
                    let mut m = MetaWriter::new(&mut buf, MetaKind::DeviceInfo);
                    m.field(b"v", val);
                    let (n, _) = m.finish();
                    buf.truncate(n);
                    w.write_meta(*pid, *mref, &buf).unwrap();
                    metas.retain(|(p, r, _)| (p, r) != (pid, mref));
                    metas.push((*pid, *mref, val.clone()));
                }
                Op::Checkpoint(b) => {
                    w.write_checkpoint(recs.len() as u64, b).unwrap();
                    cps.push((recs.len() as u64, b.clone()));
                }
                Op::Flush => w.flush().unwrap(),
            }
        }
        prop_assert_eq!(w.events_written(), recs.len() as u64);
        w.finish().unwrap();
        let t = Trace::open(&path).unwrap();
        prop_assert!(t.complete(), "{:?}", t.warnings());
        prop_assert_eq!(t.len(), recs.len() as u64);
        prop_assert!(t.records().eq(recs.iter().copied()));
        for (i, r) in recs.iter().enumerate() {
            prop_assert_eq!(t.record(i as u64), Some(*r));
        }
        for (pid, mref, val) in &metas {
            let e = t.meta(*pid, *mref).unwrap();
            prop_assert_eq!(e.get("v"), Some(&val[..]));
        }
        prop_assert_eq!(t.checkpoints().len(), cps.len());
        for (i, (idx, b)) in cps.iter().enumerate() {
            prop_assert_eq!(t.checkpoints()[i].0, *idx);
            prop_assert_eq!(t.checkpoint_bytes(i), &b[..]);
        }
    }
}
