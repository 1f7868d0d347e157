//! The ring as a queue: many producers, one consumer, full rings, bad headers.

use fragprobe_shared::format::{Record, FORMAT_VERSION};
use fragprobe_shared::ring::{DrainEnd, Pop, Ring, RingConfig, RingError, RingFile};

/// A zeroed, 8-aligned region holding a ring.
struct Mem(Vec<u64>);

impl Mem {
    fn new(cfg: &RingConfig) -> Mem {
        Mem(vec![0u64; cfg.file_len().div_ceil(8)])
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr() as *mut u8
    }
    fn len(&self) -> usize {
        self.0.len() * 8
    }
    fn init(&mut self, cfg: &RingConfig) -> Ring {
        let (p, l) = (self.ptr(), self.len());
        // SAFETY: zeroed, aligned, large enough; every test keeps `Mem` alive while the
        // ring is used.
        unsafe { Ring::init(p, l, cfg, 1234, 5) }.expect("init")
    }
}

fn cfg(capacity: u32) -> RingConfig {
    RingConfig {
        capacity,
        meta_bytes: 4096,
        live_capacity: 64,
    }
}

fn rec(thread: u32, i: u64) -> Record {
    Record {
        kind: 1,
        tid: thread,
        addr: i,
        size: i * 3 + thread as u64,
        ..Record::default()
    }
}

#[test]
fn eight_producers_one_consumer_lose_nothing() {
    const THREADS: u32 = 8;
    const PER: u64 = 100_000;
    let c = cfg(4096);
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    let refused = std::sync::atomic::AtomicU64::new(0);
    let mut got: Vec<Record> = Vec::with_capacity((THREADS as u64 * PER) as usize);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (ring, refused) = (&ring, &refused);
            s.spawn(move || {
                for i in 0..PER {
                    // The ring may fill up: retry, counting refusals, which must all show
                    // up in `dropped`.
                    while !ring.push(rec(t, i)) {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        std::thread::yield_now();
                    }
                }
            });
        }
        let total = (THREADS as u64 * PER) as usize;
        while got.len() < total {
            let st = ring.drain_until_drop(1000, u64::MAX, &mut |r| got.push(*r));
            if st.count == 0 {
                std::thread::yield_now();
            }
        }
    });
    assert_eq!(ring.pop(), Pop::Empty);
    assert_eq!(
        ring.dropped(),
        refused.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert_eq!(ring.skipped(), 0);
    let mut next = vec![0u64; THREADS as usize];
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.seq, i as u64, "sequence numbers are contiguous");
        let t = r.tid as usize;
        assert_eq!(
            r.addr, next[t],
            "thread {t}'s records arrive in order, once each"
        );
        assert_eq!(r.size, r.addr * 3 + t as u64, "record content intact");
        next[t] += 1;
    }
    assert!(next.iter().all(|&n| n == PER));
    assert_eq!(
        (ring.head(), ring.tail()),
        (THREADS as u64 * PER, THREADS as u64 * PER)
    );
}

#[test]
fn full_ring_counts_drops_exactly() {
    let c = cfg(1024);
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    let n = 5000u64;
    let accepted = (0..n).filter(|&i| ring.push(rec(0, i))).count() as u64;
    assert_eq!(accepted, 1024);
    assert_eq!(ring.dropped(), n - 1024);
    let mut seen = Vec::new();
    let st = ring.drain_until_drop(usize::MAX, u64::MAX, &mut |r| seen.push((r.seq, r.addr)));
    assert_eq!(st.count, 1024);
    assert_eq!(st.end, DrainEnd::Empty);
    assert!(seen
        .iter()
        .enumerate()
        .all(|(i, &(s, a))| s == i as u64 && a == i as u64));
    // After draining the ring accepts again, continuing the sequence.
    assert!(ring.push(rec(0, 99)));
    match ring.pop() {
        Pop::Record(r) => assert_eq!((r.seq, r.addr), (1024, 99)),
        other => panic!("expected a record, got {other:?}"),
    }
}

#[test]
fn full_ring_counts_drops_exactly_from_threads() {
    let c = cfg(1024);
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    let accepted = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (ring, accepted) = (&ring, &accepted);
            s.spawn(move || {
                for i in 0..3000 {
                    if ring.push(rec(t, i)) {
                        accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(accepted.into_inner(), 1024);
    assert_eq!(ring.dropped(), 4 * 3000 - 1024);
    let st = ring.drain_until_drop(usize::MAX, u64::MAX, &mut |_| {});
    assert_eq!(st.count, 1024);
}

#[test]
fn drain_stops_at_max_and_pending() {
    let c = cfg(8);
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    for i in 0..3 {
        assert!(ring.push(rec(0, i)));
    }
    let claim = ring.claim().expect("slot");
    assert!(ring.push(rec(0, 4)));
    let st = ring.drain_until_drop(2, u64::MAX, &mut |_| {});
    assert_eq!((st.count, st.end), (2, DrainEnd::Max));
    let st = ring.drain_until_drop(10, u64::MAX, &mut |_| {});
    assert_eq!((st.count, st.end), (1, DrainEnd::Pending { seq: 3 }));
    // Skipping a slot that is not the consumer's position, or that nobody claimed, fails.
    assert!(!ring.skip_pending(4));
    claim.commit(rec(0, 3));
    let mut addrs = Vec::new();
    let st = ring.drain_until_drop(10, u64::MAX, &mut |r| addrs.push(r.addr));
    assert_eq!((st.count, st.end, addrs), (2, DrainEnd::Empty, vec![3, 4]));
    assert!(!ring.skip_pending(5), "nothing claimed at 5");
}

#[test]
fn a_refused_try_claim_counts_its_drop_when_dropped() {
    let c = cfg(8);
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    for i in 0..8 {
        assert!(ring.push(rec(0, i)));
    }
    let full = ring.try_claim().err().expect("the ring is full");
    // Not yet: the producer still has its live-table update to make.
    assert_eq!(ring.dropped(), 0);
    drop(full);
    assert_eq!(ring.dropped(), 1);
    // `claim` counts at once.
    assert!(ring.claim().is_none());
    assert_eq!(ring.dropped(), 2);
    // Committed below the tail: everything but a claimed, uncommitted slot.
    assert!(ring.committed_below(8));
    assert!(matches!(ring.pop(), Pop::Record(_)));
    let pending = ring.claim().expect("a slot is free");
    assert!(!ring.committed_below(ring.tail()));
    assert!(ring.committed_below(ring.tail() - 1));
    pending.commit(rec(0, 8));
    assert!(ring.committed_below(ring.tail()));
}

#[test]
fn skipped_slot_is_reusable_and_late_commit_is_harmless() {
    let c = cfg(8);
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    let stalled = ring.claim().expect("slot");
    assert_eq!(ring.pop(), Pop::Pending { seq: 0 });
    assert!(ring.skip_pending(0));
    assert_eq!(ring.skipped(), 1);
    assert_eq!(ring.pop(), Pop::Empty);
    // The stalled producer finally commits: its CAS fails and nothing is delivered.
    stalled.commit(rec(9, 9));
    assert_eq!(ring.pop(), Pop::Empty);
    // Many laps later everything still flows.
    for i in 1..100 {
        assert!(ring.push(rec(0, i)));
        match ring.pop() {
            Pop::Record(r) => assert_eq!((r.seq, r.addr), (i, i)),
            other => panic!("lap {i}: {other:?}"),
        }
    }
    assert_eq!(ring.dropped(), 0);
}

#[test]
fn attach_sees_the_same_ring() {
    let c = cfg(16);
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    assert!(ring.push(rec(1, 1)));
    let (p, l) = (mem.ptr(), mem.len());
    // SAFETY: the region holds an initialised ring and outlives `other`.
    let other = unsafe { Ring::attach(p, l) }.expect("attach");
    assert_eq!(
        (other.pid(), other.start_ns(), other.config()),
        (1234, 5, c)
    );
    assert!(matches!(other.pop(), Pop::Record(r) if r.addr == 1));
    assert_eq!(ring.head(), 1);
}

#[test]
fn bad_headers_are_refused_with_clear_errors() {
    let c = cfg(16);
    let mut mem = Mem::new(&c);
    mem.init(&c);
    let (p, l) = (mem.ptr(), mem.len());

    // SAFETY: the region is valid for `l` bytes (more than asked) and outlives the call.
    let e = unsafe { Ring::attach(p, c.file_len() - 8) }.unwrap_err();
    assert_eq!(
        e,
        RingError::TooSmall {
            need: c.file_len(),
            have: c.file_len() - 8
        }
    );
    assert!(e.to_string().contains("cut short"));

    // Another version.
    let version_word = &mut mem.0[1];
    let saved = *version_word;
    *version_word = (saved & !0xffff_ffff) | (FORMAT_VERSION as u64 + 1);
    // SAFETY: see above.
    let e = unsafe { Ring::attach(p, l) }.unwrap_err();
    let RingError::Version(v) = &e else {
        panic!("expected a version error, got {e:?}")
    };
    assert_eq!((v.found, v.supported), (FORMAT_VERSION + 1, FORMAT_VERSION));
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("version {}", FORMAT_VERSION + 1)),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("version {FORMAT_VERSION}")) && msg.contains("upgrade"),
        "{msg}"
    );
    mem.0[1] = saved;

    // A capacity that is not a power of two.
    let geo = mem.0[2];
    mem.0[2] = (geo & !0xffff_ffff) | 12;
    // SAFETY: see above.
    let e = unsafe { Ring::attach(p, l) }.unwrap_err();
    assert!(matches!(e, RingError::BadGeometry(_)), "{e:?}");
    mem.0[2] = geo;

    // No magic.
    mem.0[0] = 0;
    // SAFETY: see above.
    let e = unsafe { Ring::attach(p, l) }.unwrap_err();
    assert_eq!(e, RingError::BadMagic);

    // init refuses impossible configurations.
    let mut m2 = Mem::new(&cfg(16));
    let bad = RingConfig {
        capacity: 10,
        ..cfg(16)
    };
    let (p2, l2) = (m2.ptr(), m2.len());
    // SAFETY: zeroed, aligned and large enough for cfg(16) (bigger than `bad` needs).
    let e = unsafe { Ring::init(p2, l2, &bad, 1, 1) };
    assert!(matches!(e, Err(RingError::BadGeometry(_))));
}

#[test]
fn ring_file_open_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("77.ring");
    let c = cfg(64);
    let f = RingFile::create(&path, &c, 77).unwrap();
    assert!(f.push(rec(0, 1)));
    let g = RingFile::open(&path).unwrap();
    assert_eq!(g.pid(), 77);
    assert!(matches!(g.pop(), Pop::Record(r) if r.addr == 1));

    let junk = dir.path().join("junk.ring");
    std::fs::write(&junk, vec![7u8; 4096]).unwrap();
    let e = RingFile::open(&junk).unwrap_err().to_string();
    assert!(
        e.contains("junk.ring") && e.contains("not a fragprobe ring"),
        "{e}"
    );
    let e = RingFile::open(dir.path().join("missing.ring"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.ring"), "{e}");
}

#[test]
fn the_default_ring_holds_a_burst_of_16_threads_x_32768_pairs_with_no_consumer() {
    // The load a user hit: 16 threads × 33 000 alloc/free pairs outran the consumer, and
    // the old 65 536-record default lost 87 % of it. The default holds 16 × 32 768 pairs
    // before anyone drains a record, so at 33 000 pairs the consumer need drain only 7 424
    // events while the burst lasts (it drains ~1.3 M/s on the same cores:
    // `record/drops_at_defaults` in benches/benches/record.rs measures the whole command).
    const THREADS: u32 = 16;
    const EVENTS: u64 = 32_768 * 2;
    let c = RingConfig::DEFAULT;
    let mut mem = Mem::new(&c);
    let ring = mem.init(&c);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let ring = &ring;
            s.spawn(move || {
                for i in 0..EVENTS {
                    assert!(ring.push(rec(t, i)), "thread {t} dropped event {i}");
                }
            });
        }
    });
    assert_eq!(ring.dropped(), 0);
    assert!(!ring.push(rec(0, 0)), "and then it is full");
    let mut n = 0u64;
    while ring
        .drain_until_drop(1 << 16, u64::MAX, &mut |_| n += 1)
        .count
        > 0
    {}
    assert_eq!(n, THREADS as u64 * EVENTS);
}
