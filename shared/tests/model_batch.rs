//! `Model::apply_batch` and `apply_batch_with` give exactly what `apply` on each record
//! gives, in arenas small and large enough for the batch path's prefetching.

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::model::{Metric, Model};

mod rng;
use rng::Rng;

const KINDS: [EventKind; 6] = [
    EventKind::Alloc,
    EventKind::Free,
    EventKind::AsyncAlloc,
    EventKind::AsyncFree,
    EventKind::ManagedAlloc,
    EventKind::MemGetInfo,
];

/// Churn over two processes and two devices: `live` regions first, then random frees,
/// allocations (some overlapping, some duplicates, some of unknown addresses) and other
/// kinds.
fn trace(live: usize, churn: usize, seed: u64) -> Vec<Record> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    let mut seq = 0;
    let mut rec = |kind: EventKind, pid: u32, device: i16, addr: u64, size: u64| {
        seq += 1;
        Record {
            seq,
            ts_ns: seq * 10,
            addr,
            size,
            pid,
            device,
            kind: kind as u16,
            api: Api::CudaMalloc as u16,
            ..Record::default()
        }
    };
    out.push(rec(EventKind::Device, 1, 0, 0, 1 << 40));
    let mut regions: Vec<(u32, i16, u64)> = Vec::new();
    let mut top = 0x7f00_0000_0000u64;
    for _ in 0..live {
        let (pid, dev) = if rng.next().is_multiple_of(8) {
            (2, 1)
        } else {
            (1, 0)
        };
        let s = (1 + rng.next() % 64) * 512;
        top += s + (rng.next() % 4) * 512;
        regions.push((pid, dev, top));
        out.push(rec(EventKind::Alloc, pid, dev, top, s));
    }
    for _ in 0..churn {
        let x = rng.next();
        let kind = KINDS[(x % KINDS.len() as u64) as usize];
        let i = (rng.next() % regions.len() as u64) as usize;
        let (pid, dev, a) = regions[i];
        let size = (1 + rng.next() % 96) * 512;
        match kind {
            EventKind::Free | EventKind::AsyncFree => {
                // Now and then an address nobody allocated.
                let a = if x >> 20 & 15 == 0 { a + 7 } else { a };
                out.push(rec(kind, pid, dev, a, 0));
            }
            _ => out.push(rec(kind, pid, dev, a + (x >> 8 & 3) * 512, size)),
        }
    }
    out
}

fn assert_same(a: &Model, b: &Model) {
    assert_eq!(a.checkpoint(), b.checkpoint());
    assert_eq!(a.counts(), b.counts());
    for (x, y) in a.spaces().iter().zip(b.spaces()) {
        assert_eq!(x.summary(), y.summary());
        for &m in Metric::ALL {
            let (p, q) = (x.series().get(m), y.series().get(m));
            assert!(p.points().eq(q.points()), "space series {m:?}");
        }
    }
    for (x, y) in a.devices().iter().zip(b.devices()) {
        assert_eq!(a.device_summary(x.id()), b.device_summary(y.id()));
        assert_eq!(a.device_arena(x.id()), b.device_arena(y.id()));
        let (p, q) = (
            a.device_series(x.id()).unwrap(),
            b.device_series(y.id()).unwrap(),
        );
        for &m in Metric::ALL {
            assert!(
                p.get(m).points().eq(q.get(m).points()),
                "device series {m:?}"
            );
        }
    }
}

fn check(live: usize, churn: usize, seed: u64) {
    let recs = trace(live, churn, seed);
    let mut one = Model::new();
    for r in &recs {
        one.apply(r);
    }
    // In uneven batches, so walks start and end mid-trace.
    let mut batched = Model::new();
    for part in recs.chunks(4093) {
        batched.apply_batch(part);
    }
    assert_same(&one, &batched);
    let mut seen = 0;
    let mut with = Model::new();
    with.apply_batch_with(
        &recs,
        |_| None,
        |m, r| {
            seen += 1;
            assert_eq!(m.now().seq, r.seq);
        },
    );
    assert_eq!(seen, recs.len());
    assert_same(&one, &with);
}

#[test]
fn batches_equal_one_by_one_in_a_small_arena() {
    check(500, 20_000, 0x9e37_79b9_7f4a_7c15);
}

#[test]
fn batches_equal_one_by_one_in_a_large_arena() {
    // Past the size where the batch path prefetches.
    check(40_000, 60_000, 0x2545_f491_4f6c_dd1d);
}
