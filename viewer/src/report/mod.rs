//! The report of a run: one versioned, documented schema for `report --json`, the text
//! summary `run` prints, `compare`, and `doctor`.
//!
//! Schema (format_version 1). Every byte figure is in bytes, every time in ns of
//! CLOCK_MONOTONIC as recorded (relative times in `*_rel_ns` from the first event).
//!
//! ```text
//! { "format_version": 1,
//!   "source": "path of the trace",
//!   "label": "PYTORCH_CUDA_ALLOC_CONF of the run, else FRAGPROBE_LABEL, else the file name",
//!   "warnings": ["…"],                       // truncation and similar
//!   "duration_ns": 0,
//!   "processes": [ { "pid", "ppid", "cmdline": [..], "alloc_conf", "hostname",
//!                    "cuda_visible_devices", "rank", "local_rank", "world_size",
//!                    "devices": [ordinals], "incomplete", "exit": {…}|null } ],
//!   "devices": [ { "ordinal", "uuid", "name", "total_bytes", "peak_live", "final_live",
//!                  "max_ratio", "final_ratio", "final_largest_free_block",
//!                  "min_largest_free_block" } ],
//!   "events": { "total", "dropped", "anomalies", "by_kind": {name: n},
//!               "anomalies_by_type": {name: n} },
//!   "allocations": { "ok", "failed", "frees" },
//!   "bytes": { "peak_live", "peak_live_at_rel_ns", "final_live", "peak_managed",
//!              "peak_mapped", "peak_reserved" },
//!   "fragmentation": { "max_ratio", "ratio_at_peak", "final_ratio",
//!                      "final_largest_free_block", "min_largest_free_block" },
//!   "leaks": { "count", "bytes", "by_size": [ { "kind", "size", "count" } ] },
//!   "failed_allocations": [ { "time_ns", "time_rel_ns", "pid", "device", "api", "size",
//!                             "result", "free_bytes", "largest_free_block",
//!                             "driver_free", "verdict" } ] }
//! ```
//! `allocations.ok` counts calls that created device memory (plain, pitch, managed,
//! stream-ordered, `cuMemCreate`); `frees` the calls that gave it back; `failed` the
//! allocation calls that returned an error. `bytes.*` count device memory (VMM memory from
//! create until both release and unmap). `free_bytes` is the arena's total free memory at
//! the failure. `verdict` is `capacity`, `fragmentation` or `other`.

pub mod compare;
pub mod export;
mod text;

use serde::Serialize;

use fragprobe_shared::format::EventKind;
use fragprobe_shared::model::{Model, RunFigures, Verdict, ANOMALY_KINDS};

pub use text::{bytes, duration, oom_line, print_summary, render};

/// The report schema version.
pub const REPORT_VERSION: u32 = 1;

/// A process of the run.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub ppid: Option<u32>,
    pub cmdline: Vec<String>,
    pub alloc_conf: Option<String>,
    pub label: Option<String>,
    pub hostname: Option<String>,
    pub cuda_visible_devices: Option<String>,
    pub rank: Option<u64>,
    pub local_rank: Option<u64>,
    pub world_size: Option<u64>,
    pub devices: Vec<i16>,
    pub incomplete: bool,
    pub exit: Option<ExitRow>,
}

/// How a process ended.
#[derive(Clone, Debug, Serialize)]
pub struct ExitRow {
    pub time_rel_ns: u64,
    pub live_bytes_reported: u64,
    pub live_count_reported: u64,
}

/// A device of the run.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceRow {
    pub ordinal: i16,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub total_bytes: Option<u64>,
    pub peak_live: u64,
    pub final_live: u64,
    pub max_ratio: f64,
    pub final_ratio: f64,
    pub final_largest_free_block: Option<u64>,
    pub min_largest_free_block: Option<u64>,
    /// What NVML said of the device during the run (the trace's `NvmlSample` records);
    /// absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml: Option<NvmlRow>,
}

/// NVML's figures for one device over a run.
#[derive(Clone, Debug, Serialize)]
pub struct NvmlRow {
    /// Highest device used bytes sampled.
    pub peak_used: u64,
    /// Device used bytes at the last sample.
    pub last_used: u64,
    /// Device total bytes, as NVML gives it.
    pub total: Option<u64>,
}

/// The NVML row of a device, from its samples.
fn nvml_row(d: &fragprobe_shared::model::Device) -> Option<NvmlRow> {
    let series = d
        .own_series()
        .get(fragprobe_shared::model::Metric::NvmlUsed);
    let s = d.samples();
    let last = s.nvml_used?;
    Some(NvmlRow {
        peak_used: series.max_value().map_or(last, |v| (v as u64).max(last)),
        last_used: last,
        total: s.nvml_total,
    })
}

/// Event counts.
#[derive(Clone, Debug, Serialize)]
pub struct EventsRow {
    pub total: u64,
    pub dropped: u64,
    pub anomalies: u64,
    pub by_kind: std::collections::BTreeMap<String, u64>,
    pub anomalies_by_type: std::collections::BTreeMap<String, u64>,
}

/// Allocation call counts.
#[derive(Clone, Debug, Serialize)]
pub struct AllocRow {
    pub ok: u64,
    pub failed: u64,
    pub frees: u64,
    pub releases: u64,
}

/// Byte figures.
#[derive(Clone, Debug, Serialize)]
pub struct BytesRow {
    pub peak_live: u64,
    pub peak_live_at_rel_ns: Option<u64>,
    pub final_live: u64,
    pub peak_managed: u64,
    pub peak_mapped: u64,
    pub peak_reserved: u64,
}

/// Fragmentation figures (worst device).
#[derive(Clone, Debug, Serialize)]
pub struct FragRow {
    pub max_ratio: f64,
    pub ratio_at_peak: f64,
    pub final_ratio: f64,
    pub final_largest_free_block: u64,
    pub min_largest_free_block: u64,
}

/// What was still live when processes exited.
#[derive(Clone, Debug, Serialize)]
pub struct LeakRow {
    pub count: u64,
    pub bytes: u64,
    pub by_size: Vec<LeakSize>,
}

/// Live-at-exit objects of one kind and size.
#[derive(Clone, Debug, Serialize)]
pub struct LeakSize {
    pub kind: String,
    pub size: u64,
    pub count: u64,
}

/// One failed allocation.
#[derive(Clone, Debug, Serialize)]
pub struct FailedRow {
    pub time_ns: u64,
    pub time_rel_ns: u64,
    pub pid: u32,
    pub device: i16,
    pub api: String,
    pub size: u64,
    pub result: u32,
    pub free_bytes: Option<u64>,
    pub largest_free_block: Option<u64>,
    pub driver_free: Option<u64>,
    pub verdict: String,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub format_version: u32,
    pub source: String,
    pub label: String,
    pub warnings: Vec<String>,
    pub duration_ns: u64,
    pub processes: Vec<ProcessRow>,
    pub devices: Vec<DeviceRow>,
    pub events: EventsRow,
    pub allocations: AllocRow,
    pub bytes: BytesRow,
    pub fragmentation: FragRow,
    pub leaks: LeakRow,
    pub failed_allocations: Vec<FailedRow>,
    /// PyTorch snapshots taken during the run (`run --torch-snapshot`), joined with the
    /// probe's records; absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub torch_snapshots: Vec<crate::torchhook::Joined>,
}

/// The name used in reports for a verdict.
pub fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Capacity => "capacity",
        Verdict::Fragmentation => "fragmentation",
        Verdict::Other => "other",
    }
}

impl Report {
    /// Builds the report of a model. `first_ns`/`last_ns` bound the recorded events.
    pub fn build(
        model: &Model,
        source: &str,
        warnings: Vec<String>,
        first_ns: u64,
        last_ns: u64,
    ) -> Report {
        let counts = model.counts();
        let rel = |t: u64| t.saturating_sub(first_ns);
        let processes: Vec<ProcessRow> = model
            .processes()
            .iter()
            .map(|p| {
                let i = p.info();
                ProcessRow {
                    pid: p.pid(),
                    ppid: i.ppid,
                    cmdline: i.cmdline.clone(),
                    alloc_conf: i.alloc_conf.clone(),
                    label: i.label.clone(),
                    hostname: i.hostname.clone(),
                    cuda_visible_devices: i.cuda_visible_devices.clone(),
                    rank: i.rank,
                    local_rank: i.local_rank,
                    world_size: i.world_size,
                    devices: p.spaces().map(|(o, _)| o).filter(|o| *o >= 0).collect(),
                    incomplete: p.incomplete(),
                    exit: p.exit().map(|e| ExitRow {
                        time_rel_ns: rel(e.at.ts_ns),
                        live_bytes_reported: e.reported_live_bytes,
                        live_count_reported: e.reported_live_count,
                    }),
                }
            })
            .collect();
        let figs = RunFigures::of(model);
        let devices = figs
            .devices
            .iter()
            .filter_map(|f| {
                let d = model.device(f.id)?;
                Some(DeviceRow {
                    ordinal: d.ordinal(),
                    uuid: d.info().uuid.clone(),
                    name: d.info().name.clone(),
                    total_bytes: d.info().total_bytes,
                    peak_live: f.summary.peak_live,
                    final_live: f.final_live,
                    max_ratio: f.summary.max_ratio,
                    final_ratio: f.final_ratio,
                    final_largest_free_block: f.final_largest_free,
                    min_largest_free_block: f.summary.min_largest_free,
                    nvml: nvml_row(d),
                })
            })
            .collect();
        let bytes = BytesRow {
            peak_live: figs.peak_live,
            peak_live_at_rel_ns: figs.peak_at.map(|w| rel(w.ts_ns)),
            final_live: figs.final_live,
            peak_managed: figs.peak_managed,
            peak_mapped: figs.peak_mapped,
            peak_reserved: figs.peak_reserved,
        };
        let frag = FragRow {
            max_ratio: figs.max_ratio,
            ratio_at_peak: figs.ratio_at_peak,
            final_ratio: figs.final_ratio,
            final_largest_free_block: figs.final_largest_free.unwrap_or(0),
            min_largest_free_block: figs.min_largest_free.unwrap_or(0),
        };

        let mut by_kind = std::collections::BTreeMap::new();
        for k in EventKind::ALL {
            let n = counts.of(*k);
            if n > 0 {
                by_kind.insert(k.name().to_string(), n);
            }
        }
        let mut anomalies_by_type = std::collections::BTreeMap::new();
        for (k, n) in model.anomalies().nonzero() {
            anomalies_by_type.insert(k.name().to_string(), n);
        }
        let _ = ANOMALY_KINDS;
        let leaks = leak_rows(model);
        let failed_allocations = model
            .failed_allocs()
            .iter()
            .map(|f| FailedRow {
                time_ns: f.ts_ns,
                time_rel_ns: rel(f.ts_ns),
                pid: f.pid,
                device: f.ordinal,
                api: fragprobe_shared::format::Api::from_u16(f.api)
                    .map(|a| a.name().to_string())
                    .unwrap_or_else(|| format!("api#{}", f.api)),
                size: f.size,
                result: f.result,
                free_bytes: f.total_free,
                largest_free_block: f.largest_free,
                driver_free: f.driver_free,
                verdict: verdict_name(f.verdict).to_string(),
            })
            .collect();
        let label = processes
            .iter()
            .find_map(|p| p.alloc_conf.clone())
            .or_else(|| processes.iter().find_map(|p| p.label.clone()))
            .unwrap_or_else(|| {
                std::path::Path::new(source)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| source.to_string())
            });
        Report {
            format_version: REPORT_VERSION,
            source: source.to_string(),
            label,
            warnings,
            duration_ns: last_ns.saturating_sub(first_ns),
            processes,
            devices,
            events: EventsRow {
                total: counts.events,
                dropped: counts.lost,
                anomalies: counts.anomalies,
                by_kind,
                anomalies_by_type,
            },
            allocations: AllocRow {
                ok: counts.ok_allocs,
                failed: counts.failed_allocs,
                frees: counts.frees,
                releases: counts.releases,
            },
            bytes,
            fragmentation: frag,
            leaks,
            failed_allocations,
            torch_snapshots: Vec::new(),
        }
    }
}

fn leak_rows(model: &Model) -> LeakRow {
    let mut row = LeakRow {
        count: 0,
        bytes: 0,
        by_size: Vec::new(),
    };
    for g in model.leaks() {
        row.count += g.count;
        row.bytes += g.size.saturating_mul(g.count);
        row.by_size.push(LeakSize {
            kind: g.kind.name().to_string(),
            size: g.size,
            count: g.count,
        });
    }
    row.by_size
        .sort_by_key(|l| std::cmp::Reverse(l.size.saturating_mul(l.count)));
    row
}
