//! The live table in the ring's shared memory, resync records and ring directories.

use std::collections::{BTreeMap, BTreeSet};

use fragprobe_shared::format::{EventKind, Record};
use fragprobe_shared::live::{resync_records_at, LiveClass, LiveEntry, LiveTable, SEQ_DROPPED};
use fragprobe_shared::ring::{list_rings, Pop, Ring, RingConfig, RingFile, EXITED, LIVE_OVERFLOW};

struct Mem(Vec<u64>);

impl Mem {
    fn ring(&mut self, cfg: &RingConfig) -> Ring {
        let (p, l) = (self.0.as_mut_ptr() as *mut u8, self.0.len() * 8);
        // SAFETY: zeroed, aligned, large enough; tests keep `Mem` alive while using the ring.
        unsafe { Ring::init(p, l, cfg, 42, 0) }.expect("init")
    }
}

/// A ring of `slots` slots with a live table of as many, and little metadata room.
fn small(slots: u32) -> RingConfig {
    RingConfig {
        capacity: slots,
        meta_bytes: 64,
        live_capacity: slots,
    }
}

fn mem(cfg: &RingConfig) -> Mem {
    Mem(vec![0u64; cfg.file_len().div_ceil(8)])
}

fn table(words: &mut Vec<u64>, capacity: usize) -> LiveTable {
    words.resize(LiveTable::bytes_for(capacity).div_ceil(8), 0);
    // SAFETY: zeroed, 8-aligned, big enough; the callers keep `words` alive and unmoved.
    unsafe { LiveTable::at(words.as_mut_ptr() as *mut u8, words.len() * 8, capacity) }.unwrap()
}

fn entry(key: u64, class: LiveClass, size: u64, seq: u64) -> LiveEntry {
    LiveEntry {
        key,
        class,
        device: 1,
        size,
        aux: key ^ 1,
        aux2: key ^ 2,
        seq,
    }
}

fn put(t: &LiveTable, e: LiveEntry) -> bool {
    t.insert(e.key, e.class, e.device, e.size, e.aux, e.aux2, e.seq)
}

#[test]
fn insert_get_remove_for_each() {
    let mut w = Vec::new();
    let t = table(&mut w, 64);
    let a = entry(0x7f00_0000_1000, LiveClass::Device, 4096, 1);
    let b = entry(0x7f00_0000_1000, LiveClass::Reservation, 1 << 21, 2);
    let c = LiveEntry {
        device: -1,
        ..entry(0x55, LiveClass::Handle, 1 << 21, 3)
    };
    assert!(put(&t, a) && put(&t, b) && put(&t, c));
    assert_eq!(t.len(), 3);
    assert_eq!(t.get(a.key, LiveClass::Device), Some(a));
    assert_eq!(
        t.get(b.key, LiveClass::Reservation),
        Some(b),
        "same key, other class"
    );
    assert_eq!(
        t.get(c.key, LiveClass::Handle),
        Some(c),
        "negative device survives"
    );
    assert_eq!(t.get(a.key, LiveClass::Managed), None);
    assert_eq!(
        t.totals(),
        (2, 4096 + (1 << 21)),
        "reservations hold no memory"
    );
    let mut all = Vec::new();
    t.for_each(|e| all.push(e));
    all.sort_by_key(|e| e.seq);
    assert_eq!(all, vec![a, b, c]);

    assert_eq!(t.remove(a.key, LiveClass::Device), Some(a));
    assert_eq!(t.remove(a.key, LiveClass::Device), None);
    assert_eq!(t.get(a.key, LiveClass::Device), None);
    assert_eq!(t.get(b.key, LiveClass::Reservation), Some(b));
    assert_eq!(t.len(), 2);

    // Re-inserting a live key replaces its entry instead of duplicating it.
    let b2 = LiveEntry {
        size: 7,
        seq: 9,
        ..b
    };
    assert!(put(&t, b2));
    assert_eq!(t.get(b.key, LiveClass::Reservation), Some(b2));
    assert_eq!(t.len(), 2);
    assert!(!t.overflowed());
}

#[test]
fn marker_keys_are_remapped() {
    let mut w = Vec::new();
    let t = table(&mut w, 16);
    let keys = [
        0,
        1,
        2,
        3,
        u64::MAX,
        u64::MAX - 1,
        u64::MAX - 2,
        0xFFFF_FFFF_0000_0000,
        0xFFFF_FFFE_FFFF_FFFF,
    ];
    for (i, &k) in keys.iter().enumerate() {
        assert!(
            put(&t, entry(k, LiveClass::Handle, i as u64, i as u64)),
            "key {k:#x}"
        );
    }
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(
            t.get(k, LiveClass::Handle),
            Some(entry(k, LiveClass::Handle, i as u64, i as u64))
        );
    }
    let mut seen = BTreeSet::new();
    t.for_each(|e| {
        seen.insert(e.key);
    });
    assert_eq!(seen, keys.iter().copied().collect());
    for &k in &keys {
        assert!(t.remove(k, LiveClass::Handle).is_some(), "key {k:#x}");
    }
    assert_eq!(t.len(), 0);
}

#[test]
fn full_table_reports_and_flags() {
    let c = small(8);
    let mut m = mem(&c);
    let ring = m.ring(&c);
    let t = ring.live();
    for k in 1..=8u64 {
        assert!(put(t, entry(k * 4096, LiveClass::Device, 1, k)));
    }
    assert!(!t.overflowed() && ring.flags() & LIVE_OVERFLOW == 0);
    assert!(!put(t, entry(9 * 4096, LiveClass::Device, 1, 9)));
    assert!(t.overflowed());
    assert_ne!(ring.flags() & LIVE_OVERFLOW, 0);
    // Still usable: remove one, insert another.
    assert!(t.remove(3 * 4096, LiveClass::Device).is_some());
    assert!(put(t, entry(9 * 4096, LiveClass::Device, 1, 9)));
    for k in (1..=9u64).filter(|&k| k != 3) {
        assert!(t.get(k * 4096, LiveClass::Device).is_some(), "{k}");
    }
}

#[test]
fn tombstones_do_not_fill_the_table() {
    // A long run of distinct addresses through a small table: removes must make room.
    let mut w = Vec::new();
    let t = table(&mut w, 64);
    let mut live = std::collections::VecDeque::new();
    for i in 0..200_000u64 {
        let key = 0x7000_0000_0000 + i * 512;
        assert!(
            put(&t, entry(key, LiveClass::Async, 512, i)),
            "insert {i} failed"
        );
        live.push_back(key);
        if live.len() > 40 {
            let k = live.pop_front().unwrap();
            assert!(
                t.remove(k, LiveClass::Async).is_some(),
                "remove of {k:#x} at {i}"
            );
        }
    }
    assert!(!t.overflowed());
    assert_eq!(t.len(), live.len());
    for &k in &live {
        assert!(t.get(k, LiveClass::Async).is_some());
    }
    assert_eq!(t.get(1, LiveClass::Async), None);
    let (_, tombs) = t.slot_counts();
    assert!(
        tombs < 24,
        "tombstones are reclaimed as clusters empty: {tombs}"
    );
    // Emptying the table reclaims every tombstone.
    while let Some(k) = live.pop_front() {
        assert!(t.remove(k, LiveClass::Async).is_some());
    }
    assert_eq!(t.slot_counts(), (0, 0));
}

#[test]
fn concurrent_insert_remove_keep_chains_intact() {
    const THREADS: u64 = 4;
    const LIVE_PER_THREAD: usize = 10;
    const OPS: u64 = 30_000;
    let mut w = Vec::new();
    let t = table(&mut w, 64);
    let finals: Vec<BTreeMap<u64, LiveEntry>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|th| {
                let t = &t;
                s.spawn(move || {
                    let mut mine = std::collections::VecDeque::new();
                    for i in 0..OPS {
                        let key = (th << 40) | (i * 64 + 64);
                        let e = entry(key, LiveClass::Device, key.wrapping_mul(3), i);
                        assert!(put(t, e), "thread {th} insert {i}");
                        mine.push_back(e);
                        if mine.len() > LIVE_PER_THREAD {
                            let old = mine.pop_front().unwrap();
                            assert_eq!(
                                t.remove(old.key, old.class),
                                Some(old),
                                "thread {th} op {i}"
                            );
                        }
                        // Every entry this thread holds is findable at all times, whatever
                        // the other threads are inserting, removing or reclaiming.
                        if i % 7 == 0 {
                            for e in &mine {
                                assert_eq!(t.get(e.key, e.class), Some(*e), "thread {th} op {i}");
                            }
                        }
                    }
                    mine.into_iter()
                        .map(|e| (e.key, e))
                        .collect::<BTreeMap<_, _>>()
                })
            })
            .collect();
        // Meanwhile a consumer takes snapshots: every entry it sees is consistent.
        let t = &t;
        let snap = s.spawn(move || {
            for _ in 0..300 {
                t.for_each(|e| {
                    assert_eq!(e.size, e.key.wrapping_mul(3), "torn entry {e:?}");
                    assert_eq!((e.aux, e.aux2), (e.key ^ 1, e.key ^ 2), "torn entry {e:?}");
                });
            }
        });
        snap.join().unwrap();
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(!t.overflowed());
    let mut expect: BTreeMap<u64, LiveEntry> = BTreeMap::new();
    for m in finals {
        expect.extend(m);
    }
    let mut got = BTreeMap::new();
    t.for_each(|e| {
        got.insert(e.key, e);
    });
    assert_eq!(got, expect);
    assert_eq!(t.len(), expect.len());
    for e in expect.values() {
        assert_eq!(t.remove(e.key, e.class), Some(*e));
    }
    assert_eq!(t.slot_counts(), (0, 0), "all tombstones reclaimed");
}

#[test]
fn resync_records_describe_the_live_table() {
    let c = small(64);
    let mut m = mem(&c);
    let ring = m.ring(&c);
    let push = |kind: EventKind, addr: u64| {
        let claim = ring.claim().unwrap();
        let seq = claim.seq();
        claim.commit(Record {
            kind: kind as u16,
            addr,
            ..Record::default()
        });
        seq
    };
    // Allocations 0..4 delivered to the consumer; a free (4) and an allocation (5) still in
    // the ring.
    for a in 1..=4u64 {
        let seq = push(EventKind::Alloc, a << 20);
        ring.live()
            .insert(a << 20, LiveClass::Device, 0, a * 100, 0, 0, seq);
    }
    for _ in 0..4 {
        assert!(matches!(ring.pop(), Pop::Record(_)));
    }
    let seq = push(EventKind::Free, 2 << 20);
    ring.live().remove(2 << 20, LiveClass::Device);
    assert_eq!(seq, 4);
    let seq = push(EventKind::Alloc, 9 << 20);
    ring.live()
        .insert(9 << 20, LiveClass::Async, 1, 900, 7, 8, seq);
    // An allocation whose event was dropped.
    ring.live()
        .insert(11 << 20, LiveClass::Handle, 0, 1100, 0, 0, SEQ_DROPPED);
    // A dropped allocation recorded with the tail at the time (6) instead: also included.
    ring.live()
        .insert(13 << 20, LiveClass::Device, 0, 1300, 0, 0, ring.tail());
    // An allocation claimed after the scan started (seq beyond the tail): left out.
    ring.live()
        .insert(12 << 20, LiveClass::Device, 0, 1200, 0, 0, 100);

    let recs = resync_records_at(&ring, 555);
    let kinds: Vec<_> = recs.iter().map(|r| r.kind().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&EventKind::ResyncBegin));
    assert_eq!(kinds.last(), Some(&EventKind::ResyncEnd));
    let (begin, end) = (recs[0], recs[recs.len() - 1]);
    assert_eq!(
        (begin.seq, begin.aux, begin.size),
        (6, 6, 6),
        "watermark = tail before the scan; 6 entries"
    );
    assert_eq!(
        (end.seq, end.aux, end.size),
        (6, 6, 6),
        "end = tail after the scan"
    );
    let mut entries: Vec<(u64, u64, u32, u64)> = recs[1..recs.len() - 1]
        .iter()
        .map(|r| (r.addr, r.size, r.result, r.seq))
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        vec![
            (1 << 20, 100, LiveClass::Device as u32, 0),
            (3 << 20, 300, LiveClass::Device as u32, 2),
            (4 << 20, 400, LiveClass::Device as u32, 3),
            (9 << 20, 900, LiveClass::Async as u32, 5),
            (11 << 20, 1100, LiveClass::Handle as u32, SEQ_DROPPED),
            (13 << 20, 1300, LiveClass::Device as u32, 6),
        ],
        "entries up to the watermark are in; the consumer skips records below it"
    );
    assert!(recs.iter().all(|r| r.ts_ns == 555 && r.pid == 42));
}

/// An event claimed below the watermark whose live-table update lands after the resync
/// began is in the snapshot: the resync waits for its commit before scanning.
#[test]
fn resync_waits_for_events_claimed_below_its_watermark() {
    let c = small(64);
    let mut m = mem(&c);
    let ring = m.ring(&c);
    let claim = ring.claim().unwrap();
    let seq = claim.seq();
    let recs = std::thread::scope(|s| {
        let resync = s.spawn(|| resync_records_at(&ring, 0));
        // Well after the resync read its watermark (the tail, past `seq`).
        std::thread::sleep(std::time::Duration::from_millis(30));
        ring.live()
            .insert(7 << 20, LiveClass::Device, 0, 700, 0, 0, seq);
        claim.commit(Record {
            kind: EventKind::Alloc as u16,
            addr: 7 << 20,
            size: 700,
            ..Record::default()
        });
        resync.join().unwrap()
    });
    assert_eq!(recs[0].aux, seq + 1, "watermark");
    let entries: Vec<(u64, u64)> = recs
        .iter()
        .filter(|r| r.kind() == Some(EventKind::ResyncEntry))
        .map(|r| (r.addr, r.seq))
        .collect();
    assert_eq!(entries, vec![(7 << 20, seq)]);
}

#[test]
fn list_rings_finds_rings_and_liveness() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let c = small(8);
    let _mine = RingFile::create(dir.path().join(format!("{me}.ring")), &c, me).unwrap();
    let exited = RingFile::create(dir.path().join("1.ring"), &c, 1).unwrap();
    exited.set_flag(EXITED);
    std::fs::write(
        dir.path().join("2.ring"),
        b"not a ring at all, but long enough to read a header from it ...",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
    let found = list_rings(dir.path());
    let summary: Vec<_> = found.iter().map(|r| (r.pid, r.alive)).collect();
    assert_eq!(summary, vec![(1, false), (me, true)]);
    assert!(list_rings(dir.path().join("missing")).is_empty());
}

#[test]
fn churn_at_high_load_from_threads() {
    // 4 threads keep up to 3 entries each in a 16-slot table (75 % load at peak) and check
    // that each of their entries stays findable while the others churn and reclaim.
    let mut w = Vec::new();
    let t = table(&mut w, 16);
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let t = &t;
            s.spawn(move || {
                let mut mine = std::collections::VecDeque::new();
                for i in 0..50_000u64 {
                    let key = (th << 40) | (i * 64 + 64);
                    assert!(
                        t.insert(key, LiveClass::Device, 0, key * 3, 0, 0, i),
                        "{th}/{i}"
                    );
                    mine.push_back(key);
                    if mine.len() > 2 {
                        let k = mine.pop_front().unwrap();
                        assert!(t.remove(k, LiveClass::Device).is_some(), "{th}/{i}");
                    }
                    for &k in &mine {
                        let got = t.get(k, LiveClass::Device).map(|e| e.size);
                        assert_eq!(got, Some(k * 3), "{th}/{i}");
                    }
                }
                for k in mine {
                    assert!(t.remove(k, LiveClass::Device).is_some());
                }
            });
        }
    });
    assert!(!t.overflowed());
    assert_eq!(t.slot_counts(), (0, 0));
}
