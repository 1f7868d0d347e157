//! Stream-ordered memory pools (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`,
//! `cuMemFreeAsync`, `cuMemPool*`).
//!
//! A pool takes device memory in chunks (multiples of 2 MiB, placed first-fit in the
//! device arena and charged as physical memory) and sub-allocates them first-fit. Freed
//! blocks stay in the pool ("reserved" but not "used") until the pool is trimmed
//! (`cuMemPoolTrimTo`) or a synchronisation point finds it above its release threshold
//! (default 0, as on real drivers, so a synchronize returns every wholly free chunk).
//! Simulated work completes immediately, so a freed block is reusable at once by any stream.

use crate::arena::{round_up, Arena};
use crate::codes::{CuError, CuResult};
use crate::gpu::{default_pool_handle, Alloc, AllocKind, Gpu};
use crate::layout::*;
use std::collections::BTreeMap;

/// `CUmemPool_attribute` values.
pub const ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: i32 = 1;
pub const ATTR_REUSE_ALLOW_OPPORTUNISTIC: i32 = 2;
pub const ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: i32 = 3;
pub const ATTR_RELEASE_THRESHOLD: i32 = 4;
pub const ATTR_RESERVED_MEM_CURRENT: i32 = 5;
pub const ATTR_RESERVED_MEM_HIGH: i32 = 6;
pub const ATTR_USED_MEM_CURRENT: i32 = 7;
pub const ATTR_USED_MEM_HIGH: i32 = 8;

/// A pool attribute value: the first three attributes are `int`, the rest `cuuint64_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolAttr {
    Int(i32),
    U64(u64),
}

pub struct Pool {
    pub device: usize,
    pub is_default: bool,
    /// Largest total reservation (0 = the device size).
    pub max_size: u64,
    arena: Arena,
    chunks: BTreeMap<u64, u64>,
    pub reserved: u64,
    pub used: u64,
    pub reserved_high: u64,
    pub used_high: u64,
    pub release_threshold: u64,
    reuse: [i32; 3],
    destroyed: bool,
}

impl Pool {
    pub fn new(device: usize, is_default: bool, max_size: u64) -> Pool {
        Pool {
            device,
            is_default,
            max_size,
            arena: Arena::empty(device_arena_base(device), DEVICE_ARENA_STRIDE),
            chunks: BTreeMap::new(),
            reserved: 0,
            used: 0,
            reserved_high: 0,
            used_high: 0,
            release_threshold: 0,
            reuse: [1, 1, 1],
            destroyed: false,
        }
    }

    fn chunk_of(&self, p: u64) -> Option<(u64, u64)> {
        self.chunks
            .range(..=p)
            .next_back()
            .map(|(&s, &l)| (s, l))
            .filter(|&(s, l)| p < s + l)
    }

    /// Chunk addresses in address order (tests and reports).
    pub fn chunk_list(&self) -> Vec<(u64, u64)> {
        self.chunks.iter().map(|(&s, &l)| (s, l)).collect()
    }
}

impl Gpu {
    pub fn default_pool(&self, d: usize) -> u64 {
        self.devices[d].default_pool
    }

    pub fn current_pool(&self, d: usize) -> u64 {
        self.devices[d].current_pool
    }

    pub fn set_current_pool(&mut self, d: usize, pool: u64) -> CuResult<()> {
        match self.pools.get(&pool) {
            Some(p) if p.device == d && !p.destroyed => {
                self.devices[d].current_pool = pool;
                Ok(())
            }
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    pub fn pool(&self, h: u64) -> CuResult<&Pool> {
        match self.pools.get(&h) {
            Some(p) if !p.destroyed => Ok(p),
            _ => Err(CuError::INVALID_VALUE),
        }
    }

    /// `cuMemPoolCreate` for a device-located pinned pool.
    pub fn pool_create(
        &mut self,
        alloc_type: u32,
        loc_type: u32,
        loc_id: i32,
        max_size: u64,
    ) -> CuResult<u64> {
        if alloc_type != 1 {
            return Err(CuError::INVALID_VALUE);
        }
        if loc_type != 1 {
            return Err(CuError::NOT_SUPPORTED);
        }
        let d = self
            .check_device(loc_id)
            .map_err(|_| CuError::INVALID_VALUE)?;
        let h = make_handle(TAG_POOL, self.fresh_id());
        self.pools.insert(h, Pool::new(d, false, max_size));
        Ok(h)
    }

    /// `cuMemPoolDestroy`: memory still allocated from the pool stays valid; the pool goes
    /// away when the last of it is freed. Default pools cannot be destroyed.
    pub fn pool_destroy(&mut self, h: u64) -> CuResult<()> {
        let p = self.pool(h)?;
        if p.is_default {
            return Err(CuError::INVALID_VALUE);
        }
        let d = p.device;
        if self.devices[d].current_pool == h {
            self.devices[d].current_pool = default_pool_handle(d);
        }
        self.pool_release_to(h, 0);
        let p = self.pools.get_mut(&h).expect("checked above");
        p.destroyed = true;
        if p.used == 0 {
            self.pools.remove(&h);
        }
        Ok(())
    }

    /// Allocates `size` bytes from pool `h` for the caller's context `ctx`.
    pub fn pool_alloc(&mut self, ctx: u64, h: u64, size: u64) -> CuResult<u64> {
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let d = self.pool(h)?.device;
        self.fault(size)?;
        let len = alloc_len(size);
        let p = match self
            .pools
            .get_mut(&h)
            .and_then(|p| p.arena.alloc(len, ALLOC_ALIGN))
        {
            Some(p) => p,
            None => {
                self.pool_grow(h, len).or_else(|_| {
                    // give back wholly free chunks and try once more
                    self.pool_release_to(h, 0);
                    self.pool_grow(h, len)
                })?;
                self.pools
                    .get_mut(&h)
                    .and_then(|p| p.arena.alloc(len, ALLOC_ALIGN))
                    .ok_or(CuError::OUT_OF_MEMORY)?
            }
        };
        let pool = self.pools.get_mut(&h).expect("pool exists");
        pool.used += len;
        pool.used_high = pool.used_high.max(pool.used);
        let id = self.fresh_id();
        self.allocs.insert(
            p,
            Alloc {
                len,
                size,
                device: d,
                ctx,
                kind: AllocKind::Pool(h),
                id,
            },
        );
        Ok(p)
    }

    /// Adds a chunk big enough for `len` bytes to pool `h`.
    fn pool_grow(&mut self, h: u64, len: u64) -> CuResult<()> {
        let (d, reserved, max) = {
            let p = &self.pools[&h];
            (p.device, p.reserved, p.max_size)
        };
        let chunk = round_up(len, POOL_CHUNK);
        if max != 0 && reserved + chunk > max {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let at = self.devices[d]
            .arena
            .alloc(chunk, POOL_CHUNK)
            .ok_or(CuError::OUT_OF_MEMORY)?;
        if let Err(e) = self.charge(d, chunk) {
            let _ = self.devices[d].arena.free(at, chunk);
            return Err(e);
        }
        let p = self.pools.get_mut(&h).expect("pool exists");
        p.arena.add_free_range(at, chunk);
        p.chunks.insert(at, chunk);
        p.reserved += chunk;
        p.reserved_high = p.reserved_high.max(p.reserved);
        Ok(())
    }

    /// Returns a block to its pool (it stays reserved).
    pub(crate) fn pool_give_back(&mut self, h: u64, p: u64, len: u64) {
        let Some(pool) = self.pools.get_mut(&h) else {
            return;
        };
        if let Some((lo, clen)) = pool.chunk_of(p) {
            let _ = pool.arena.free_bounded(p, len, lo, lo + clen);
        }
        pool.used -= len;
        if pool.destroyed && pool.used == 0 {
            self.pool_release_to(h, 0);
            self.pools.remove(&h);
        }
    }

    /// Releases wholly free chunks, highest address first, until the pool reserves at most
    /// `keep` bytes.
    pub fn pool_release_to(&mut self, h: u64, keep: u64) {
        let Some(pool) = self.pools.get_mut(&h) else {
            return;
        };
        let d = pool.device;
        let mut released = Vec::new();
        let candidates: Vec<(u64, u64)> = pool.chunks.iter().rev().map(|(&s, &l)| (s, l)).collect();
        for (s, l) in candidates {
            if pool.reserved <= keep {
                break;
            }
            if pool.arena.take_free_range(s, l) {
                pool.chunks.remove(&s);
                pool.reserved -= l;
                released.push((s, l));
            }
        }
        for (s, l) in released {
            let _ = self.devices[d].arena.free(s, l);
            self.uncharge(d, l);
        }
    }

    /// Trims every pool of device `d` down to `keep` bytes.
    pub fn trim_pools(&mut self, d: usize, keep: u64) {
        let hs: Vec<u64> = self
            .pools
            .iter()
            .filter(|(_, p)| p.device == d)
            .map(|(&h, _)| h)
            .collect();
        for h in hs {
            self.pool_release_to(h, keep);
        }
    }

    /// `cuMemPoolTrimTo`.
    pub fn pool_trim_to(&mut self, h: u64, keep: u64) -> CuResult<()> {
        self.pool(h)?;
        self.pool_release_to(h, keep);
        Ok(())
    }

    /// `cuMemPoolGetAttribute`.
    pub fn pool_get_attribute(&self, h: u64, attr: i32) -> CuResult<PoolAttr> {
        let p = self.pool(h)?;
        Ok(match attr {
            1..=3 => PoolAttr::Int(p.reuse[(attr - 1) as usize]),
            ATTR_RELEASE_THRESHOLD => PoolAttr::U64(p.release_threshold),
            ATTR_RESERVED_MEM_CURRENT => PoolAttr::U64(p.reserved),
            ATTR_RESERVED_MEM_HIGH => PoolAttr::U64(p.reserved_high),
            ATTR_USED_MEM_CURRENT => PoolAttr::U64(p.used),
            ATTR_USED_MEM_HIGH => PoolAttr::U64(p.used_high),
            _ => return Err(CuError::INVALID_VALUE),
        })
    }

    /// `cuMemPoolSetAttribute`. The high-water marks accept only 0 (reset to current); the
    /// current values are read-only.
    pub fn pool_set_attribute(&mut self, h: u64, attr: i32, value: PoolAttr) -> CuResult<()> {
        self.pool(h)?;
        let p = self.pools.get_mut(&h).expect("checked");
        match (attr, value) {
            (1..=3, PoolAttr::Int(v)) => p.reuse[(attr - 1) as usize] = (v != 0) as i32,
            (ATTR_RELEASE_THRESHOLD, PoolAttr::U64(v)) => p.release_threshold = v,
            (ATTR_RESERVED_MEM_HIGH, PoolAttr::U64(0)) => p.reserved_high = p.reserved,
            (ATTR_USED_MEM_HIGH, PoolAttr::U64(0)) => p.used_high = p.used,
            _ => return Err(CuError::INVALID_VALUE),
        }
        Ok(())
    }

    /// Stream-ordered free: the block returns to its pool; any other allocation is freed as
    /// by `cuMemFree`.
    pub fn free_async(&mut self, ctx: Option<u64>, p: u64, stream: u64) -> CuResult<()> {
        self.stream_device(ctx, stream)?;
        let a = self.allocs.remove(&p).ok_or(CuError::INVALID_VALUE)?;
        self.release_alloc_memory(p, &a);
        Ok(())
    }

    /// `cuMemAllocAsync`: from the current pool of the stream's device.
    pub fn alloc_async(&mut self, ctx: Option<u64>, size: u64, stream: u64) -> CuResult<u64> {
        let d = self.stream_device(ctx, stream)?;
        let owner = self.stream_ctx(ctx, stream)?;
        let pool = self.devices[d].current_pool;
        self.pool_alloc(owner, pool, size)
    }

    /// `cuMemAllocFromPoolAsync`.
    pub fn alloc_from_pool_async(
        &mut self,
        ctx: Option<u64>,
        size: u64,
        pool: u64,
        stream: u64,
    ) -> CuResult<u64> {
        self.stream_device(ctx, stream)?;
        let owner = self.stream_ctx(ctx, stream)?;
        self.pool(pool)?;
        self.pool_alloc(owner, pool, size)
    }
}
