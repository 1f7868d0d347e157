//! The probe's added latency per intercepted call: the same `cuMemAlloc_v2` +
//! `cuMemFree_v2` pair on the simulated driver, called directly and through the probe's
//! wrappers (with a consumer draining the ring, as `fragprobe run` does), in one process
//! and one run so the two are measured side by side.
//!
//! Targets (issue: the probe): ≤ 100 ns added per call median from one thread (stretch
//! 50 ns), ≤ 300 ns p99 with 8 threads. A pair is two calls: added per call =
//! (probed − direct) / 2.
//!
//! Besides criterion's two single-thread benchmarks, the bench prints figures it measures
//! itself, always with the direct and the probed calls *interleaved* in the same threads,
//! so that both see the same machine (other processes, frequency changes, preemption):
//!
//! * `probe/added_per_call`: batches of pairs, direct and probed alternating; the median
//!   over batches of (probed − direct) / 2 per call;
//! * `probe/per_call_latency/<T>_threads`: every call timed on its own (T = 1, 2, 8 threads,
//!   each alternating a direct and a probed pair), percentiles of the direct and of the
//!   probed distribution, and their differences. With more threads than cores, the tails of
//!   *both* distributions are scheduler noise (a thread preempted mid-call, or while the
//!   simulated driver's lock is held); the difference at each percentile is what the probe
//!   adds;
//! * `probe/live_table`: the memory the probe's live table takes per live allocation.

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fragprobe_shared::live::{LiveTable, LIVE_ENTRY_SIZE};
use fragprobe_shared::ring::{list_rings, RingConfig, RingFile, MAX_LIVE_CAPACITY};
use libloading::Library;

type Init = unsafe extern "C" fn(u32) -> u32;
type Retain = unsafe extern "C" fn(*mut *mut c_void, i32) -> u32;
type SetCurrent = unsafe extern "C" fn(*mut c_void) -> u32;
type Alloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type Free = unsafe extern "C" fn(u64) -> u32;

#[derive(Clone, Copy)]
struct Pair {
    alloc: Alloc,
    free: Free,
}

struct Setup {
    _driver: Library,
    _probe: Library,
    ctx: usize,
    set_current: SetCurrent,
    direct: Pair,
    probed: Pair,
    stop: Arc<AtomicBool>,
}

fn setup() -> Setup {
    let tmp = std::env::temp_dir().join(format!("fragprobe-probe-bench-{}", std::process::id()));
    let rings = tmp.join("rings");
    std::fs::create_dir_all(&rings).unwrap();
    std::env::set_var("FRAGPROBE_SIM_STATE", tmp.join("state"));
    std::env::set_var("FRAGPROBE_SIM_GPU", "1x16GiB");
    std::env::set_var("FRAGPROBE_RING_DIR", &rings);
    std::env::set_var("FRAGPROBE_RING_CAPACITY", "1048576");
    let driver_path = fragprobe_tests::sim::driver_library();
    // FRAGPROBE_BENCH_PROBE=<path> measures another build of the probe (an older commit's,
    // say) against the same direct calls.
    let probe_path = std::env::var_os("FRAGPROBE_BENCH_PROBE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(fragprobe_tests::probe::probe_library);
    // SAFETY: loading the stand-in driver and the probe; symbols have the declared CUDA
    // signatures. The probe finds the driver by its soname (libcuda.so.1), already loaded.
    unsafe {
        let driver = Library::new(&driver_path).expect("driver");
        let probe = Library::new(&probe_path).expect("probe");
        let init = *driver.get::<Init>(b"cuInit\0").unwrap();
        let retain = *driver.get::<Retain>(b"cuDevicePrimaryCtxRetain\0").unwrap();
        let set_current = *driver.get::<SetCurrent>(b"cuCtxSetCurrent\0").unwrap();
        assert_eq!(init(0), 0);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(retain(&mut ctx, 0), 0);
        assert_eq!(set_current(ctx), 0);
        let direct = Pair {
            alloc: *driver.get(b"cuMemAlloc_v2\0").unwrap(),
            free: *driver.get(b"cuMemFree_v2\0").unwrap(),
        };
        let probed = Pair {
            alloc: *probe.get(b"cuMemAlloc_v2\0").unwrap(),
            free: *probe.get(b"cuMemFree_v2\0").unwrap(),
        };
        // First probed call creates the ring; then a consumer drains it like `fragprobe run`.
        let mut p = 0;
        assert_eq!((probed.alloc)(&mut p, 4096), 0);
        assert_eq!((probed.free)(p), 0);
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let info = list_rings(&rings)
            .pop()
            .expect("the probe created its ring");
        std::thread::Builder::new()
            .name("bench-consumer".into())
            .spawn(move || {
                let ring = RingFile::open(&info.path).unwrap();
                let mut n = 0u64;
                while !s2.load(Ordering::Relaxed) {
                    // The recorder's loop (see viewer/src/record/recorder.rs).
                    let st = ring.drain_until_drop(1 << 16, ring.dropped(), &mut |r| {
                        n = n.wrapping_add(r.seq)
                    });
                    if st.count == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                black_box(n);
            })
            .unwrap();
        Setup {
            _driver: driver,
            _probe: probe,
            ctx: ctx as usize,
            set_current,
            direct,
            probed,
            stop,
        }
    }
}

fn pair(p: Pair, size: usize) {
    let mut ptr = 0u64;
    // SAFETY: valid out-pointer; frees exactly what was allocated.
    unsafe {
        assert_eq!((p.alloc)(&mut ptr, size), 0);
        assert_eq!((p.free)(ptr), 0);
    }
}

fn percentiles(v: &mut [u64], ps: &[f64]) -> Vec<u64> {
    v.sort_unstable();
    ps.iter()
        .map(|p| v[((v.len() as f64 * p) as usize).min(v.len() - 1)])
        .collect()
}

fn time_call(f: impl FnOnce() -> u32) -> u64 {
    let t = Instant::now();
    let r = f();
    let ns = t.elapsed().as_nanos() as u64;
    assert_eq!(r, 0);
    ns
}

/// Per-call latencies of direct and probed calls, from `threads` threads each making
/// `rounds` rounds of one direct and one probed alloc/free pair (order alternating).
fn per_call(s: &Setup, threads: usize, rounds: usize) -> (Vec<u64>, Vec<u64>) {
    let (ctx, set_current, direct, probed) = (s.ctx, s.set_current, s.direct, s.probed);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                // SAFETY: a context from the driver, made current on this thread.
                unsafe { set_current(ctx as *mut c_void) };
                let mut d = Vec::with_capacity(2 * rounds);
                let mut p = Vec::with_capacity(2 * rounds);
                let timed_pair = |pair: Pair, out: &mut Vec<u64>| {
                    let mut ptr = 0u64;
                    // SAFETY: valid out-pointer; frees exactly what was allocated.
                    out.push(time_call(|| unsafe { (pair.alloc)(&mut ptr, 4096) }));
                    // SAFETY: as above.
                    out.push(time_call(|| unsafe { (pair.free)(ptr) }));
                };
                for i in 0..rounds {
                    if i % 2 == 0 {
                        timed_pair(direct, &mut d);
                        timed_pair(probed, &mut p);
                    } else {
                        timed_pair(probed, &mut p);
                        timed_pair(direct, &mut d);
                    }
                }
                (d, p)
            })
        })
        .collect();
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for h in handles {
        let (a, b) = h.join().unwrap();
        d.extend(a);
        p.extend(b);
    }
    (d, p)
}

/// Median over batches of the added ns per call, direct and probed batches alternating.
fn added_per_call(s: &Setup, batches: usize, pairs: usize) -> (f64, f64, f64) {
    let batch = |p: Pair| {
        let t = Instant::now();
        for _ in 0..pairs {
            pair(p, black_box(4096));
        }
        t.elapsed().as_nanos() as f64 / pairs as f64
    };
    let mut added = Vec::with_capacity(batches);
    let (mut ds, mut ps) = (Vec::new(), Vec::new());
    for i in 0..batches {
        let (d, p) = if i % 2 == 0 {
            let d = batch(s.direct);
            (d, batch(s.probed))
        } else {
            let p = batch(s.probed);
            (batch(s.direct), p)
        };
        ds.push(d);
        ps.push(p);
        added.push((p - d) / 2.0);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    (med(&mut ds), med(&mut ps), med(&mut added))
}

fn bench(c: &mut Criterion) {
    let s = setup();
    let mut g = c.benchmark_group("probe");
    g.bench_function("direct_alloc_free_4KiB", |b| {
        b.iter(|| pair(s.direct, black_box(4096)))
    });
    g.bench_function("probed_alloc_free_4KiB", |b| {
        b.iter(|| pair(s.probed, black_box(4096)))
    });
    g.finish();

    let (d, p, added) = added_per_call(&s, 400, 1000);
    println!(
        "probe/added_per_call: pair median direct {d:.1} ns, probed {p:.1} ns; added per call {added:.1} ns (median of 400 alternating batches of 1000 pairs)"
    );
    let ps = [0.5, 0.9, 0.99, 0.999];
    for threads in [1, 2, 8] {
        let (mut dv, mut pv) = per_call(&s, threads, 160_000 / threads);
        let dq = percentiles(&mut dv, &ps);
        let pq = percentiles(&mut pv, &ps);
        let fmt = |q: &[u64]| format!("p50 {} p90 {} p99 {} p99.9 {}", q[0], q[1], q[2], q[3]);
        let diff: Vec<i64> = dq
            .iter()
            .zip(&pq)
            .map(|(a, b)| *b as i64 - *a as i64)
            .collect();
        println!(
            "probe/per_call_latency/{threads}_threads ns ({} calls each): direct {}; probed {}; added p50 {} p90 {} p99 {} p99.9 {}",
            dv.len(),
            fmt(&dq),
            fmt(&pq),
            diff[0],
            diff[1],
            diff[2],
            diff[3]
        );
    }

    // The live table: fixed slots in the ring file, one per live allocation at most
    // (keep the load under about 50 %, so budget two slots per live allocation).
    let cfg = RingConfig::DEFAULT;
    let table = LiveTable::bytes_for(cfg.live_capacity as usize);
    println!(
        "probe/live_table: {LIVE_ENTRY_SIZE} bytes per slot; default {} slots = {:.1} MiB ({} bytes with header), \
         for up to ~{} live allocations at 50 % load = {} bytes per live allocation; \
         whole default ring file {:.1} MiB; FRAGPROBE_LIVE_CAPACITY up to {} slots ({} MiB)",
        cfg.live_capacity,
        table as f64 / (1 << 20) as f64,
        table,
        cfg.live_capacity / 2,
        2 * LIVE_ENTRY_SIZE,
        cfg.file_len() as f64 / (1 << 20) as f64,
        MAX_LIVE_CAPACITY,
        LiveTable::bytes_for(MAX_LIVE_CAPACITY as usize) >> 20,
    );
    s.stop.store(true, Ordering::Relaxed);
}

criterion_group!(benches, bench);
criterion_main!(benches);
