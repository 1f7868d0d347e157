//! Verifying the simulator against a recorded trace.
//!
//! The state at the start of the trace is reconstructed (see [`replay`](super::replay)),
//! then the trace is replayed through the simulator with the snapshot's own settings. Each
//! recorded `segment_alloc` tells the simulator where the real `cudaMalloc` put the segment
//! (the simulator decides *whether* and *how big*; the driver decides *where*), and each
//! recorded `segment_free` / `segment_unmap` that no allocation caused (`empty_cache`, or
//! the retry path after a real OOM) is applied as it happened. Everything else — which
//! cached block serves each request, splitting, merging, segment sizes — is the
//! simulator's own prediction, compared with the recorded addresses.

use std::collections::{BTreeMap, VecDeque};

use super::replay::{reconstruct_start, Reconstruction};
use super::sim::address::{AddressSource, FirstFit};
use super::sim::allocator::{Allocator, Stats};
use super::sim::config::{ConfError, Config, Version};
use super::sim::pools::IntMap;
use super::snapshot::{Action, PoolId, Segment, Snapshot};

/// The first place where the simulator and the recording disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Index of the trace entry.
    pub index: usize,
    /// What was recorded.
    pub action: Action,
    /// Recorded address.
    pub recorded_addr: u64,
    /// The simulator's address (0 when it failed).
    pub predicted_addr: u64,
    /// Bytes (the request, or the recorded segment size).
    pub size: u64,
    /// For segment allocations: the simulator's segment size (0 when it made none).
    pub predicted_size: u64,
}

/// How one device's recorded trace compares with the simulator.
#[derive(Clone, Debug, Default)]
pub struct DeviceVerify {
    /// Device ordinal.
    pub device: i32,
    /// Trace entries.
    pub events: u64,
    /// `alloc` entries.
    pub alloc_events: u64,
    /// Of those, how many the simulator placed at the recorded address.
    pub alloc_address_matches: u64,
    /// Recorded `segment_alloc` entries.
    pub segment_allocs: u64,
    /// Of those, how many the simulator also made, with the same size, at that point.
    pub segment_size_matches: u64,
    /// Recorded `segment_map` entries (expandable segments).
    pub segment_maps: u64,
    /// Of those, how many the simulator also made at the same address and size.
    pub segment_map_matches: u64,
    /// Segment allocations or maps the simulator made where the recording has none.
    pub unexpected_segments: u64,
    /// Recorded `segment_free`/`segment_unmap` entries applied to the simulator.
    pub segment_releases: u64,
    /// Of those, how many the simulator could apply (the memory was free there too).
    pub segment_release_matches: u64,
    /// Frees the simulator could not apply.
    pub free_errors: u64,
    /// Mismatched allocations moved to their recorded address so the replay could go on
    /// judging later decisions from the recorded state.
    pub resyncs: u64,
    /// Whether the simulator's final state equals the snapshot's `segments`.
    pub final_state_matches: bool,
    /// The first disagreement, if any.
    pub first_mismatch: Option<Mismatch>,
    /// What reconstructing the start state inferred or could not explain.
    pub reconstruction: Reconstruction,
    /// The simulator's statistics at the end (peaks cover the trace).
    pub stats: Stats,
}

/// The verification of a whole snapshot.
#[derive(Clone, Debug)]
pub struct VerifyReport {
    /// The configuration replayed (from the snapshot's `allocator_settings`).
    pub config: Config,
    /// Per device.
    pub devices: Vec<DeviceVerify>,
}

impl VerifyReport {
    fn sum(&self, f: impl Fn(&DeviceVerify) -> u64) -> u64 {
        self.devices.iter().map(f).sum()
    }
    /// Total `alloc` entries.
    pub fn alloc_events(&self) -> u64 {
        self.sum(|d| d.alloc_events)
    }
    /// Total matching `alloc` addresses.
    pub fn alloc_address_matches(&self) -> u64 {
        self.sum(|d| d.alloc_address_matches)
    }
    /// Total recorded `segment_alloc` entries.
    pub fn segment_allocs(&self) -> u64 {
        self.sum(|d| d.segment_allocs)
    }
    /// Total matching segment sizes.
    pub fn segment_size_matches(&self) -> u64 {
        self.sum(|d| d.segment_size_matches)
    }
    /// Whether every address, segment, map and the final state matched.
    pub fn is_exact(&self) -> bool {
        self.devices.iter().all(|d| {
            d.alloc_address_matches == d.alloc_events
                && d.segment_size_matches == d.segment_allocs
                && d.segment_map_matches == d.segment_maps
                && d.unexpected_segments == 0
                && d.final_state_matches
        })
    }
}

impl Recorded {
    /// The known reservation a map at `a` grows: the nearest base at or below `a` whose
    /// high water reaches `a`.
    fn holder(&self, a: u64) -> Option<u64> {
        self.reserved
            .range(..=a)
            .next_back()
            .filter(|(_, &end)| a <= end)
            .map(|(&b, _)| b)
    }

    /// A recorded map: raises its reservation's high water.
    fn mapped(&mut self, a: u64, size: u64) {
        if let Some(b) = self.holder(a) {
            let end = self.reserved.entry(b).or_insert(a);
            *end = (*end).max(a.saturating_add(size));
        }
    }
}

/// Hands out the recorded addresses of the segments created for the current request.
struct Recorded {
    allocs: VecDeque<u64>,
    /// Recorded `segment_map` addresses since the last alloc.
    maps: Vec<u64>,
    /// Reservations known so far: base → end of the highest recorded map in it. A new one
    /// starts at the first recorded map beyond all of them: an expandable segment only
    /// grows at its end or into its own holes, so a map past a reservation's high water is
    /// another reservation's, wherever the driver put it. (The reservation's size is not
    /// in the recording, and the simulator's guess — 1⅛ × a device total the file does not
    /// have — would swallow a neighbour placed closer, as the small pool's often is.)
    reserved: BTreeMap<u64, u64>,
    /// Addresses for anything the recording does not explain: far from real ones.
    fallback: FirstFit,
}

impl AddressSource for Recorded {
    fn segment_alloc(&mut self, size: u64, stream: u64, small: bool) -> u64 {
        match self.allocs.pop_front() {
            Some(a) => a,
            None => self.fallback.segment_alloc(size, stream, small),
        }
    }
    fn segment_free(&mut self, addr: u64, size: u64) {
        if addr >= FALLBACK_BASE {
            self.fallback.segment_free(addr, size);
        }
    }
    fn reserve(&mut self, size: u64, stream: u64, small: bool) -> u64 {
        let base = match self
            .maps
            .iter()
            .copied()
            .find(|&a| self.holder(a).is_none())
        {
            Some(a) => a,
            None => self.fallback.reserve(size, stream, small),
        };
        self.reserved.insert(base, base);
        base
    }
    fn release(&mut self, addr: u64, size: u64) {
        self.reserved.remove(&addr);
        self.segment_free(addr, size);
    }
}

const FALLBACK_BASE: u64 = 1 << 56;

/// Verifies every device of `snap` with the snapshot's own settings
/// ([`Config::of_snapshot`]: recorded, else inferred, else the defaults) under the rules of
/// `version`.
pub fn verify(snap: &Snapshot, version: Version) -> Result<VerifyReport, ConfError> {
    verify_with(snap, &Config::of_snapshot(snap, version)?)
}

/// Verifies every device of `snap` under `cfg`.
pub fn verify_with(snap: &Snapshot, cfg: &Config) -> Result<VerifyReport, ConfError> {
    let mut cfg = cfg.clone();
    // The recording already contains the consequences of device limits.
    cfg.capacity = None;
    cfg.memory_fraction = None;
    let devices = snap
        .devices()
        .into_iter()
        .map(|d| verify_device(snap, d, &cfg))
        .collect();
    Ok(VerifyReport {
        config: cfg,
        devices,
    })
}

fn pool_lookup(ranges: &BTreeMap<u64, (u64, PoolId)>, addr: u64) -> PoolId {
    match ranges.range(..=addr).next_back() {
        Some((&a, &(size, id))) if addr < a + size => id,
        _ => (0, 0),
    }
}

fn verify_device(snap: &Snapshot, device: i32, cfg: &Config) -> DeviceVerify {
    let finals: Vec<Segment> = snap.device_segments(device).cloned().collect();
    let trace = snap.trace(device);
    let rec = reconstruct_start(&finals, trace, cfg);
    let mut out = DeviceVerify {
        device,
        events: trace.len() as u64,
        ..DeviceVerify::default()
    };
    let mut sim = match Allocator::from_segments(cfg.clone(), &rec.segments) {
        Ok(s) => s,
        Err(e) => {
            let mut rec = rec;
            rec.anomalies
                .push(format!("start state rejected by the simulator: {e}"));
            out.reconstruction = rec;
            return out;
        }
    };
    // Only the segments an allocation made are compared with the recording.
    sim.record_segment_events();
    // Private (CUDA-graph) pools: the trace does not say which allocations were made during
    // capture, so an allocation is routed to the pool of the segment that holds its address.
    let mut pools: BTreeMap<u64, (u64, PoolId)> = BTreeMap::new();
    for s in rec.segments.iter().chain(finals.iter()) {
        if s.pool_id != (0, 0) {
            pools.insert(s.address, (s.total_size, s.pool_id));
        }
    }
    let mut src = Recorded {
        allocs: VecDeque::new(),
        maps: Vec::new(),
        reserved: sim
            .reservations()
            .into_iter()
            .map(|(base, size)| {
                // the start state's mapped ranges inside it set its high water
                let end = rec
                    .segments
                    .iter()
                    .filter(|s| s.is_expandable && s.address >= base && s.address < base + size)
                    .map(Segment::end)
                    .max()
                    .unwrap_or(base);
                (base, end)
            })
            .collect(),
        fallback: {
            let mut f = FirstFit::new();
            // Keep invented addresses far away from real ones.
            let _ = f.segment_alloc(FALLBACK_BASE - FirstFit::BASE, 0, false);
            f
        },
    };
    // Recorded segment_alloc / segment_map entries since the last alloc.
    let mut window_allocs: Vec<(u64, u64)> = Vec::new();
    let mut window_maps: Vec<(u64, u64)> = Vec::new();
    // What the simulator did for the current alloc (reused across entries).
    let mut sim_allocs: Vec<(u64, u64)> = Vec::new();
    let mut sim_maps: Vec<(u64, u64)> = Vec::new();
    // Recorded address → simulator address, for blocks the simulator placed elsewhere.
    let mut moved: IntMap<u64, u64> = IntMap::default();
    let mismatch = |out: &mut DeviceVerify, m: Mismatch| {
        if out.first_mismatch.is_none() {
            out.first_mismatch = Some(m);
        }
    };
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::SegmentAlloc => {
                out.segment_allocs += 1;
                window_allocs.push((e.addr, e.size));
            }
            Action::SegmentMap => {
                out.segment_maps += 1;
                window_maps.push((e.addr, e.size));
            }
            Action::Alloc => {
                out.alloc_events += 1;
                src.allocs.clear();
                src.allocs.extend(window_allocs.iter().map(|&(a, _)| a));
                src.maps.clear();
                src.maps.extend(window_maps.iter().map(|&(a, _)| a));
                let pool = if pools.is_empty() {
                    (0, 0)
                } else {
                    pool_lookup(&pools, e.addr)
                };
                let got = sim.malloc_in(pool, e.size, e.stream, &mut src);
                sim_allocs.clear();
                sim_maps.clear();
                for x in sim.events() {
                    match x.action {
                        Action::SegmentAlloc => sim_allocs.push((x.addr, x.size)),
                        Action::SegmentMap => sim_maps.push((x.addr, x.size)),
                        _ => {}
                    }
                }
                sim.clear_events();
                for (k, &(ra, rs)) in window_allocs.iter().enumerate() {
                    match sim_allocs.get(k) {
                        Some(&(_, ss)) if ss == rs => out.segment_size_matches += 1,
                        other => mismatch(
                            &mut out,
                            Mismatch {
                                index: i,
                                action: Action::SegmentAlloc,
                                recorded_addr: ra,
                                predicted_addr: other.map_or(0, |x| x.0),
                                size: rs,
                                predicted_size: other.map_or(0, |x| x.1),
                            },
                        ),
                    }
                }
                for (k, &(ra, rs)) in window_maps.iter().enumerate() {
                    match sim_maps.get(k) {
                        Some(&(sa, ss)) if ss == rs && sa == ra => out.segment_map_matches += 1,
                        other => mismatch(
                            &mut out,
                            Mismatch {
                                index: i,
                                action: Action::SegmentMap,
                                recorded_addr: ra,
                                predicted_addr: other.map_or(0, |x| x.0),
                                size: rs,
                                predicted_size: other.map_or(0, |x| x.1),
                            },
                        ),
                    }
                }
                out.unexpected_segments += sim_allocs.len().saturating_sub(window_allocs.len())
                    as u64
                    + sim_maps.len().saturating_sub(window_maps.len()) as u64;
                for &(a, size) in &window_maps {
                    src.mapped(a, size);
                }
                window_allocs.clear();
                window_maps.clear();
                match got {
                    Ok(a) if a == e.addr => out.alloc_address_matches += 1,
                    Ok(a) => {
                        // Put the block where it really went, if that memory is free.
                        let _ = sim.free(a);
                        if sim.force_alloc_at(e.addr, e.size, e.stream) {
                            out.resyncs += 1;
                        } else if let Ok(b) = sim.malloc_in(pool, e.size, e.stream, &mut src) {
                            moved.insert(e.addr, b);
                        }
                        sim.clear_events();
                        mismatch(
                            &mut out,
                            Mismatch {
                                index: i,
                                action: Action::Alloc,
                                recorded_addr: e.addr,
                                predicted_addr: a,
                                size: e.size,
                                predicted_size: 0,
                            },
                        );
                    }
                    Err(_) => mismatch(
                        &mut out,
                        Mismatch {
                            index: i,
                            action: Action::Alloc,
                            recorded_addr: e.addr,
                            predicted_addr: 0,
                            size: e.size,
                            predicted_size: 0,
                        },
                    ),
                }
            }
            Action::FreeRequested | Action::FreeCompleted => {
                let addr = moved.get(&e.addr).copied().unwrap_or(e.addr);
                let r = if e.action == Action::FreeRequested {
                    sim.free_requested(addr)
                } else {
                    moved.remove(&e.addr);
                    sim.free_completed(addr)
                };
                if r.is_err() {
                    out.free_errors += 1;
                }
                sim.clear_events();
            }
            Action::SegmentFree => {
                // Pages mapped by an attempt that then failed and freed the cache.
                apply_orphan_maps(&mut sim, &mut window_maps, &mut out, i);
                out.segment_releases += 1;
                if sim.release_segment_at(e.addr, &mut src) {
                    out.segment_release_matches += 1;
                }
                sim.clear_events();
            }
            Action::SegmentUnmap => {
                apply_orphan_maps(&mut sim, &mut window_maps, &mut out, i);
                out.segment_releases += 1;
                if sim.unmap_at(e.addr, &mut src) == e.size {
                    out.segment_release_matches += 1;
                }
                sim.clear_events();
            }
            Action::Oom => {
                // A failed malloc: no block, but pages it mapped before giving up stay
                // mapped (segment frees it caused were applied as they came).
                apply_orphan_maps(&mut sim, &mut window_maps, &mut out, i);
                for &(ra, rs) in &window_allocs {
                    mismatch(
                        &mut out,
                        Mismatch {
                            index: i,
                            action: Action::SegmentAlloc,
                            recorded_addr: ra,
                            predicted_addr: 0,
                            size: rs,
                            predicted_size: 0,
                        },
                    );
                }
                window_allocs.clear();
                sim.clear_events();
            }
            Action::Snapshot | Action::UserDefined | Action::Other => {}
        }
    }
    // Recorded segment allocations after the last alloc (a trailing OOM's retry…).
    out.final_state_matches = same_layout(&sim.segments(device), &finals);
    out.stats = sim.stats().clone();
    out.reconstruction = rec;
    out
}

/// Applies recorded `segment_map`s that no allocation used (a malloc mapped pages, then
/// failed); they count as matching when the simulator had those pages unmapped too.
fn apply_orphan_maps(
    sim: &mut Allocator,
    maps: &mut Vec<(u64, u64)>,
    out: &mut DeviceVerify,
    i: usize,
) {
    for (ra, rs) in maps.drain(..) {
        if sim.map_at(ra, rs) {
            out.segment_map_matches += 1;
        } else if out.first_mismatch.is_none() {
            out.first_mismatch = Some(Mismatch {
                index: i,
                action: Action::SegmentMap,
                recorded_addr: ra,
                predicted_addr: 0,
                size: rs,
                predicted_size: 0,
            });
        }
    }
    sim.clear_events();
}

/// Equal segments and blocks (addresses, sizes, states, requested sizes of active blocks).
fn same_layout(a: &[Segment], b: &[Segment]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.address == y.address
                && x.total_size == y.total_size
                && x.pool == y.pool
                && x.is_expandable == y.is_expandable
                && x.blocks.len() == y.blocks.len()
                && x.blocks.iter().zip(&y.blocks).all(|(p, q)| {
                    p.address == q.address
                        && p.size == q.size
                        && p.state == q.state
                        && (!p.state.is_active() || p.requested_size == q.requested_size)
                })
        })
}
