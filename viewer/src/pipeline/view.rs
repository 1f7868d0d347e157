//! Reading the model for the panels: plain values copied out under a brief read lock.

use fragprobe_shared::format::Api;
use fragprobe_shared::model::{
    self, ArenaFigures, Device, Metric, Model, RunFigures, Series, SeriesView, SpaceId, Summary,
    Totals,
};

use super::crosscheck::CrossCheck;
use super::log::EventLog;
use super::panels::compare;
use super::panels::figures::Figures;
use super::panels::timeline::{Curve, Input as TimelineInput, Marker};
use super::run::Head;
pub use super::run::{Baseline, Baselines};
use super::space::{
    Hole, RegionDetail, RegionKind, RegionSource, RegionView, Segment, SpaceInfo, SpaceKey,
};

/// The viewer's kind of a model region (`None`: not drawn, e.g. physical handles).
pub fn kind_of(k: model::RegionKind) -> Option<RegionKind> {
    use model::RegionKind as M;
    Some(match k {
        M::Device | M::Pitch => RegionKind::Plain,
        M::Async => RegionKind::Pool,
        M::Managed => RegionKind::Managed,
        M::Imported => RegionKind::Imported,
        M::Reservation => RegionKind::VmmReserved,
        M::Mapping => RegionKind::VmmMapped,
        M::Handle => return None,
    })
}

fn space_key(m: &Model, id: SpaceId) -> Option<SpaceKey> {
    m.space(id).map(|s| SpaceKey {
        pid: s.pid(),
        device: s.ordinal(),
    })
}

/// Every space's map facts. Cost: one pass over the free blocks of each arena (for the
/// largest one's address) and over the regions outside the arenas — call it when the model
/// changed, not every frame.
pub fn spaces(m: &Model) -> Vec<SpaceInfo> {
    let mut out = Vec::new();
    for sp in m.spaces() {
        let key = SpaceKey {
            pid: sp.pid(),
            device: sp.ordinal(),
        };
        let mut segments = Vec::new();
        let mut largest_hole = None;
        let arena = sp.arena();
        if let Some(a) = arena {
            segments.push(Segment {
                name: "arena".into(),
                lo: a.base,
                hi: a.end.max(a.base + 1),
            });
            if a.largest_free > 0 {
                largest_hole = m
                    .gaps_in(sp.id(), a.base, a.end)
                    .into_iter()
                    .filter(|g| g.size == a.largest_free)
                    .map(|g| Hole {
                        addr: g.addr,
                        size: g.size,
                    })
                    .next();
            }
        }
        // Regions outside the arena (VMM reservations, managed memory) get their own bands.
        let (lo, hi) = arena.map_or((u64::MAX, 0), |a| (a.base, a.end));
        let outside: Vec<_> = if arena.is_some() {
            let mut v = m.regions_in(sp.id(), 0, lo);
            v.extend(m.regions_in(sp.id(), hi, u64::MAX));
            v
        } else {
            m.regions_in(sp.id(), 0, u64::MAX)
        };
        let mut vmm: Option<(u64, u64)> = None;
        let mut managed: Option<(u64, u64)> = None;
        for r in &outside {
            if r.addr >= lo && r.addr < hi {
                continue;
            }
            let end = r.addr.saturating_add(r.size);
            let slot = match kind_of(r.kind) {
                Some(RegionKind::VmmMapped | RegionKind::VmmReserved) => &mut vmm,
                Some(_) => &mut managed,
                None => continue,
            };
            *slot = Some(slot.map_or((r.addr, end), |(a, b)| (a.min(r.addr), b.max(end))));
        }
        if let Some((a, b)) = vmm {
            segments.push(Segment {
                name: "VMM".into(),
                lo: a,
                hi: b,
            });
        }
        if let Some((a, b)) = managed {
            segments.push(Segment {
                name: "managed / imported".into(),
                lo: a,
                hi: b,
            });
        }
        let t = sp.totals();
        out.push(SpaceInfo {
            key,
            segments,
            largest_hole,
            live_count: t.live_count + t.managed_count + t.imported_count + t.mapping_count,
        });
    }
    out
}

/// Regions of a model, for the map.
pub struct ModelRegions<'a> {
    /// The model (head or cursor).
    pub model: &'a Model,
    /// What [`spaces`] returned for it.
    pub spaces: &'a [SpaceInfo],
    /// The records (to find the allocating thread of a region).
    pub log: Option<&'a dyn EventLog>,
}

impl RegionSource for ModelRegions<'_> {
    fn spaces(&self) -> Vec<SpaceInfo> {
        self.spaces.to_vec()
    }

    fn visit(&self, space: SpaceKey, lo: u64, hi: u64, f: &mut dyn FnMut(&RegionView)) {
        visit(self.model, space, lo, hi, f);
    }

    fn detail(&self, space: SpaceKey, addr: u64) -> Option<RegionDetail> {
        let id = self.model.space_id(space.pid, space.device)?;
        let r = self.model.region_at(id, addr)?;
        let kind = kind_of(r.kind)?;
        let stream = if r.kind == model::RegionKind::Async {
            r.aux
        } else {
            0
        };
        let tid = self
            .log
            .and_then(|l| tid_of(l, space.pid, r.seq, r.ts_ns))
            .unwrap_or(0);
        Some(RegionDetail {
            region: RegionView {
                addr: r.addr,
                size: r.size,
                kind,
                ts_ns: r.ts_ns,
            },
            api: Api::from_u16(r.api),
            tid,
            stream,
            seq: r.seq,
        })
    }
}

/// Calls `f` for each drawable region of `space` overlapping `[lo, hi)`, by address.
pub fn visit(m: &Model, space: SpaceKey, lo: u64, hi: u64, f: &mut dyn FnMut(&RegionView)) {
    let Some(id) = m.space_id(space.pid, space.device) else {
        return;
    };
    for r in m.regions_in(id, lo, hi) {
        if let Some(kind) = kind_of(r.kind) {
            f(&RegionView {
                addr: r.addr,
                size: r.size,
                kind,
                ts_ns: r.ts_ns,
            });
        }
    }
}

/// The uuid recorded for the GPU that `space` is on (NVML numbers GPUs in PCI order over
/// the whole machine, CUDA ordinals follow CUDA_VISIBLE_DEVICES; the uuid names the same
/// GPU in both).
pub fn device_uuid(m: &Model, space: SpaceKey) -> Option<String> {
    let sp = m
        .space_id(space.pid, space.device)
        .and_then(|id| m.space(id))?;
    m.device(sp.device())?.info().uuid.clone()
}

/// The thread of the record `(pid, seq)` recorded at `ts_ns`.
fn tid_of(log: &dyn EventLog, pid: u32, seq: u64, ts_ns: u64) -> Option<u32> {
    let first = log.partition_by_time(ts_ns.saturating_sub(1));
    for i in first..first + 4096 {
        let r = log.get(i)?;
        if r.ts_ns > ts_ns {
            return None;
        }
        if r.pid == pid && r.seq == seq {
            return Some(r.tid);
        }
    }
    None
}

/// NVML figures for a space, from the model's samples or a live sampler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmlFigures {
    /// The process's used bytes (`None`: n/a).
    pub process_used: Option<u64>,
    /// Device used bytes.
    pub device_used: u64,
    /// Device total.
    pub device_total: u64,
}

/// What figures and timelines are about: one space, or (merged) the whole device it is on.
struct Scoped<'a> {
    totals: &'a Totals,
    arena: Option<ArenaFigures>,
    summary: &'a Summary,
    series: SeriesView<'a>,
    device: Option<&'a Device>,
}

fn scoped(m: &Model, space: SpaceKey, merged: bool) -> Option<Scoped<'_>> {
    let sp = m
        .space_id(space.pid, space.device)
        .and_then(|id| m.space(id))?;
    let device = m.device(sp.device());
    Some(match (merged, device) {
        (true, Some(d)) => Scoped {
            totals: d.totals(),
            arena: m.device_arena(d.id()),
            summary: m.device_summary(d.id())?,
            series: m.device_series(d.id())?,
            device,
        },
        _ => Scoped {
            totals: sp.totals(),
            arena: sp.arena(),
            summary: sp.summary(),
            series: sp.series().view(),
            device,
        },
    })
}

/// The figures of one space of `m` (head or cursor model); `merged`: of the whole device
/// the space is on (every process), the NVML comparison then being device-wide.
pub fn figures(
    m: &Model,
    head: &Head,
    space: SpaceKey,
    merged: bool,
    nvml: Option<NvmlFigures>,
    live_baseline: Option<Baseline>,
) -> Figures {
    let c = m.counts();
    let mut f = Figures {
        dropped: c.lost.max(head.ring_dropped),
        anomalies: c.anomalies,
        failed_allocs: c.failed_allocs,
        events: c.events,
        ..Figures::default()
    };
    if let Some(d) = head
        .allocator
        .as_ref()
        .and_then(|l| l.device(i32::from(space.device)))
    {
        f.allocator = Some(super::panels::figures::AllocatorHeadline {
            allocated: d.now.allocated,
            free: d.now.free,
            largest_free: d.now.largest_free,
        });
    }
    let Some(sc) = scoped(m, space, merged) else {
        return f;
    };
    let t = sc.totals;
    f.live_bytes = t.live_bytes;
    f.live_count = t.live_count;
    f.peak_live = sc.summary.peak_live;
    f.managed_bytes = t.managed_bytes;
    f.mapped_bytes = t.mapped_bytes;
    f.reserved_bytes = t.reserved_bytes;
    if let Some(a) = sc.arena {
        f.largest_free = Some(a.largest_free);
        f.total_free = Some(a.total_free);
        f.frag_ratio = a.ratio();
    }
    let samples = sc.device.map(|d| *d.samples()).unwrap_or_default();
    let now = m.now().ts_ns;
    let nvml = nvml.or_else(|| {
        let used = samples.nvml_used?;
        Some(NvmlFigures {
            // This process's own sample: the model's last one may be another process's.
            process_used: head.nvml_process_at(space.pid, space.device, now),
            device_used: used,
            device_total: samples.nvml_total.unwrap_or(0),
        })
    });
    let baseline = head
        .baselines
        .get(&(space.pid, space.device))
        .and_then(|b| b.at(now))
        .or(live_baseline);
    f.crosscheck = nvml.map(|n| CrossCheck {
        tracked_live: t.live_bytes,
        // Merged: one process's NVML figure says nothing about the device's processes.
        process_used: n.process_used.filter(|_| !merged),
        baseline: baseline.filter(|_| !merged).map(|b| b.bytes),
        baseline_estimated_with: baseline.filter(|_| !merged).and_then(|b| b.estimated_with),
        device_used: n.device_used,
        device_total: n.device_total,
    });
    f
}

fn curve(s: &Series, name: &str, colour: egui::Color32, t0: u64, t1: u64, n: usize) -> Curve {
    let mut points = Vec::new();
    for b in s.downsample(t0, t1.max(t0 + 1), n) {
        let x = (b.t - t0) as f64 / 1e9;
        if b.min != b.max {
            points.push([x, b.min]);
            points.push([x, b.max]);
        }
        points.push([x, b.last]);
    }
    Curve {
        name: name.into(),
        colour,
        points,
        dashed: false,
    }
}

/// The timeline of one space: bytes and ratio curves, NVML, failures. `buckets` is the
/// plot's width in pixels.
pub fn timeline(head: &Head, space: SpaceKey, merged: bool, buckets: usize) -> TimelineInput {
    use egui::Color32 as C;
    let m = &head.model;
    let (t0, t1) = head.span();
    let mut input = TimelineInput {
        span: (0.0, (t1 - t0) as f64 / 1e9),
        ..TimelineInput::default()
    };
    let Some(sc) = scoped(m, space, merged) else {
        return input;
    };
    let s = sc.series;
    let n = buckets.max(16);
    let t = sc.totals;
    let summary = sc.summary;
    // For a PyTorch snapshot the device layer is its segments: reserved, not live.
    let live_name = if head.allocator.is_some() {
        "reserved (segments)"
    } else {
        "live bytes"
    };
    input.bytes.push(curve(
        s.get(Metric::Live),
        live_name,
        C::from_rgb(66, 165, 245),
        t0,
        t1,
        n,
    ));
    if summary.peak_mapped > 0 || t.mapped_bytes > 0 {
        input.bytes.push(curve(
            s.get(Metric::Mapped),
            "VMM mapped",
            C::from_rgb(255, 152, 0),
            t0,
            t1,
            n,
        ));
    }
    if summary.peak_reserved > 0 || t.reserved_bytes > 0 {
        input.bytes.push(curve(
            s.get(Metric::Reserved),
            "VMM reserved",
            C::from_rgb(141, 110, 99),
            t0,
            t1,
            n,
        ));
    }
    if !s.get(Metric::LargestFree).is_empty() {
        input.bytes.push(curve(
            s.get(Metric::LargestFree),
            "largest free block",
            C::from_rgb(255, 235, 59),
            t0,
            t1,
            n,
        ));
        input.ratio.push(curve(
            s.get(Metric::FragRatio),
            "fragmentation ratio",
            C::from_rgb(239, 83, 80),
            t0,
            t1,
            n,
        ));
    }
    if let Some(d) = sc.device {
        let nv = d.own_series().get(Metric::NvmlUsed);
        if !nv.is_empty() {
            input.bytes.push(curve(
                nv,
                "NVML used (device)",
                C::from_rgb(102, 187, 106),
                t0,
                t1,
                n,
            ));
        }
        let total = d
            .samples()
            .nvml_total
            .or(d.info().total_bytes)
            .filter(|&v| v > 0);
        input.device_total = total.map(|v| v as f64);
    }
    for fa in m
        .failed_allocs()
        .iter()
        .filter(|f| (merged || f.pid == space.pid) && f.ordinal == space.device)
    {
        input.markers.push(Marker {
            t: fa.ts_ns.saturating_sub(t0) as f64 / 1e9,
            text: format!(
                "failed {} of {} ({})",
                fa.kind.name(),
                super::space::human_bytes(fa.size),
                fa.verdict.name()
            ),
        });
    }
    input
}

/// Failed allocation times (ns), in order, for the "next failure" keys.
pub fn failure_times(m: &Model) -> Vec<u64> {
    let mut v: Vec<u64> = m.failed_allocs().iter().map(|f| f.ts_ns).collect();
    v.sort_unstable();
    v
}

/// The spaces of a model, the busiest (highest peak) first.
pub fn space_keys(m: &Model) -> Vec<SpaceKey> {
    let mut v: Vec<(u64, SpaceKey)> = m
        .spaces()
        .iter()
        .filter_map(|s| Some((s.summary().peak_live, space_key(m, s.id())?)))
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    v.into_iter().map(|(_, k)| k).collect()
}

/// A run's line in the comparison: its figures over the whole run ([`RunFigures`], the
/// ones `fragprobe compare` prints), with the curves of its peak device.
pub fn compare_run(head: &Head, name: &str, loading: bool, buckets: usize) -> compare::Run {
    let m = &head.model;
    let (t0, t1) = head.span();
    let c = m.counts();
    let figs = RunFigures::of(m);
    let mut run = compare::Run {
        label: head.alloc_conf().unwrap_or_else(|| name.to_string()),
        file: name.to_string(),
        loading,
        stats: compare::Stats {
            peak_live: figs.peak_live,
            ratio_at_peak: figs.ratio_at_peak,
            max_ratio: figs.max_ratio,
            largest_free_at_peak: figs.largest_free_at_peak,
            min_largest_free: figs.min_largest_free,
            final_live: figs.final_live,
            failed_allocs: c.failed_allocs,
            dropped: c.lost.max(head.ring_dropped),
            anomalies: c.anomalies,
            events: c.events,
            duration_s: (t1 - t0) as f64 / 1e9,
        },
        ..compare::Run::default()
    };
    let peak = figs.peak_device.and_then(|id| m.device(id));
    if let Some(l) = &head.allocator {
        let d = peak
            .and_then(|d| l.device(i32::from(d.ordinal())))
            .or(l.devices.first());
        run.allocator = d
            .map(|d| {
                super::allocator::rows(d)
                    .into_iter()
                    .map(|(label, value, _)| (label, value))
                    .collect()
            })
            .unwrap_or_default();
    }
    let Some(series) = peak.and_then(|d| m.device_series(d.id())) else {
        return run;
    };
    let n = buckets.max(16);
    // Runs are overlaid from each one's first allocation (live bytes first above 0), not
    // from its first record: start-up before it (Python's imports, a sweep's first run
    // warming the page cache) would shift one run's curves right of another's.
    let align = series
        .get(Metric::Live)
        .points()
        .find(|b| b.max > 0.0)
        .map_or(t0, |b| b.t)
        .clamp(t0, t1);
    for (metric, out) in [
        (Metric::Live, &mut run.live),
        (Metric::FragRatio, &mut run.ratio),
    ] {
        *out = curve(series.get(metric), "", egui::Color32::WHITE, align, t1, n).points;
    }
    run
}
