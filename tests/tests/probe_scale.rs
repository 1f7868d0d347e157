//! The probe at scale and its timing: 16 threads × 100 000 alloc/free pairs recorded
//! losslessly by `fragprobe record` with an exact final state, and `dur_ns` that is
//! nanoseconds whichever clock the probe timed the call with.

use std::time::Instant;

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::model::{DeviceId, Model};
use fragprobe_shared::trace::Trace;
use fragprobe_tests::probe::{op_of, record_scenario};

const THREADS: u64 = 16;

#[test]
fn sixteen_threads_100k_pairs_each_lossless_exact_and_anomaly_free() {
    let pairs: u64 = 100_000;
    let calls = THREADS * pairs * 2;
    let t = Instant::now();
    // A ring that holds every event even if the consumer fell behind: nothing may be lost,
    // so every call must be in the trace exactly once.
    let rec = record_scenario(
        "threads16",
        &[&pairs.to_string(), "--quiet"],
        None,
        &[("FRAGPROBE_RING_CAPACITY", "4194304")],
    );
    let recorded_in = t.elapsed();
    assert!(
        rec.output.status.success(),
        "fragprobe failed: {}",
        String::from_utf8_lossy(&rec.output.stderr)
    );
    let stdout = String::from_utf8_lossy(&rec.output.stdout);
    assert!(
        stdout.contains(&format!(
            "FPSCN-SUMMARY allocs={} frees={}",
            THREADS * pairs,
            THREADS * pairs
        )),
        "every call succeeded: {stdout}"
    );

    // Exactly one record per call, nothing lost or skipped, consecutive sequence numbers.
    let program: Vec<&Record> = rec.records.iter().filter(|r| op_of(r).is_some()).collect();
    assert_eq!(program.len() as u64, calls, "one record per call");
    let allocs = program
        .iter()
        .filter(|r| r.kind == EventKind::Alloc as u16 && r.api() == Some(Api::CuMemAllocV2))
        .count() as u64;
    let frees = program
        .iter()
        .filter(|r| r.kind == EventKind::Free as u16 && r.api() == Some(Api::CuMemFreeV2))
        .count() as u64;
    assert_eq!((allocs, frees), (THREADS * pairs, THREADS * pairs));
    assert!(
        program.iter().all(|r| r.result == 0 && r.device == 0),
        "every call succeeded on device 0"
    );
    for kind in [EventKind::Loss, EventKind::ResyncBegin] {
        assert_eq!(
            rec.records.iter().filter(|r| r.kind == kind as u16).count(),
            0,
            "no {kind:?}: the recording is lossless"
        );
    }
    // The probe's records: the recorder's own (NVML samples) carry the ring position they
    // were written at.
    let probe: Vec<&Record> = rec
        .records
        .iter()
        .filter(|r| !matches!(r.api(), Some(Api::Consumer | Api::Nvml)))
        .collect();
    let mut seqs: Vec<u64> = probe.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), probe.len(), "no seq twice");
    assert_eq!(
        seqs.last().copied(),
        Some(seqs.len() as u64 - 1),
        "no seq missing (nothing dropped or skipped)"
    );
    // Every thread's calls are there (16 threads, pairs each way).
    let mut per_tid = std::collections::HashMap::<u32, u64>::new();
    for r in &program {
        *per_tid.entry(r.tid).or_default() += 1;
    }
    assert_eq!(per_tid.len() as u64, THREADS);
    assert!(per_tid.values().all(|&n| n == 2 * pairs), "{per_tid:?}");

    // The probe's own account at exit, and the model's: nothing live, no anomalies.
    let exit = rec
        .records
        .iter()
        .find(|r| r.kind == EventKind::ProcessExit as u16)
        .expect("ProcessExit");
    assert_eq!((exit.aux, exit.size), (0, 0), "live table empty at exit");
    let mut m = Model::new();
    for r in &rec.records {
        m.apply(r);
    }
    assert_eq!(
        m.anomalies().total(),
        0,
        "anomalies {:?}",
        m.anomalies().nonzero().collect::<Vec<_>>()
    );
    let c = m.counts();
    assert_eq!(
        (c.ok_allocs, c.frees, c.lost),
        (THREADS * pairs, THREADS * pairs, 0)
    );
    assert_eq!(m.devices().len(), 1);
    let fin = m.device_final(DeviceId(0));
    assert_eq!((fin.totals.live_bytes, fin.totals.live_count), (0, 0));
    assert!(m.leaks().is_empty());
    eprintln!(
        "16 × {pairs} pairs: recorded in {recorded_in:?}, checked in {:?}",
        t.elapsed() - recorded_in
    );
}

/// The process description's `dur_clock` (where the probe's durations come from).
fn dur_clock(trace: &std::path::Path) -> String {
    let t = Trace::open(trace).unwrap();
    let start = t
        .records()
        .find(|r| r.kind == EventKind::ProcessStart as u16)
        .expect("ProcessStart");
    let meta = t.meta(start.pid, start.meta).expect("process description");
    meta.get_str("dur_clock")
        .expect("dur_clock field")
        .to_string()
}

#[test]
fn durations_are_nanoseconds_with_either_clock() {
    // Every simulated alloc and free busy-waits this long inside the driver.
    let latency: u64 = 250_000;
    for clock in [None, Some("monotonic")] {
        let mut env = vec![("FRAGPROBE_SIM_LATENCY_NS", "250000")];
        if let Some(c) = clock {
            env.push(("FRAGPROBE_CLOCK", c));
        }
        // 16 threads × 40 pairs of 250 µs calls: well past the 10 ms after which the TSC
        // (where trusted) times the calls.
        let rec = record_scenario("threads16", &["40", "--quiet"], None, &env);
        assert!(
            rec.output.status.success(),
            "{}",
            String::from_utf8_lossy(&rec.output.stderr)
        );
        let source = dur_clock(&rec.trace);
        match clock {
            Some(c) => assert_eq!(source, c),
            None => assert!(source == "tsc" || source == "monotonic", "{source}"),
        }
        let mut durs: Vec<u64> = rec
            .records
            .iter()
            .filter(|r| op_of(r).is_some())
            .map(|r| r.dur_ns as u64)
            .collect();
        assert_eq!(durs.len(), 16 * 40 * 2);
        durs.sort_unstable();
        // Never shorter than the driver's busy wait (0.1 % for the TSC calibration), and
        // typically not much longer (preemption on a busy machine can stretch a few).
        assert!(
            durs[0] >= latency - latency / 1000,
            "{source}: shortest {} ns < {latency} ns",
            durs[0]
        );
        let median = durs[durs.len() / 2];
        assert!(
            median < latency * 4,
            "{source}: median {median} ns for a {latency} ns call"
        );
        // Timestamps (taken after each call) agree with the durations: a thread's calls
        // follow one another, so consecutive timestamps are at least the later call's
        // duration apart (1 µs for the TSC conversion), and none is after the process's exit
        // record (the first calls may precede the start record: the ring is created after
        // the first call returns).
        let bound = |k: EventKind| {
            rec.records
                .iter()
                .find(|r| r.kind == k as u16)
                .map(|r| r.ts_ns)
                .unwrap()
        };
        let exit = bound(EventKind::ProcessExit);
        let mut by_tid = std::collections::HashMap::<u32, Vec<&Record>>::new();
        for r in rec.records.iter().filter(|r| op_of(r).is_some()) {
            assert!(
                r.ts_ns <= exit + 1_000,
                "{source}: {r:?} after exit at {exit}"
            );
            by_tid.entry(r.tid).or_default().push(r);
        }
        for calls in by_tid.values_mut() {
            calls.sort_by_key(|r| r.seq);
            for w in calls.windows(2) {
                assert!(
                    w[1].ts_ns + 1_000 >= w[0].ts_ns + w[1].dur_ns as u64,
                    "{source}: {:?} then {:?}",
                    w[0],
                    w[1]
                );
            }
        }
        eprintln!(
            "dur_clock {source}: min {} median {median} max {}",
            durs[0],
            durs[durs.len() - 1]
        );
    }
}
