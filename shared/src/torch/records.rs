//! Converting between PyTorch snapshots and fragprobe records.
//!
//! [`to_records`] turns a snapshot's *device* layer — the segments PyTorch obtained with
//! `cudaMalloc` / mapped with `cuMemMap` — into [`Record`]s with [`Api::Synthetic`], so the
//! same address-space model that ingests live traces can ingest an imported snapshot. The
//! allocator layer (blocks inside segments) stays in the [`Snapshot`].
//!
//! [`from_records`] goes the other way: every device allocation in a fragprobe trace
//! becomes a one-block segment, so a fragprobe trace opens in PyTorch's `memory_viz`.

use std::collections::BTreeMap;

use super::replay::reconstruct_start;
use super::sim::config::{Config, Version};
use super::sim::rounding::SMALL_BUFFER;
use super::snapshot::{
    Action, Block, BlockState, FormatInfo, PoolKind, Segment, Snapshot, SnapshotLayout, TraceEvent,
};
use super::stacks::Stacks;
use crate::format::{Api, EventKind, Record, DEVICE_UNKNOWN};

fn record(kind: EventKind, device: i32, addr: u64, size: u64, ts_ns: u64) -> Record {
    Record {
        ts_ns,
        addr,
        size,
        kind: kind as u16,
        api: Api::Synthetic as u16,
        device: i16::try_from(device).unwrap_or(DEVICE_UNKNOWN),
        ..Record::default()
    }
}

/// The device-level history of `snap` as records: first the segments that existed when its
/// trace began (reconstructed), then every `segment_alloc` / `segment_free` /
/// `segment_map` / `segment_unmap` of the trace. Timestamps are the trace's `time_us` in
/// nanoseconds (the previous entry's time when an entry has none); records of all devices
/// are merged by time and numbered in order.
///
/// A `cudaMalloc` segment is an `Alloc` and its `segment_free` a `Free`. An expandable
/// segment is what PyTorch did with the driver's VMM calls: one `AddressReserve` per
/// (stream, pool) reservation, at its first mapping, spanning every range the file shows
/// mapped in it (the driver's reservation is at least that large; its true size is not in
/// the file); each mapped range one `MemCreate` + `MemMap` + `MemRelease` per page (20 MiB
/// in the large pool, or `large_segment_size_mb`; 2 MiB in the small one), as PyTorch maps
/// them; each `segment_unmap` a `MemUnmap` of its range. So the model sees handles mapped
/// inside reservations — no `map_outside_reservation`, no `map_unknown_handle` — and an
/// imported expandable snapshot's mapped bytes are its reserved bytes.
pub fn to_records(snap: &Snapshot) -> Vec<Record> {
    let cfg = Config::of_snapshot(snap, Version::DEFAULT).unwrap_or_default();
    let mut out = Vec::new();
    let mut vmm = Vmm::default();
    for device in snap.devices() {
        let finals: Vec<Segment> = snap.device_segments(device).cloned().collect();
        let trace = snap.trace(device);
        let start = reconstruct_start(&finals, trace, &cfg);
        let t0 = trace
            .iter()
            .find_map(|e| e.time_us)
            .map_or(0, |t| (t.max(0) as u64) * 1000);
        let mut res = Reservations::of(device, &finals, &start.segments, trace);
        for s in &start.segments {
            if s.is_expandable {
                let pool = res.pool(s.address, s.stream);
                res.reserve_at(&mut out, s.stream, pool, t0);
                vmm.map(
                    &mut out,
                    device,
                    s.address,
                    s.total_size,
                    page(pool, &cfg),
                    t0,
                );
            } else {
                out.push(record(
                    EventKind::Alloc,
                    device,
                    s.address,
                    s.total_size,
                    t0,
                ));
            }
        }
        let mut ts = t0;
        for e in trace {
            if let Some(t) = e.time_us {
                ts = (t.max(0) as u64).saturating_mul(1000);
            }
            match e.action {
                Action::SegmentAlloc => {
                    out.push(record(EventKind::Alloc, device, e.addr, e.size, ts));
                }
                Action::SegmentFree => out.push(record(EventKind::Free, device, e.addr, 0, ts)),
                Action::SegmentMap => {
                    let pool = res.pool(e.addr, e.stream);
                    res.reserve_at(&mut out, e.stream, pool, ts);
                    vmm.map(&mut out, device, e.addr, e.size, page(pool, &cfg), ts);
                }
                Action::SegmentUnmap => {
                    out.push(record(EventKind::MemUnmap, device, e.addr, e.size, ts));
                }
                _ => {}
            }
        }
    }
    out.sort_by_key(|r| r.ts_ns);
    for (i, r) in out.iter_mut().enumerate() {
        r.seq = i as u64;
    }
    out
}

/// The page PyTorch maps an expandable segment of `pool` in.
fn page(pool: PoolKind, cfg: &Config) -> u64 {
    match pool {
        PoolKind::Small => SMALL_BUFFER,
        PoolKind::Large => cfg.large_segment_size.max(SMALL_BUFFER),
    }
}

/// Synthetic physical handles, numbered across devices.
#[derive(Default)]
struct Vmm {
    next_handle: u64,
}

impl Vmm {
    /// `[addr, addr + size)` mapped page by page: create, map, release (the mapping keeps
    /// the memory, as with the real driver).
    fn map(
        &mut self,
        out: &mut Vec<Record>,
        device: i32,
        addr: u64,
        size: u64,
        page: u64,
        ts: u64,
    ) {
        let mut at = addr;
        let end = addr.saturating_add(size);
        while at < end {
            let len = page.min(end - at);
            self.next_handle += 1;
            let h = self.next_handle;
            out.push(record(EventKind::MemCreate, device, h, len, ts));
            let mut m = record(EventKind::MemMap, device, at, len, ts);
            m.aux = h;
            out.push(m);
            out.push(record(EventKind::MemRelease, device, h, 0, ts));
            at += len;
        }
    }
}

/// The (stream, pool) reservations of one device's expandable segments: each spans every
/// range the file shows mapped in it.
struct Reservations {
    device: i32,
    /// Known expandable segments: (address, stream, pool).
    known: Vec<(u64, u64, PoolKind)>,
    /// (stream, pool) → (start, end) of all ranges, and whether it was emitted.
    spans: BTreeMap<(u64, u8), (u64, u64, bool)>,
}

impl Reservations {
    /// From the final segments, the reconstructed start segments and the trace.
    fn of(device: i32, finals: &[Segment], start: &[Segment], trace: &[TraceEvent]) -> Self {
        let mut r = Reservations {
            device,
            known: finals
                .iter()
                .chain(start)
                .filter(|s| s.is_expandable)
                .map(|s| (s.address, s.stream, s.pool))
                .collect(),
            spans: BTreeMap::new(),
        };
        let ranges = start
            .iter()
            .filter(|s| s.is_expandable)
            .map(|s| (s.address, s.total_size, s.stream))
            .chain(
                trace
                    .iter()
                    .filter(|e| e.action == Action::SegmentMap)
                    .map(|e| (e.addr, e.size, e.stream)),
            )
            .collect::<Vec<_>>();
        for (addr, size, stream) in ranges {
            let pool = r.pool(addr, stream);
            let span = r
                .spans
                .entry((stream, pool as u8))
                .or_insert((addr, addr, false));
            span.0 = span.0.min(addr);
            span.1 = span.1.max(addr.saturating_add(size));
        }
        r
    }

    /// The pool of a range at `addr` on `stream`: that of the nearest known expandable
    /// segment of the stream (a device's small and large reservations lie far apart), else
    /// the large pool.
    fn pool(&self, addr: u64, stream: u64) -> PoolKind {
        self.known
            .iter()
            .filter(|k| k.1 == stream)
            .min_by_key(|k| k.0.abs_diff(addr))
            .or_else(|| self.known.iter().min_by_key(|k| k.0.abs_diff(addr)))
            .map_or(PoolKind::Large, |k| k.2)
    }

    /// Emits the reservation of (stream, pool) before its first mapping.
    fn reserve_at(&mut self, out: &mut Vec<Record>, stream: u64, pool: PoolKind, ts: u64) {
        if let Some(span) = self.spans.get_mut(&(stream, pool as u8)) {
            if !span.2 {
                span.2 = true;
                out.push(record(
                    EventKind::AddressReserve,
                    self.device,
                    span.0,
                    span.1 - span.0,
                    ts,
                ));
            }
        }
    }
}

/// A snapshot in which each device allocation of `records` is a segment holding one block:
/// `segment_alloc` + `alloc` when it was made, `free_requested` + `free_completed` +
/// `segment_free` when it was freed; allocations still live at the end are the segments.
/// Only successful `Alloc`, `ManagedAlloc`, `AsyncAlloc`, `Free` and `AsyncFree` records
/// are used.
pub fn from_records(records: &[Record]) -> Snapshot {
    let mut traces: Vec<Vec<TraceEvent>> = Vec::new();
    // (device, addr) → (size, stream)
    let mut live: BTreeMap<(i32, u64), (u64, u64)> = BTreeMap::new();
    for r in records {
        if !r.ok() {
            continue;
        }
        let device = if r.device < 0 { 0 } else { r.device as i32 };
        let d = device as usize;
        if traces.len() <= d {
            traces.resize_with(d + 1, Vec::new);
        }
        let time_us = Some((r.ts_ns / 1000) as i64);
        let ev = |action, addr, size, stream| TraceEvent {
            action,
            addr,
            size,
            stream,
            time_us,
            stack: 0,
        };
        match r.kind() {
            Some(EventKind::Alloc | EventKind::ManagedAlloc | EventKind::AsyncAlloc) => {
                // What no allocator can hand out (a damaged or hostile trace) has no place
                // in a snapshot: PyTorch's reader, and ours, would refuse the whole file.
                if r.addr == 0 || r.size == 0 || r.addr.checked_add(r.size).is_none() {
                    continue;
                }
                if let Some((size, stream)) = live.remove(&(device, r.addr)) {
                    // Allocated again without a free in between (a lost free): the old
                    // block ends here, so segments never overlap.
                    traces[d].push(ev(Action::FreeRequested, r.addr, size, stream));
                    traces[d].push(ev(Action::FreeCompleted, r.addr, size, stream));
                    traces[d].push(ev(Action::SegmentFree, r.addr, size, stream));
                }
                let stream = if r.kind() == Some(EventKind::AsyncAlloc) {
                    r.aux
                } else {
                    0
                };
                traces[d].push(ev(Action::SegmentAlloc, r.addr, r.size, stream));
                traces[d].push(ev(Action::Alloc, r.addr, r.size, stream));
                live.insert((device, r.addr), (r.size, stream));
            }
            Some(EventKind::Free | EventKind::AsyncFree) => {
                if let Some((size, stream)) = live.remove(&(device, r.addr)) {
                    traces[d].push(ev(Action::FreeRequested, r.addr, size, stream));
                    traces[d].push(ev(Action::FreeCompleted, r.addr, size, stream));
                    traces[d].push(ev(Action::SegmentFree, r.addr, size, stream));
                }
            }
            _ => {}
        }
    }
    let segments = live
        .into_iter()
        .map(|((device, addr), (size, stream))| Segment {
            device,
            address: addr,
            total_size: size,
            stream,
            pool: if size <= 1 << 20 {
                PoolKind::Small
            } else {
                PoolKind::Large
            },
            pool_id: (0, 0),
            is_expandable: false,
            stack: 0,
            blocks: vec![Block {
                address: addr,
                size,
                requested_size: size,
                state: BlockState::ActiveAllocated,
                stack: 0,
            }],
        })
        .collect();
    Snapshot {
        format: FormatInfo {
            layout: SnapshotLayout::Dict,
            pickle_protocol: 4,
            has_time_us: true,
            has_settings: false,
            legacy_history: false,
        },
        segments,
        traces,
        settings: None,
        stacks: Stacks::default(),
        annotations: 0,
    }
}
