//! What users run: `fragprobe record` of 16 threads × 33 000 alloc/free pairs (1.06 M
//! events) with the default ring, timed as a whole command, and how many events the
//! default ring lost (it must lose none at this load: `record/drops_at_defaults`).
//!
//! The load outruns any consumer that shares the cores with it (on 2 cores it makes
//! 3.5 M events/s): the ring has to hold the burst.

use std::path::Path;
use std::process::Command;

use criterion::{criterion_group, criterion_main, Criterion};
use fragprobe_shared::model::Model;
use fragprobe_shared::trace::Trace;
use fragprobe_tests::probe::{fragprobe, out_path};
use fragprobe_tests::sim::build_scenario;

const PAIRS: &str = "33000";

fn record(prog: &Path, trace: &Path) -> Command {
    let mut cmd = fragprobe();
    cmd.args(["record", "--simulated-gpu", "-q", "-o"])
        .arg(trace)
        .arg("--")
        .arg(prog)
        .args([PAIRS, "--quiet"])
        .env_remove("FRAGPROBE_RING_CAPACITY")
        .env_remove("FRAGPROBE_LIVE_CAPACITY")
        .stdout(std::process::Stdio::null());
    cmd
}

fn bench(c: &mut Criterion) {
    let prog = build_scenario("threads16");
    let trace = out_path("record-bench.fpt");
    let mut g = c.benchmark_group("record");
    g.sample_size(10);
    g.bench_function("threads16_33000_pairs_default_ring", |b| {
        b.iter(|| {
            let st = record(&prog, &trace).status().expect("fragprobe record");
            assert!(st.success());
        })
    });
    g.finish();
    let mut drops = Vec::new();
    for _ in 0..5 {
        let st = record(&prog, &trace).status().expect("fragprobe record");
        assert!(st.success());
        let t = Trace::open(&trace).expect("trace");
        let mut m = Model::new();
        for r in t.records() {
            m.apply(&r);
        }
        drops.push((m.counts().lost, t.len()));
    }
    println!(
        "record/drops_at_defaults: 16 threads x {PAIRS} pairs, default ring: (events lost, records in the trace) per run: {drops:?}"
    );
    let _ = std::fs::remove_file(&trace);
}

criterion_group!(benches, bench);
criterion_main!(benches);
