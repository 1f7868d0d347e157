//! End to end: producers follow the probe's protocol on a ring that is far too small (so
//! events are dropped), the consumer resyncs from the live table after every loss, and the
//! model ends with exactly the live table's objects and no anomalies.

use std::sync::atomic::{AtomicBool, Ordering};

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::live::{resync_records_at, LiveClass, SEQ_DROPPED};
use fragprobe_shared::model::Model;
use fragprobe_shared::ring::{DrainEnd, Ring, RingConfig};

const PID: u32 = 77;

fn event(kind: EventKind, addr: u64, size: u64) -> Record {
    Record {
        kind: kind as u16,
        api: Api::Synthetic as u16,
        addr,
        size,
        pid: PID,
        device: 0,
        ..Record::default()
    }
}

/// What the probe does around a successful allocation (odd threads record drops with the
/// tail, even ones with SEQ_DROPPED: both must work).
fn alloc(ring: &Ring, addr: u64, size: u64, drop_seq_is_tail: bool) {
    let claim = ring.try_claim();
    let dropped = if drop_seq_is_tail {
        ring.tail()
    } else {
        SEQ_DROPPED
    };
    let seq = claim.as_ref().map_or(dropped, |c| c.seq());
    ring.live()
        .insert(addr, LiveClass::Device, 0, size, 0, 0, seq);
    // A refusal (`Err`) is counted here, after the update.
    if let Ok(c) = claim {
        c.commit(event(EventKind::Alloc, addr, size));
    }
}

/// What the probe does before a free.
fn free(ring: &Ring, addr: u64) {
    let claim = ring.try_claim();
    ring.live().remove(addr, LiveClass::Device);
    if let Ok(c) = claim {
        c.commit(event(EventKind::Free, addr, 0));
    }
}

#[test]
fn resyncs_after_losses_leave_the_model_exact() {
    let cfg = RingConfig {
        capacity: 64,
        meta_bytes: 64,
        live_capacity: 4096,
    };
    let mut mem = vec![0u64; cfg.file_len().div_ceil(8)];
    // SAFETY: zeroed, aligned, large enough, and `mem` outlives the ring.
    let ring = unsafe { Ring::init(mem.as_mut_ptr() as *mut u8, mem.len() * 8, &cfg, PID, 0) }
        .expect("init");
    let done = AtomicBool::new(false);
    let mut model = Model::new();
    let mut seen_lost = 0u64;
    let mut resyncs = 0;
    let mut skip_below = 0u64;
    std::thread::scope(|s| {
        let producers: Vec<_> = (0..2u64)
            .map(|t| {
                let ring = &ring;
                s.spawn(move || {
                    let mut live = std::collections::VecDeque::new();
                    for i in 0..20_000u64 {
                        let addr = 0x7000_0000_0000 + (t << 36) + i * 0x1000;
                        alloc(ring, addr, 0x100 + (i % 15) * 0x100, t % 2 == 1);
                        live.push_back(addr);
                        if live.len() > 50 || (i % 7 == 0 && !live.is_empty()) {
                            free(ring, live.pop_front().unwrap());
                        }
                    }
                })
            })
            .collect();
        // The consumer: deliver records, but account for drops (loss marker + resync) before
        // any record that may depend on them; after a resync, skip records below its
        // watermark (the snapshot holds them).
        let mut consume = |model: &mut Model| loop {
            let mut batch = Vec::new();
            let st = ring.drain_until_drop(usize::MAX, seen_lost, &mut |r| batch.push(*r));
            for r in batch.iter().filter(|r| r.seq >= skip_below) {
                model.apply(r);
            }
            let lost = ring.dropped();
            if lost > seen_lost {
                let head = ring.head();
                model.apply(&Record {
                    seq: head,
                    addr: head,
                    size: lost - seen_lost,
                    kind: EventKind::Loss as u16,
                    api: Api::Consumer as u16,
                    pid: PID,
                    device: -1,
                    ..Record::default()
                });
                seen_lost = lost;
                let recs = resync_records_at(&ring, 0);
                skip_below = recs[0].aux;
                for r in &recs {
                    model.apply(r);
                }
                resyncs += 1;
                continue;
            }
            if st.end != DrainEnd::Max {
                return;
            }
        };
        while !done.load(Ordering::Relaxed) {
            consume(&mut model);
            if producers.iter().all(|p| p.is_finished()) {
                done.store(true, Ordering::Relaxed);
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        consume(&mut model);
    });
    assert!(ring.dropped() > 0, "the test needs losses");
    assert!(resyncs > 0);
    assert_eq!(ring.head(), ring.tail());
    let (count, bytes) = ring.live().totals();
    let space = &model.spaces()[0];
    assert_eq!(
        (space.totals().live_count, space.totals().live_bytes),
        (count, bytes),
        "model after {resyncs} resyncs ({} events dropped) vs the live table",
        ring.dropped()
    );
    assert_eq!(model.anomalies().total(), 0, "{:?}", model.anomalies());
}
