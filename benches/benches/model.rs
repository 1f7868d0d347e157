//! Model throughput: records applied per second (model + metrics + series, through
//! `Model::apply_batch`) in steady-state allocation/free churn with 1 k and 1 M live
//! regions.
//!
//! The churn is realistic first-fit-like traffic: free a random live region, allocate a new
//! one of a random size into the hole it left if it fits (else after the last region). Each
//! measured batch is that sequence followed by its exact inverse in reverse order, so the
//! model returns to the same state and batches can be repeated without rebuilding it.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::model::Model;

use fragprobe_tests::rng::Rng;

const BASE: u64 = 0x7f00_0000_0000;
const TOTAL: u64 = 80 << 30;

fn rec(seq: u64, kind: EventKind, addr: u64, size: u64) -> Record {
    Record {
        seq,
        ts_ns: seq * 100,
        addr,
        size,
        pid: 1,
        device: 0,
        kind: kind as u16,
        api: Api::CudaMalloc as u16,
        ..Record::default()
    }
}

/// A model holding `live` regions, and a churn batch of `4 × moves` events (each move is a
/// free and an allocation; then their inverse) that leaves it in the same state.
fn setup(live: usize, moves: usize) -> (Model, Vec<Record>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut m = Model::new();
    m.apply(&rec(0, EventKind::Device, 0, TOTAL));
    let size = |rng: &mut Rng| (1 + rng.next() % 64) * 512;
    let mut regions: Vec<(u64, u64, u64)> = Vec::with_capacity(live); // (addr, size, seq)
    let mut top = BASE;
    let mut seq = 1;
    for _ in 0..live {
        let s = size(&mut rng);
        // Leave a gap now and then so the arena has holes from the start.
        if rng.next().is_multiple_of(4) {
            top += size(&mut rng);
        }
        regions.push((top, s, seq));
        m.apply(&rec(seq, EventKind::Alloc, top, s));
        top += s;
        seq += 1;
    }
    let mut fwd = Vec::with_capacity(2 * moves);
    for _ in 0..moves {
        let i = (rng.next() % regions.len() as u64) as usize;
        let (a, s, _) = regions.swap_remove(i);
        fwd.push(rec(seq, EventKind::Free, a, 0));
        seq += 1;
        let n = size(&mut rng);
        let at = if n <= s {
            a
        } else {
            let t = top;
            top += n;
            t
        };
        regions.push((at, n, seq));
        fwd.push(rec(seq, EventKind::Alloc, at, n));
        seq += 1;
    }
    // The inverse, in reverse order: undo each alloc with a free and each free with the
    // original allocation.
    // Rebuild what each free removed by replaying the forward pass on a shadow map.
    let mut shadow: std::collections::HashMap<u64, Record> =
        m_regions(&m).into_iter().map(|r| (r.addr, r)).collect();
    let mut undo = Vec::with_capacity(fwd.len());
    for r in &fwd {
        if r.kind == EventKind::Free as u16 {
            let old = shadow.remove(&r.addr).expect("freed region is live");
            undo.push(old);
        } else {
            shadow.insert(r.addr, *r);
            undo.push(rec(r.seq, EventKind::Free, r.addr, 0));
        }
    }
    let mut batch = fwd;
    batch.extend(undo.into_iter().rev());
    (m, batch)
}

/// The live regions of the model's only space, as the allocation records that made them.
fn m_regions(m: &Model) -> Vec<Record> {
    let s = m.spaces()[0].id();
    m.regions_in(s, 0, u64::MAX)
        .into_iter()
        .map(|r| rec(r.seq, EventKind::Alloc, r.addr, r.size))
        .collect()
}

fn churn(c: &mut Criterion, name: &str, live: usize, moves: usize) {
    let (mut m, batch) = setup(live, moves);
    let before = m.spaces()[0].totals().live_count;
    for r in &batch {
        m.apply(r);
    }
    assert_eq!(
        m.spaces()[0].totals().live_count,
        before,
        "batch must restore the state"
    );
    assert_eq!(m.counts().anomalies, 0);
    let mut g = c.benchmark_group("model");
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.sample_size(20);
    g.bench_function(name, |b| {
        // The batch entry point the viewer's ingest uses (it loads what the records ahead
        // will touch while one is applied); the same results as `apply` on each.
        b.iter(|| m.apply_batch(&batch))
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    churn(c, "churn_1k_live", 1_000, 10_000);
    churn(c, "churn_1m_live", 1_000_000, 100_000);
}

criterion_group!(model, benches);
criterion_main!(model);
