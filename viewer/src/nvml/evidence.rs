//! Filling [`Evidence`] for `doctor` from what is at hand: the live NVML view, a `log`
//! file, or a fragprobe trace.

use std::collections::BTreeMap;

use super::diagnose::{Evidence, OtherProcess};
use super::logfile::LogData;
use super::procfs::ProcFs;
use super::sample::Snapshot;

/// One piece of evidence per device.
#[derive(Clone, Debug)]
pub struct DeviceEvidence {
    /// Display name of the device ("GPU 0 (NVIDIA H100)").
    pub title: String,
    /// The evidence.
    pub evidence: Evidence,
}

/// From the live NVML view: every process is "other" (there is no run); leftovers are the
/// processes whose parent is gone; use near the capacity is flagged.
pub fn from_snapshot(s: &Snapshot) -> Vec<DeviceEvidence> {
    let free: Vec<(u32, u64)> = s
        .devices
        .iter()
        .filter_map(|d| d.memory.as_ref().ok().map(|m| (d.index, m.free)))
        .collect();
    s.devices
        .iter()
        .map(|d| {
            let m = d.memory.as_ref().ok();
            let others = d
                .process_list()
                .iter()
                .map(|p| OtherProcess {
                    pid: p.pid,
                    used: p.used,
                    user: p
                        .info
                        .as_ref()
                        .map(|i| i.user.clone())
                        .unwrap_or_else(|| "?".into()),
                    cmdline: p
                        .info
                        .as_ref()
                        .map(|i| i.cmdline.clone())
                        .unwrap_or_default(),
                    leftover: p.info.as_ref().is_some_and(|i| i.orphaned),
                })
                .collect();
            DeviceEvidence {
                title: format!(
                    "GPU {} ({})",
                    d.index,
                    d.name.as_deref().unwrap_or("name n/a")
                ),
                evidence: Evidence {
                    source: "live NVML".into(),
                    device: Some(d.index),
                    capacity: m.map(|m| m.total),
                    reserved: m.map(|m| m.reserved).unwrap_or(0),
                    others,
                    peak_used: m.map(|m| m.used()),
                    live_label: "device used".into(),
                    other_gpus: free.iter().copied().filter(|g| g.0 != d.index).collect(),
                    ..Evidence::default()
                },
            }
        })
        .collect()
}

/// From a `fragprobe log` file: the device's used memory over time (rising baseline,
/// near capacity); processes listed at the busiest sample (JSON Lines only) are checked
/// against `/proc` now for leftovers.
pub fn from_log(data: &LogData, source: &str, procfs: &ProcFs) -> Vec<DeviceEvidence> {
    let mut by_gpu: BTreeMap<(u32, Option<u32>), Vec<&super::logfile::LogRow>> = BTreeMap::new();
    for r in &data.rows {
        by_gpu.entry((r.gpu, r.mig)).or_default().push(r);
    }
    let last_free: Vec<(u32, u64)> = by_gpu
        .iter()
        .filter(|(k, _)| k.1.is_none())
        .filter_map(|(k, rows)| rows.iter().rev().find_map(|r| r.free).map(|f| (k.0, f)))
        .collect();
    by_gpu
        .into_iter()
        .map(|((gpu, mig), rows)| {
            let capacity = rows.iter().filter_map(|r| r.total).max();
            let live: Vec<(u64, u64)> = rows
                .iter()
                .filter_map(|r| r.used.map(|u| (r.unix_ns, u)))
                .collect();
            let busiest = rows
                .iter()
                .filter(|r| r.used.is_some())
                .max_by_key(|r| r.used);
            let others = busiest
                .and_then(|r| r.processes.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|(pid, used)| {
                    let info = procfs.info(pid);
                    OtherProcess {
                        pid,
                        used,
                        user: info
                            .as_ref()
                            .map(|i| i.user.clone())
                            .unwrap_or_else(|| "?".into()),
                        cmdline: info
                            .as_ref()
                            .map(|i| i.cmdline.clone())
                            .unwrap_or_else(|| "(exited)".into()),
                        leftover: info.as_ref().is_some_and(|i| i.orphaned),
                    }
                })
                .collect();
            let name = rows
                .iter()
                .find(|r| !r.name.is_empty())
                .map(|r| r.name.clone());
            DeviceEvidence {
                title: match mig {
                    Some(m) => format!("GPU {gpu} MIG {m}"),
                    None => format!("GPU {gpu} ({})", name.unwrap_or_else(|| "name n/a".into())),
                },
                evidence: Evidence {
                    source: source.to_string(),
                    device: Some(gpu),
                    capacity,
                    reserved: rows.iter().rev().find_map(|r| r.reserved).unwrap_or(0),
                    peak_used: live.iter().map(|p| p.1).max(),
                    live,
                    live_label: "device used".into(),
                    others,
                    other_gpus: last_free.iter().copied().filter(|g| g.0 != gpu).collect(),
                    ..Evidence::default()
                },
            }
        })
        .collect()
}

pub use super::trace_evidence::{chart_from_trace, from_trace};
