//! The native caching allocator's malloc/free paths, rule for rule.
//!
//! Names follow `c10/cuda/CUDACachingAllocator.cpp` (`get_free_block`, `alloc_block`,
//! `release_available_cached_blocks`, `release_cached_blocks`, `alloc_found_block`,
//! `free_block`, `try_merge_blocks`, `garbage_collect_cached_blocks`) so the two can be read
//! side by side. Expandable segments are in `expandable.rs`.

use super::address::AddressSource;
use super::config::{Config, ExpandableSplit};
use super::pools::{Arena, Block, IntMap, Pool, NIL};
use super::rounding::{allocation_size, round_size, MIN_BLOCK, SMALL_SIZE};
use crate::torch::snapshot::{Action, PoolId, TraceEvent};

/// Requests above this (2^60 bytes) fail as out of memory without further ado.
pub const MAX_REQUEST: u64 = 1 << 60;

/// Running totals, PyTorch's `DeviceStats` plus event counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes of blocks handed out (`allocated_bytes`).
    pub allocated: u64,
    /// Peak of `allocated`.
    pub allocated_peak: u64,
    /// Allocated or pending-free bytes (`active_bytes`).
    pub active: u64,
    /// Peak of `active`.
    pub active_peak: u64,
    /// Bytes the program asked for (`requested_bytes`).
    pub requested: u64,
    /// Peak of `requested`.
    pub requested_peak: u64,
    /// Bytes obtained from the device (`reserved_bytes`).
    pub reserved: u64,
    /// Peak of `reserved`.
    pub reserved_peak: u64,
    /// The most bytes allocated while `reserved` stood at its peak.
    pub allocated_at_reserved_peak: u64,
    /// Free bytes in split segments (`inactive_split_bytes`; expandable segments excluded).
    pub inactive_split: u64,
    /// Peak of `inactive_split`.
    pub inactive_split_peak: u64,
    /// Live `cudaMalloc` segments.
    pub segments: u64,
    /// Successful mallocs.
    pub allocs: u64,
    /// Completed frees.
    pub frees: u64,
    /// `cudaMalloc` calls that succeeded.
    pub cuda_mallocs: u64,
    /// `cudaFree` calls.
    pub cuda_frees: u64,
    /// `segment_map` operations (each maps one or more pages).
    pub maps: u64,
    /// Pages mapped.
    pub pages_mapped: u64,
    /// `segment_unmap` operations.
    pub unmaps: u64,
    /// Pages unmapped.
    pub pages_unmapped: u64,
    /// `num_alloc_retries`: mallocs that freed every cached block and tried again.
    pub alloc_retries: u64,
    /// `num_ooms`.
    pub ooms: u64,
    /// Times `release_cached_blocks` ran (the retry path or `empty_cache`).
    pub cache_flushes: u64,
    /// Times garbage collection found something to do.
    pub gc_runs: u64,
    /// Bytes garbage collection released.
    pub gc_released: u64,
}

/// An allocation the simulated allocator could not satisfy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oom {
    /// Bytes requested.
    pub requested: u64,
    /// After rounding.
    pub rounded: u64,
    /// Bytes reserved when it failed.
    pub reserved: u64,
    /// Bytes allocated when it failed.
    pub allocated: u64,
}

/// A misuse of the simulator (freeing an unknown address…).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError(pub String);

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

/// A `cudaMalloc` segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegMeta {
    /// Bytes.
    pub size: u64,
    /// Pool index.
    pub pool: u16,
    /// Stream.
    pub stream: u64,
}

/// One expandable segment: a virtual reservation mapped page by page.
#[derive(Clone, Debug)]
pub struct ExpSeg {
    /// Start of the reservation.
    pub base: u64,
    /// Bytes reserved.
    pub size: u64,
    /// Page (handle) size: 2 MiB small, `large_segment_size` large.
    pub page: u64,
    /// Stream.
    pub stream: u64,
    /// Pool index.
    pub pool: u16,
    /// Which pages are mapped.
    pub mapped: Vec<bool>,
}

/// PyTorch's `DeviceCachingAllocator` for one device, simulated.
#[derive(Clone, Debug)]
pub struct Allocator {
    pub(super) cfg: Config,
    pub(super) arena: Arena,
    pub(super) pools: Vec<Pool>,
    /// Active (allocated or pending-free) blocks by address.
    pub(super) live: IntMap<u64, u32>,
    /// `cudaMalloc` segments by address.
    pub(super) segs: IntMap<u64, SegMeta>,
    pub(super) exps: Vec<Option<ExpSeg>>,
    pub(super) stats: Stats,
    /// `total_allocated_memory`: bytes currently obtained from the device.
    pub(super) total: u64,
    pub(super) allowed_max: Option<u64>,
    pub(super) events: Option<Vec<TraceEvent>>,
    /// Record only segment events (`segment_alloc/free/map/unmap`).
    pub(super) segment_events_only: bool,
}

impl Allocator {
    /// An empty allocator following `cfg`.
    pub fn new(cfg: Config) -> Allocator {
        let allowed_max = cfg.memory_fraction.and_then(|f| {
            cfg.device_total
                .or(cfg.capacity)
                .map(|t| (f * t as f64) as u64)
        });
        Allocator {
            cfg,
            arena: Arena::default(),
            pools: vec![Pool::new(false, (0, 0)), Pool::new(true, (0, 0))],
            live: IntMap::default(),
            segs: IntMap::default(),
            exps: Vec::new(),
            stats: Stats::default(),
            total: 0,
            allowed_max,
            events: None,
            segment_events_only: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Current statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Starts (or stops) keeping a trace of what the allocator does, in snapshot terms.
    pub fn record_events(&mut self, on: bool) {
        self.events = if on { Some(Vec::new()) } else { None };
        self.segment_events_only = false;
    }

    /// Starts keeping a trace of only the segment events (`segment_alloc`,
    /// `segment_free`, `segment_map`, `segment_unmap`): what a caller that follows the
    /// allocator's device calls needs, without an entry per malloc and free.
    pub fn record_segment_events(&mut self) {
        self.events = Some(Vec::new());
        self.segment_events_only = true;
    }

    /// Takes the recorded trace.
    pub fn take_events(&mut self) -> Vec<TraceEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The trace recorded since it was last taken or cleared.
    pub fn events(&self) -> &[TraceEvent] {
        self.events.as_deref().unwrap_or(&[])
    }

    /// Forgets the recorded trace but keeps its buffer (cheaper than taking it when the
    /// caller looks at a few events at a time).
    pub fn clear_events(&mut self) {
        if let Some(ev) = self.events.as_mut() {
            ev.clear();
        }
    }

    /// The effective `allowed_memory_maximum`, when a memory fraction is set.
    pub fn allowed_max(&self) -> Option<u64> {
        self.allowed_max
    }

    #[inline]
    pub(super) fn event(&mut self, action: Action, addr: u64, size: u64, stream: u64) {
        if let Some(ev) = self.events.as_mut() {
            if self.segment_events_only
                && !matches!(
                    action,
                    Action::SegmentAlloc
                        | Action::SegmentFree
                        | Action::SegmentMap
                        | Action::SegmentUnmap
                )
            {
                return;
            }
            ev.push(TraceEvent {
                action,
                addr,
                size,
                stream,
                time_us: None,
                stack: 0,
            });
        }
    }

    /// Index of the large pool of `id` (the small pool is the next index).
    pub(super) fn pool_slot(&mut self, id: PoolId) -> usize {
        if id == (0, 0) {
            return 0;
        }
        if let Some(i) = self.pools.iter().position(|p| p.id == id && !p.small) {
            return i;
        }
        self.pools.push(Pool::new(false, id));
        self.pools.push(Pool::new(true, id));
        self.pools.len() - 2
    }

    fn set_fraction(&self) -> bool {
        self.allowed_max.is_some()
    }

    fn gc_active(&self) -> bool {
        self.set_fraction() && self.cfg.garbage_collection_threshold > 0.0
    }

    // ---- statistics helpers ----

    pub(super) fn add_reserved(&mut self, n: u64) {
        self.total += n;
        self.stats.reserved += n;
        if self.stats.reserved > self.stats.reserved_peak {
            self.stats.reserved_peak = self.stats.reserved;
            self.stats.allocated_at_reserved_peak = self.stats.allocated;
        }
    }

    pub(super) fn sub_reserved(&mut self, n: u64) {
        self.total -= n;
        self.stats.reserved -= n;
    }

    fn add_inactive_split(&mut self, delta: i64) {
        let s = &mut self.stats;
        s.inactive_split = (s.inactive_split as i64 + delta).max(0) as u64;
        s.inactive_split_peak = s.inactive_split_peak.max(s.inactive_split);
    }

    // ---- pool set helpers ----

    pub(super) fn insert_free(&mut self, id: u32) {
        let b = self.arena.get(id);
        let (stream, size, addr, pool) = (b.stream, b.size, b.addr, b.pool as usize);
        let calls = self.pools[pool].get_free_calls;
        self.arena.get_mut(id).gc_base = calls;
        self.pools[pool].insert_free(stream, size, addr, id);
    }

    pub(super) fn remove_free(&mut self, id: u32) {
        let b = self.arena.get(id);
        let (stream, size, addr, pool) = (b.stream, b.size, b.addr, b.pool as usize);
        self.pools[pool].remove_free(stream, size, addr);
    }

    /// `try_merge_blocks`: absorbs `src` into `dst` when `src` is free and equally mapped.
    pub(super) fn try_merge(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        let s = self.arena.get(src).clone();
        if s.allocated || s.pending || s.mapped != self.arena.get(dst).mapped {
            return 0;
        }
        if s.mapped {
            self.pools[s.pool as usize].remove_free(s.stream, s.size, s.addr);
        } else {
            self.pools[s.pool as usize].remove_unmapped(s.stream, s.addr);
        }
        if self.arena.get(dst).prev == src {
            let d = self.arena.get_mut(dst);
            d.addr = s.addr;
            d.prev = s.prev;
            if s.prev != NIL {
                self.arena.get_mut(s.prev).next = dst;
            }
        } else {
            self.arena.get_mut(dst).next = s.next;
            if s.next != NIL {
                self.arena.get_mut(s.next).prev = dst;
            }
        }
        self.arena.get_mut(dst).size += s.size;
        self.arena.remove(src);
        s.size
    }

    // ---- malloc ----

    /// `malloc` from the default pool. Returns the block's address.
    pub fn malloc<A: AddressSource + ?Sized>(
        &mut self,
        size: u64,
        stream: u64,
        src: &mut A,
    ) -> Result<u64, Oom> {
        self.malloc_in((0, 0), size, stream, src)
    }

    /// `malloc` from the pools of `pool` (a CUDA-graph or `MemPool` id; (0, 0) = default).
    pub fn malloc_in<A: AddressSource + ?Sized>(
        &mut self,
        pool: PoolId,
        orig: u64,
        stream: u64,
        src: &mut A,
    ) -> Result<u64, Oom> {
        if orig > MAX_REQUEST {
            // No device has exabytes; also keeps the rounding arithmetic in range.
            return Err(self.oom(orig, orig, stream));
        }
        let size = round_size(orig, &self.cfg.roundup_power2_divisions);
        let pool = self.pool_slot(pool) + (size <= SMALL_SIZE) as usize;
        let alloc_size = allocation_size(size, self.cfg.large_segment_size);
        let mut found = self.get_free_block(pool, stream, size);
        if found.is_none() {
            if self.gc_active() {
                self.garbage_collect(src);
            }
            found = self.alloc_block(pool, stream, size, alloc_size, false, src);
            if found.is_none() && self.release_available_cached_blocks(pool, stream, size, src) {
                found = self.alloc_block(pool, stream, size, alloc_size, false, src);
            }
            if found.is_none() {
                self.release_cached_blocks(src);
                found = self.alloc_block(pool, stream, size, alloc_size, true, src);
            }
        }
        let Some(block) = found else {
            return Err(self.oom(orig, size, stream));
        };
        let split = self.should_split(block, size);
        Ok(self.alloc_found_block(block, size, orig, stream, split))
    }

    /// Counts and records a failed `malloc` of `requested` bytes (`rounded` after rounding).
    fn oom(&mut self, requested: u64, rounded: u64, stream: u64) -> Oom {
        self.stats.ooms += 1;
        self.event(Action::Oom, 0, rounded, stream);
        Oom {
            requested,
            rounded,
            reserved: self.stats.reserved,
            allocated: self.stats.allocated,
        }
    }

    pub(super) fn should_split(&self, id: u32, size: u64) -> bool {
        let b = self.arena.get(id);
        let remaining = b.size - size;
        let m = self.cfg.max_split_size;
        let expandable_rule = self.cfg.expandable_segments
            && match self.cfg.version.expandable_split() {
                ExpandableSplit::Always => true,
                ExpandableSplit::HonourMaxSplit => size < m,
            };
        if self.pools[b.pool as usize].small || expandable_rule {
            remaining >= MIN_BLOCK
        } else {
            size < m && remaining > SMALL_SIZE
        }
    }

    fn expandable_size(&self, id: u32) -> u64 {
        let b = self.arena.get(id);
        let extra = if b.next != NIL && !self.arena.get(b.next).mapped {
            self.arena.get(b.next).size
        } else {
            0
        };
        b.size + extra
    }

    /// `get_free_block`: best fit by (stream, size, address), with the oversize rules.
    pub(super) fn get_free_block(&mut self, pool: usize, stream: u64, size: u64) -> Option<u32> {
        if self.gc_active() {
            self.pools[pool].get_free_calls += 1;
        }
        let cur = {
            let mut it = self.pools[pool].free_from(stream, size);
            let (_, _, first) = it.next()?;
            let mut cur = first;
            if self.arena.get(cur).exp != NIL {
                if self.cfg.expandable_segments {
                    // Best fit counts an expandable block as big as it could grow.
                    for (_, _, next) in it {
                        if self.arena.get(cur).exp == NIL
                            || self.expandable_size(next) >= self.expandable_size(cur)
                        {
                            break;
                        }
                        cur = next;
                    }
                } else {
                    // Expandable segments were switched off: use only ordinary blocks.
                    loop {
                        let (_, _, next) = it.next()?;
                        if self.arena.get(next).exp == NIL {
                            cur = next;
                            break;
                        }
                    }
                }
            }
            cur
        };
        let bsize = self.arena.get(cur).size;
        let m = self.cfg.max_split_size;
        // Do not return an oversized block for a small request…
        if size < m && bsize >= m {
            return None;
        }
        // …and round an oversize request up by at most max_non_split_rounding.
        if size >= m && bsize >= size.saturating_add(self.cfg.max_non_split_rounding) {
            return None;
        }
        self.remove_free(cur);
        Some(cur)
    }

    /// `alloc_block`: a new segment from the device (or pages of an expandable segment).
    #[allow(clippy::too_many_arguments)]
    fn alloc_block<A: AddressSource + ?Sized>(
        &mut self,
        pool: usize,
        stream: u64,
        size: u64,
        alloc_size: u64,
        is_retry: bool,
        src: &mut A,
    ) -> Option<u32> {
        if is_retry {
            self.stats.alloc_retries += 1;
        }
        if let Some(max) = self.allowed_max {
            if self.total + alloc_size > max {
                return None;
            }
        }
        if self.cfg.expandable_segments && self.pools[pool].id == (0, 0) {
            return self.try_allocate_expandable_block(pool, stream, size, src);
        }
        if let Some(cap) = self.cfg.capacity {
            if self.total + alloc_size > cap {
                return None;
            }
        }
        let small = self.pools[pool].small;
        let addr = src.segment_alloc(alloc_size, stream, small);
        self.add_reserved(alloc_size);
        self.stats.segments += 1;
        self.stats.cuda_mallocs += 1;
        self.segs.insert(
            addr,
            SegMeta {
                size: alloc_size,
                pool: pool as u16,
                stream,
            },
        );
        let id = self.arena.add(Block {
            addr,
            size: alloc_size,
            requested: 0,
            stream,
            prev: NIL,
            next: NIL,
            pool: pool as u16,
            allocated: false,
            pending: false,
            mapped: true,
            exp: NIL,
            gc_base: 0,
        });
        self.event(Action::SegmentAlloc, addr, alloc_size, stream);
        Some(id)
    }

    /// `alloc_found_block`: hands out the front of `id`, splitting off the rest if asked.
    fn alloc_found_block(
        &mut self,
        id: u32,
        size: u64,
        orig: u64,
        stream: u64,
        split: bool,
    ) -> u64 {
        let already_split = self.arena.get(id).is_split();
        let is_exp = self.arena.get(id).exp != NIL;
        let block = if split {
            let r = self.arena.get(id).clone();
            let front = self.arena.add(Block {
                addr: r.addr,
                size,
                requested: 0,
                stream,
                prev: r.prev,
                next: id,
                pool: r.pool,
                allocated: false,
                pending: false,
                mapped: true,
                exp: r.exp,
                gc_base: 0,
            });
            if r.prev != NIL {
                self.arena.get_mut(r.prev).next = front;
            }
            {
                let rem = self.arena.get_mut(id);
                rem.prev = front;
                rem.addr += size;
                rem.size -= size;
            }
            self.insert_free(id);
            if !is_exp {
                if already_split {
                    self.add_inactive_split(-(size as i64));
                } else {
                    self.add_inactive_split((r.size - size) as i64);
                }
            }
            front
        } else {
            if already_split && !is_exp {
                let s = self.arena.get(id).size;
                self.add_inactive_split(-(s as i64));
            }
            id
        };
        let b = self.arena.get_mut(block);
        b.allocated = true;
        b.requested = orig;
        let (addr, bsize) = (b.addr, b.size);
        self.live.insert(addr, block);
        let s = &mut self.stats;
        s.allocs += 1;
        s.allocated += bsize;
        s.allocated_peak = s.allocated_peak.max(s.allocated);
        s.active += bsize;
        s.active_peak = s.active_peak.max(s.active);
        s.requested += orig;
        s.requested_peak = s.requested_peak.max(s.requested);
        if s.reserved == s.reserved_peak {
            s.allocated_at_reserved_peak = s.allocated_at_reserved_peak.max(s.allocated);
        }
        self.event(Action::Alloc, addr, orig, stream);
        addr
    }

    // ---- free ----

    /// The program frees the block at `addr` and no other stream uses it: `free_requested`
    /// and `free_completed` at once.
    pub fn free(&mut self, addr: u64) -> Result<(), SimError> {
        self.free_requested(addr)?;
        self.free_completed(addr)
    }

    /// The program freed the block at `addr`; it stays active (pending) until
    /// [`Allocator::free_completed`].
    pub fn free_requested(&mut self, addr: u64) -> Result<(), SimError> {
        let id = *self
            .live
            .get(&addr)
            .ok_or_else(|| SimError(format!("free of {addr:#x}, which is not allocated")))?;
        if !self.arena.get(id).allocated {
            return Err(SimError(format!("block {addr:#x} was already freed")));
        }
        self.mark_free_requested(id);
        Ok(())
    }

    /// `free_requested` of the allocated block `id`.
    fn mark_free_requested(&mut self, id: u32) {
        let b = self.arena.get_mut(id);
        b.allocated = false;
        b.pending = true;
        let (addr, size, req, stream) = (b.addr, b.size, b.requested, b.stream);
        self.stats.allocated -= size;
        self.event(Action::FreeRequested, addr, req, stream);
    }

    /// The block at `addr` returns to its pool (`free_block`).
    pub fn free_completed(&mut self, addr: u64) -> Result<(), SimError> {
        let id = self
            .live
            .remove(&addr)
            .ok_or_else(|| SimError(format!("free of {addr:#x}, which is not allocated")))?;
        if self.arena.get(id).allocated {
            self.mark_free_requested(id);
        }
        self.free_block(id);
        Ok(())
    }

    /// Whether `addr` is an active block.
    pub fn is_live(&self, addr: u64) -> bool {
        self.live.contains_key(&addr)
    }

    /// Number of active blocks.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// `free_block` for a block already taken out of the live set.
    fn free_block(&mut self, id: u32) {
        let b = self.arena.get(id).clone();
        self.event(Action::FreeCompleted, b.addr, b.requested, b.stream);
        {
            let bm = self.arena.get_mut(id);
            bm.pending = false;
            bm.allocated = false;
            bm.requested = 0;
        }
        let mut net: i64 = 0;
        for cand in [b.prev, b.next] {
            let sub = self.try_merge(id, cand);
            if sub > 0 {
                net -= sub as i64;
            }
        }
        self.insert_free(id);
        if self.arena.get(id).is_split() {
            net += self.arena.get(id).size as i64;
        }
        if b.exp == NIL {
            self.add_inactive_split(net);
        }
        let s = &mut self.stats;
        s.frees += 1;
        s.active -= b.size;
        s.requested -= b.requested;
    }

    // ---- giving memory back ----

    fn release_block<A: AddressSource + ?Sized>(&mut self, id: u32, src: &mut A) {
        let b = self.arena.get(id).clone();
        debug_assert!(b.exp == NIL && !b.is_split());
        self.remove_free(id);
        self.segs.remove(&b.addr);
        self.sub_reserved(b.size);
        self.stats.segments -= 1;
        self.stats.cuda_frees += 1;
        src.segment_free(b.addr, b.size);
        self.event(Action::SegmentFree, b.addr, b.size, b.stream);
        self.arena.remove(id);
    }

    /// `release_available_cached_blocks`: with `max_split_size` set, free cached oversize
    /// blocks — one big enough, or the largest ones until enough is released.
    fn release_available_cached_blocks<A: AddressSource + ?Sized>(
        &mut self,
        pool: usize,
        stream: u64,
        size: u64,
        src: &mut A,
    ) -> bool {
        let m = self.cfg.max_split_size;
        if m == u64::MAX {
            return false;
        }
        let key = size.max(m);
        let first = self.pools[pool]
            .free_from(stream, key)
            .next()
            .map(|(_, _, id)| id);
        if let Some(id) = first {
            if self.arena.get(id).exp == NIL {
                if self.arena.get(id).is_split() {
                    // PyTorch would cudaFree the middle of a segment here; a configuration
                    // that creates split oversize blocks is outside what can be simulated.
                    return false;
                }
                self.release_block(id, src);
                return true;
            }
        }
        // No single block is large enough: free oversize blocks from the largest down.
        let candidates: Vec<u32> = self.pools[pool]
            .free_below(stream, key)
            .take_while(|&(size, _, _)| size >= m)
            .map(|(_, _, id)| id)
            .collect();
        if candidates.is_empty() {
            return false;
        }
        let mut released = 0;
        for id in candidates {
            if released >= key {
                break;
            }
            let b = self.arena.get(id);
            if b.exp == NIL && !b.is_split() {
                released += b.size;
                self.release_block(id, src);
            }
        }
        released >= key
    }

    /// `release_cached_blocks` (also `torch.cuda.empty_cache()`): free every unsplit cached
    /// block of the default pools and unmap every free page of expandable segments.
    pub fn release_cached_blocks<A: AddressSource + ?Sized>(&mut self, src: &mut A) {
        self.stats.cache_flushes += 1;
        self.release_blocks(0, src);
        self.release_blocks(1, src);
    }

    fn release_blocks<A: AddressSource + ?Sized>(&mut self, pool: usize, src: &mut A) {
        let ids: Vec<u32> = self.pools[pool].all_free().collect();
        let mut to_unmap = Vec::new();
        for id in ids {
            let b = self.arena.get(id);
            if b.exp != NIL {
                to_unmap.push(id);
            } else if !b.is_split() {
                self.release_block(id, src);
            }
        }
        for id in to_unmap {
            let _ = self.unmap_block(id, src);
            let b = self.arena.get(id);
            if !b.mapped && !b.is_split() {
                self.release_expandable_segment(id, src);
            }
        }
    }

    /// `garbage_collect_cached_blocks`: with a memory fraction and a threshold, free the
    /// oldest unsplit large cached blocks until usage drops under the threshold.
    fn garbage_collect<A: AddressSource + ?Sized>(&mut self, src: &mut A) {
        let Some(max) = self.allowed_max else { return };
        let threshold = (self.cfg.garbage_collection_threshold * max as f64) as u64;
        if self.total <= threshold {
            return;
        }
        let target = self.total - threshold;
        let calls = self.pools[0].get_free_calls;
        let age = |b: &Block| (calls - b.gc_base).max(0) as u64;
        let mut total_age = 0u64;
        let mut count = 0u64;
        for id in self.pools[0].all_free() {
            let b = self.arena.get(id);
            if !b.is_split() {
                total_age += age(b);
                count += 1;
            }
        }
        if count == 0 {
            return;
        }
        self.stats.gc_runs += 1;
        let mut reclaimed = 0u64;
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let threshold_age = total_age as f64 / count as f64;
            freed = false;
            let ids: Vec<u32> = self.pools[0].all_free().collect();
            for id in ids {
                let b = self.arena.get(id);
                if !b.is_split() && b.exp == NIL && age(b) as f64 >= threshold_age {
                    freed = true;
                    reclaimed += b.size;
                    total_age -= age(b);
                    count -= 1;
                    self.stats.gc_released += b.size;
                    self.release_block(id, src);
                }
            }
        }
    }

    /// Allocates a block of `orig` bytes at exactly `addr`, inside a free block of
    /// `stream` that holds it (used to put a diverged replay back on the recorded track).
    /// The rest of the free block stays free before it, and after it per the split rules.
    /// Returns whether it could.
    pub fn force_alloc_at(&mut self, addr: u64, orig: u64, stream: u64) -> bool {
        if orig > MAX_REQUEST {
            return false;
        }
        let size = round_size(orig, &self.cfg.roundup_power2_divisions);
        let Some(id) = self.free_block_holding(addr, size, stream) else {
            return false;
        };
        let b = self.arena.get(id).clone();
        self.remove_free(id);
        if addr > b.addr {
            let front = self.arena.add(Block {
                addr: b.addr,
                size: addr - b.addr,
                requested: 0,
                stream,
                prev: b.prev,
                next: id,
                pool: b.pool,
                allocated: false,
                pending: false,
                mapped: true,
                exp: b.exp,
                gc_base: 0,
            });
            if b.prev != NIL {
                self.arena.get_mut(b.prev).next = front;
            }
            let m = self.arena.get_mut(id);
            m.prev = front;
            m.addr = addr;
            m.size -= addr - b.addr;
            self.insert_free(front);
            if !b.is_split() && b.exp == NIL {
                // Both parts are now free blocks of a split segment.
                self.add_inactive_split(b.size as i64);
            }
        }
        let split = self.should_split(id, size);
        self.alloc_found_block(id, size, orig, stream, split);
        true
    }

    /// The free mapped block of `stream` that holds `[addr, addr + size)`, in a pool of the
    /// size class of `size`; where several do (segments the recording placed on top of each
    /// other), the lowest arena id.
    fn free_block_holding(&self, addr: u64, size: u64, stream: u64) -> Option<u32> {
        let small = size <= SMALL_SIZE;
        let end = addr.saturating_add(size);
        // Free mapped blocks are exactly those in the pools' free sets, and a block that
        // holds `size` bytes is at least that big.
        let found = self
            .pools
            .iter()
            .filter(|p| p.small == small)
            .flat_map(|p| p.free_from(stream, size))
            .filter(|&(bsize, baddr, _)| baddr <= addr && end <= baddr + bsize)
            .map(|(_, _, id)| id)
            .min();
        debug_assert_eq!(
            found,
            self.arena
                .iter()
                .find(|(_, b)| {
                    b.is_free()
                        && b.mapped
                        && b.stream == stream
                        && b.addr <= addr
                        && end <= b.addr + b.size
                        && small == self.pools[b.pool as usize].small
                })
                .map(|(id, _)| id)
        );
        found
    }

    /// Releases the cached `cudaMalloc` segment at `addr` if it is entirely free (used to
    /// apply a recorded `segment_free`). Returns whether it was released.
    pub fn release_segment_at<A: AddressSource + ?Sized>(
        &mut self,
        addr: u64,
        src: &mut A,
    ) -> bool {
        let Some(meta) = self.segs.get(&addr).copied() else {
            return false;
        };
        let found = self.pools[meta.pool as usize].get_free(meta.stream, meta.size, addr);
        match found {
            Some(id) if !self.arena.get(id).is_split() => {
                self.release_block(id, src);
                true
            }
            _ => false,
        }
    }
}
