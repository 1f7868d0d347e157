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
/// `segment_map` / `segment_unmap` of the trace (`Alloc`, `Free`, `MemMap`, `MemUnmap`).
/// Timestamps are the trace's `time_us` in nanoseconds (the previous entry's time when an
/// entry has none); records of all devices are merged by time and numbered in order.
pub fn to_records(snap: &Snapshot) -> Vec<Record> {
    let cfg = Config::of_snapshot(snap, Version::DEFAULT).unwrap_or_default();
    let mut out = Vec::new();
    for device in snap.devices() {
        let finals: Vec<Segment> = snap.device_segments(device).cloned().collect();
        let trace = snap.trace(device);
        let start = reconstruct_start(&finals, trace, &cfg);
        let t0 = trace
            .iter()
            .find_map(|e| e.time_us)
            .map_or(0, |t| (t.max(0) as u64) * 1000);
        for s in &start.segments {
            let kind = if s.is_expandable {
                EventKind::MemMap
            } else {
                EventKind::Alloc
            };
            out.push(record(kind, device, s.address, s.total_size, t0));
        }
        let mut ts = t0;
        for e in trace {
            if let Some(t) = e.time_us {
                ts = (t.max(0) as u64).saturating_mul(1000);
            }
            let r = match e.action {
                Action::SegmentAlloc => record(EventKind::Alloc, device, e.addr, e.size, ts),
                Action::SegmentFree => record(EventKind::Free, device, e.addr, 0, ts),
                Action::SegmentMap => record(EventKind::MemMap, device, e.addr, e.size, ts),
                Action::SegmentUnmap => record(EventKind::MemUnmap, device, e.addr, e.size, ts),
                _ => continue,
            };
            out.push(r);
        }
    }
    out.sort_by_key(|r| r.ts_ns);
    for (i, r) in out.iter_mut().enumerate() {
        r.seq = i as u64;
    }
    out
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
