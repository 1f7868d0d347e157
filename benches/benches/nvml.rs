//! The NVML sampler's cost per sample, which bounds what `watch`, `log` and the viewer
//! spend: one sample of the simulated GPU's NVML with a workload holding memory in another
//! process, the `/proc` and ring lookups, the live-table scan of a probed process, and the
//! formatting of a `watch` frame and a log row.
//!
//! Target: `nvml/sample_devices` (what `log` does per sample) ≤ 1 ms median, so sampling
//! at 10 Hz stays under 1 % of a core; `nvml/probe_info_default_ring` (262 144 slots,
//! 1 000 live objects) ≤ 10 ms, so `watch` stays light with a few probed processes.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use fragprobe_shared::live::LiveClass;
use fragprobe_shared::ring::{RingConfig, RingFile};
use fragprobe_tests::sim::{nvml_library, sim_command, spawn_held, state_of, ENV_GPU, ENV_STATE};
use fragprobe_viewer::nvml::logfile;
use fragprobe_viewer::nvml::screen::{self, Style};
use fragprobe_viewer::nvml::{live, Monitor, NvmlArgs};

fn bench(c: &mut Criterion) {
    // A workload in another process holding memory on a simulated 16 GiB device.
    let cmd = sim_command("leak", Some("1x16GiB"));
    let state = state_of(&cmd).expect("state file");
    let (mut held, _) = spawn_held(cmd);
    // Set before NVML reads its settings; the bench is single-threaded here.
    std::env::set_var(ENV_STATE, &state);
    std::env::set_var(ENV_GPU, "1x16GiB");
    let args = NvmlArgs {
        nvml_lib: Some(nvml_library()),
        simulated_gpu: None,
    };
    let mon = Monitor::open(&args).expect("open the simulated NVML");
    let mut g = c.benchmark_group("nvml");
    g.bench_function("sample_devices", |b| {
        b.iter(|| black_box(mon.sample_devices(&[])))
    });
    g.bench_function("sample_with_proc_and_rings", |b| {
        b.iter(|| black_box(mon.sample(&[])))
    });

    let snap = mon.sample(&[]);
    let style = Style {
        color: true,
        diff: true,
        width: 200,
    };
    g.bench_function("render_watch_frame", |b| {
        b.iter(|| black_box(screen::render(&snap, Some(&snap), &style, "bench")))
    });
    let rows = logfile::rows(&snap, &[]);
    g.bench_function("csv_row", |b| {
        b.iter(|| black_box(logfile::csv_line(&rows[0])))
    });

    let dir = std::env::temp_dir().join(format!("fragprobe-nvml-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("ring directory");
    let ring = dir.join("4242-1.ring");
    let _ = std::fs::remove_file(&ring);
    let rf = RingFile::create(&ring, &RingConfig::DEFAULT, 4242).expect("create ring");
    for i in 0..1000u64 {
        let addr = 0x7000_0000_0000 + i * (4 << 20);
        assert!(rf
            .live()
            .insert(addr, LiveClass::Device, 0, 2 << 20, 0, 0, i));
    }
    g.bench_function("probe_info_default_ring", |b| {
        b.iter(|| black_box(live::probe_info(ring.clone(), Some(16 << 30), None)))
    });
    g.finish();
    drop(rf);
    let _ = std::fs::remove_dir_all(&dir);
    drop(held.stdin.take());
    let _ = held.wait();
}

criterion_group!(benches, bench);
criterion_main!(benches);
