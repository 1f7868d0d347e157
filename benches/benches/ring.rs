//! Ring hot paths: push (claim + commit) from 1, 2 and 8 threads while a consumer drains,
//! and draining a full ring into a trace file.
//!
//! Target: push ≤ 50 ns median from one thread (`ring/push/1_thread`, which times pushes
//! that have room while the consumer drains every 0.5 ms, as `fragprobe run`'s recorder
//! does; `1_thread_spinning_consumer` is the worst case, a consumer draining without pause
//! and so pulling every line the producer writes over to its own core). The 2- and 8-thread
//! benches report aggregate wall time per accepted push, retries on a full ring included, so
//! they also measure how fast the (spinning) consumer drains. The ring lives in ordinary
//! memory here; a `MAP_SHARED` file mapping behaves the same once its pages are resident.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fragprobe_shared::format::Record;
use fragprobe_shared::ring::{Ring, RingConfig};
use fragprobe_shared::trace::TraceWriter;

struct Mem(Vec<u64>);

impl Mem {
    fn new(cfg: &RingConfig) -> Mem {
        Mem(vec![0u64; cfg.file_len().div_ceil(8)])
    }
    fn ring(&mut self, cfg: &RingConfig) -> Ring {
        let (p, l) = (self.0.as_mut_ptr() as *mut u8, self.0.len() * 8);
        // SAFETY: zeroed, 8-aligned, large enough; every bench keeps `Mem` alive (and
        // unmoved) while it uses the ring.
        unsafe { Ring::init(p, l, cfg, 1, 0) }.expect("ring init")
    }
}

fn rec(i: u64) -> Record {
    Record {
        kind: 1,
        addr: i,
        size: 4096,
        ts_ns: i,
        pid: 1,
        tid: 2,
        ..Record::default()
    }
}

/// How the consumer waits between drains.
#[derive(Clone, Copy)]
enum Poll {
    /// Drains again at once, yielding the CPU only when the ring is empty: the worst case
    /// for the producer, whose freshly written lines the consumer keeps pulling away.
    Spin,
    /// Sleeps this long after every drain, as `fragprobe run`'s recorder does while
    /// records keep coming (0.5 ms, growing to 10.5 ms when idle).
    Every(Duration),
}

/// The recorder's polling interval while busy (see `record/session.rs`).
const RECORDER_POLL: Duration = Duration::from_micros(500);

/// Runs `f` while a consumer thread drains `ring`.
fn with_consumer<T>(ring: &Ring, poll: Poll, f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // The recorder's loop: 64 Ki records a pass, stopping at an unaccounted drop.
                let st = ring
                    .drain_until_drop(1 << 16, ring.dropped(), &mut |r| n = n.wrapping_add(r.addr));
                match poll {
                    Poll::Spin if st.count == 0 => std::thread::yield_now(),
                    Poll::Spin => {}
                    Poll::Every(d) => std::thread::sleep(d),
                }
            }
            black_box(n);
        });
        let out = f();
        stop.store(true, Ordering::Relaxed);
        out
    })
}

fn push(c: &mut Criterion) {
    let cfg = RingConfig::DEFAULT;
    let mut g = c.benchmark_group("ring/push");
    g.throughput(Throughput::Elements(1));

    // One producer: time blocks of pushes that are sure to fit (the wait for room, if the
    // consumer falls behind, is not timed), so this is the cost of claim + commit itself
    // while a consumer drains concurrently: one polling as the recorder does, and one
    // spinning on the lines the producer writes.
    for (name, poll) in [
        ("1_thread", Poll::Every(RECORDER_POLL)),
        ("1_thread_spinning_consumer", Poll::Spin),
    ] {
        let mut mem = Mem::new(&cfg);
        let ring = mem.ring(&cfg);
        let mut waits = 0u64;
        with_consumer(&ring, poll, || {
            let mut i = 0u64;
            g.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    const BLOCK: u64 = 1024;
                    let mut timed = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let n = left.min(BLOCK);
                        while ring.tail() - ring.head() > ring.capacity() - n {
                            waits += 1;
                            std::thread::yield_now();
                        }
                        let t0 = Instant::now();
                        for _ in 0..n {
                            i += 1;
                            black_box(ring.push(black_box(rec(i))));
                        }
                        timed += t0.elapsed();
                        left -= n;
                    }
                    timed
                })
            });
        });
        assert_eq!(ring.dropped(), 0, "every timed push had room");
        eprintln!("ring/push/{name}: waited for room {waits} times (untimed)");
    }

    for threads in [2u64, 8] {
        let mut mem = Mem::new(&cfg);
        let ring = mem.ring(&cfg);
        with_consumer(&ring, Poll::Spin, || {
            g.bench_function(format!("{threads}_threads"), |b| {
                b.iter_custom(|iters| {
                    let per = iters.div_ceil(threads);
                    let start = Barrier::new(threads as usize + 1);
                    std::thread::scope(|s| {
                        for t in 0..threads {
                            let (ring, start) = (&ring, &start);
                            s.spawn(move || {
                                start.wait();
                                for i in 0..per {
                                    while !ring.push(rec(t << 40 | i)) {
                                        std::hint::spin_loop();
                                    }
                                }
                            });
                        }
                        start.wait();
                        let t0 = Instant::now();
                        // Scope end joins the producers.
                        t0
                    })
                    .elapsed()
                });
            });
        });
        eprintln!(
            "ring/push/{threads}_threads: {} refused pushes (retried) for {} accepted",
            ring.dropped(),
            ring.tail()
        );
    }
    g.finish();
}

fn drain_to_trace(c: &mut Criterion) {
    let cfg = RingConfig::DEFAULT;
    let n = cfg.capacity as u64;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("drain.fpt");
    let mut mem = Mem::new(&cfg);
    let ring = mem.ring(&cfg);
    let mut g = c.benchmark_group("ring/drain_to_trace");
    g.throughput(Throughput::Elements(n));
    let mut buf: Vec<Record> = Vec::with_capacity(4096);
    g.bench_function("65536_records", |b| {
        b.iter_batched(
            || {
                for i in 0..n {
                    assert!(ring.push(rec(i)));
                }
                TraceWriter::create(&path).expect("trace file")
            },
            |mut w| {
                loop {
                    buf.clear();
                    let st = ring.drain_until_drop(4096, ring.dropped(), &mut |r| buf.push(*r));
                    if st.count == 0 {
                        break;
                    }
                    w.write_records(&buf).expect("write");
                }
                w.finish().expect("finish")
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = push, drain_to_trace
}
criterion_main!(benches);
