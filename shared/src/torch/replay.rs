//! Reconstructing the allocator state at the start of a recorded trace, and turning a
//! trace into a request stream for replay.
//!
//! The trace is a ring of `max_entries`: its oldest entries may be gone, so the state when
//! the trace starts is rebuilt from the final `segments` by undoing the trace backwards.
//! Undoing is exact except for one thing the trace does not say: how big a block was when
//! it was allocated before the trace began and freed during it. Its size is its rounded
//! request, or — when the allocator could not have split the rest off (a large-pool
//! remainder of at most 1 MiB, or an oversize request) — the whole free run it sat in.

use std::collections::BTreeMap;

use super::sim::config::Config;
use super::sim::pools::IntMap;
use super::sim::rounding::{round_size, MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE};
use super::sim::sorted::SortedMap;
use super::snapshot::{Action, Block, BlockState, PoolId, PoolKind, Segment, Snapshot, TraceEvent};

#[derive(Clone, Debug)]
struct USeg {
    size: u64,
    stream: u64,
    pool: PoolKind,
    pool_id: PoolId,
    expandable: bool,
    stack: u32,
    /// Blocks by address: (size, state, requested, stack).
    blocks: SortedMap<u64, UBlock>,
}

#[derive(Clone, Copy, Debug)]
struct UBlock {
    size: u64,
    state: BlockState,
    requested: u64,
    stack: u32,
}

/// The state at the start of a trace, and what undoing the trace had to guess or skip.
#[derive(Clone, Debug, Default)]
pub struct Reconstruction {
    /// Segments at the start of the trace.
    pub segments: Vec<Segment>,
    /// Blocks freed during the trace but allocated before it, whose size was inferred.
    pub inferred_blocks: u64,
    /// Of those, how many were given the whole free run (unsplittable remainder).
    pub inferred_whole: u64,
    /// Inferred large-pool blocks whose true size the trace cannot pin down: each was
    /// given its rounded request, but it may have been taken unsplit with up to 1 MiB more
    /// (the free block after it was freed before the trace began). Replay addresses next
    /// to them may differ from the recording.
    pub ambiguous_blocks: u64,
    /// Trace entries that did not fit the final state (should be empty).
    pub anomalies: Vec<String>,
}

/// Undoes `trace` from `final_segments` (one device) under `cfg`'s rounding and split rules.
pub fn reconstruct_start(
    final_segments: &[Segment],
    trace: &[TraceEvent],
    cfg: &Config,
) -> Reconstruction {
    let mut segs = Segs::new();
    for s in final_segments {
        let blocks = s
            .blocks
            .iter()
            .map(|b| {
                (
                    b.address,
                    UBlock {
                        size: b.size,
                        state: b.state,
                        requested: b.requested_size,
                        stack: b.stack,
                    },
                )
            })
            .collect();
        segs.insert(
            s.address,
            USeg {
                size: s.total_size,
                stream: s.stream,
                pool: s.pool,
                pool_id: s.pool_id,
                expandable: s.is_expandable,
                stack: s.stack,
                blocks,
            },
        );
    }
    let mut r = Reconstruction::default();
    // Blocks whose size undoing had to infer, until an `alloc` earlier in the trace shows
    // they were allocated inside it (address → took the whole free run).
    let mut inferred: IntMap<u64, bool> = Default::default();
    for (i, e) in trace.iter().enumerate().rev() {
        let res = match e.action {
            Action::Alloc => {
                inferred.remove(&e.addr);
                undo_alloc(&mut segs, e)
            }
            Action::FreeRequested => undo_free_requested(&mut segs, e),
            Action::FreeCompleted => {
                undo_free_completed(&mut segs, e, cfg, &mut inferred).map(|whole| {
                    inferred.insert(e.addr, whole);
                })
            }
            Action::SegmentAlloc => undo_segment_alloc(&mut segs, e),
            Action::SegmentFree => undo_segment_free(&mut segs, e, cfg),
            Action::SegmentMap => undo_segment_map(&mut segs, e),
            Action::SegmentUnmap => undo_segment_unmap(&mut segs, e, cfg),
            Action::Oom | Action::Snapshot | Action::UserDefined | Action::Other => Ok(()),
        };
        if let Err(m) = res {
            if r.anomalies.len() < 100 {
                r.anomalies.push(format!(
                    "entry {i} ({} at {:#x}): {m}",
                    e.action.name(),
                    e.addr
                ));
            }
        }
    }
    r.inferred_blocks = inferred.len() as u64;
    r.inferred_whole = inferred.values().filter(|&&w| w).count() as u64;
    for s in segs.values() {
        if s.pool != PoolKind::Large || s.expandable {
            continue;
        }
        for ((a, b), (_, n)) in s.blocks.iter().zip(s.blocks.iter().skip(1)) {
            let splittable =
                round_size(b.requested, &cfg.roundup_power2_divisions) < cfg.max_split_size;
            if b.state.is_active()
                && inferred.get(&a) == Some(&false)
                && splittable
                && n.state == BlockState::Inactive
                && n.size > SMALL_SIZE + MIN_BLOCK
            {
                r.ambiguous_blocks += 1;
            }
        }
    }
    r.segments = segs
        .into_sorted()
        .map(|(addr, s)| Segment {
            device: final_segments.first().map_or(0, |f| f.device),
            address: addr,
            total_size: s.size,
            stream: s.stream,
            pool: s.pool,
            pool_id: s.pool_id,
            is_expandable: s.expandable,
            stack: s.stack,
            blocks: s
                .blocks
                .into_iter()
                .map(|(a, b)| Block {
                    address: a,
                    size: b.size,
                    requested_size: b.requested,
                    state: b.state,
                    stack: b.stack,
                })
                .collect(),
        })
        .collect();
    r
}

/// Segments by address: an ordered index (address → slot) over a slab. Every trace entry
/// looks its segment up, so the index bisected is dense (16-byte entries, kept flat up to a
/// few hundred segments), and a segment discarded by an undone `segment_alloc` leaves its
/// block buffer for the next undone `segment_free`.
/// Lines of [`Segs`]'s lookup cache (a power of two).
const CACHE_LINES: usize = 1024;

#[derive(Default)]
struct Segs {
    index: SortedMap<u64, u32, 512>,
    slab: Vec<USeg>,
    spare: Vec<u32>,
    spare_blocks: Vec<SortedMap<u64, UBlock>>,
    /// Recent lookups by 2 MiB page of the address: (segment address, end of the addresses
    /// it answers for — its end, or the next segment's start if sooner —, slot,
    /// generation). An entry holds only while `generation` matches, which every change
    /// of the index bumps.
    cache: Vec<(u64, u64, u32, u32)>,
    generation: u32,
}

impl Segs {
    fn new() -> Segs {
        Segs::default()
    }

    fn get(&self, addr: &u64) -> Option<&USeg> {
        self.index.get(addr).map(|&i| &self.slab[i as usize])
    }

    /// Forgets every cached lookup.
    fn invalidate(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Entries from 2^32 changes ago would look current again: empty them.
            self.cache.fill((0, 0, 0, 0));
        }
    }

    /// The segment holding `addr`.
    fn containing(&mut self, addr: u64) -> Option<(u64, &mut USeg)> {
        let line = (addr >> 21) as usize & (CACHE_LINES - 1);
        if let Some(&(a, end, i, g)) = self.cache.get(line) {
            if g == self.generation && a <= addr && addr < end {
                return Some((a, &mut self.slab[i as usize]));
            }
        }
        let near = self.index.around(&addr);
        let (a, &i) = near.at_or_below?;
        let mut end = a.saturating_add(self.slab[i as usize].size);
        if addr >= end {
            return None;
        }
        if let Some((next, _)) = near.above {
            end = end.min(next);
        }
        if self.cache.is_empty() {
            self.cache = vec![(0, 0, 0, 0); CACHE_LINES];
        }
        self.cache[line] = (a, end, i, self.generation);
        Some((a, &mut self.slab[i as usize]))
    }

    fn last_below(&self, addr: &u64) -> Option<(u64, &USeg)> {
        let (a, &i) = self.index.last_below(addr)?;
        Some((a, &self.slab[i as usize]))
    }

    /// Sets the segment at `addr` (replacing one already there).
    fn insert(&mut self, addr: u64, seg: USeg) {
        self.invalidate();
        if let Some(&i) = self.index.get(&addr) {
            self.slab[i as usize] = seg;
        } else if let Some(i) = self.spare.pop() {
            self.slab[i as usize] = seg;
            self.index.insert(addr, i);
        } else {
            self.slab.push(seg);
            self.index.insert(addr, (self.slab.len() - 1) as u32);
        }
    }

    fn remove(&mut self, addr: &u64) -> Option<USeg> {
        self.invalidate();
        let i = self.index.remove(addr)?;
        self.spare.push(i);
        let empty = USeg {
            blocks: SortedMap::new(),
            ..self.slab[i as usize]
        };
        Some(std::mem::replace(&mut self.slab[i as usize], empty))
    }

    /// Removes the segment at `addr`, keeping its block buffer for [`Segs::fresh_blocks`].
    fn discard(&mut self, addr: &u64) {
        self.invalidate();
        if let Some(i) = self.index.remove(addr) {
            self.spare.push(i);
            let mut blocks = std::mem::take(&mut self.slab[i as usize].blocks);
            blocks.clear();
            self.spare_blocks.push(blocks);
        }
    }

    /// An empty block map, reusing a discarded segment's buffer when there is one.
    fn fresh_blocks(&mut self) -> SortedMap<u64, UBlock> {
        self.spare_blocks.pop().unwrap_or_default()
    }

    fn values(&self) -> impl Iterator<Item = &USeg> + '_ {
        self.index.values().map(|&i| &self.slab[i as usize])
    }

    fn into_sorted(mut self) -> impl Iterator<Item = (u64, USeg)> {
        let slots: Vec<(u64, u32)> = self.index.iter().map(|(a, &i)| (a, i)).collect();
        slots.into_iter().map(move |(a, i)| {
            let empty = USeg {
                blocks: SortedMap::new(),
                ..self.slab[i as usize]
            };
            (a, std::mem::replace(&mut self.slab[i as usize], empty))
        })
    }
}

fn containing(segs: &mut Segs, addr: u64) -> Option<(u64, &mut USeg)> {
    segs.containing(addr)
}

fn block_containing(s: &USeg, addr: u64) -> Option<(u64, UBlock)> {
    let (a, &b) = s.blocks.last_at_or_below(&addr)?;
    (addr < a.saturating_add(b.size)).then_some((a, b))
}

/// Frees the block at `addr` and merges it with free neighbours.
///
/// The merged block keeps the lowest address, so it is updated where it stands and only
/// the absorbed neighbours leave the map.
fn make_free(s: &mut USeg, addr: u64) {
    let Some(&b) = s.blocks.get(&addr) else {
        return;
    };
    let prev = s
        .blocks
        .last_below(&addr)
        .filter(|(pa, pb)| pb.state == BlockState::Inactive && pa + pb.size == addr)
        .map(|(pa, pb)| (pa, pb.size));
    let next = addr + b.size;
    let next_size = s
        .blocks
        .get(&next)
        .filter(|nb| nb.state == BlockState::Inactive)
        .map(|nb| nb.size);
    let mut merged = UBlock {
        size: b.size,
        state: BlockState::Inactive,
        requested: 0,
        stack: 0,
    };
    let mut start = addr;
    if let Some((pa, ps)) = prev {
        s.blocks.remove(&addr);
        start = pa;
        merged.size += ps;
    }
    if let Some(ns) = next_size {
        s.blocks.remove(&next);
        merged.size += ns;
    }
    if let Some(slot) = s.blocks.get_mut(&start) {
        *slot = merged;
    }
}

fn undo_alloc(segs: &mut Segs, e: &TraceEvent) -> Result<(), String> {
    let (_, s) = containing(segs, e.addr).ok_or("outside every segment")?;
    match s.blocks.get(&e.addr) {
        Some(b) if b.state == BlockState::ActiveAllocated => {
            make_free(s, e.addr);
            Ok(())
        }
        Some(b) => Err(format!(
            "block is {}, expected active_allocated",
            b.state.name()
        )),
        None => Err("no block starts here".into()),
    }
}

fn undo_free_requested(segs: &mut Segs, e: &TraceEvent) -> Result<(), String> {
    let (_, s) = containing(segs, e.addr).ok_or("outside every segment")?;
    match s.blocks.get_mut(&e.addr) {
        Some(b) if b.state == BlockState::ActivePendingFree => {
            b.state = BlockState::ActiveAllocated;
            Ok(())
        }
        Some(b) => Err(format!(
            "block is {}, expected active_pending_free",
            b.state.name()
        )),
        None => Err("no block starts here".into()),
    }
}

/// Returns whether the block was given the whole free run.
fn undo_free_completed(
    segs: &mut Segs,
    e: &TraceEvent,
    cfg: &Config,
    inferred: &mut IntMap<u64, bool>,
) -> Result<bool, String> {
    let (_, s) = containing(segs, e.addr).ok_or("outside every segment")?;
    let (fa, fb) = block_containing(s, e.addr).ok_or("no block here")?;
    if fb.state != BlockState::Inactive {
        return Err(format!("block is {}, expected inactive", fb.state.name()));
    }
    let fend = fa + fb.size;
    let rounded = round_size(e.size, &cfg.roundup_power2_divisions);
    let mut size = rounded.min(fend - e.addr);
    let remainder = fend - e.addr - size;
    let splittable = |rem: u64| {
        if s.pool == PoolKind::Small || s.expandable {
            rem >= MIN_BLOCK
        } else {
            rounded < cfg.max_split_size && rem > SMALL_SIZE
        }
    };
    let whole = remainder > 0 && !splittable(remainder);
    if whole {
        size = fend - e.addr;
    }
    // The free block's entry at `fa` is kept for whichever block starts there afterwards
    // (its left part, or this one), so the map shifts only for the blocks added after it.
    let pending = UBlock {
        size,
        state: BlockState::ActivePendingFree,
        requested: e.size,
        stack: e.stack,
    };
    if e.addr == fa {
        if let Some(slot) = s.blocks.get_mut(&fa) {
            *slot = pending;
        }
    } else {
        let left = e.addr - fa;
        // A large-pool free block is always > 1 MiB. A smaller run left of this block is
        // the unsplit tail of the block before it, whose size was inferred as its rounded
        // request while the run still reached further (this block was free then).
        let prev = s.blocks.last_below(&fa).map(|(a, &b)| (a, b));
        match prev {
            Some((pa, pb))
                if s.pool == PoolKind::Large
                    && !s.expandable
                    && left <= SMALL_SIZE
                    && pa + pb.size == fa
                    && pb.state.is_active()
                    && inferred.contains_key(&pa) =>
            {
                s.blocks.remove(&fa);
                s.blocks.insert(
                    pa,
                    UBlock {
                        size: pb.size + left,
                        ..pb
                    },
                );
                inferred.insert(pa, true);
            }
            _ => {
                if let Some(slot) = s.blocks.get_mut(&fa) {
                    slot.size = left;
                }
            }
        }
        s.blocks.insert(e.addr, pending);
    }
    if e.addr + size < fend {
        s.blocks.insert(
            e.addr + size,
            UBlock {
                size: fend - e.addr - size,
                ..fb
            },
        );
    }
    Ok(whole)
}

fn undo_segment_alloc(segs: &mut Segs, e: &TraceEvent) -> Result<(), String> {
    let s = segs.get(&e.addr).ok_or("no segment starts here")?;
    let whole_free = s.blocks.len() == 1
        && s.blocks
            .values()
            .all(|b| b.state == BlockState::Inactive && b.size == s.size);
    if s.size != e.size {
        return Err(format!(
            "segment is {} bytes, the trace says {}",
            s.size, e.size
        ));
    }
    segs.discard(&e.addr);
    if whole_free {
        Ok(())
    } else {
        Err("segment was not entirely free when it was allocated".into())
    }
}

fn undo_segment_free(segs: &mut Segs, e: &TraceEvent, cfg: &Config) -> Result<(), String> {
    if let Some((a, _)) = containing(segs, e.addr) {
        return Err(format!("overlaps the live segment at {a:#x}"));
    }
    let pool = if e.size == SMALL_BUFFER && cfg.large_segment_size != SMALL_BUFFER {
        PoolKind::Small
    } else {
        PoolKind::Large
    };
    let mut blocks = segs.fresh_blocks();
    blocks.insert(
        e.addr,
        UBlock {
            size: e.size,
            state: BlockState::Inactive,
            requested: 0,
            stack: 0,
        },
    );
    segs.insert(
        e.addr,
        USeg {
            size: e.size,
            stream: e.stream,
            pool,
            pool_id: (0, 0),
            expandable: false,
            stack: e.stack,
            blocks,
        },
    );
    Ok(())
}

/// Removes `[addr, addr + size)` (free) from the mapped range that holds it.
fn undo_segment_map(segs: &mut Segs, e: &TraceEvent) -> Result<(), String> {
    let (sa, s) = containing(segs, e.addr).ok_or("outside every mapped range")?;
    if !s.expandable {
        return Err("maps into a segment that is not expandable".into());
    }
    let end = e.addr.saturating_add(e.size);
    if end > sa.saturating_add(s.size) {
        return Err("runs past the mapped range".into());
    }
    let (fa, fb) = block_containing(s, e.addr).ok_or("no block here")?;
    if fb.state != BlockState::Inactive || fa + fb.size < end {
        return Err("mapped pages were not free".into());
    }
    let mut seg = segs.remove(&sa).ok_or("range vanished")?;
    seg.blocks.remove(&fa);
    if fa < e.addr {
        seg.blocks.insert(
            fa,
            UBlock {
                size: e.addr - fa,
                ..fb
            },
        );
    }
    if end < fa + fb.size {
        seg.blocks.insert(
            end,
            UBlock {
                size: fa + fb.size - end,
                ..fb
            },
        );
    }
    let seg_end = sa + seg.size;
    let before: SortedMap<u64, UBlock> = seg
        .blocks
        .range_below(&e.addr)
        .map(|(a, &b)| (a, b))
        .collect();
    let after: SortedMap<u64, UBlock> = seg.blocks.range_from(&end).map(|(a, &b)| (a, b)).collect();
    if e.addr > sa {
        segs.insert(
            sa,
            USeg {
                size: e.addr - sa,
                blocks: before,
                ..seg.clone()
            },
        );
    }
    if end < seg_end {
        segs.insert(
            end,
            USeg {
                size: seg_end - end,
                blocks: after,
                ..seg
            },
        );
    }
    Ok(())
}

/// Puts `[addr, addr + size)` back as a free mapped range, joining adjacent ranges.
fn undo_segment_unmap(segs: &mut Segs, e: &TraceEvent, cfg: &Config) -> Result<(), String> {
    if let Some((a, _)) = containing(segs, e.addr) {
        return Err(format!("overlaps the mapped range at {a:#x}"));
    }
    let end = e.addr.saturating_add(e.size);
    let prev = segs
        .last_below(&e.addr)
        .filter(|(a, s)| a.saturating_add(s.size) == e.addr && s.expandable && s.stream == e.stream)
        .map(|(a, s)| (a, s.pool, s.pool_id));
    let next = segs
        .get(&end)
        .filter(|s| s.expandable && s.stream == e.stream)
        .map(|s| (s.pool, s.pool_id));
    let (pool, pool_id) = match (prev, next) {
        (Some((_, p, id)), _) | (None, Some((p, id))) => (p, id),
        (None, None) if !e.size.is_multiple_of(cfg.large_segment_size) => (PoolKind::Small, (0, 0)),
        (None, None) => (PoolKind::Large, (0, 0)),
    };
    let mut blocks = SortedMap::new();
    blocks.insert(
        e.addr,
        UBlock {
            size: e.size,
            state: BlockState::Inactive,
            requested: 0,
            stack: 0,
        },
    );
    let mut seg = USeg {
        size: e.size,
        stream: e.stream,
        pool,
        pool_id,
        expandable: true,
        stack: e.stack,
        blocks,
    };
    let mut start = e.addr;
    if let Some((pa, _, _)) = prev {
        if let Some(p) = segs.remove(&pa) {
            start = pa;
            let mut blocks = p.blocks;
            blocks.extend(seg.blocks);
            seg = USeg {
                size: p.size + seg.size,
                blocks,
                ..p
            };
        }
    }
    if next.is_some() {
        if let Some(n) = segs.remove(&end) {
            seg.size += n.size;
            seg.blocks.extend(n.blocks);
        }
    }
    // Join free neighbours around the re-mapped range.
    make_free_run(&mut seg, e.addr);
    segs.insert(start, seg);
    Ok(())
}

/// Merges the free block at `addr` with free neighbours.
fn make_free_run(s: &mut USeg, addr: u64) {
    if s.blocks
        .get(&addr)
        .is_some_and(|b| b.state == BlockState::Inactive)
    {
        make_free(s, addr);
    }
}

/// One request of a replayable workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Allocate `size` bytes on `stream`, known afterwards as `id`.
    Alloc {
        /// Bytes requested.
        size: u64,
        /// Stream.
        stream: u64,
        /// Request id.
        id: u32,
    },
    /// The program freed `id` (it may still be in use on another stream).
    FreeRequested {
        /// Request id.
        id: u32,
    },
    /// `id` returns to the allocator.
    FreeCompleted {
        /// Request id.
        id: u32,
    },
    /// `torch.cuda.empty_cache()` (recorded as segment frees that no allocation caused).
    EmptyCache,
}

/// A recorded request stream, independent of where the allocator put things.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    /// Requests, in order. Blocks live at the start of the trace come first, in address
    /// order (allocated, and freed-but-pending where recorded so).
    pub requests: Vec<Request>,
    /// Number of distinct ids.
    pub ids: u32,
    /// Of the requests, how many recreate blocks live at the start.
    pub initial: usize,
    /// Frees of blocks the workload never saw allocated (skipped).
    pub unmatched_frees: u64,
    /// Recorded `oom` entries. Each is also a request (the program asked; under its own
    /// settings it failed, under others it may fit), never freed.
    pub recorded_ooms: u64,
    /// The first recorded OOM: the index of its request in [`Workload::requests`], the
    /// device's free bytes PyTorch saw then (`device_free`), and the bytes PyTorch had
    /// reserved then (the start state's segments plus the trace's segment events so far).
    pub first_oom: Option<(usize, u64, u64)>,
}

impl Workload {
    /// A new request of `size` bytes on `stream`; returns its id.
    fn alloc(&mut self, size: u64, stream: u64) -> u32 {
        let id = self.ids;
        self.ids += 1;
        self.requests.push(Request::Alloc { size, stream, id });
        id
    }

    /// Builds the request stream of one device from its start state and trace.
    pub fn from_trace(start: &[Segment], trace: &[TraceEvent]) -> Workload {
        let mut w = Workload::default();
        let mut by_addr: BTreeMap<u64, u32> = BTreeMap::new();
        let mut pending_free_at_start = Vec::new();
        for s in start {
            for b in &s.blocks {
                if b.state.is_active() {
                    let id = w.alloc(b.requested_size, s.stream);
                    by_addr.insert(b.address, id);
                    if b.state == BlockState::ActivePendingFree {
                        pending_free_at_start.push(id);
                    }
                }
            }
        }
        for id in pending_free_at_start {
            w.requests.push(Request::FreeRequested { id });
        }
        w.initial = w.requests.len();
        // Bytes PyTorch has reserved as the trace goes (for the first OOM's capacity).
        let mut reserved: u64 = start.iter().map(|s| s.total_size).sum();
        let mut i = 0;
        while i < trace.len() {
            let e = &trace[i];
            match e.action {
                Action::Alloc => {
                    let id = w.alloc(e.size, e.stream);
                    by_addr.insert(e.addr, id);
                }
                Action::FreeRequested => match by_addr.get(&e.addr) {
                    Some(&id) => w.requests.push(Request::FreeRequested { id }),
                    None => w.unmatched_frees += 1,
                },
                Action::FreeCompleted => match by_addr.remove(&e.addr) {
                    Some(id) => w.requests.push(Request::FreeCompleted { id }),
                    None => w.unmatched_frees += 1,
                },
                Action::SegmentAlloc | Action::SegmentMap => reserved += e.size,
                Action::SegmentFree | Action::SegmentUnmap => {
                    // A run of segment frees not followed by an allocation's segment_alloc
                    // (the retry path) is an empty_cache() call.
                    let mut j = i;
                    while j < trace.len()
                        && matches!(trace[j].action, Action::SegmentFree | Action::SegmentUnmap)
                    {
                        reserved = reserved.saturating_sub(trace[j].size);
                        j += 1;
                    }
                    let retry = j < trace.len()
                        && matches!(
                            trace[j].action,
                            Action::SegmentAlloc | Action::SegmentMap | Action::Oom
                        );
                    if !retry {
                        w.requests.push(Request::EmptyCache);
                    }
                    i = j;
                    continue;
                }
                Action::Oom => {
                    w.recorded_ooms += 1;
                    if w.first_oom.is_none() {
                        w.first_oom = Some((w.requests.len(), e.addr, reserved));
                    }
                    w.alloc(e.size, e.stream);
                }
                _ => {}
            }
            i += 1;
        }
        w
    }

    /// Number of trace-level events the workload stands for (allocs + both free steps).
    pub fn event_count(&self) -> usize {
        self.requests.len()
    }
}

/// The start state and request stream of `device` in `snap`.
pub fn workload(snap: &Snapshot, device: i32, cfg: &Config) -> (Reconstruction, Workload) {
    let finals: Vec<Segment> = snap.device_segments(device).cloned().collect();
    let trace = snap.trace(device);
    let rec = reconstruct_start(&finals, trace, cfg);
    let w = Workload::from_trace(&rec.segments, trace);
    (rec, w)
}
