//! The probe's added latency per intercepted call: the same `cuMemAlloc_v2` +
//! `cuMemFree_v2` pair on the simulated driver, called directly and through the probe's
//! wrappers (with a consumer draining the ring, as `fragprobe run` does), in one process
//! and one run so the two are measured side by side.
//!
//! Targets (issue: the probe): ≤ 100 ns added per call median from one thread (stretch
//! 50 ns), ≤ 300 ns p99 with 8 threads. A pair is two calls: added per call =
//! (probed − direct) / 2. `probe/p99_8_threads` prints percentiles it measures itself
//! (criterion reports means and medians only).

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fragprobe_shared::ring::{list_rings, RingFile};
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
    let probe_path = fragprobe_tests::probe::probe_library();
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
                    let st = ring.drain(1 << 16, &mut |r| n = n.wrapping_add(r.seq));
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

fn percentiles(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

/// Per-pair latencies from `threads` threads, each timing `n` pairs.
fn threaded(s: &Setup, p: Pair, threads: usize, n: usize) -> Vec<u64> {
    let ctx = s.ctx;
    let set_current = s.set_current;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                // SAFETY: a context from the driver, made current on this thread.
                unsafe { set_current(ctx as *mut c_void) };
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    pair(p, 4096);
                    v.push(t.elapsed().as_nanos() as u64);
                }
                v
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
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
    g.bench_function("p99_8_threads", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            let _ = threaded(&s, s.probed, 8, (iters as usize / 8).max(1));
            t.elapsed()
        })
    });
    g.finish();
    // Percentiles, direct vs probed, in the same run (8 threads on however many cores).
    let n = 20_000;
    let (d50, d99) = percentiles(threaded(&s, s.direct, 8, n));
    let (p50, p99) = percentiles(threaded(&s, s.probed, 8, n));
    println!("probe/8_threads pair latency ns: direct p50 {d50} p99 {d99}; probed p50 {p50} p99 {p99}; added per call p50 {} p99 {}",
        p50.saturating_sub(d50) / 2, p99.saturating_sub(d99) / 2);
    s.stop.store(true, Ordering::Relaxed);
}

criterion_group!(benches, bench);
criterion_main!(benches);
