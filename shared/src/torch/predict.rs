//! What-if replay: the recorded request stream against other allocator configurations.

use super::figures::{figures, Figures, PeakFigures};
use super::replay::{workload, Request, Workload};
use super::sim::address::FirstFit;
use super::sim::allocator::{Allocator, Stats};
use super::sim::config::{Config, Version};
use super::snapshot::Snapshot;
use super::verify::verify_with;

/// A sweep of commonly recommended settings (with the snapshot's own settings, which are
/// always replayed first, that makes 12 configurations).
pub const DEFAULT_SWEEP: [&str; 11] = [
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "expandable_segments:True,max_split_size_mb:128",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "roundup_power2_divisions:4,max_non_split_rounding_mb:512",
    "max_split_size_mb:256,max_non_split_rounding_mb:256",
    "large_segment_size_mb:64",
    "expandable_segments:True,large_segment_size_mb:64",
    "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
];

/// The outcome of replaying a workload under one configuration.
#[derive(Clone, Debug, Default)]
pub struct Prediction {
    /// The `PYTORCH_CUDA_ALLOC_CONF` string.
    pub conf: String,
    /// This is the snapshot's own configuration (replayed like the others, for an
    /// apples-to-apples baseline).
    pub baseline: bool,
    /// Why it was not simulated (bad string, `cudaMallocAsync`), if it was not.
    pub error: Option<String>,
    /// Peaks over the replay.
    pub peak: PeakFigures,
    /// Figures of the final state.
    pub end: Figures,
    /// Counters (cudaMalloc/cudaFree, maps/unmaps, retries, OOMs…).
    pub stats: Stats,
    /// Allocations that failed with OOM (their later frees are skipped).
    pub failed_allocs: u64,
}

/// Replays `w` under `cfg` from an empty allocator (blocks live at the start of the
/// trace are allocated first, in address order).
pub fn simulate_workload(w: &Workload, cfg: &Config) -> Prediction {
    let mut p = Prediction {
        conf: cfg.source.clone(),
        ..Prediction::default()
    };
    if let Err(e) = cfg.simulable() {
        p.error = Some(e);
        return p;
    }
    let mut a = Allocator::new(cfg.clone());
    let mut src = FirstFit::new();
    let mut addr = vec![0u64; w.ids as usize];
    for r in &w.requests {
        match *r {
            Request::Alloc { size, stream, id } => match a.malloc(size, stream, &mut src) {
                Ok(x) => addr[id as usize] = x,
                Err(_) => p.failed_allocs += 1,
            },
            Request::FreeRequested { id } => {
                let x = addr[id as usize];
                if x != 0 {
                    let _ = a.free_requested(x);
                }
            }
            Request::FreeCompleted { id } => {
                let x = std::mem::take(&mut addr[id as usize]);
                if x != 0 {
                    let _ = a.free_completed(x);
                }
            }
            Request::EmptyCache => a.release_cached_blocks(&mut src),
        }
    }
    p.peak = PeakFigures::from(a.stats());
    p.end = figures(&a.segments(0));
    p.stats = a.stats().clone();
    p
}

/// Replays `w` under every configuration, on as many threads as the machine offers (each
/// configuration is independent). Results are in the order of `cfgs`.
pub fn simulate_all(w: &Workload, cfgs: &[Config]) -> Vec<Prediction> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(cfgs.len().max(1));
    if threads <= 1 {
        return cfgs.iter().map(|c| simulate_workload(w, c)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<Prediction>> = vec![None; cfgs.len()];
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(c) = cfgs.get(i) else { break };
                        done.push((i, simulate_workload(w, c)));
                    }
                    done
                })
            })
            .collect();
        for h in handles {
            // A panicking replay is a bug; surface it instead of hiding a result.
            for (i, p) in h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)) {
                out[i] = Some(p);
            }
        }
    });
    out.into_iter().map(Option::unwrap_or_default).collect()
}

/// The recorded run, as replayed exactly by the verifier.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    /// Peaks over the trace (from the reconstructed start state).
    pub peak: PeakFigures,
    /// Figures of the snapshot's final state.
    pub end: Figures,
    /// Counters of the replay.
    pub stats: Stats,
    /// Whether the replay matched the recording exactly (so these figures are exact).
    pub exact: bool,
}

/// Predictions for one device.
#[derive(Clone, Debug, Default)]
pub struct PredictReport {
    /// Device ordinal.
    pub device: i32,
    /// Requests replayed (allocs and both free steps, plus blocks live at the start).
    pub requests: usize,
    /// Of those, blocks live at the start of the trace.
    pub initial_blocks: usize,
    /// Capacity the replays ran against (`None` = unlimited).
    pub capacity: Option<u64>,
    /// The recorded run.
    pub recorded: Recorded,
    /// One per configuration, in the order given.
    pub predictions: Vec<Prediction>,
    /// Set when the capacity was not given but inferred from the first recorded OOM:
    /// (bytes PyTorch had reserved then, the device's free bytes then).
    pub capacity_from_oom: Option<(u64, u64)>,
}

/// Replays device `device` of `snap` under each configuration string in `confs`. The
/// snapshot's own configuration comes first (marked by its `conf` string, which may be
/// empty). `capacity` limits the device (`None`: unlimited — snapshots do not record the
/// device's total).
pub fn predict(
    snap: &Snapshot,
    device: i32,
    confs: &[String],
    version: Version,
    capacity: Option<u64>,
) -> PredictReport {
    let own = Config::of_snapshot(snap, version).unwrap_or_else(|_| Config {
        version,
        ..Config::default()
    });
    let (_, w) = workload(snap, device, &own);
    // Without a given capacity, a recorded OOM says how much PyTorch could have had: what
    // it had reserved then plus what the device still had free.
    let (capacity, capacity_from_oom) = match (capacity, w.first_oom) {
        (Some(c), _) => (Some(c), None),
        (None, Some((_, device_free, reserved))) => {
            (Some(reserved + device_free), Some((reserved, device_free)))
        }
        (None, None) => (None, None),
    };
    let mut report = PredictReport {
        device,
        requests: w.requests.len(),
        initial_blocks: w.initial,
        capacity,
        capacity_from_oom,
        ..PredictReport::default()
    };
    if let Ok(v) = verify_with(snap, &own) {
        if let Some(d) = v.devices.iter().find(|d| d.device == device) {
            report.recorded = Recorded {
                peak: PeakFigures::from(&d.stats),
                end: figures(&snap.device_segments(device).cloned().collect::<Vec<_>>()),
                stats: Stats {
                    // the verifier replays what succeeded; the trace says what did not
                    ooms: d.stats.ooms.max(w.recorded_ooms),
                    ..d.stats.clone()
                },
                exact: d.alloc_address_matches == d.alloc_events && d.final_state_matches,
            };
        }
    }
    let mut own_run = own.clone();
    own_run.capacity = capacity;
    own_run.device_total = capacity;
    // Parse everything first, then replay all configurations in parallel.
    let mut cfgs = vec![own_run];
    let mut errors: Vec<(usize, Prediction)> = Vec::new();
    for (i, c) in confs.iter().enumerate() {
        match Config::parse(c, version) {
            Ok(mut cfg) => {
                cfg.capacity = capacity;
                cfg.device_total = capacity;
                cfgs.push(cfg);
            }
            Err(e) => errors.push((
                i + 1,
                Prediction {
                    conf: c.clone(),
                    error: Some(e.to_string()),
                    ..Prediction::default()
                },
            )),
        }
    }
    let mut done = simulate_all(&w, &cfgs).into_iter();
    let mut preds = Vec::with_capacity(confs.len() + 1);
    let mut errors = errors.into_iter().peekable();
    for i in 0..=confs.len() {
        if errors.peek().is_some_and(|(j, _)| *j == i) {
            preds.extend(errors.next().map(|(_, p)| p));
        } else {
            preds.extend(done.next());
        }
    }
    if let Some(base) = preds.first_mut() {
        base.baseline = true;
    }
    report.predictions = preds;
    report
}
