//! A producer process killed between claim and commit must not wedge the consumer.

use fragprobe_shared::format::Record;
use fragprobe_shared::ring::{Pop, RingConfig, RingFile};

#[test]
fn producer_killed_mid_write_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RingConfig {
        capacity: 16,
        meta_bytes: 1024,
        live_capacity: 16,
    };
    let ring = RingFile::create(dir.path().join("1.ring"), &cfg, 1).unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);

    // SAFETY: the child only touches the shared mapping (atomics, no allocation), writes to
    // a pipe and waits to be killed; it never returns into the test harness.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        for i in 0..3 {
            ring.push(Record {
                kind: 1,
                addr: 100 + i,
                ..Record::default()
            });
        }
        if let Some(claim) = ring.claim() {
            // Half-written and never committed: the process dies holding the slot.
            std::mem::forget(claim);
        }
        // SAFETY: fds[1] is the pipe's write end; the buffer is one valid byte.
        unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) };
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }
    let mut b = [0u8; 1];
    // SAFETY: fds[0] is the pipe's read end; b is one writable byte.
    assert_eq!(unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) }, 1);
    // SAFETY: child is our child process.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(child, &mut status, 0);
        assert!(libc::WIFSIGNALED(status));
    }

    let mut addrs = Vec::new();
    for _ in 0..3 {
        match ring.pop() {
            Pop::Record(r) => addrs.push(r.addr),
            other => panic!("expected a record, got {other:?}"),
        }
    }
    assert_eq!(addrs, vec![100, 101, 102]);
    // The dead producer's slot: pending forever, until the consumer gives up on it.
    assert_eq!(ring.pop(), Pop::Pending { seq: 3 });
    assert_eq!(ring.pop(), Pop::Pending { seq: 3 });
    assert!(ring.skip_pending(3));
    assert!(!ring.skip_pending(3), "skipping twice does nothing");
    assert_eq!(ring.pop(), Pop::Empty);
    // Other producers carry on, through several laps.
    for i in 0..40u64 {
        assert!(ring.push(Record {
            kind: 1,
            addr: i,
            ..Record::default()
        }));
        match ring.pop() {
            Pop::Record(r) => assert_eq!((r.seq, r.addr), (4 + i, i)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((ring.skipped(), ring.dropped()), (1, 0));
    // SAFETY: closing our pipe fds.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}
