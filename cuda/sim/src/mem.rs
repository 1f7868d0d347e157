//! `cuMemAlloc`-family memory: plain, pitched, managed and legacy 32-bit allocations,
//! frees, `cuMemGetInfo` and pointer queries.

use crate::arena::round_up;
use crate::codes::{CuError, CuResult};
use crate::gpu::{Alloc, AllocKind, Gpu};
use crate::layout::{alloc_len, ALLOC_ALIGN, PITCH_ALIGN};

/// `CU_MEM_ATTACH_GLOBAL` and `CU_MEM_ATTACH_HOST`.
const MEM_ATTACH_GLOBAL: u32 = 1;
const MEM_ATTACH_HOST: u32 = 2;

/// The answer to a `cuPointerGetAttribute` query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtrAttr {
    /// A pointer-sized value (context, device pointer, range start, range size, pool).
    U64(u64),
    /// A 4-byte value (memory type, device ordinal, booleans).
    U32(u32),
}

/// What a device address belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtrInfo {
    pub base: u64,
    pub len: u64,
    pub device: usize,
    pub ctx: u64,
    pub managed: bool,
    pub mapped_vmm: bool,
    pub pool: u64,
    pub id: u64,
}

impl Gpu {
    /// `cuMemAlloc_v2`: the lowest-addressed hole of the current context's device.
    pub fn mem_alloc(&mut self, ctx: Option<u64>, size: u64) -> CuResult<u64> {
        self.alloc_kind(ctx, size, AllocKind::Device)
    }

    /// `cuMemAllocPitch_v2`: returns (pointer, pitch).
    pub fn mem_alloc_pitch(
        &mut self,
        ctx: Option<u64>,
        width: u64,
        height: u64,
        elem: u32,
    ) -> CuResult<(u64, u64)> {
        if width == 0 || height == 0 || !matches!(elem, 4 | 8 | 16) {
            return Err(CuError::INVALID_VALUE);
        }
        let pitch = round_up(width, PITCH_ALIGN);
        let size = pitch.checked_mul(height).ok_or(CuError::OUT_OF_MEMORY)?;
        let p = self.alloc_kind(ctx, size, AllocKind::Pitch)?;
        Ok((p, pitch))
    }

    fn alloc_kind(&mut self, ctx: Option<u64>, size: u64, kind: AllocKind) -> CuResult<u64> {
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let ctx = ctx.ok_or(CuError::INVALID_CONTEXT)?;
        let d = self.ctx_device(ctx)?;
        self.fault(size)?;
        let len = alloc_len(size);
        if len > self.devices[d].size {
            return Err(CuError::OUT_OF_MEMORY);
        }
        let p = self.devices[d]
            .arena
            .alloc(len, ALLOC_ALIGN)
            .ok_or(CuError::OUT_OF_MEMORY)?;
        if let Err(e) = self.charge(d, len) {
            let _ = self.devices[d].arena.free(p, len);
            return Err(e);
        }
        let id = self.fresh_id();
        self.allocs.insert(
            p,
            Alloc {
                len,
                size,
                device: d,
                ctx,
                kind,
                id,
            },
        );
        Ok(p)
    }

    /// `cuMemAllocManaged`: simulated managed memory takes addresses from the per-process
    /// managed range and no device memory (it is never touched, so never migrated).
    pub fn mem_alloc_managed(&mut self, ctx: Option<u64>, size: u64, flags: u32) -> CuResult<u64> {
        if size == 0 || !matches!(flags, MEM_ATTACH_GLOBAL | MEM_ATTACH_HOST) {
            return Err(CuError::INVALID_VALUE);
        }
        let ctx = ctx.ok_or(CuError::INVALID_CONTEXT)?;
        let d = self.ctx_device(ctx)?;
        self.fault(size)?;
        let len = alloc_len(size);
        let p = self
            .managed
            .alloc(len, ALLOC_ALIGN)
            .ok_or(CuError::OUT_OF_MEMORY)?;
        let id = self.fresh_id();
        self.allocs.insert(
            p,
            Alloc {
                len,
                size,
                device: d,
                ctx,
                kind: AllocKind::Managed,
                id,
            },
        );
        Ok(p)
    }

    /// The legacy (pre-3.2) 32-bit `cuMemAlloc`/`cuMemAllocPitch`: addresses come from a
    /// window below 4 GiB shared by the process's devices; device memory is charged as usual.
    pub fn mem_alloc_legacy(&mut self, ctx: Option<u64>, size: u64) -> CuResult<u32> {
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let ctx = ctx.ok_or(CuError::INVALID_CONTEXT)?;
        let d = self.ctx_device(ctx)?;
        self.fault(size)?;
        let len = alloc_len(size);
        let p = self
            .legacy
            .alloc(len, ALLOC_ALIGN)
            .ok_or(CuError::OUT_OF_MEMORY)?;
        if let Err(e) = self.charge(d, len) {
            let _ = self.legacy.free(p, len);
            return Err(e);
        }
        let id = self.fresh_id();
        self.allocs.insert(
            p,
            Alloc {
                len,
                size,
                device: d,
                ctx,
                kind: AllocKind::Legacy,
                id,
            },
        );
        Ok(p as u32)
    }

    /// Returns an allocation's address range and memory (the allocation is already out of
    /// `allocs`).
    pub(crate) fn release_alloc_memory(&mut self, p: u64, a: &Alloc) {
        match a.kind {
            AllocKind::Device | AllocKind::Pitch => {
                let _ = self.devices[a.device].arena.free(p, a.len);
                self.uncharge(a.device, a.len);
            }
            AllocKind::Legacy => {
                let _ = self.legacy.free(p, a.len);
                self.uncharge(a.device, a.len);
            }
            AllocKind::Managed => {
                let _ = self.managed.free(p, a.len);
            }
            AllocKind::Pool(pool) => self.pool_give_back(pool, p, a.len),
        }
    }

    /// `cuMemFree_v2` (also frees managed and stream-ordered allocations, as the real one
    /// does). Freeing 0 succeeds and does nothing; any other address that is not the start
    /// of a live allocation is `CUDA_ERROR_INVALID_VALUE`.
    pub fn mem_free(&mut self, ctx: Option<u64>, p: u64) -> CuResult<()> {
        let ctx = ctx.ok_or(CuError::INVALID_CONTEXT)?;
        self.ctx_device(ctx)?;
        if p == 0 {
            return Ok(());
        }
        let a = self.allocs.remove(&p).ok_or(CuError::INVALID_VALUE)?;
        self.release_alloc_memory(p, &a);
        Ok(())
    }

    /// `cuMemGetInfo_v2` for the current context's device: free = size − physical memory
    /// used by all processes, total = size.
    pub fn mem_get_info(&self, ctx: Option<u64>) -> CuResult<(u64, u64)> {
        let d = self.current_device(ctx)?;
        self.state.cleanup_stale();
        let size = self.devices[d].size;
        Ok((
            size.saturating_sub(self.state.device_used(self.physical[d])),
            size,
        ))
    }

    /// What `p` points into: an allocation (any address inside it) or a VMM mapping.
    pub fn pointer_info(&self, p: u64) -> Option<PtrInfo> {
        if let Some((&base, a)) = self.allocs.range(..=p).next_back() {
            if p < base + a.len.max(a.size) {
                return Some(PtrInfo {
                    base,
                    len: a.size,
                    device: a.device,
                    ctx: a.ctx,
                    managed: a.kind == AllocKind::Managed,
                    mapped_vmm: false,
                    pool: match a.kind {
                        AllocKind::Pool(h) => h,
                        _ => 0,
                    },
                    id: a.id,
                });
            }
        }
        if let Some((&base, m)) = self.mappings.range(..=p).next_back() {
            if p < base + m.len {
                return Some(PtrInfo {
                    base,
                    len: m.len,
                    device: m.device,
                    ctx: 0,
                    managed: false,
                    mapped_vmm: true,
                    pool: 0,
                    id: m.handle,
                });
            }
        }
        None
    }

    /// `cuPointerGetAttribute`.
    pub fn pointer_attribute(&self, attr: i32, p: u64) -> CuResult<PtrAttr> {
        if !(1..=21).contains(&attr) {
            return Err(CuError::INVALID_VALUE);
        }
        let i = self.pointer_info(p).ok_or(CuError::INVALID_VALUE)?;
        Ok(match attr {
            1 => PtrAttr::U64(i.ctx),
            2 => PtrAttr::U32(2), // CU_MEMORYTYPE_DEVICE
            3 => PtrAttr::U64(p),
            4 => return Err(CuError::INVALID_VALUE), // no host mapping
            7 => PtrAttr::U64(i.id),
            8 => PtrAttr::U32(i.managed as u32),
            9 => PtrAttr::U32(i.device as u32),
            11 => PtrAttr::U64(i.base),
            12 => PtrAttr::U64(i.len),
            13 => PtrAttr::U32(1),
            17 => PtrAttr::U64(i.pool),
            _ => return Err(CuError::NOT_SUPPORTED),
        })
    }

    /// `cuMemGetAddressRange_v2`: (base, size) of the allocation containing `p`.
    pub fn address_range(&self, p: u64) -> CuResult<(u64, u64)> {
        let i = self.pointer_info(p).ok_or(CuError::NOT_FOUND)?;
        Ok((i.base, i.len))
    }

    /// Number of live allocations (all kinds) in this process.
    pub fn live_allocations(&self) -> usize {
        self.allocs.len()
    }
}
