//! PyTorch snapshot import and allocator simulation.
//!
//! - `torch_import/*`: the largest real snapshot fixture, from bytes: pickle VM alone, and
//!   pickle + snapshot model + start-state reconstruction + figures.
//! - `torch_verify`: exact replay of that fixture.
//! - `torch_simulate/one_config`: a 1 M-event synthetic training-like trace through one
//!   configuration (throughput in trace events: allocs and both free steps).
//! - `torch_simulate/sweep12`: the same trace under 12 configurations, in parallel.
//!
//! Targets: ≥ 5 M trace events/s per configuration; the 12-configuration sweep of the
//! 1 M-event trace in < 5 s on 2 cores.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fragprobe_shared::torch::figures::figures;
use fragprobe_shared::torch::pickle::read_pickle_bytes;
use fragprobe_shared::torch::predict::{simulate_all, simulate_workload, DEFAULT_SWEEP};
use fragprobe_shared::torch::replay::{reconstruct_start, Request, Workload};
use fragprobe_shared::torch::sim::{Config, Version};
use fragprobe_shared::torch::snapshot::{decode, Segment};
use fragprobe_shared::torch::verify::verify;

fn largest_fixture() -> Vec<u8> {
    let dir = fragprobe_tests::snapshots::dir()
        .expect("real snapshots beside the checkout (../shared/data)");
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(&dir).expect("fixtures directory") {
        let p = e.expect("dir entry").path();
        if p.extension().is_some_and(|x| x == "pickle") {
            let n = std::fs::metadata(&p).expect("metadata").len();
            if best.as_ref().is_none_or(|(m, _)| n > *m) {
                best = Some((n, p));
            }
        }
    }
    std::fs::read(best.expect("a pickle fixture").1).expect("read fixture")
}

/// A training-like request stream: a few thousand live tensors of mixed sizes, freed in
/// random order, `events` trace events in all (each alloc later has free_requested and
/// free_completed).
pub fn synthetic(events: usize, seed: u64) -> Workload {
    let mut x = seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut w = Workload::default();
    let mut live: Vec<u32> = Vec::new();
    let target_live = 3000;
    while w.requests.len() + 2 * live.len() < events {
        let r = rnd();
        let alloc = live.len() < 16 || (r % (2 * target_live as u64)) as usize >= live.len();
        if alloc {
            let size = match rnd() % 10 {
                0..=3 => 512 + rnd() % (1 << 20),       // small pool
                4..=7 => (1 << 20) + rnd() % (9 << 20), // 1–10 MiB
                8 => (10 << 20) + rnd() % (118 << 20),  // 10–128 MiB
                _ => [4 << 20, 16 << 20, 64 << 20][(rnd() % 3) as usize], // repeated shapes
            };
            let id = w.ids;
            w.ids += 1;
            w.requests.push(Request::Alloc {
                size,
                stream: 0,
                id,
            });
            live.push(id);
        } else {
            let id = live.swap_remove((rnd() as usize) % live.len());
            w.requests.push(Request::FreeRequested { id });
            w.requests.push(Request::FreeCompleted { id });
        }
    }
    for id in live {
        w.requests.push(Request::FreeRequested { id });
        w.requests.push(Request::FreeCompleted { id });
    }
    w
}

fn bench_import(c: &mut Criterion) {
    let bytes = largest_fixture();
    let mut g = c.benchmark_group("torch_import");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("pickle", |b| {
        b.iter(|| read_pickle_bytes(black_box(&bytes)).expect("pickle"))
    });
    g.bench_function("pickle_model_figures", |b| {
        b.iter(|| {
            let p = read_pickle_bytes(black_box(&bytes)).expect("pickle");
            let s = decode(&p).expect("snapshot");
            let finals: Vec<Segment> = s.device_segments(0).cloned().collect();
            let start = reconstruct_start(&finals, s.trace(0), &Config::default());
            (figures(&finals), start.segments.len())
        })
    });
    g.finish();
    let p = read_pickle_bytes(&bytes).expect("pickle");
    let s = decode(&p).expect("snapshot");
    let mut g = c.benchmark_group("torch_verify");
    g.throughput(Throughput::Elements(s.event_count() as u64));
    g.bench_function("largest_fixture", |b| {
        b.iter(|| verify(black_box(&s), Version::DEFAULT).expect("verify"))
    });
    g.finish();
}

fn bench_simulate(c: &mut Criterion) {
    let w = synthetic(1_000_000, 0x5eed);
    let cfgs: Vec<Config> = std::iter::once(Config::default())
        .chain(DEFAULT_SWEEP.iter().map(|s| {
            let mut c = Config::parse(s, Version::DEFAULT).expect("sweep config");
            // The memory-fraction entry needs a device size to act on.
            c.device_total = Some(80 << 30);
            c
        }))
        .collect();
    assert_eq!(cfgs.len(), 12);
    let mut g = c.benchmark_group("torch_simulate");
    g.sample_size(10);
    g.throughput(Throughput::Elements(w.requests.len() as u64));
    g.bench_function("one_config", |b| {
        b.iter(|| simulate_workload(black_box(&w), &cfgs[0]))
    });
    g.bench_function("one_config_expandable", |b| {
        b.iter(|| simulate_workload(black_box(&w), &cfgs[1]))
    });
    g.throughput(Throughput::Elements(12 * w.requests.len() as u64));
    g.bench_function("sweep12", |b| b.iter(|| simulate_all(black_box(&w), &cfgs)));
    g.finish();
}

criterion_group!(benches, bench_import, bench_simulate);
criterion_main!(benches);
