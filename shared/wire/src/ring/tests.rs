use super::*;

#[test]
fn a_ring_takes_at_most_an_eighth_and_leaves_a_quarter_or_a_gib_free() {
    const MIB: u64 = 1 << 20;
    // Docker's default /dev/shm: no room for the default 18 MiB ring.
    assert!(!room_for_ring(18 * MIB, 64 * MIB, 64 * MIB));
    // A 2 GiB /dev/shm takes it, until a quarter of it would be left.
    assert!(room_for_ring(18 * MIB, 2 << 30, 2 << 30));
    assert!(room_for_ring(18 * MIB, 2 << 30, 512 * MIB + 18 * MIB));
    assert!(!room_for_ring(18 * MIB, 2 << 30, 512 * MIB + 18 * MIB - 1));
    // A big, mostly full disk: 1 GiB left is enough.
    assert!(room_for_ring(18 * MIB, 250 << 30, (1 << 30) + 18 * MIB));
    assert!(!room_for_ring(
        18 * MIB,
        250 << 30,
        (1 << 30) + 18 * MIB - 1
    ));
    // Exactly an eighth is allowed; never more than is free.
    assert!(room_for_ring(8 * MIB, 64 * MIB, 64 * MIB));
    assert!(!room_for_ring(8 * MIB + 1, 64 * MIB, 64 * MIB));
    assert!(!room_for_ring(MIB, 1 << 40, MIB - 1));
    // Nothing needed: any file system with a quarter free.
    assert!(room_for_ring(0, 64 * MIB, 16 * MIB));
}

fn zeroed(cfg: &RingConfig) -> Vec<u64> {
    vec![0u64; cfg.file_len().div_ceil(8)]
}

#[test]
fn layout_is_aligned_and_sized() {
    let cfg = RingConfig::DEFAULT;
    let len = cfg.file_len();
    assert_eq!(len % 64, 0);
    assert!(len > (1 << 20) * 88 + 64 * 1024 + 262144 * 48);
    assert!(len < 102 << 20, "default ring is about 101 MiB, got {len}");
}

#[test]
fn env_values_round_and_clamp() {
    assert_eq!(RingConfig::from_env_values(None, None), RingConfig::DEFAULT);
    let c = RingConfig::from_env_values(Some(1000), Some(3));
    assert_eq!((c.capacity, c.live_capacity), (1024, 8));
    let c = RingConfig::from_env_values(Some(u64::MAX), Some(0));
    assert_eq!(
        (c.capacity, c.live_capacity),
        (MAX_CAPACITY, MIN_LIVE_CAPACITY)
    );
    assert!(c.check().is_ok());
}

/// A ring of 8 slots, 128 bytes of metadata and an 8-entry live table, for pid 7
/// started at 9 ns, in zeroed memory that `f` may not outlive.
fn with_small_ring(f: impl FnOnce(&Ring)) {
    let cfg = RingConfig {
        capacity: 8,
        meta_bytes: 128,
        live_capacity: 8,
    };
    let mut mem = zeroed(&cfg);
    // SAFETY: mem is zeroed, 8-aligned, large enough and outlives the ring.
    let ring =
        unsafe { Ring::init(mem.as_mut_ptr() as *mut u8, cfg.file_len(), &cfg, 7, 9) }.unwrap();
    f(&ring);
}

#[test]
fn a_ring_overwritten_from_outside_drops_instead_of_spinning() {
    with_small_ring(a_ring_overwritten_from_outside_drops_instead_of_spinning_in);
}

fn a_ring_overwritten_from_outside_drops_instead_of_spinning_in(ring: &Ring) {
    assert!(ring.push(Record::default()));
    // Garbage in the next slot's state word, as if the host wrote text into the file:
    // it claims a later lap's commit while the tail has not moved.
    ring.state(1)
        .store(u64::from_le_bytes(*b"FPSCN pi"), Ordering::Relaxed);
    let dropped = ring.dropped();
    assert!(!ring.push(Record::default()), "refused, not spun on");
    assert_eq!(ring.dropped(), dropped + 1, "and counted");
}

#[test]
fn push_pop_and_meta() {
    with_small_ring(push_pop_and_meta_in);
}

fn push_pop_and_meta_in(ring: &Ring) {
    assert_eq!((ring.pid(), ring.start_ns()), (7, 9));
    assert_eq!(ring.pop(), Pop::Empty);
    let mut buf = [0u8; 64];
    let mut w = crate::format::MetaWriter::new(&mut buf, crate::format::MetaKind::RunInfo);
    w.field(b"k", b"value");
    let (n, _) = w.finish();
    let r = ring.write_meta(&buf[..n]).unwrap();
    assert_eq!(r, 1);
    let e = crate::format::MetaEntry::parse(ring.meta(r).unwrap()).unwrap();
    assert_eq!(e.get("k"), Some(&b"value"[..]));
    assert!(ring.meta(2).is_none() && ring.meta(0).is_none());
    // 128 bytes of meta: the 24-byte entry fits 5 times in total.
    let refs: Vec<_> = (0..10).map(|_| ring.write_meta(&buf[..n])).collect();
    assert_eq!(refs.iter().filter(|r| r.is_some()).count(), 4);
    assert!(ring.push(Record {
        kind: 1,
        addr: 5,
        meta: r,
        ..Record::default()
    }));
    let c = ring.claim().unwrap();
    assert_eq!(c.seq(), 1);
    assert_eq!(
        ring.pop().clone(),
        Pop::Record(Record {
            kind: 1,
            addr: 5,
            meta: r,
            ..Record::default()
        })
    );
    assert_eq!(ring.pop(), Pop::Pending { seq: 1 });
    drop(c);
    match ring.pop() {
        Pop::Record(v) => assert_eq!((v.seq, v.kind, v.pid), (1, 0, 7)),
        other => panic!("expected the void record, got {other:?}"),
    }
}

#[test]
fn ring_dirs_in_order() {
    let mut buf = [0u8; 256];
    let c = |i, e: Option<&[u8]>, x: Option<&[u8]>, buf: &mut [u8; 256]| {
        ring_dir_candidate(i, 1000, e, x, buf).map(|s| String::from_utf8(s.to_vec()).unwrap())
    };
    assert_eq!(
        c(0, Some(b"/r"), Some(b"/run/user/1000"), &mut buf).unwrap(),
        "/r"
    );
    assert_eq!(
        c(1, Some(b"/r"), Some(b"/run/user/1000/"), &mut buf).unwrap(),
        "/run/user/1000/fragprobe"
    );
    assert_eq!(
        c(2, Some(b"/r"), Some(b"/x"), &mut buf).unwrap(),
        "/dev/shm/fragprobe-1000"
    );
    assert_eq!(
        c(3, Some(b"/r"), Some(b"/x"), &mut buf).unwrap(),
        "/tmp/fragprobe-1000"
    );
    assert_eq!(c(4, Some(b"/r"), Some(b"/x"), &mut buf), None);
    assert_eq!(
        c(0, Some(b""), None, &mut buf).unwrap(),
        "/dev/shm/fragprobe-1000"
    );
    assert_eq!(
        ring_dir_candidate(0, 1000, None, None, &mut [0u8; 8]),
        None,
        "too small a buffer"
    );
    assert_eq!(parse_ring_file_name(b"4242.ring"), Some(4242));
    assert_eq!(parse_ring_file_name(b"99999999999.ring"), None);
    assert_eq!(parse_ring_file_name(b"x.ring"), None);
    assert_eq!(parse_ring_file_name(b"4242-123456789.ring"), Some(4242));
    assert_eq!(parse_ring_file_name(b"4242-.ring"), None);
    assert_eq!(parse_ring_file_name(b"4242-12x.ring"), None);
}
