//! End to end: producers follow the probe's protocol on a ring that is far too small (so
//! events are dropped), the consumer resyncs from the live table after every loss, and the
//! model ends with exactly the live table's objects and no anomalies.

use std::sync::atomic::{AtomicBool, Ordering};

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::live::{resync_records_at, LiveClass, SEQ_DROPPED};
use fragprobe_shared::model::Model;
use fragprobe_shared::ring::{Ring, RingConfig};

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

/// What the probe does around a successful allocation.
fn alloc(ring: &Ring, addr: u64, size: u64) {
    let claim = ring.claim();
    let seq = claim.as_ref().map_or(SEQ_DROPPED, |c| c.seq());
    ring.live()
        .insert(addr, LiveClass::Device, 0, size, 0, 0, seq);
    if let Some(c) = claim {
        c.commit(event(EventKind::Alloc, addr, size));
    }
}

/// What the probe does before a free.
fn free(ring: &Ring, addr: u64) {
    let claim = ring.claim();
    ring.live().remove(addr, LiveClass::Device);
    if let Some(c) = claim {
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
    std::thread::scope(|s| {
        let producers: Vec<_> = (0..2u64)
            .map(|t| {
                let ring = &ring;
                s.spawn(move || {
                    let mut live = std::collections::VecDeque::new();
                    for i in 0..20_000u64 {
                        let addr = 0x7000_0000_0000 + (t << 36) + i * 0x1000;
                        alloc(ring, addr, 0x100 + (i % 15) * 0x100);
                        live.push_back(addr);
                        if live.len() > 50 || (i % 7 == 0 && !live.is_empty()) {
                            free(ring, live.pop_front().unwrap());
                        }
                    }
                })
            })
            .collect();
        let mut consume = |model: &mut Model| {
            let mut batch = Vec::new();
            ring.drain(usize::MAX, &mut |r| batch.push(*r));
            for r in &batch {
                model.apply(r);
            }
            let lost = ring.dropped() + ring.skipped();
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
                for r in resync_records_at(&ring, 0) {
                    model.apply(&r);
                }
                resyncs += 1;
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
