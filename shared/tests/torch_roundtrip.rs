//! Self-consistency of reconstruction + replay: traces written by the simulator itself —
//! ordinary and expandable segments, several streams, empty_cache calls, OOM retries,
//! truncated like PyTorch's ring buffer — must verify exactly.

use fragprobe_shared::torch::sim::{Allocator, Config, FirstFit, Version};
use fragprobe_shared::torch::snapshot::{Action, FormatInfo, Snapshot, SnapshotLayout, TraceEvent};
use fragprobe_shared::torch::stacks::Stacks;
use fragprobe_shared::torch::verify::verify_with;

mod rng;
use rng::Rng;

/// Runs a random workload and returns the resulting snapshot (final segments + trace).
fn record(conf: &str, seed: u64, steps: usize, capacity: Option<u64>) -> (Snapshot, Config) {
    let mut cfg = Config::parse(conf, Version::DEFAULT).unwrap();
    cfg.capacity = capacity;
    cfg.device_total = Some(8 << 30);
    let mut a = Allocator::new(cfg.clone());
    a.record_events(true);
    let mut src = FirstFit::new();
    let mut rng = Rng(seed);
    let mut live: Vec<u64> = Vec::new();
    let mut pending: Vec<u64> = Vec::new();
    for step in 0..steps {
        let r = rng.next();
        match r % 16 {
            0..=7 => {
                let size = match rng.next() % 6 {
                    0 | 1 => 1 + rng.next() % (1 << 20),
                    2 | 3 => (1 << 20) + rng.next() % (12 << 20),
                    4 => (10 << 20) + rng.next() % (90 << 20),
                    _ => [1 << 20, 3 << 20, 24 << 20][(rng.next() % 3) as usize],
                };
                let stream = if rng.next().is_multiple_of(5) { 7 } else { 0 };
                if let Ok(x) = a.malloc(size, stream, &mut src) {
                    live.push(x);
                }
            }
            8..=13 if !live.is_empty() => {
                let x = live.swap_remove((rng.next() as usize) % live.len());
                if rng.next().is_multiple_of(4) {
                    // record_stream: the free completes later.
                    a.free_requested(x).unwrap();
                    pending.push(x);
                } else {
                    a.free(x).unwrap();
                }
            }
            14 if !pending.is_empty() => {
                let x = pending.swap_remove(0);
                a.free_completed(x).unwrap();
            }
            15 if step % 7 == 0 => a.release_cached_blocks(&mut src),
            _ => {}
        }
    }
    let segments = a.segments(0);
    let trace: Vec<TraceEvent> = a.take_events();
    let snap = Snapshot {
        format: FormatInfo {
            layout: SnapshotLayout::Dict,
            pickle_protocol: 4,
            has_time_us: false,
            has_settings: false,
            legacy_history: false,
        },
        segments,
        traces: vec![trace],
        settings: None,
        stacks: Stacks::default(),
        annotations: 0,
    };
    (snap, cfg)
}

fn check(conf: &str, capacity: Option<u64>) {
    for seed in [1u64, 7, 42, 1234] {
        let (full, cfg) = record(conf, seed, 3000, capacity);
        let n = full.traces[0].len();
        assert!(n > 1000, "{conf}: only {n} events");
        // The whole trace, then only its newest parts (a ring of max_entries).
        for keep in [n, n * 2 / 3, n / 3, n / 10] {
            let mut s = full.clone();
            s.traces[0].drain(..n - keep);
            let r = verify_with(&s, &cfg).unwrap();
            let d = &r.devices[0];
            // A truncated trace may hide a block's unsplit tail (flagged as ambiguous): the
            // allocation placed next to it may differ, and the replay resynchronises.
            // Everything else must replay exactly.
            let misses = d.alloc_events - d.alloc_address_matches;
            let explained = keep < n && misses <= d.reconstruction.ambiguous_blocks;
            assert!(
                r.is_exact() || explained,
                "{conf} seed {seed} keep {keep}/{n}: allocs {}/{} segs {}/{} maps {}/{} unexpected {} final {} anomalies {:?} first {:?}",
                d.alloc_address_matches,
                d.alloc_events,
                d.segment_size_matches,
                d.segment_allocs,
                d.segment_map_matches,
                d.segment_maps,
                d.unexpected_segments,
                d.final_state_matches,
                d.reconstruction.anomalies,
                d.first_mismatch
            );
            assert!(d.reconstruction.anomalies.is_empty());
        }
    }
}

#[test]
fn default_settings_round_trip() {
    check("", None);
}

#[test]
fn max_split_and_roundup_round_trip() {
    check(
        "max_split_size_mb:64,roundup_power2_divisions:[1:2,4:4,>:8]",
        None,
    );
}

#[test]
fn oom_retries_round_trip() {
    // A tight device: cudaMalloc fails, cached segments are released, the retry succeeds
    // or an OOM is recorded.
    let (s, _) = record("", 3, 3000, Some(600 << 20));
    let t = &s.traces[0];
    assert!(t.iter().any(|e| e.action == Action::SegmentFree));
    assert!(t.iter().any(|e| e.action == Action::Oom));
    check("", Some(600 << 20));
    check("max_split_size_mb:40", Some(600 << 20));
}

#[test]
fn expandable_segments_round_trip() {
    let (s, _) = record("expandable_segments:True", 5, 3000, None);
    assert!(s.segments.iter().all(|x| x.is_expandable));
    assert!(s.traces[0].iter().any(|e| e.action == Action::SegmentUnmap));
    check("expandable_segments:True", None);
    check("expandable_segments:True", Some(600 << 20));
}

#[test]
fn a_snapshot_without_settings_is_simulated_with_the_settings_it_shows() {
    // PyTorch before ≈ 2.4 writes no allocator_settings; its expandable segments and
    // segment_map entries say which setting it ran with.
    let (s, cfg) = record("expandable_segments:True", 5, 3000, None);
    assert!(s.settings.is_none());
    let own = Config::of_snapshot(&s, Version::DEFAULT).unwrap();
    assert!(own.expandable_segments, "{own:?}");
    let why = own.inferred.as_deref().unwrap_or("");
    assert!(
        why.contains("no allocator_settings") && why.contains("segment_map"),
        "{why}"
    );
    // (a snapshot does not record the device's total, which sizes the reservations: the
    // recording's is given, as in the other round trips)
    let r = verify_with(
        &s,
        &Config {
            device_total: cfg.device_total,
            ..own
        },
    )
    .unwrap();
    assert!(
        r.is_exact(),
        "with the inferred settings: {:?}",
        r.devices[0].first_mismatch
    );
    // As native (what the simulator did before) the same file is not exact.
    let native = Config {
        device_total: cfg.device_total,
        ..Config::parse("", Version::DEFAULT).unwrap()
    };
    assert!(!verify_with(&s, &native).unwrap().is_exact());
    // And a native recording infers nothing.
    let (n, _) = record("", 5, 3000, None);
    let c = Config::of_snapshot(&n, Version::DEFAULT).unwrap();
    assert!(!c.expandable_segments && c.inferred.is_none());
}

#[test]
fn an_expandable_snapshot_imports_as_handles_mapped_inside_reservations() {
    use fragprobe_shared::format::EventKind;
    use fragprobe_shared::model::{Model, RunFigures};
    use fragprobe_shared::torch::to_records;
    // With unmaps (empty_cache), a tight device (OOM retries) and several streams.
    for (seed, capacity) in [(5u64, None), (7, Some(600u64 << 20)), (42, None)] {
        let (s, cfg) = record("expandable_segments:True", seed, 3000, capacity);
        let recs = to_records(&s);
        let mut m = Model::new();
        for r in &recs {
            m.apply(r);
        }
        assert_eq!(m.anomalies().total(), 0, "seed {seed}: {:?}", m.anomalies());
        let count = |k: EventKind| recs.iter().filter(|r| r.kind() == Some(k)).count();
        let maps = s.traces[0]
            .iter()
            .filter(|e| e.action == Action::SegmentMap)
            .count();
        assert!(maps > 0 && count(EventKind::MemUnmap) > 0, "seed {seed}");
        assert_eq!(count(EventKind::MemCreate), count(EventKind::MemMap));
        // one reservation per (stream, pool) the file shows
        let pools: std::collections::BTreeSet<(u64, bool)> = s
            .segments
            .iter()
            .map(|x| (x.stream, x.pool == fragprobe_shared::torch::PoolKind::Small))
            .collect();
        assert!(
            count(EventKind::AddressReserve) >= pools.len(),
            "seed {seed}"
        );
        // what is mapped at the end is what the snapshot's segments hold, page for page
        let reserved: u64 = s.segments.iter().map(|x| x.total_size).sum();
        let f = RunFigures::of(&m);
        assert_eq!(f.final_live, reserved, "seed {seed}");
        // the large pool's pages are the large segment size, as PyTorch maps them
        let large = recs
            .iter()
            .filter(|r| r.kind() == Some(EventKind::MemCreate))
            .map(|r| r.size)
            .max()
            .unwrap();
        assert_eq!(large, cfg.large_segment_size, "seed {seed}");
    }
}

#[test]
fn expandable_reservations_are_learned_from_the_trace_not_sized_by_a_guess() {
    // A snapshot does not record the device's total, which sized the real reservations;
    // replaying with a larger guess must still put each pool's reservation where the
    // trace shows its first map.
    for seed in [5u64, 42] {
        let (s, cfg) = record("expandable_segments:True", seed, 3000, None);
        for guess in [None, Some(80u64 << 30)] {
            let r = verify_with(
                &s,
                &Config {
                    device_total: guess,
                    ..cfg.clone()
                },
            )
            .unwrap();
            let d = &r.devices[0];
            assert!(
                r.is_exact(),
                "seed {seed}, device total guessed {guess:?}: allocs {}/{} maps {}/{} first {:?}",
                d.alloc_address_matches,
                d.alloc_events,
                d.segment_map_matches,
                d.segment_maps,
                d.first_mismatch
            );
        }
    }
}

#[test]
fn a_recorded_oom_is_a_request_and_bounds_the_capacity_of_a_prediction() {
    use fragprobe_shared::torch::predict::predict;
    // A tight device: the recording has OOMs.
    let (s, _) = record("", 3, 3000, Some(600 << 20));
    let ooms = s.traces[0]
        .iter()
        .filter(|e| e.action == Action::Oom)
        .count() as u64;
    assert!(ooms > 0);
    let r = predict(
        &s,
        0,
        &["expandable_segments:True".into()],
        Version::DEFAULT,
        None,
    );
    let (reserved, free) = r.capacity_from_oom.expect("capacity inferred from the OOM");
    assert_eq!(r.capacity, Some(reserved + free));
    assert!(r.capacity.unwrap() <= 600 << 20, "{:?}", r.capacity);
    // under its own settings the replay fails where the recording failed
    let own = &r.predictions[0];
    assert!(own.baseline && own.stats.ooms >= 1, "{:?}", own.stats);
    assert_eq!(r.recorded.stats.ooms, ooms);
    // a given capacity is used as given
    let r = predict(&s, 0, &[], Version::DEFAULT, Some(1 << 30));
    assert_eq!((r.capacity, r.capacity_from_oom), (Some(1 << 30), None));
}
