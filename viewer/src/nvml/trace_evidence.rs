//! Evidence and plots from a fragprobe trace: the records replayed into the shared
//! address-space model, with the state at every failed allocation captured on the way.

use std::collections::HashMap;
use std::path::Path;

use fragprobe_shared::format::{EventKind, Record};
use fragprobe_shared::model::{DeviceId, Metric, Model};
use fragprobe_shared::trace::{Trace, TraceError};

use super::chart::{Chart, Marker, MarkerKind, Series};
use super::diagnose::{Evidence, Failure, SimulatedConf};
use super::evidence::DeviceEvidence;
use crate::exit;

/// A failed allocation with the figures the model had right after it.
#[derive(Clone, Debug)]
struct SeenFailure {
    device: DeviceId,
    failure: Failure,
    others: Option<u64>,
}

/// The replayed trace and what was captured during the replay.
pub struct Replayed {
    /// The model after every record.
    pub model: Model,
    failures: Vec<SeenFailure>,
    /// Timestamp of the first record (ns, CLOCK_MONOTONIC).
    pub first_ns: u64,
    /// The trace itself (its run-info entries name PyTorch's snapshots).
    pub trace: Trace,
}

fn trace_error(e: TraceError) -> (u8, String) {
    let code = match &e {
        TraceError::Io { .. } => exit::NO_INPUT,
        TraceError::Version { .. } => exit::VERSION,
        _ => exit::BAD_INPUT,
    };
    (code, e.to_string())
}

fn is_allocating(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Alloc | EventKind::AsyncAlloc | EventKind::ManagedAlloc | EventKind::MemCreate
    )
}

/// Opens `path` and replays it. Errors carry the exit code.
pub fn replay(path: &Path) -> Result<Replayed, (u8, String)> {
    let trace = Trace::open(path).map_err(trace_error)?;
    for w in trace.warnings() {
        eprintln!("fragprobe: {}: {w}", path.display());
    }
    let mut model = Model::new();
    let mut failures = Vec::new();
    // Latest NVML per-process figure: (device, pid) → bytes.
    let mut proc_used: HashMap<(DeviceId, u32), u64> = HashMap::new();
    // Bytes outside the tracked allocations at the last cuMemGetInfo, per device.
    let mut outside: HashMap<DeviceId, u64> = HashMap::new();
    let span = fragprobe_shared::replay::trace(&trace, &mut model, |model, r| {
        let Some(kind) = r.kind() else { return };
        if kind == EventKind::NvmlSample {
            // The device of the process's ordinal, as the model placed the sample (one
            // sample gives one record per GPU of the process, all with the same seq). A
            // process NVML no longer lists holds nothing of its own there.
            if let Some(d) = model.device_id_of(r.pid, r.device) {
                if r.aux2 == u64::MAX {
                    proc_used.remove(&(d, r.pid));
                } else {
                    proc_used.insert((d, r.pid), r.aux2);
                }
            }
        }
        if kind == EventKind::ProcessExit {
            // An ended process's last figure is not the run's any more.
            proc_used.retain(|(_, pid), _| *pid != r.pid);
        }
        if kind == EventKind::MemGetInfo && r.ok() {
            if let Some(dev) = device_of(model, r) {
                let used = r.aux.saturating_sub(r.size);
                outside.insert(dev.id(), used.saturating_sub(dev.totals().live_bytes));
            }
        }
        if is_allocating(kind) && !r.ok() {
            if let Some(f) = capture_failure(model, r, &proc_used, &outside) {
                failures.push(f);
            }
        }
    });
    Ok(Replayed {
        model,
        failures,
        first_ns: span.first_ns,
        trace,
    })
}

/// The model's device of a record's (pid, ordinal).
fn device_of<'m>(model: &'m Model, r: &Record) -> Option<&'m fragprobe_shared::model::Device> {
    let space = model
        .space_id(r.pid, r.device)
        .and_then(|s| model.space(s))?;
    model.device(space.device())
}

fn capture_failure(
    model: &Model,
    r: &Record,
    proc_used: &HashMap<(DeviceId, u32), u64>,
    outside: &HashMap<DeviceId, u64>,
) -> Option<SeenFailure> {
    let fa = model
        .failed_allocs()
        .last()
        .filter(|f| f.seq == r.seq && f.pid == r.pid)?;
    let space = model
        .space_id(r.pid, r.device)
        .and_then(|s| model.space(s))?;
    let dev = model.device(space.device())?;
    let live = dev.totals().live_bytes;
    let others = dev.samples().nvml_used.map(|used| {
        let mine: u64 = proc_used
            .iter()
            .filter(|((d, _), _)| *d == dev.id())
            .map(|(_, b)| *b)
            .sum();
        used.saturating_sub(mine)
    });
    Some(SeenFailure {
        device: dev.id(),
        failure: Failure {
            t_ns: r.ts_ns,
            request: fa.size,
            live,
            free_total: fa.total_free,
            largest_free: fa.largest_free,
            cached_unused: None,
            outside: outside.get(&dev.id()).copied(),
        },
        // Only meaningful once a per-process figure says what the run itself holds.
        others: others.filter(|_| proc_used.keys().any(|(d, _)| *d == dev.id())),
    })
}

/// The settings a fragmentation OOM suggests, replayed through the allocator simulator on
/// the run's own history: the exit snapshot (else the OOM snapshot) of the first process
/// whose PyTorch ran out of memory. (device, result) per setting; empty without one.
fn simulate_alternatives(
    trace: &Path,
    joined: &[crate::torchhook::Joined],
    request: Option<u64>,
) -> Vec<(i32, SimulatedConf)> {
    use fragprobe_shared::torch::{load_snapshot, predict::predict, sim::Version};
    let Some(oom) = joined.iter().find(|j| j.oom.is_some()) else {
        return Vec::new();
    };
    let device = oom.oom.as_ref().map_or(0, |o| o.device);
    let pick = joined
        .iter()
        .find(|j| j.pid == oom.pid && j.reason == "exit" && j.error.is_none())
        .unwrap_or(oom);
    let base = trace.parent().unwrap_or(Path::new("."));
    let file = {
        let p = Path::new(&pick.path);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let Ok(snap) = load_snapshot(&file) else {
        return Vec::new();
    };
    let mut confs = vec!["expandable_segments:True".to_string()];
    if let Some(r) = request {
        confs.push(format!(
            "max_split_size_mb:{}",
            super::diagnose::split_size_mb(r)
        ));
    }
    confs.push("roundup_power2_divisions:4".into());
    let report = predict(&snap, device, &confs, Version::DEFAULT, None);
    report
        .predictions
        .iter()
        .filter(|p| !p.baseline && p.error.is_none())
        .map(|p| {
            (
                device,
                SimulatedConf {
                    conf: p.conf.clone(),
                    ooms: p.stats.ooms,
                    peak_reserved: p.peak.peak_reserved,
                    snapshot: file.display().to_string(),
                },
            )
        })
        .collect()
}

/// Whether a device saw anything: allocations, failures or NVML samples. (A device the
/// model only knows from a `cuMemGetInfo` before its description arrived is left out.)
fn active(rp: &Replayed, dev: &fragprobe_shared::model::Device) -> bool {
    rp.model
        .device_summary(dev.id())
        .is_some_and(|s| s.peak_live > 0)
        || !dev.own_series().get(Metric::NvmlUsed).is_empty()
        || rp.failures.iter().any(|f| f.device == dev.id())
}

/// Whether device ordinal `ord` is in the `-i` selection (all when empty).
fn selected(gpus: &[u32], ord: i16) -> bool {
    gpus.is_empty() || u32::try_from(ord).is_ok_and(|o| gpus.contains(&o))
}

/// A process looks like PyTorch when it set the allocator configuration, or was started
/// by Python or a PyTorch launcher, or names a `torch…` module or program. Only the last
/// path component of each argument counts: a program that merely lives under a directory
/// with "torch" in its name is not PyTorch.
fn looks_like_pytorch(model: &Model) -> bool {
    let base = |a: &str| a.rsplit('/').next().unwrap_or(a).to_string();
    model.processes().iter().any(|p| {
        let i = p.info();
        i.alloc_conf.is_some()
            || i.cmdline.first().is_some_and(|a| {
                let b = base(a);
                b.starts_with("python") || ["accelerate", "deepspeed"].contains(&b.as_str())
            })
            || i.cmdline.iter().any(|a| base(a).starts_with("torch"))
    })
}

fn capacity(model: &Model, d: DeviceId) -> Option<u64> {
    let dev = model.device(d)?;
    dev.info()
        .total_bytes
        .or(dev.samples().nvml_total)
        .or(dev.samples().driver_total)
}

fn title(model: &Model, d: DeviceId) -> String {
    let Some(dev) = model.device(d) else {
        return "device ?".into();
    };
    let name = dev.info().name.clone().unwrap_or_else(|| "name n/a".into());
    format!("GPU {} ({name})", dev.ordinal())
}

/// Evidence per device from a trace. Errors carry the exit code.
pub fn from_trace(path: &Path, gpus: &[u32]) -> Result<Vec<DeviceEvidence>, (u8, String)> {
    let rp = replay(path)?;
    let m = &rp.model;
    let pytorch = looks_like_pytorch(m);
    // PyTorch's own snapshots joined with the trace (`run --torch-snapshot`): at an OOM they
    // say how much the caching allocator held unallocated, and what settings it ran with.
    let joined = crate::torchhook::join(&rp.trace);
    let ooms: Vec<&crate::torchhook::JoinedOom> =
        joined.iter().filter_map(|j| j.oom.as_ref()).collect();
    let pytorch_conf = joined.iter().find_map(|j| j.alloc_conf.clone());
    let simulated = simulate_alternatives(
        path,
        &joined,
        rp.failures.first().map(|f| f.failure.request),
    );
    let free_of = |d: DeviceId| {
        let dev = m.device(d)?;
        let s = dev.samples();
        s.driver_free
            .or_else(|| Some(s.nvml_total?.saturating_sub(s.nvml_used?)))
    };
    let mut out = Vec::new();
    for dev in m.devices() {
        let ord = dev.ordinal();
        if !selected(gpus, ord) || !active(&rp, dev) {
            continue;
        }
        let id = dev.id();
        let mine: Vec<&SeenFailure> = rp.failures.iter().filter(|f| f.device == id).collect();
        let Some(series) = m.device_series(id) else {
            continue;
        };
        let live: Vec<(u64, u64)> = series
            .get(Metric::Live)
            .points()
            .map(|b| (b.t, b.min.max(0.0) as u64))
            .collect();
        let nvml = dev.own_series().get(Metric::NvmlUsed);
        let unfreed: u64 = dev
            .spaces()
            .filter_map(|s| m.space(s))
            .filter_map(|s| m.process(s.pid()).and_then(|p| p.exit()).map(|_| s))
            .filter_map(|s| s.exit_snapshot().map(|x| x.totals.live_bytes))
            .sum();
        out.push(DeviceEvidence {
            title: title(m, id),
            evidence: Evidence {
                source: format!("trace {}", path.display()),
                device: (ord >= 0).then_some(ord as u32),
                capacity: capacity(m, id),
                reserved: 0,
                failures: mine
                    .iter()
                    .map(|f| {
                        let mut f = f.failure.clone();
                        if let Some(o) = ooms.iter().find(|o| o.device == i32::from(ord)) {
                            f.cached_unused = Some(o.cached_free);
                        }
                        f
                    })
                    .collect(),
                others: Vec::new(),
                others_unattributed: mine.iter().filter_map(|f| f.others).max(),
                live,
                live_label: "live bytes".into(),
                peak_used: nvml.max_value().map(|v| v as u64),
                unfreed_at_exit: (unfreed > 0).then_some(unfreed),
                pytorch: pytorch || !joined.is_empty(),
                pytorch_conf: pytorch_conf.clone(),
                simulated: simulated
                    .iter()
                    .filter(|(d, _)| *d == i32::from(ord))
                    .map(|(_, c)| c.clone())
                    .collect(),
                run_processes: {
                    let mut pids: Vec<u32> = dev
                        .spaces()
                        .filter_map(|s| m.space(s))
                        .map(|s| s.pid())
                        .collect();
                    pids.sort_unstable();
                    pids.dedup();
                    pids.len() as u32
                },
                other_gpus: m
                    .devices()
                    .iter()
                    .filter(|o| o.ordinal() != ord && o.ordinal() >= 0 && active(&rp, o))
                    .filter_map(|o| free_of(o.id()).map(|f| (o.ordinal() as u32, f)))
                    .collect(),
            },
        });
    }
    if out.is_empty() {
        return Err((
            exit::BAD_INPUT,
            format!(
                "{} holds no device activity{}",
                path.display(),
                if gpus.is_empty() {
                    String::new()
                } else {
                    format!(" for GPU(s) {gpus:?}")
                }
            ),
        ));
    }
    Ok(out)
}

/// A plot from a trace: live bytes (and NVML's device used, when sampled) per device over
/// time, failed allocations marked. Errors carry the exit code.
pub fn chart_from_trace(
    path: &Path,
    gpus: &[u32],
    title_text: &str,
    threshold: f64,
) -> Result<Chart, (u8, String)> {
    let rp = replay(path)?;
    let m = &rp.model;
    let t0 = rp.first_ns;
    let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
    let mut series = Vec::new();
    let mut markers = Vec::new();
    for dev in m.devices() {
        let ord = dev.ordinal();
        if !selected(gpus, ord) || !active(&rp, dev) {
            continue;
        }
        let total = capacity(m, dev.id()).map(|t| t as f64);
        let idx = series.len();
        let Some(live) = m.device_series(dev.id()).map(|v| v.get(Metric::Live)) else {
            continue;
        };
        series.push(Series {
            label: format!("{} live bytes", title(m, dev.id())),
            points: step_points(live.points().map(|b| (secs(b.t), b.max, b.last))),
            total,
        });
        let nvml = dev.own_series().get(Metric::NvmlUsed);
        if !nvml.is_empty() {
            series.push(Series {
                label: format!("GPU {ord} NVML used"),
                points: nvml.points().map(|b| (secs(b.t), b.last)).collect(),
                total,
            });
        }
        for f in rp.failures.iter().filter(|f| f.device == dev.id()) {
            markers.push(Marker {
                t: secs(f.failure.t_ns),
                kind: MarkerKind::Failure,
                series: Some(idx),
            });
        }
    }
    Ok(Chart {
        title: title_text.to_string(),
        series,
        markers,
        threshold_pct: (threshold > 0.0).then_some(threshold),
        width: 1200,
        height: 600,
    })
}

/// Step-function points from buckets (t, max, last): each bucket's peak is drawn, then
/// its closing value, so downsampled peaks stay visible.
fn step_points(b: impl Iterator<Item = (f64, f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (t, max, last) in b {
        if let Some(&(_, prev)) = out.last() {
            out.push((t, prev));
        }
        out.push((t, max));
        if last != max {
            out.push((t, last));
        }
    }
    out
}

#[cfg(test)]
mod pytorch_tests {
    use super::*;
    use fragprobe_shared::format::{Api, EventKind, MetaKind, MetaWriter, Record};

    fn model_of(argv: &[&str]) -> Model {
        let mut buf = [0u8; 512];
        let mut w = MetaWriter::new(&mut buf, MetaKind::ProcessInfo);
        w.field(b"pid", b"7")
            .field(b"cmdline", argv.join("\0").as_bytes());
        let (len, _) = w.finish();
        let entry = fragprobe_shared::format::MetaEntry::parse(&buf[..len]).unwrap();
        let mut m = Model::new();
        let r = Record {
            pid: 7,
            kind: EventKind::ProcessStart as u16,
            api: Api::Probe as u16,
            meta: 1,
            ..Record::default()
        };
        m.apply_with_meta(&r, Some(&entry));
        m
    }

    #[test]
    fn pytorch_is_recognised_by_program_and_module_not_by_directory() {
        assert!(looks_like_pytorch(&model_of(&[
            "/usr/bin/python3",
            "train.py"
        ])));
        assert!(looks_like_pytorch(&model_of(&[
            "/opt/bin/torchrun",
            "--nproc",
            "8",
            "t.py"
        ])));
        assert!(looks_like_pytorch(&model_of(&[
            "env",
            "torch.distributed.run"
        ])));
        assert!(!looks_like_pytorch(&model_of(&[
            "/work/target-torch/debug/frag_oom"
        ])));
        assert!(!looks_like_pytorch(&model_of(&[
            "/home/me/pytorch-tools/bin/bench",
            "x"
        ])));
    }
}
